"""The rviz, rqt and diagnostic_aggregator files for a robot in any namespace (no ROS).

    simreal -n left monitor --write-config DIR   # DIR/monitor.rviz, simreal.perspective and
                                                 # diagnostic_analyzers.yaml for /left

The package's config/monitor.rviz and config/simreal.perspective name relative topics; these
functions rewrite them for a namespace and list the topics they name (for the tests).
"""
import ast
import json

import yaml

# The rviz displays' topic keys, and the rqt_plot groups of the perspective.
RVIZ_TOPIC_KEYS = ('Topic', 'Description Topic')
PLOT_GROUP = 'plugin__rqt_plot__Plot__'
# Nodes whose /diagnostics statuses the analyzers group (one GenericAnalyzer each).
DIAGNOSING_NODES = ('safety_supervisor', 'policy_runner', 'sim_robot', 'unitree_bridge')


def _in(namespace, name):
    """`name` (absolute in the shipped files) moved into `namespace`."""
    ns = (namespace or '').strip('/')
    return f'/{ns}/{name.lstrip("/")}' if ns else '/' + name.lstrip('/')


def rviz_in(namespace, text):
    """Return config/monitor.rviz's text with every display topic in `namespace`.

    The shipped file names absolute topics (`/monitor/markers`, `/robot_description`); rviz2
    resolves them as they are, so a robot under /left needs its own copy."""
    data = yaml.safe_load(text)
    for display in data['Visualization Manager']['Displays']:
        for key in RVIZ_TOPIC_KEYS:
            entry = display.get(key)
            if isinstance(entry, dict) and str(entry.get('Value', '')).startswith('/'):
                entry['Value'] = _in(namespace, entry['Value'])
    return yaml.safe_dump(data, sort_keys=False)


def rviz_topics(text):
    """Return the topics the rviz file's displays subscribe to."""
    data = yaml.safe_load(text)
    return {d[key]['Value'] for d in data['Visualization Manager']['Displays']
            for key in RVIZ_TOPIC_KEYS if isinstance(d.get(key), dict)}


def _plots(data):
    groups = data['groups']['pluginmanager']['groups']
    return [g['groups']['plugin']['keys']['topics'] for name, g in groups.items()
            if name.startswith(PLOT_GROUP)]


def perspective_in(namespace, text):
    """Return config/simreal.perspective's text with every plotted topic in `namespace`."""
    data = json.loads(text)
    for topics in _plots(data):
        names = ast.literal_eval(topics['repr'])
        topics['repr'] = repr([_in(namespace, n) for n in names])
    return json.dumps(data, indent=2) + '\n'


def perspective_topics(text):
    """Return the topics the perspective's plots read: each entry is `<topic>/<field>[i]`
    ('/left/joint_states/position[0]' reads /left/joint_states)."""
    return {name.rsplit('/', 1)[0] for topics in _plots(json.loads(text))
            for name in ast.literal_eval(topics['repr'])}


def analyzers(robots):
    """diagnostic_aggregator parameters grouping /diagnostics per robot, then per node.

    robots: {namespace: [node names]} ('' or '/' for the root). Status names are the node's
    name with its namespace ('left/safety_supervisor: ...', the heartbeat
    '/left/safety_supervisor'); each GenericAnalyzer matches both spellings."""
    params = {'path': 'simreal'}
    for namespace, nodes in sorted(robots.items()):
        ns = (namespace or '').strip('/')
        group = {}
        for node in nodes:
            if node not in DIAGNOSING_NODES:
                continue
            name = f'{ns}/{node}' if ns else node
            group[node] = {'type': 'diagnostic_aggregator/GenericAnalyzer', 'path': node,
                           'startswith': [name, '/' + name]}
        key = ns.replace('/', '_') or 'root'
        params[key] = {'type': 'diagnostic_aggregator/AnalyzerGroup',
                       'path': ns or 'robot', 'analyzers': group}
    return {'analyzers': {'ros__parameters': params}}


def analyzer_prefixes(params):
    """{(group path, node): startswith prefixes} of `analyzers()`' output."""
    out = {}
    for value in params['analyzers']['ros__parameters'].values():
        if isinstance(value, dict):
            for node, spec in value['analyzers'].items():
                out[(value['path'], node)] = list(spec['startswith'])
    return out


def write_configs(folder, namespace, robots):
    """Write monitor.rviz and simreal.perspective for `namespace`, and
    diagnostic_analyzers.yaml for `robots` ({namespace: [node names]}), into `folder`.
    Return {'rviz', 'perspective', 'analyzers'}: their paths."""
    from pathlib import Path
    from simreal_ros.core.config import share_dir
    config = Path(share_dir()) / 'config'
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {'rviz': folder / 'monitor.rviz', 'perspective': folder / 'simreal.perspective',
             'analyzers': folder / 'diagnostic_analyzers.yaml'}
    paths['rviz'].write_text(rviz_in(namespace, (config / 'monitor.rviz').read_text()))
    paths['perspective'].write_text(
        perspective_in(namespace, (config / 'simreal.perspective').read_text()))
    paths['analyzers'].write_text(
        '# diagnostic_aggregator: ros2 run diagnostic_aggregator aggregator_node --ros-args '
        f'--params-file {paths["analyzers"]}\n' + yaml.safe_dump(analyzers(robots),
                                                                  sort_keys=False))
    return paths

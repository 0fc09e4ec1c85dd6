"""`simreal monitor`: rviz markers for the operator (stage, e-stop, per-joint limit usage),
and the rviz, rqt and diagnostic_aggregator files for a robot in any namespace.

    simreal monitor --robot arm3            # publishes monitor/markers at 5 Hz
    rviz2 -d config/monitor.rviz
    simreal -n left monitor --write-config DIR   # DIR/monitor.rviz, simreal.perspective and
                                                 # diagnostic_analyzers.yaml for /left

Reads `safety/state` (latched JSON) and `joint_states`, and the supervisor's limits from the
robot parameter file; publishes a visualization_msgs/MarkerArray on `monitor/markers`: one text
line with stage and e-stop state, and one bar per joint whose length is the largest fraction
of a limit in use (position within the soft range, velocity and torque against the stage's
scaled limits), and per joint its live reality gap from `sim_bridge/live_gap` (gap over the
noise floor, coloured by its status). `limit_usage` is the arithmetic, without ROS.
"""
import ast
import json
import threading
import time

import numpy as np
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


def limit_usage(params, stage, names, position, velocity, effort):
    """Return {joint: {'position', 'velocity', 'torque'}} fractions of each limit in use.

    params: the safety_supervisor parameters (position_lower/upper, velocity_limit,
    torque_limit, joint_names); stage: the current stage scale (velocity and torque limits
    are scaled by it). Position usage is 0 at the middle of the soft range, 1 at either end.
    """
    order = list(params['joint_names'])
    lo = np.asarray(params['position_lower'], float)
    hi = np.asarray(params['position_upper'], float)
    vmax = np.asarray(params['velocity_limit'], float) * float(stage)
    tmax = np.asarray(params['torque_limit'], float) * float(stage)
    mid, half = (hi + lo) / 2.0, np.maximum((hi - lo) / 2.0, 1e-9)
    out = {}
    for k, name in enumerate(names):
        if name not in order:
            continue
        i = order.index(name)
        entry = {'position': abs(position[k] - mid[i]) / half[i]}
        if k < len(velocity):
            entry['velocity'] = abs(velocity[k]) / max(vmax[i], 1e-9)
        if k < len(effort):
            entry['torque'] = abs(effort[k]) / max(tmax[i], 1e-9)
        out[name] = {key: round(float(v), 3) for key, v in entry.items()}
    return out


def _color(marker, fraction):
    marker.color.a = 1.0
    if fraction < 0.7:
        marker.color.r, marker.color.g, marker.color.b = 0.1, 0.8, 0.2
    elif fraction < 0.95:
        marker.color.r, marker.color.g, marker.color.b = 0.95, 0.7, 0.1
    else:
        marker.color.r, marker.color.g, marker.color.b = 0.9, 0.1, 0.1


GAP_COLOUR = {'OK': 0.0, 'WARN': 0.8, 'ERROR': 1.0}


def markers(state, usage, frame='world', stamp=None, live_gap=None):
    """Return a MarkerArray: a status text and one bar + label per joint, and with a live-gap
    document one text per joint: its gap over the noise floor and status."""
    from visualization_msgs.msg import Marker, MarkerArray
    out = MarkerArray()
    text = Marker(ns='simreal', id=0, type=Marker.TEXT_VIEW_FACING, action=Marker.ADD)
    text.header.frame_id = frame
    if stamp is not None:
        text.header.stamp = stamp
    text.pose.position.z = 1.2
    text.pose.orientation.w = 1.0
    text.scale.z = 0.08
    if state is None:
        text.text = 'safety_supervisor: no state'
        _color(text, 1.0)
    else:
        stage = state.get('stage', {})
        estop = f'E-STOP: {state.get("estop_cause")}' if state.get('estop') else 'e-stop clear'
        text.text = (f'stage {stage.get("stage")} (highest {stage.get("highest")}) | {estop} | '
                     f'{state.get("output")} {state.get("mode")}')
        _color(text, 1.0 if state.get('estop') else 0.0)
    out.markers.append(text)
    for j, (name, use) in enumerate(sorted(usage.items())):
        worst = max(use.values()) if use else 0.0
        bar = Marker(ns='simreal_limits', id=j, type=Marker.CUBE, action=Marker.ADD)
        bar.header = text.header
        bar.scale.x = max(min(worst, 1.5), 0.01) * 0.5
        bar.scale.y = bar.scale.z = 0.04
        bar.pose.position.x = bar.scale.x / 2.0
        bar.pose.position.z = 1.0 - 0.08 * j
        bar.pose.orientation.w = 1.0
        _color(bar, worst)
        label = Marker(ns='simreal_labels', id=j, type=Marker.TEXT_VIEW_FACING,
                       action=Marker.ADD)
        label.header = text.header
        label.pose.position.x = -0.35
        label.pose.position.z = bar.pose.position.z
        label.pose.orientation.w = 1.0
        label.scale.z = 0.04
        label.text = f'{name}: ' + ' '.join(f'{k[:3]} {v * 100:.0f}%' for k, v in use.items())
        _color(label, worst)
        out.markers += [bar, label]
    joints = (live_gap or {}).get('joints') or {}
    for j, name in enumerate(sorted(joints)):
        g = joints[name]
        gap = Marker(ns='simreal_live_gap', id=j, type=Marker.TEXT_VIEW_FACING,
                     action=Marker.ADD)
        gap.header = text.header
        gap.pose.position.x = 0.55
        gap.pose.position.z = 1.0 - 0.08 * j
        gap.pose.orientation.w = 1.0
        gap.scale.z = 0.04
        if g.get('gap_over_floor') is None or g.get('status') == 'unknown':
            gap.text = f'{name}: live gap unknown'
            _color(gap, 0.8)
        else:
            gap.text = f'{name}: live gap {g["gap_over_floor"]:.1f}x floor {g["status"]}'
            _color(gap, GAP_COLOUR.get(g['status'], 1.0))
        out.markers.append(gap)
    return out


def run(ros, robot, rate_hz=5.0, duration=None):
    """Publish monitor/markers until Ctrl-C (or `duration` s); return the messages sent."""
    from sensor_msgs.msg import JointState
    from std_msgs.msg import String
    from visualization_msgs.msg import MarkerArray
    from simreal_ros.core.config import load_node_params, robot_config_path
    from simreal_ros.nodes.common import LATCHED_QOS, SENSOR_SUB_QOS
    from simreal_ros.client.ros import join_name as _join
    params = load_node_params(robot_config_path(robot), 'safety_supervisor')
    latest = {'state': None, 'joints': None, 'gap': None}
    lock = threading.Lock()

    def on_state(msg):
        with lock:
            latest['state'] = json.loads(msg.data)

    def on_joints(msg):
        with lock:
            latest['joints'] = msg

    def on_gap(msg):
        with lock:
            latest['gap'] = json.loads(msg.data)
    ros.node.create_subscription(String, _join(ros.namespace, 'safety/state'), on_state,
                                 LATCHED_QOS)
    ros.node.create_subscription(JointState, _join(ros.namespace, 'joint_states'), on_joints,
                                 SENSOR_SUB_QOS)
    ros.node.create_subscription(String, _join(ros.namespace, 'sim_bridge/live_gap'), on_gap,
                                 LATCHED_QOS)
    pub = ros.node.create_publisher(MarkerArray, _join(ros.namespace, 'monitor/markers'), 10)
    sent = 0
    end = None if duration is None else time.monotonic() + duration
    while end is None or time.monotonic() < end:
        with lock:
            state, joints, gap = latest['state'], latest['joints'], latest['gap']
        usage = {}
        if joints is not None and state is not None:
            usage = limit_usage(params, state['stage']['stage'], list(joints.name),
                                list(joints.position), list(joints.velocity),
                                list(joints.effort))
        pub.publish(markers(state, usage, stamp=ros.node.get_clock().now().to_msg(),
                            live_gap=gap))
        sent += 1
        time.sleep(1.0 / rate_hz)   # a display refresh, not synchronisation
    return sent

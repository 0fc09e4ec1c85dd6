"""The ros2_control example (config/ros2_control/, docs/ros2_control.md), checked statically.

ros2_control is not installable on the development machines (no wheels on PyPI), so nothing
here starts a controller_manager. The checks read the files as controller_manager, the
controllers and the supervisor would:

- controllers.yaml is a controller_manager parameter file: `controller_manager: ros__parameters:`
  with an integer `update_rate`, each controller's `type` a plugin ros2_controllers exports
  (names read from its jazzy/kilted plugin XML files), each controller with its own
  `<name>: ros__parameters:` section holding only parameters that plugin declares, `joints`
  equal to arm3's `joint_names`, interface names in {position, velocity, effort};
- arm3.urdf's `<ros2_control>` block has those joints, and the command and state interfaces
  the controllers claim;
- supervisor_arm3.yaml (and every supervisor snippet in docs/ros2_control.md) sets only
  parameters safety_supervisor declares (read from the node's source, as the node declares
  them), and its array output reaches a forward controller: `array_topic` is
  `<controller>/commands`, `array_field` its `interface_name`, `array_joint_order` its `joints`.

Each check returns a list of problems; the last tests make sure a misspelt joint name, a wrong
topic and the like are found.
"""
import ast
import copy
import re
import xml.etree.ElementTree as ET

import pytest
import yaml

from conftest import REPO
from simreal_ros.core.config import load_node_params

EXAMPLE = REPO / 'config' / 'ros2_control'
CONTROLLERS = EXAMPLE / 'controllers.yaml'
SUPERVISOR_SNIPPET = EXAMPLE / 'supervisor_arm3.yaml'
URDF = EXAMPLE / 'arm3.urdf'
ARM3 = REPO / 'config' / 'robots' / 'arm3.yaml'
MJCF = REPO / 'models' / 'arm3' / 'arm3.xml'
DOC = REPO / 'docs' / 'ros2_control.md'
# The node's file and its parts (safety_supervisor_<role>.py: parameters, services, reports).
NODE_SOURCES = sorted((REPO / 'simreal_ros' / 'nodes').glob('safety_supervisor*.py'))
COMMON_SOURCE = REPO / 'simreal_ros' / 'nodes' / 'common.py'

INTERFACES = {'position', 'velocity', 'effort'}
FORWARD = 'forward_command_controller/ForwardCommandController'
# Forward controllers with the interface fixed (Jazzy and Kilted; removed later upstream).
FIXED_INTERFACE = {'position_controllers/JointGroupPositionController': 'position',
                   'velocity_controllers/JointGroupVelocityController': 'velocity',
                   'effort_controllers/JointGroupEffortController': 'effort'}
JSB = 'joint_state_broadcaster/JointStateBroadcaster'
# Parameters each plugin declares (ros2_controllers jazzy/kilted:
# forward_command_controller/src/forward_command_controller_parameters.yaml,
# joint_state_broadcaster/src/joint_state_broadcaster_parameters.yaml).
PLUGIN_PARAMETERS = {
    FORWARD: {'joints', 'interface_name'},
    **{plugin: {'joints', 'interface_name'} for plugin in FIXED_INTERFACE},
    JSB: {'use_local_topics', 'joints', 'extra_joints', 'interfaces',
          'map_interface_to_joint_state', 'use_urdf_to_filter', 'frame_id',
          'publish_dynamic_joint_states'},
}
# Any controller node (controller_interface, and the spawner's keys in a controller's section).
CONTROLLER_PARAMETERS = {'update_rate', 'is_async', 'use_sim_time', 'type', 'params_file',
                         'fallback_controllers'}


def read(path):
    with open(path) as f:
        return yaml.safe_load(f)


def arm3_joints():
    return list(load_node_params(ARM3, '/**')['joint_names'])


def section(data, name):
    """Return `name`'s ros__parameters mapping (plain, '/name' or '/**/name' key), or None."""
    for key in (name, '/' + name, '/**/' + name):
        if isinstance(data, dict) and key in data:
            entry = data[key]
            if isinstance(entry, dict) and isinstance(entry.get('ros__parameters'), dict):
                return entry['ros__parameters']
    return None


# -- what a controller does, from the file ------------------------------------------------------
def controllers_of(data):
    """{controller name: plugin} declared under controller_manager."""
    cm = section(data, 'controller_manager') or {}
    return {name: value['type'] for name, value in cm.items()
            if isinstance(value, dict) and 'type' in value}


def command_interface(plugin, params):
    """The interface a forward controller commands, or None for a broadcaster."""
    if plugin == FORWARD:
        return params.get('interface_name')
    return FIXED_INTERFACE.get(plugin)


def check_controllers(data, joints):
    """Problems of a controller_manager parameter file for a robot with `joints`."""
    problems = []
    cm = section(data, 'controller_manager')
    if cm is None:
        return ['no controller_manager: ros__parameters: section']
    rate = cm.get('update_rate')
    if not isinstance(rate, int) or isinstance(rate, bool) or rate <= 0:
        problems.append(f'controller_manager update_rate must be a positive integer (the '
                        f'parameter is an int), got {rate!r}')
    for name, value in cm.items():
        if isinstance(value, dict) and 'type' not in value:
            problems.append(f'controller_manager.{name} has no type')
    controllers = controllers_of(data)
    if not controllers:
        problems.append('controller_manager declares no controller (<name>: type: <plugin>)')
    for key in data:
        name = str(key).split('/')[-1]     # 'name', '/name' or '/**/name'
        if name != 'controller_manager' and name not in controllers:
            problems.append(f'section {name!r} is not a controller controller_manager declares '
                            f'({sorted(controllers)})')
    for name, plugin in controllers.items():
        if plugin not in PLUGIN_PARAMETERS:
            problems.append(f'{name}: unknown plugin {plugin!r}; known: '
                            f'{sorted(PLUGIN_PARAMETERS)}')
            continue
        params = section(data, name)
        if params is None:
            problems.append(f'{name}: no "{name}: ros__parameters:" section')
            continue
        unknown = sorted(set(params) - PLUGIN_PARAMETERS[plugin] - CONTROLLER_PARAMETERS)
        if unknown:
            problems.append(f'{name}: {plugin} declares no parameter {unknown}')
        if params.get('type', plugin) != plugin:
            problems.append(f'{name}: type {params["type"]!r} in its section, {plugin!r} '
                            'in controller_manager')
        listed = list(params.get('joints') or [])
        if plugin == JSB:
            if listed and listed != list(joints):
                problems.append(f'{name}: joints {listed} are not the robot\'s {list(joints)}')
            interfaces = list(params.get('interfaces') or [])
            if bool(listed) != bool(interfaces):
                problems.append(f'{name}: joints and interfaces are used together (one empty '
                                'publishes every interface)')
            if set(interfaces) - INTERFACES:
                problems.append(f'{name}: interfaces {sorted(set(interfaces) - INTERFACES)} '
                                f'are not in {sorted(INTERFACES)}')
            if interfaces and not {'position', 'velocity'} <= set(interfaces):
                problems.append(f'{name}: the supervisor needs position and velocity, got '
                                f'{interfaces}')
            if params.get('use_local_topics'):
                problems.append(f'{name}: use_local_topics moves joint_states to '
                                f'{name}/joint_states; the supervisor reads joint_states')
            continue
        if listed != list(joints):
            problems.append(f'{name}: joints {listed} are not the robot\'s {list(joints)}')
        interface = command_interface(plugin, params)
        if interface not in INTERFACES:
            problems.append(f'{name}: interface_name {interface!r} is not one of '
                            f'{sorted(INTERFACES)}')
        if plugin in FIXED_INTERFACE and params.get('interface_name', interface) != interface:
            problems.append(f'{name}: {plugin} commands {interface} only')
    return problems


# -- the example URDF -----------------------------------------------------------------------------
def urdf_interfaces(root):
    """{joint: (command interfaces, state interfaces)} of the <ros2_control> blocks."""
    out = {}
    for block in root.iter('ros2_control'):
        for joint in block.findall('joint'):
            out[joint.get('name')] = ({c.get('name') for c in joint.findall('command_interface')},
                                      {s.get('name') for s in joint.findall('state_interface')})
    return out


def check_urdf(root, data, joints):
    """Problems of a URDF's <ros2_control> block against the controllers and the robot."""
    problems = []
    blocks = list(root.iter('ros2_control'))
    if not blocks:
        return ['no <ros2_control> block']
    for block in blocks:
        if block.find('hardware/plugin') is None or not block.find('hardware/plugin').text:
            problems.append(f'<ros2_control name="{block.get("name")}"> has no hardware plugin')
    urdf_joints = {j.get('name') for j in root.findall('joint')}
    interfaces = urdf_interfaces(root)
    if sorted(interfaces) != sorted(joints):
        problems.append(f'<ros2_control> joints {sorted(interfaces)} are not the robot\'s '
                        f'{sorted(joints)}')
    for name in interfaces:
        if name not in urdf_joints:
            problems.append(f'<ros2_control> joint {name!r} is not a <joint> of the URDF')
    for name, plugin in controllers_of(data).items():
        params = section(data, name) or {}
        for joint in params.get('joints') or []:
            command, state = interfaces.get(joint, (set(), set()))
            if plugin == JSB:
                missing = set(params.get('interfaces') or []) - state
                if missing:
                    problems.append(f'{name}: {joint} has no state interface {sorted(missing)}')
            else:
                interface = command_interface(plugin, params)
                if interface not in command:
                    problems.append(f'{name}: {joint} has no command interface {interface!r}')
    return problems


# -- the supervisor's declared parameters, from its source ------------------------------------------
def _declared_names(tree, function_calls=('declare',)):
    """Names (str) and f-string patterns (re) of parameters declared in a module's AST."""
    names, patterns = set(), []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and any(getattr(t, 'id', '') == 'ARRAYS' for t in node.targets)):
            names |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
        if not isinstance(node, ast.Call):
            continue
        func = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, 'attr',
                                                                              '')
        if func in function_calls and len(node.args) >= 2:
            arg = node.args[1]
        elif func == 'declare_parameter' and node.args:
            arg = node.args[0]
        else:
            continue
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            names.add(arg.value)
        elif isinstance(arg, ast.JoinedStr):
            patterns.append(re.compile('^' + ''.join(
                re.escape(v.value) if isinstance(v, ast.Constant) else r'[^.]+'
                for v in arg.values) + '$'))
    return names, patterns


def supervisor_parameters():
    """(names, patterns, node name, array fields the node accepts) read from its source."""
    tree = ast.Module(body=[stmt for path in NODE_SOURCES
                            for stmt in ast.parse(path.read_text()).body], type_ignores=[])
    names, patterns = _declared_names(tree)
    calls = {getattr(n.func, 'id', '') for n in ast.walk(tree) if isinstance(n, ast.Call)}
    if 'declare_priority' in calls:   # process_priority, declared in nodes/common.py
        common = ast.parse(COMMON_SOURCE.read_text())
        for fn in ast.walk(common):
            if isinstance(fn, ast.FunctionDef) and fn.name == 'declare_priority':
                more, more_patterns = _declared_names(fn)
                names |= more
                patterns += more_patterns
    names.add('use_sim_time')         # every rclpy node
    node_name, fields = None, None
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and any(getattr(t, 'id', '') == 'NODE_NAME'
                                                 for t in node.targets)):
            node_name = node.value.value
        if (isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute)
                and node.left.attr == 'array_field' and isinstance(node.ops[0], ast.NotIn)):
            fields = set(ast.literal_eval(node.comparators[0]))
    return names, patterns, node_name, fields


def _flat(params, prefix=''):
    out = {}
    for key, value in params.items():
        if isinstance(value, dict):
            out.update(_flat(value, f'{prefix}{key}.'))
        else:
            out[f'{prefix}{key}'] = value
    return out


def check_supervisor(snippet, data, joints):
    """Problems of a supervisor parameter snippet against the node and the controllers."""
    names, patterns, node_name, fields = supervisor_parameters()
    assert node_name and names and fields, 'could not read safety_supervisor.py'
    params = section(snippet, node_name)
    if params is None:
        return [f'no "/**/{node_name}: ros__parameters:" section']
    problems = []
    for key in sorted(_flat(params)):
        if key not in names and not any(p.match(key) for p in patterns):
            problems.append(f'{node_name} declares no parameter {key!r}')
    topic = str(params.get('array_topic') or '').strip('/')
    if not topic:
        return problems + ['array_topic is not set: the supervisor publishes no array']
    controllers = controllers_of(data)
    target = next((n for n in controllers if topic == f'{n}/commands'), None)
    if target is None or controllers[target] == JSB:
        return problems + [f'array_topic {topic!r} is no forward controller\'s <name>/commands '
                           f'topic ({", ".join(f"{n}/commands" for n in controllers)})']
    ctl = section(data, target) or {}
    field = params.get('array_field', 'position')
    if field not in fields:
        problems.append(f'array_field {field!r} is not one of {sorted(fields)}')
    interface = command_interface(controllers[target], ctl)
    if field != interface:
        problems.append(f'array_field {field!r} but {target} commands {interface!r}')
    order = list(params.get('array_joint_order') or joints)
    if order != list(ctl.get('joints') or []):
        problems.append(f'array_joint_order {order} is not {target}\'s joints '
                        f'{ctl.get("joints")} (data[i] goes to joints[i])')
    unknown = [n for n in order if n not in joints]
    if unknown:
        problems.append(f'array_joint_order names {unknown}, not in joint_names {joints}')
    return problems


def doc_supervisor_snippets():
    """The yaml blocks of docs/ros2_control.md that configure safety_supervisor."""
    blocks = re.findall(r'```yaml\n(.*?)```', DOC.read_text(), re.S)
    return [yaml.safe_load(b) for b in blocks if 'safety_supervisor' in b]


# -- the shipped files ----------------------------------------------------------------------------
def test_controllers_yaml_is_a_controller_manager_file_for_arm3():
    data = read(CONTROLLERS)
    assert check_controllers(data, arm3_joints()) == []
    controllers = controllers_of(data)
    assert JSB in controllers.values()
    assert {command_interface(p, section(data, n)) for n, p in controllers.items()
            if p != JSB} == {'position', 'effort'}


def test_the_urdf_offers_what_the_controllers_claim():
    root = ET.parse(URDF).getroot()
    assert check_urdf(root, read(CONTROLLERS), arm3_joints()) == []


def test_the_urdf_limits_are_arm3s():
    """Effort and velocity limits = the supervisor's stage-1.00 limits; range = the MJCF's."""
    sup = load_node_params(ARM3, 'safety_supervisor')
    mjcf = {j.get('name'): [float(v) for v in j.get('range').split()]
            for j in ET.parse(MJCF).getroot().iter('joint') if j.get('name')}
    joints = {j.get('name'): j.find('limit') for j in ET.parse(URDF).getroot().findall('joint')}
    for i, name in enumerate(arm3_joints()):
        limit = joints[name]
        assert float(limit.get('effort')) == sup['torque_limit'][i], name
        assert float(limit.get('velocity')) == sup['velocity_limit'][i], name
        assert [float(limit.get('lower')), float(limit.get('upper'))] == mjcf[name], name


def test_supervisor_snippet_feeds_the_position_controller():
    snippet = read(SUPERVISOR_SNIPPET)
    data = read(CONTROLLERS)
    assert check_supervisor(snippet, data, arm3_joints()) == []
    sup = load_node_params(SUPERVISOR_SNIPPET, 'safety_supervisor')
    assert sup['array_topic'] == 'position_controller/commands'
    # The array carries only the field the source sends: arm3's policy sends positions.
    assert load_node_params(ARM3, 'policy_runner')['action.mode'] == sup['array_field']
    # The robot file does not set the array output itself: the snippet is what adds it.
    assert not {k for k in load_node_params(ARM3, 'safety_supervisor') if k.startswith('array_')}


def test_every_supervisor_snippet_in_the_doc_feeds_a_controller():
    snippets = doc_supervisor_snippets()
    assert snippets, 'docs/ros2_control.md shows no supervisor parameters'
    for snippet in snippets:
        assert check_supervisor(snippet, read(CONTROLLERS), arm3_joints()) == [], snippet


def test_the_doc_is_linked_and_says_how_the_example_is_checked():
    text = DOC.read_text()
    assert 'not installable' in text and 'test/test_ros2_control_example.py' in text
    for name in ('controllers.yaml', 'supervisor_arm3.yaml', 'arm3.urdf', 'safety/heartbeat'):
        assert name in text, name
    assert '(docs/ros2_control.md)' in (REPO / 'README.md').read_text()
    assert '(ros2_control.md)' in (REPO / 'docs' / 'real_robot.md').read_text()


def test_declared_parameters_are_read_from_the_node():
    names, patterns, node_name, fields = supervisor_parameters()
    assert node_name == 'safety_supervisor'
    assert {'array_topic', 'array_field', 'array_joint_order', 'joint_names', 'kp',
            'safe_mode', 'heartbeat_rate_hz', 'process_priority'} <= names
    assert any(p.match('policy_timeout_s') for p in patterns)
    assert fields == INTERFACES


# -- the checks find mistakes ------------------------------------------------------------------------
def _mutated(path, edit):
    data = copy.deepcopy(read(path))
    edit(data)
    return data


def _set(path_keys, value):
    def edit(data):
        node = data
        for key in path_keys[:-1]:
            node = node[key]
        node[path_keys[-1]] = value
    return edit


JOINTS_BAD = ['shoulder_yaw', 'shoulder_pich', 'elbow_pitch']


@pytest.mark.parametrize('edit,expect', [
    (_set(['position_controller', 'ros__parameters', 'joints'], JOINTS_BAD), 'shoulder_pich'),
    (_set(['joint_state_broadcaster', 'ros__parameters', 'joints'], JOINTS_BAD),
     'shoulder_pich'),
    (_set(['position_controller', 'ros__parameters', 'interface_name'], 'positon'), 'positon'),
    (_set(['position_controller', 'ros__parameters', 'interface_nam'], 'position'),
     'interface_nam'),
    (_set(['controller_manager', 'ros__parameters', 'update_rate'], 500.0), 'update_rate'),
    (_set(['controller_manager', 'ros__parameters', 'position_controller', 'type'],
          'forward_command_controller/ForwardController'), 'unknown plugin'),
    (lambda d: d.pop('effort_controller'), 'no "effort_controller: ros__parameters:"'),
    (lambda d: d.update(positon_controller=d['position_controller']), 'positon_controller'),
    (_set(['joint_state_broadcaster', 'ros__parameters', 'interfaces'], ['position']),
     'position and velocity'),
], ids=['joint', 'jsb-joint', 'interface', 'parameter', 'float-rate', 'plugin',
        'no-section', 'orphan-section', 'jsb-velocity'])
def test_a_broken_controllers_file_is_found(edit, expect):
    problems = check_controllers(_mutated(CONTROLLERS, edit), arm3_joints())
    assert any(expect in p for p in problems), problems


def test_a_urdf_without_the_claimed_interface_is_found():
    root = ET.parse(URDF).getroot()
    for joint in root.iter('ros2_control'):
        for j in joint.findall('joint'):
            for c in j.findall('command_interface'):
                if c.get('name') == 'effort':
                    j.remove(c)
    problems = check_urdf(root, read(CONTROLLERS), arm3_joints())
    assert any("no command interface 'effort'" in p for p in problems), problems
    root = ET.parse(URDF).getroot()
    next(root.iter('ros2_control')).find('joint').set('name', 'shoulder_yaww')
    assert check_urdf(root, read(CONTROLLERS), arm3_joints())


SUP = '/**/safety_supervisor'


@pytest.mark.parametrize('edit,expect', [
    (_set([SUP, 'ros__parameters', 'array_topic'], '/position_controller/command'),
     'no forward controller'),
    (_set([SUP, 'ros__parameters', 'array_topic'], 'joint_state_broadcaster/commands'),
     'no forward controller'),
    (_set([SUP, 'ros__parameters', 'array_field'], 'effort'), "commands 'position'"),
    (_set([SUP, 'ros__parameters', 'array_joint_order'], list(reversed(JOINTS_BAD))),
     'shoulder_pich'),
    (_set([SUP, 'ros__parameters', 'array_joint_order'],
          ['elbow_pitch', 'shoulder_pitch', 'shoulder_yaw']), 'data[i] goes to joints[i]'),
    (_set([SUP, 'ros__parameters', 'array_topics'], 'x'), "no parameter 'array_topics'"),
    (lambda d: d.update({'/**/safety_supervisr': d.pop(SUP)}), 'no "/**/safety_supervisor'),
], ids=['topic', 'broadcaster', 'field', 'joint', 'order', 'parameter', 'node-name'])
def test_a_broken_supervisor_snippet_is_found(edit, expect):
    problems = check_supervisor(_mutated(SUPERVISOR_SNIPPET, edit), read(CONTROLLERS),
                                arm3_joints())
    assert any(expect in p for p in problems), problems

"""The deployment graph, described once: which nodes, which parameter files, which remaps.

`simreal up`, `simreal demo` and `launch/deploy.launch.py` all build their processes from
`build_graph()`, so they start the same nodes with the same parameters. No rclpy here.

    from simreal_ros.deploy.graph import build_graph
    graph = build_graph('arm3', sysid=True)
    for node in graph.nodes:
        print(node.name, node.params_files, node.remaps)

A robot parameter file may contain a `deploy` section naming the robot driver's topics when they
differ from the package's names (every node is remapped the same way):

    deploy:
      ros__parameters:
        joint_states_topic: /robot/joint_states
        command_topic: /robot/joint_command
        imu_topic: /robot/imu
        applied_command_topic: /robot/applied_command   # what it applied (the live gap)
"""
from dataclasses import dataclass, field
import importlib.util
import os
from pathlib import Path
import sys
import tempfile

import yaml

from simreal_ros.core.config import (ConfigError, load_node_params, read_yaml, resolve_path,
                                     robot_config_path)

# The order in which nodes are started: the driver first, the supervisor before any command
# source, the sources last.
SIM_NODE = 'sim_robot'
SUPERVISOR = 'safety_supervisor'
POLICY = 'policy_runner'
SYSID_NODES = ('friction_id', 'inertia_id', 'latency_id')
BRIDGE = 'sim_bridge'
UNITREE = 'unitree_bridge'
MARKERS = 'status_markers'   # rviz markers (rviz:=true); needs no section of its own
ALL_NODES = (SIM_NODE, UNITREE, SUPERVISOR, POLICY) + SYSID_NODES + (BRIDGE, MARKERS)
# Hardware adapters a graph can put between the supervisor and the robot (`driver`).
DRIVERS = {'': None, 'unitree': UNITREE}


def rehearsal_wire(interface='unitree_hg', environ=None):
    """Robot-side DDS parameters for a rehearsal at a desk (sim_robot plays the Unitree robot):
    loopback only, on the ROS domain + 100 (mod 233), so parallel runs in private ROS domains
    stay apart and the robot's own domain and network are never touched."""
    env = os.environ if environ is None else environ
    domain = (int(env.get('ROS_DOMAIN_ID', '0') or 0) + 100) % 233
    return {'interface': interface, 'unitree.domain_id': domain,
            'unitree.network_interface': 'lo'}

# Driver topics a robot's `deploy` section may remap: package name -> deploy parameter.
DRIVER_TOPICS = {'joint_states': 'joint_states_topic', 'hardware/command': 'command_topic',
                 'imu': 'imu_topic', 'driver/applied_command': 'applied_command_topic'}
DEPLOY_SECTION = 'deploy'
# Parameters of the shared '/**' section read by the tools themselves, not by a node.
TOOL_PARAMETERS = ('robot_name',)


@dataclass
class NodeSpec:
    """One node process of the graph."""

    name: str                   # node name and console script (ros2 run simreal_ros <name>)
    params_files: list          # parameter files, in order (later ones override)
    remaps: list                # [(from, to)] topic remaps
    overrides: dict = field(default_factory=dict)   # parameters the overlay file sets

    @property
    def executable(self):
        return self.name

    @property
    def module(self):
        return f'simreal_ros.nodes.{self.name}'


@dataclass
class Graph:
    """The nodes to start for one robot, and the ones left out with the reason."""

    robot: str
    robot_name: str
    config_path: Path
    namespace: str
    use_sim_time: bool
    nodes: list
    skipped: list               # [(node name, reason)]
    overlay_path: Path = None

    def node(self, name):
        """Return the NodeSpec called `name`, or None when it is not in the graph."""
        return next((n for n in self.nodes if n.name == name), None)

    def names(self):
        return [n.name for n in self.nodes]

    def command(self, spec, python=None):
        """Return the argv that starts `spec` as its own process (without ros2cli)."""
        cmd = [python or sys.executable, '-m', spec.module, '--ros-args',
               '-r', f'__node:={spec.name}']
        if self.namespace:
            cmd += ['-r', f'__ns:={self.namespace}']
        for path in spec.params_files:
            cmd += ['--params-file', str(path)]
        for src, dst in spec.remaps:
            cmd += ['-r', f'{src}:={dst}']
        return cmd

    def describe(self):
        """Return printable lines: node, parameter files, remaps, and what was left out."""
        lines = [f'robot {self.robot_name} ({self.config_path})'
                 + (f', namespace {self.namespace}' if self.namespace else '')
                 + (', use_sim_time' if self.use_sim_time else '')]
        for spec in self.nodes:
            extra = ', '.join(f'{a}->{b}' for a, b in spec.remaps)
            over = ', '.join(f'{k}={v}' for k, v in spec.overrides.items())
            lines.append(f'  {spec.name:<18} ' + (f'remap {extra}; ' if extra else '')
                         + (f'set {over}' if over else 'robot parameters as in the file'))
        for name, reason in self.skipped:
            lines.append(f'  {name:<18} not started: {reason}')
        return lines


def node_available(name):
    """Return True when the node's module exists in this installation."""
    try:
        return importlib.util.find_spec(f'simreal_ros.nodes.{name}') is not None
    except (ImportError, ValueError):
        return False


def _namespace(namespace):
    namespace = (namespace or '').strip().strip('/')
    return '/' + namespace if namespace else ''


def _deploy_remaps(path):
    data = read_yaml(path)
    section = None
    for key in (DEPLOY_SECTION, '/' + DEPLOY_SECTION, '/**/' + DEPLOY_SECTION):
        if isinstance(data, dict) and key in data:
            section = (data[key] or {}).get('ros__parameters') or {}
    if section is None:
        return []
    unknown = sorted(set(section) - set(DRIVER_TOPICS.values()))
    if unknown:
        raise ConfigError(f'{path}: section {DEPLOY_SECTION!r} has unknown parameters '
                          f'{unknown}; allowed: {sorted(DRIVER_TOPICS.values())}')
    return [(topic, str(section[key])) for topic, key in DRIVER_TOPICS.items()
            if section.get(key) and str(section[key]) != topic]


def build_graph(robot='arm3', *, policy='', use_sim=True, sysid=False, use_sim_time=False,
                namespace='', overrides=None, check_files=True, driver='', markers=False):
    """Describe the graph for `robot` (a name in config/robots/ or a parameter file path).

    policy: an ONNX path that replaces policy_runner's policy_path. use_sim: start sim_robot
    (false on hardware). driver: '' (the robot's driver speaks hardware/command itself) or
    'unitree' (start unitree_bridge with the robot file's section; with use_sim, sim_robot
    plays the Unitree robot and both talk over loopback: `rehearsal_wire`). sysid: start the
    three SysID nodes and sim_bridge (sim_bridge alone also starts without it when the robot
    file holds identified values: its shadow gives the supervisor the live gap). markers: start status_markers (the rviz markers, in the
    graph's namespace; it reads the limits from the robot file). overrides:
    {node: {parameter: value}} written to the overlay file (the demo shortens dwell times).
    Nodes whose module does not exist yet, or whose section is absent from the robot file, are
    listed in `skipped` with the reason. Raises ConfigError for an unknown robot.
    """
    path = robot_config_path(robot)
    shared = load_node_params(path, '/**')
    robot_name = str(shared.get('robot_name') or Path(path).stem)
    if driver not in DRIVERS:
        raise ConfigError(f'driver {driver!r}: expected one of {sorted(DRIVERS)}')
    wanted = ([SIM_NODE] if use_sim else []) + ([DRIVERS[driver]] if DRIVERS[driver] else [])
    wanted += [SUPERVISOR, POLICY]
    if sysid:
        wanted += list(SYSID_NODES) + [BRIDGE]
    elif BRIDGE in _sections(path) and identified_in_file(path):
        # An identified model to shadow: sim_bridge runs with the deployment, so the live gap
        # exists and the supervisor's gate (live_gap.require auto) is on (issue 15).
        wanted.append(BRIDGE)
    if markers:
        wanted.append(MARKERS)
    sections = set(_sections(path))
    ns = _namespace(namespace)
    if ns:
        plain = sorted(k for k in read_yaml(path) if k in wanted)
        if plain:
            raise ConfigError(
                f'{path}: section(s) {plain} apply only to nodes in the root namespace, so '
                f'namespace {ns} would start them without their parameters; key them '
                + ', '.join(f"'/**/{k}:'" for k in plain) + ' (any namespace)')
    remaps = _deploy_remaps(path)
    if ns and use_sim_time:
        # One clock per robot: sim_robot's /clock and every node's time source become
        # <ns>/clock, so a robot never follows another simulated robot's time.
        remaps.append(('/clock', f'{ns}/clock'))
    overrides = {k: dict(v) for k, v in (overrides or {}).items()}
    if sysid and use_sim and SIM_NODE in wanted:
        gantry = gantry_session(path)
        if gantry:
            overrides[SIM_NODE] = dict(gantry, **overrides.get(SIM_NODE, {}))
    if driver == 'unitree' and use_sim:
        if UNITREE not in sections:
            raise ConfigError(f'{path} has no {UNITREE!r} section (driver unitree)')
        wire = rehearsal_wire(load_node_params(path, UNITREE).get('interface', 'unitree_hg'))
        for name in (SIM_NODE, UNITREE):
            overrides[name] = dict(wire, **overrides.get(name, {}))
    nodes, skipped = [], []
    for name in wanted:
        if not node_available(name):
            skipped.append((name, f'node not available (no module simreal_ros.nodes.{name} '
                                  'in this installation)'))
            continue
        if name == MARKERS:
            over = dict(overrides.get(name, {}))
            over.setdefault('robot_file', str(path))
            nodes.append(NodeSpec(name=name, params_files=[str(path)], remaps=list(remaps),
                                  overrides=over))
            continue
        if name not in sections:
            skipped.append((name, f'{path} has no {name!r} section'))
            continue
        over = dict(overrides.get(name, {}))
        if name == POLICY and policy:
            over['policy_path'] = str(resolve_path(policy, what='policy'))
        if ((name == SIM_NODE and driver == '') or name == UNITREE) and SUPERVISOR in wanted:
            # The driver obeys the supervisor only (issue 16): any other publisher of
            # hardware/command is a rogue, named, and the robot damped.
            over.setdefault('command_publishers', [SUPERVISOR])
        if use_sim_time:
            if name == SIM_NODE:
                over['publish_clock'] = True   # sim_robot owns /clock
            else:
                over['use_sim_time'] = True
        if check_files and name == POLICY and 'policy_path' not in over:
            stand_in = _stand_in(path)
            if stand_in:
                over['policy_path'] = stand_in
        if check_files and name == POLICY:
            problem = _policy_problem(path, over)
            if problem:
                skipped.append((name, problem))
                continue
            # The node gets the file checked here, whatever its working directory.
            over['policy_path'] = str(_policy_file(path, over))
        nodes.append(NodeSpec(name=name, params_files=[str(path)], remaps=list(remaps),
                              overrides=over))
    graph = Graph(robot=str(robot), robot_name=robot_name, config_path=Path(path),
                  namespace=ns, use_sim_time=bool(use_sim_time),
                  nodes=nodes, skipped=skipped)
    return graph


def gantry_session(path):
    """sim_robot's overrides for a simulated SysID session of a robot identified hanging in
    its gantry (sim_bridge.gantry_lift >= 0 in the robot file): the base bolted that high, as
    sim_bridge replays it, running from the start, and the hidden plant on (the truth SysID
    must find); {} otherwise.
    A --param sim_robot:... given by the operator wins."""
    if BRIDGE not in _sections(path):
        return {}
    lift = load_node_params(path, BRIDGE).get('gantry_lift')
    try:
        lift = float(lift)
    except (TypeError, ValueError):
        return {}
    # Bolted up, it cannot fall: it runs from the start (no hold_until_command, whose frozen
    # joint_states stamps the supervisor's watchdog takes for a dead driver until a position
    # target arrives).
    return ({'gantry_lift': lift, 'plant_enabled': True, 'hold_until_command': False}
            if lift >= 0 else {})


def identified_in_file(path):
    """True when the robot file gives sim_bridge identified values (`joints.<joint>.<key>`, or a
    non-zero `latency_s`), as `identified_params.yaml` from `sim_bridge/export` does."""
    p = load_node_params(path, BRIDGE)
    return any(k.startswith('joints.') for k in p) or float(p.get('latency_s') or 0.0) != 0.0


def _sections(path):
    data = read_yaml(path)
    return [str(k).split('/')[-1] for k in data if k not in ('/**', '**')]


def _stand_in(path):
    """Return the stand-in policy the robot file names (made on first use), or ''.

    A robot file whose policy_path is a stand-in the package can make (arm3_policy.onnx) gets
    the copy in the user data folder ($XDG_DATA_HOME/simreal_ros), never a path relative to
    the working directory, so `ros2 launch simreal_ros deploy.launch.py` starts policy_runner
    from anywhere.
    """
    from simreal_ros.core.onnx_policies import STAND_INS, stand_in_policy
    configured = str(load_node_params(path, POLICY).get('policy_path') or '')
    name = os.path.basename(configured)
    if name not in STAND_INS or configured.startswith(('/', 'package://', 'asset://')):
        return ''
    return stand_in_policy(name)


def _policy_file(path, over):
    """Return policy_runner's policy file: an override as given, else the robot file's
    policy_path (absolute, package://, or relative to the robot file's folder, as
    policy_runner resolves it against the parameter file that sets it)."""
    if over.get('policy_path'):
        return resolve_path(over['policy_path'], what='policy_runner: parameter policy_path')
    policy = load_node_params(path, POLICY).get('policy_path')
    return resolve_path(policy, what=f'policy_runner: parameter policy_path (set in {path})',
                        relative_to=Path(path).parent)


def _policy_problem(path, over):
    policy = over.get('policy_path') or load_node_params(path, POLICY).get('policy_path')
    if not policy:
        return f'{path}: policy_runner has no policy_path (give policy:=<file.onnx>)'
    try:
        from simreal_ros.core.policy import refuse_torch_file
        refuse_torch_file(_policy_file(path, over), f'{path}: policy_runner policy_path')
    except ConfigError as exc:
        from simreal_ros.core.onnx_policies import STAND_INS
        if os.path.basename(str(policy)) in STAND_INS:
            hint = (f'; {os.path.basename(str(policy))} is a stand-in the package makes on '
                    'first use when policy_path names it by a relative path (as '
                    'config/robots/ does), or give policy:=<file.onnx>')
        else:
            hint = ('; give policy:=<file.onnx> (simreal up --policy), or fix policy_path '
                    '(docs/bring_your_own.md, "The policy")')
        return f'{exc}{hint}'
    return ''


def missing_files(robot):
    """Return [(section, parameter, value)] for each file the robot file names that is absent.

    The files are the `*_path` parameters of every section (model_path, policy_path), resolved
    as the nodes resolve them (absolute, package://simreal_ros/..., or relative to the robot
    file's folder, the current directory or the source checkout, in that order). A
    stand-in policy the package makes on first use (`arm3_policy.onnx`, see `_stand_in`) is
    never missing. Tests skip a robot file with this, whatever its name: the G1's model and
    policy are third-party assets (`asset://`, `simreal assets fetch`).
    """
    from simreal_ros.core.onnx_policies import STAND_INS
    path = robot_config_path(robot)
    missing = []
    for section in _sections(path) or ['/**']:
        for key, value in sorted(load_node_params(path, section).items()):
            if not key.endswith('_path') or not isinstance(value, str) or not value:
                continue
            if os.path.basename(value) in STAND_INS and \
                    not value.startswith(('/', 'package://', 'asset://')):
                continue
            try:
                resolve_path(value, what=f'{section}.{key}', relative_to=Path(path).parent)
            except ConfigError:
                if (key, value) not in [(k, v) for _, k, v in missing]:   # '/**' ones once
                    missing.append((section, key, value))
    return missing


def write_overlay(graph, folder=None):
    """Write the overlay parameter file (one '/**/<node>' section per node with overrides).

    Each node gets [robot file, overlay] as its parameter files: a node-name section in a later
    file overrides the robot file's section (a `-p` argument would not). Returns the path, or
    None when no node has overrides.
    """
    sections = {f'/**/{n.name}': {'ros__parameters': n.overrides}
                for n in graph.nodes if n.overrides}
    if not sections:
        return None
    folder = Path(folder or tempfile.mkdtemp(prefix='simreal_graph_'))
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f'{graph.robot_name}_overlay.yaml'
    out.write_text('# Written by simreal_ros.deploy.graph: overrides on top of '
                   f'{graph.config_path}\n' + yaml.safe_dump(sections, sort_keys=True))
    graph.overlay_path = out
    for spec in graph.nodes:
        if spec.overrides:
            spec.params_files = [str(graph.config_path), str(out)]
    return out


def node_parameters(graph, spec):
    """Return the flattened parameters `spec` receives from its files (for tests and docs)."""
    params = {}
    for path in spec.params_files:
        params.update(load_node_params(path, spec.name))
    return params


def rviz_config():
    """Return the path of config/monitor.rviz."""
    from simreal_ros.core.config import share_dir
    return Path(share_dir()) / 'config' / 'monitor.rviz'


def monitor_configs(graph, folder=None):
    """Write the rviz, rqt and diagnostic_aggregator files for `graph`'s robot (its topics in
    its namespace; see simreal_ros.deploy.monitor_files.write_configs) beside the overlay, or into
    `folder`; return {'rviz', 'perspective', 'analyzers'}: their paths."""
    from simreal_ros.deploy.monitor_files import write_configs
    if folder is None:
        base = graph.overlay_path.parent if graph.overlay_path else Path(
            tempfile.mkdtemp(prefix='simreal_graph_'))
        folder = base / 'monitor'
    return write_configs(folder, graph.namespace, {graph.namespace: graph.names()})


def rviz_available():
    """Return True when rviz2 can be started (a ROS 2 desktop install: package or PATH)."""
    import shutil
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_prefix
        try:
            get_package_prefix('rviz2')
            return True
        except (PackageNotFoundError, OSError):   # OSError: no AMENT_PREFIX_PATH at all
            pass
    except ImportError:
        pass
    return shutil.which('rviz2') is not None


def env_summary():
    """Return the DDS settings that decide who sees this graph."""
    return {'ROS_DOMAIN_ID': os.environ.get('ROS_DOMAIN_ID', '0 (default)'),
            'ROS_AUTOMATIC_DISCOVERY_RANGE':
                os.environ.get('ROS_AUTOMATIC_DISCOVERY_RANGE', 'SUBNET (default)')}

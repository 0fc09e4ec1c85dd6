"""deploy.launch.py and `simreal up` start the same graph; checked without launch_ros.

launch/launch_ros are not installed everywhere (not on the pip-only path), so this file checks
deploy.launch.py statically: its arguments, that every executable is a console script, that
every parameter file loads, that every parameter a file gives a node is declared by that node
(the node processes are started and asked over rcl_interfaces/ListParameters), and that an
unknown robot is a clear message. test_launch_real.py runs the file where launch_ros imports.
"""
import ast
import importlib.util
import os
from pathlib import Path
import subprocess
import sys
import types

import pytest
import yaml

from conftest import REPO, require_files
from rosproc import wait_for
from simreal_ros.core.config import ConfigError, load_node_params, node_names_in, read_yaml
from simreal_ros.deploy.graph import (ALL_NODES, TOOL_PARAMETERS, UNITREE, build_graph, missing_files,
                               node_parameters, write_overlay)

LAUNCH = REPO / 'launch' / 'deploy.launch.py'
ROBOTS = sorted((REPO / 'config' / 'robots').glob('*.yaml'))
# The robot file the Unitree driver cases use: the first with a unitree_bridge section.
UNITREE_ROBOT = next((p for p in ROBOTS if UNITREE in node_names_in(p)), None)
ARGUMENTS = {'robot', 'policy', 'use_sim', 'sysid', 'use_sim_time', 'namespace', 'rviz',
             'urdf', 'driver', 'enclaves'}


def setup_scripts():
    """Return the console script names setup.py declares (NODES + 'simreal')."""
    tree = ast.parse((REPO / 'setup.py').read_text())
    nodes = None
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and getattr(stmt.targets[0], 'id', '') == 'NODES':
            nodes = ast.literal_eval(stmt.value)
    assert nodes is not None, 'setup.py has no NODES list'
    text = (REPO / 'setup.py').read_text()
    return set(nodes) | ({'simreal'} if "'simreal = simreal_ros.client.cli:main'" in text else set())


def policy_file(tmp_path):
    """A generated stand-in policy for arm3 (nothing binary is committed)."""
    spec = importlib.util.spec_from_file_location('onnx_policies',
                                                  REPO / 'scripts' / 'onnx_policies.py')
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.arm3(str(tmp_path / 'arm3_policy.onnx'))


# -- a recording stand-in for the launch API, to run the file's own logic ----------------
class _Recorder:
    made = []

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs
        _Recorder.made.append(self)


def _fake_launch_modules(values):
    """Return sys.modules entries for launch/launch_ros that record what the file builds."""
    class LaunchConfiguration:
        def __init__(self, name):
            self.name = name

        def perform(self, context):
            return values[self.name]

    mods = {}
    for name in ('launch', 'launch.actions', 'launch.conditions', 'launch.substitutions',
                 'launch_ros', 'launch_ros.actions'):
        mods[name] = types.ModuleType(name)
    kinds = {}
    for mod, names in (('launch', ['LaunchDescription']),
                       ('launch.actions', ['DeclareLaunchArgument', 'ExecuteProcess',
                                           'LogInfo', 'OpaqueFunction']),
                       ('launch.conditions', ['IfCondition']),
                       ('launch_ros.actions', ['Node'])):
        for cls in names:
            kinds[cls] = type(cls, (_Recorder,), {})
            setattr(mods[mod], cls, kinds[cls])
    mods['launch.substitutions'].LaunchConfiguration = LaunchConfiguration
    return mods, kinds


def run_launch_file(values, monkeypatch):
    """Execute deploy.launch.py's generate_launch_description and its OpaqueFunction."""
    mods, kinds = _fake_launch_modules(values)
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    _Recorder.made = []
    spec = importlib.util.spec_from_file_location('deploy_launch', LAUNCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    description = module.generate_launch_description()
    declared = {a.args[0]: a.kwargs for a in description.args[0]
                if isinstance(a, kinds['DeclareLaunchArgument'])}
    opaque = [a for a in description.args[0] if isinstance(a, kinds['OpaqueFunction'])]
    assert len(opaque) == 1
    actions = opaque[0].kwargs['function'](context=None)
    nodes = [a.kwargs for a in actions if isinstance(a, kinds['Node'])]
    return declared, nodes, actions


def launch_values(**over):
    values = {'robot': 'arm3', 'policy': '', 'use_sim': 'true', 'sysid': 'false',
              'use_sim_time': 'false', 'namespace': '', 'rviz': 'false', 'urdf': '',
              'driver': '', 'enclaves': ''}
    values.update(over)
    return values


# -- tests --------------------------------------------------------------------------------
def test_launch_file_declares_the_documented_arguments(monkeypatch, tmp_path):
    declared, _, _ = run_launch_file(launch_values(policy=policy_file(tmp_path)), monkeypatch)
    assert set(declared) == ARGUMENTS
    assert all(kw.get('description') for kw in declared.values())


def test_every_executable_is_a_console_script():
    scripts = setup_scripts()
    assert 'simreal' in scripts
    graph = build_graph('arm3', sysid=True, check_files=False)
    for spec in graph.nodes:
        assert spec.executable in scripts, f'{spec.executable} is not in setup.py NODES'
        assert importlib.util.find_spec(spec.module) is not None
    # A node module that exists must also be a console script (ros2 run / ros2 launch).
    for name in ALL_NODES:
        if (REPO / 'simreal_ros' / 'nodes' / f'{name}.py').is_file():
            assert name in scripts, f'simreal_ros/nodes/{name}.py has no console script'


@pytest.mark.parametrize('path', ROBOTS, ids=[p.stem for p in ROBOTS])
def test_every_parameter_file_loads(path):
    graph = build_graph(str(path), sysid=True, check_files=False)
    assert graph.node('safety_supervisor') is not None
    for spec in graph.nodes:
        params = node_parameters(graph, spec)
        assert params['joint_names'], f'{path}: {spec.name} gets no joint_names'


@pytest.mark.parametrize('opts', [
    {}, {'use_sim': 'false'}, {'sysid': 'true'}, {'use_sim_time': 'true'},
    {'namespace': 'left_arm'}, {'driver': 'unitree'}, {'driver': 'unitree', 'use_sim': 'false'},
], ids=['default', 'hardware', 'sysid', 'sim_time', 'namespace', 'unitree_rehearsal',
        'unitree_robot'])
def test_launch_file_and_simreal_up_start_the_same_graph(opts, monkeypatch, tmp_path):
    """The Node actions of deploy.launch.py equal the processes `simreal up` starts."""
    from simreal_ros.client import cli
    policy = policy_file(tmp_path)
    robot = 'arm3'
    if opts.get('driver'):
        assert UNITREE_ROBOT is not None, 'no robot file in config/robots has a unitree_bridge'
        require_files(UNITREE_ROBOT)
        robot, policy = UNITREE_ROBOT.stem, ''
    if opts.get('namespace'):
        robot = str(namespaced_copy(REPO / 'config' / 'robots' / 'arm3.yaml', tmp_path))
    _, launched, _ = run_launch_file(launch_values(policy=policy, robot=robot, **opts),
                                     monkeypatch)
    parser = cli.build_parser()
    argv = ['-n', opts.get('namespace', ''), 'up', '--robot', robot, '--policy', policy]
    argv += ['--no-sim'] if opts.get('use_sim') == 'false' else []
    argv += ['--sysid'] if opts.get('sysid') == 'true' else []
    argv += ['--use-sim-time'] if opts.get('use_sim_time') == 'true' else []
    argv += ['--driver', opts['driver']] if opts.get('driver') else []
    args = parser.parse_args(argv)
    graph = cli.graph_from_args(args)
    write_overlay(graph, tmp_path / 'up')
    up = {spec.name: (graph.command(spec), node_parameters(graph, spec))
          for spec in graph.nodes}
    launched = [n for n in launched if n['package'] == 'simreal_ros']
    assert [n['name'] for n in launched] == graph.names()
    assert ('sim_robot' in up) == (opts.get('use_sim') != 'false')
    assert ('unitree_bridge' in up) == bool(opts.get('driver'))
    if opts.get('driver') and 'sim_robot' in up:
        # the rehearsal: both ends of rt/lowcmd on loopback, in one private domain
        for name in ('sim_robot', 'unitree_bridge'):
            assert up[name][1]['unitree.network_interface'] == 'lo'
        assert up['sim_robot'][1]['unitree.domain_id'] == \
            up['unitree_bridge'][1]['unitree.domain_id']
        assert up['sim_robot'][1]['interface'] == 'unitree_hg'
    elif opts.get('driver'):   # on the robot: the file's own network interface (eth0)
        assert up['unitree_bridge'][1]['unitree.network_interface'] == load_node_params(
            UNITREE_ROBOT, UNITREE)['unitree.network_interface'] != 'lo'
    for node in launched:
        cmd, up_params = up[node['name']]
        assert node['executable'] == node['name'] and node['package'] == 'simreal_ros'
        params = {}
        for path in node['parameters']:
            params.update(load_node_params(path, node['name']))
        assert params == up_params, node['name']
        for src, dst in node['remappings']:
            assert f'{src}:={dst}' in cmd
        ns = node['namespace'] or ''
        assert (f'__ns:={ns}' in cmd) == bool(ns)
        if opts.get('use_sim_time') == 'true':
            key = 'publish_clock' if node['name'] == 'sim_robot' else 'use_sim_time'
            assert params[key] is True
        if node['name'] == 'policy_runner' and policy:
            assert params['policy_path'] == str(Path(policy).resolve())


def namespaced_copy(path, folder):
    """Copy a robot file with every node section keyed '/**/<node>' (any namespace)."""
    import yaml
    data = yaml.safe_load(Path(path).read_text())
    out = {(k if k.startswith('/') else '/**/' + k): v for k, v in data.items()}
    Path(folder).mkdir(parents=True, exist_ok=True)
    dest = Path(folder) / Path(path).name
    dest.write_text(yaml.safe_dump(out))
    return dest


def test_namespace_needs_sections_that_match_any_namespace(tmp_path):
    """A 'policy_runner:' section does not reach /left_arm/policy_runner: said, not ignored."""
    import yaml
    data = yaml.safe_load((REPO / 'config' / 'robots' / 'arm3.yaml').read_text())
    data['safety_supervisor'] = data.pop('/**/safety_supervisor', None) or \
        data.get('safety_supervisor')
    plain = tmp_path / 'plain.yaml'
    plain.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"'/\*\*/safety_supervisor:'"):
        build_graph(str(plain), namespace='left_arm', check_files=False)
    build_graph(str(plain), check_files=False)   # fine in the root namespace
    build_graph(str(namespaced_copy(plain, tmp_path / 'ns')), namespace='left_arm',
                check_files=False)


def test_unknown_robot_is_a_clear_message(monkeypatch, tmp_path):
    with pytest.raises(ConfigError, match=r"unknown robot 'no_such_bot'.*known robots: .*arm3"):
        build_graph('no_such_bot')
    with pytest.raises(RuntimeError, match=r'deploy.launch.py: unknown robot') as info:
        run_launch_file(launch_values(robot='no_such_bot'), monkeypatch)
    assert info.value.__cause__ is None   # the sentence, not a chained traceback
    from simreal_ros.client import cli
    assert cli.main(['up', '--robot', 'no_such_bot', '--dry-run']) == 2


def test_missing_policy_is_reported_not_started(tmp_path):
    graph = build_graph('arm3', policy='', overrides={
        'policy_runner': {'policy_path': str(tmp_path / 'absent.onnx')}})
    assert graph.node('policy_runner') is None
    reason = dict(graph.skipped)['policy_runner']
    assert 'absent.onnx' in reason and 'not found' in reason


def test_deploy_section_remaps_every_node(tmp_path):
    text = (REPO / 'config' / 'robots' / 'arm3.yaml').read_text()
    path = tmp_path / 'arm3_driver.yaml'
    path.write_text(text + '\ndeploy:\n  ros__parameters:\n    joint_states_topic: /drv/js\n'
                    '    command_topic: /drv/cmd\n')
    graph = build_graph(str(path), check_files=False)
    for spec in graph.nodes:
        assert ('joint_states', '/drv/js') in spec.remaps
        assert ('hardware/command', '/drv/cmd') in spec.remaps
    path.write_text(text + '\ndeploy:\n  ros__parameters:\n    joint_state_topic: /x\n')
    with pytest.raises(ConfigError, match='joint_state_topic'):
        build_graph(str(path), check_files=False)


def test_an_identified_model_in_the_robot_file_is_shadowed_during_deployment(tmp_path):
    """Identified values in sim_bridge's section (as its export writes them) start sim_bridge
    with the deployment, so the live gap exists and gates the stages; without them, not."""
    assert 'sim_bridge' not in build_graph('arm3', check_files=False).names()
    data = yaml.safe_load((REPO / 'config' / 'robots' / 'arm3.yaml').read_text())
    data['/**/sim_bridge']['ros__parameters']['joints'] = {'elbow_pitch': {'damping': 0.15}}
    path = tmp_path / 'arm3_identified.yaml'
    path.write_text(yaml.safe_dump(data))
    names = build_graph(str(path), check_files=False).names()
    assert 'sim_bridge' in names and 'friction_id' not in names, names
    data['/**/sim_bridge']['ros__parameters'].pop('joints')
    data['/**/sim_bridge']['ros__parameters']['latency_s'] = 0.004
    path.write_text(yaml.safe_dump(data))
    assert 'sim_bridge' in build_graph(str(path), check_files=False).names()


def test_a_robot_file_is_skipped_for_the_files_it_names_not_for_its_name(tmp_path):
    """An asset missing: any robot file naming it is skipped, a 'g1...' one naming none runs."""
    shipped = {p.stem: missing_files(p) for p in ROBOTS}
    assert shipped['arm3'] == []   # its stand-in policy is made on first use, never missing
    g1 = (REPO / 'config' / 'robots' / 'g1_12dof.yaml').read_text()
    moved = tmp_path / 'my_legged_robot.yaml'
    moved.write_text(g1.replace('asset://unitree_g1_12dof/', str(tmp_path / 'absent') + '/'))
    assert missing_files(moved) == [
        ('sim_robot', 'model_path', str(tmp_path / 'absent' / 'scene.xml')),
        ('policy_runner', 'policy_path', str(tmp_path / 'absent' / 'policy.onnx'))]
    with pytest.raises(pytest.skip.Exception, match=r'my_legged_robot.yaml names files that '
                       r'are not here: sim_robot.model_path = .*absent/scene.xml'):
        require_files(moved)
    arm = tmp_path / 'g1_lookalike.yaml'   # named like the G1, names only packaged files
    arm.write_text((REPO / 'config' / 'robots' / 'arm3.yaml').read_text())
    require_files(arm)   # not skipped


# -- every parameter in the files is declared by its node (real node processes) -----------
def _list_parameters(node, name, timeout=60.0):
    from rcl_interfaces.srv import ListParameters
    client = node.create_client(ListParameters, f'/{name}/list_parameters')
    assert client.wait_for_service(timeout_sec=timeout), f'{name} did not come up'
    future = client.call_async(ListParameters.Request(depth=0))
    wait_for(future.done, 30, what=f'{name} list_parameters')
    return set(future.result().result.names)


@pytest.mark.ros
@pytest.mark.parametrize('path', ROBOTS, ids=[p.stem for p in ROBOTS])
def test_every_parameter_in_the_file_is_declared_by_its_node(path, tmp_path):
    import rclpy
    require_files(path)   # skipped, with the reason, when a model or policy it names is absent
    from rosproc import Spinner
    env_before = dict(os.environ)
    overrides = {'policy_runner': {'policy_path': policy_file(tmp_path)}} \
        if path.stem == 'arm3' else {}
    overrides.setdefault('safety_supervisor', {})['stage_file'] = str(tmp_path / 's.json')
    # The Unitree adapter too where the file has its section (rehearsal: on loopback).
    driver = 'unitree' if 'unitree_bridge' in read_yaml(path) or \
        '/**/unitree_bridge' in read_yaml(path) else ''
    graph = build_graph(str(path), sysid=True, overrides=overrides, driver=driver)
    assert not [n for n, r in graph.skipped if 'not found' in r], graph.skipped
    assert not driver or graph.node('unitree_bridge') is not None
    write_overlay(graph, tmp_path)
    procs, logs = [], {}
    rclpy.init()
    node = rclpy.create_node('param_probe')
    spinner = Spinner(node)
    try:
        for spec in graph.nodes:
            logs[spec.name] = open(tmp_path / f'{spec.name}.log', 'w+')
            procs.append(subprocess.Popen(graph.command(spec), stdout=logs[spec.name],
                                          stderr=subprocess.STDOUT, cwd=REPO))
        shared = load_node_params(path, '/**')
        used_shared = set()
        for spec, proc in zip(graph.nodes, procs):
            try:
                declared = _list_parameters(node, spec.name)
            except AssertionError:
                logs[spec.name].seek(0)
                raise AssertionError(f'{spec.name}: {logs[spec.name].read()[-2000:]}')
            given = set(node_parameters(graph, spec))
            own = given - set(shared)
            undeclared = sorted(own - declared)
            assert not undeclared, f'{path.name}: {spec.name} does not declare {undeclared}'
            used_shared |= set(shared) & declared
        unused = sorted(set(shared) - used_shared - set(TOOL_PARAMETERS))
        assert not unused, f"{path.name}: '/**' parameters no node declares: {unused}"
    finally:
        spinner.stop()
        rclpy.try_shutdown()
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
        for f in logs.values():
            f.close()
    # Building and starting the graph leaves this process's environment as it was.
    assert dict(os.environ) == env_before, _env_diff(env_before, dict(os.environ))


def _env_diff(before, after):
    return {k: (before.get(k), after.get(k)) for k in set(before) | set(after)
            if before.get(k) != after.get(k)}


def test_urdf_adds_robot_state_publisher(monkeypatch, tmp_path):
    urdf = tmp_path / 'arm.urdf'
    urdf.write_text('<robot name="arm"><link name="base"/></robot>')
    _, nodes, _ = run_launch_file(launch_values(policy=policy_file(tmp_path), urdf=str(urdf)),
                                  monkeypatch)
    rsp = [n for n in nodes if n['package'] == 'robot_state_publisher']
    assert len(rsp) == 1
    assert rsp[0]['parameters'] == [{'robot_description': urdf.read_text()}]
    with pytest.raises(RuntimeError, match='urdf:=.*No such file'):
        run_launch_file(launch_values(policy=policy_file(tmp_path),
                                      urdf=str(tmp_path / 'absent.urdf')), monkeypatch)



def test_each_namespaced_robot_on_sim_time_has_its_own_clock(tmp_path):
    robot = str(namespaced_copy(REPO / 'config' / 'robots' / 'arm3.yaml', tmp_path))
    graph = build_graph(robot, namespace='left', use_sim_time=True,
                        policy=policy_file(tmp_path))
    assert graph.nodes and all(('/clock', '/left/clock') in n.remaps for n in graph.nodes)
    plain = build_graph(robot, use_sim_time=True, policy=policy_file(tmp_path))
    assert not any(src == '/clock' for n in plain.nodes for src, _ in n.remaps)


def test_enclaves_give_each_node_its_own_sros2_enclave(monkeypatch, tmp_path):
    values = launch_values(policy=policy_file(tmp_path))
    _, nodes, _ = run_launch_file(values, monkeypatch)
    assert all('ros_arguments' not in n for n in nodes)
    _, nodes, _ = run_launch_file(dict(values, enclaves='/simreal/'), monkeypatch)
    ours = [n for n in nodes if n['package'] == 'simreal_ros']
    assert ours and all(n['ros_arguments'] == ['--enclave', f"/simreal/{n['name']}"]
                        for n in ours)
    with pytest.raises(RuntimeError, match='enclaves:=simreal'):
        run_launch_file(dict(values, enclaves='simreal'), monkeypatch)


@pytest.mark.parametrize('ci', ['true', ''], ids=['ci', 'not-ci'])
def test_a_skipped_ros_native_test_fails_under_ci(ci, tmp_path):
    """conftest's rule: with CI=true a skip of a ros_native test is a failure, else a skip."""
    (tmp_path / 'conftest.py').write_text((REPO / 'test' / 'conftest.py').read_text())
    (tmp_path / 'test_native.py').write_text(
        'import pytest\n\n\n@pytest.mark.ros_native\ndef test_native():\n'
        "    pytest.skip('ros2 absent')\n\n\ndef test_other():\n    pytest.skip('fine')\n")
    env = dict(os.environ, CI=ci)
    env.pop('PYTEST_ADDOPTS', None)
    result = subprocess.run([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
                             str(tmp_path)], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=120)
    summary = result.stdout.strip().splitlines()[-1]
    if ci:
        assert '1 failed, 1 skipped' in summary, result.stdout[-2000:]
        assert 'may not be skipped' in result.stdout and 'ros2 absent' in result.stdout
    else:
        assert '2 skipped' in summary and 'failed' not in summary, result.stdout[-2000:]


def test_up_param_sets_a_node_parameter_over_the_robot_file(capsys):
    """`simreal up --param NODE:NAME=VALUE` reaches that node's overlay (YAML values); a
    malformed item or a node not in the graph is a configuration error, nothing started."""
    from simreal_ros.client import cli
    assert cli.main(['up', '--dry-run', '--param', 'safety_supervisor:rate_hz=250.0',
                     '--param', 'sim_robot:publish_rate_hz=250.0']) == 0
    out = capsys.readouterr().out
    assert 'safety_supervisor  set rate_hz=250.0' in out and 'publish_rate_hz=250.0' in out
    assert cli.param_overrides(['policy_runner:joints=[a, b]']) == \
        {'policy_runner': {'joints': ['a', 'b']}}
    assert cli.main(['up', '--dry-run', '--param', 'no_such_node:x=1']) == 2
    assert "--param names ['no_such_node'], not in this graph" in capsys.readouterr().err
    assert cli.main(['up', '--dry-run', '--param', 'rate_hz=250.0']) == 2
    assert 'use NODE:NAME=VALUE' in capsys.readouterr().err

"""Two robots on one DDS domain, as `simreal -n left up` and `simreal -n right up` (issue 16).

Each is the arm3 graph (sim_robot, safety_supervisor, policy_runner) in its namespace, started
by the CLI as a user would, with one ROS_HOME. E-stop, status, stage records and diagnostics
names must stay per robot, and `simreal status` / `simreal estop --all` must find both. A
rogue publisher on one robot's hardware/command e-stops that robot only, naming the rogue.
The monitoring files written for a namespace name topics that run there, and the
diagnostic_aggregator analyzers put every status in its own robot's group. SysID on one robot
while the other deploys leaves the other forwarding, and its results in its own folder.
"""
import json
import os
import signal
import subprocess
import sys

import pytest
import yaml

from conftest import REPO, simreal
from rosproc import wait_for

pytestmark = pytest.mark.ros


def state_of(ns, env):
    """The robot's safety/state, read by a CLI process (the -n route a user takes). A reader
    that discovered nothing in 10 s is started once more, as a user would run the command
    again: ci12 saw one fresh process get no latched /left/safety/state in 10 s while the
    graph ran (the next reads got it); the robot's behaviour is what the callers assert.
    Kept (issue 42): this is DDS discovery of a fresh process on a busy computer, outside the
    robot's graph; `simreal status` typed a second time is what a user does."""
    code = ('import json, sys; from simreal_ros.client.ros import Ros, safety_state; '
            f'r = Ros({ns!r})\ntry: print(json.dumps(safety_state(r, timeout=10)))\n'
            'finally: r.close()')
    errors = []
    for _ in range(2):
        out = subprocess.run([sys.executable, '-c', code], cwd=REPO, capture_output=True,
                             text=True, timeout=60, env=env)
        if out.returncode == 0:
            return json.loads(out.stdout.strip().splitlines()[-1])
        errors.append(out.stderr[-2000:])
        if 'nothing on' not in out.stderr:
            break
    raise AssertionError('\n---\n'.join(errors))


@pytest.fixture
def two_robots(tmp_path):
    sys.path.insert(0, str(REPO / 'scripts'))
    import onnx_policies
    policy = onnx_policies.arm3(str(tmp_path / 'arm3_policy.onnx'))
    # One HOME (SysID results default to ~/.ros/simreal_ros/sysid) and one ROS_HOME (stage
    # records) for both robots, as on one computer.
    env = dict(os.environ, ROS_HOME=str(tmp_path / 'ros_home'), HOME=str(tmp_path / 'home'),
               PYTHONUNBUFFERED='1')
    ups, logs = {}, {}
    try:
        for ns in ('left', 'right'):
            logs[ns] = open(tmp_path / f'{ns}.log', 'w+')
            # status_markers and the SysID nodes on one robot
            rviz = ['--rviz', '--sysid'] if ns == 'left' else []
            # Two whole graphs on what may be 2 cores: the loops at 250 Hz (the robot file
            # says 500), and joint_states may be 0.5 s old (0.2 in the file): eleven Python
            # processes starting at once stalled right's joint_states for 204 ms and e-stopped
            # it (rightly: test_safety_node_faults tests that watchdog). The namespaces are
            # the test here.
            # The SysID input likewise gets 0.2 s (the file says 0.06): ci16 saw /left's
            # latency experiment held at 60-62 ms stamps until its one segment was used up,
            # twice (test_safety_node tests that watchdog).
            rates = ['--param', 'sim_robot:publish_rate_hz=250.0',
                     '--param', 'safety_supervisor:rate_hz=250.0',
                     '--param', 'safety_supervisor:joint_states_timeout_s=0.5',
                     '--param', 'safety_supervisor:sysid_timeout_s=0.2']
            ups[ns] = subprocess.Popen(
                [sys.executable, '-m', 'simreal_ros.client.cli', '-n', ns, 'up', '--policy', policy]
                + rviz + rates,
                cwd=REPO, stdout=logs[ns], stderr=subprocess.STDOUT, env=env)
        for ns in ups:
            wait_for(lambda: simreal('-n', ns, 'status', env=env)[0] == 0, 120, interval=1.0,
                     what=f'{ns} robot up')
        yield env
    finally:
        for ns, up in ups.items():
            if up.poll() is None:
                up.send_signal(signal.SIGINT)
        for ns, up in ups.items():
            try:
                up.wait(timeout=40)
            except subprocess.TimeoutExpired:
                up.kill()
                up.wait()
            logs[ns].close()


def test_two_namespaced_robots_stay_apart(two_robots):
    env = two_robots
    # simreal status without a namespace: one line per robot.
    code, out = simreal('status', env=env)
    assert code == 0, out
    lines = [line for line in out.splitlines() if line.startswith('/')]
    assert [line.split()[0] for line in lines] == ['/left', '/right'], out
    # Stage records apart (one ROS_HOME), under each robot's namespace.
    left, right = state_of('left', env), state_of('right', env)
    files = left['stage_record']['file'], right['stage_record']['file']
    assert files[0] != files[1] and '/left/' in files[0] and '/right/' in files[1], files
    # E-stop one: the other is untouched.
    code, out = simreal('-n', 'left', 'estop', env=env)
    assert code == 0 and out.startswith('estop: ok'), out
    wait_for(lambda: state_of('left', env)['estop'], 10, interval=0.5, what='left latched')
    right = state_of('right', env)
    assert not right['estop'], right['estop_cause']
    # Each robot's status shows its own diagnostics, named with its namespace.
    code, out = simreal('-n', 'right', 'status', env=env)
    assert code == 0 and 'e-stop      : clear' in out, out
    diags = [line for line in out.splitlines() if line.startswith('diagnostics')]
    assert diags and all('right/' in line for line in diags), out
    assert any('right/safety_supervisor' in line for line in diags), out
    # estop --all finds and stops both, each answer named.
    code, out = simreal('estop', '--all', env=env)
    assert code == 0, out
    assert 'estop /left: ok' in out and 'estop /right: ok' in out, out
    wait_for(lambda: state_of('right', env)['estop'], 10, interval=0.5, what='right latched')


def test_a_rogue_on_one_robots_hardware_command_estops_that_robot_only(two_robots):
    import rclpy
    from sensor_msgs.msg import JointState
    from simreal_ros.client.rig import Intruder
    from simreal_ros.nodes.common import COMMAND_QOS
    env = two_robots
    rclpy.init()
    rogue = Intruder('rogue_commander', '/left/hardware/command', COMMAND_QOS,
                     lambda: JointState(name=['shoulder_yaw'], position=[0.0]))
    try:
        wait_for(lambda: state_of('left', env)['estop'], 15, interval=0.5,
                 what='left e-stopped by the rogue')
        cause = state_of('left', env)['estop_cause']
        assert 'rogue publisher' in cause and '/rogue_commander' in cause, cause
        assert not state_of('right', env)['estop']
    finally:
        rogue.close()
        rclpy.try_shutdown()


def test_estop_all_with_no_robot_says_so():
    code, out = simreal('estop', '--all')
    assert code == 1 and 'no safety_supervisor found' in out and 'ROS_DOMAIN_ID=' in out


def test_monitoring_files_name_what_runs_in_each_namespace(two_robots, tmp_path):
    """rviz, rqt and diagnostic_aggregator files for /left (`simreal -n left monitor
    --write-config`), checked against the running graph: rviz2, rqt and the aggregator are not
    installable on the pip path, so what they would subscribe to is checked instead."""
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from simreal_ros.deploy import monitor_files as monitor
    from simreal_ros.client.rig import Spinner
    env = two_robots
    folder = tmp_path / 'monitoring'
    code, out = simreal('-n', 'left', 'monitor', '--write-config', str(folder), env=env)
    assert code == 0 and 'robots: /left, /right' in out, out
    rviz = monitor.rviz_topics((folder / 'monitor.rviz').read_text())
    plots = monitor.perspective_topics((folder / 'simreal.perspective').read_text())
    analyzers = yaml.safe_load((folder / 'diagnostic_analyzers.yaml').read_text())
    prefixes = monitor.analyzer_prefixes(analyzers)
    assert {group for group, _ in prefixes} == {'left', 'right'}, prefixes
    # robot_description comes from robot_state_publisher (urdf:=), not installable here.
    assert rviz == {'/left/monitor/markers', '/left/robot_description'}, rviz
    rclpy.init()
    node = rclpy.create_node('monitoring_check')
    statuses = set()
    node.create_subscription(DiagnosticArray, '/diagnostics',
                             lambda m: statuses.update(s.name for s in m.status), 50)
    spinner = Spinner(node)
    try:
        wanted = (rviz - {'/left/robot_description'}) | plots
        topics = lambda: {t for t, _ in node.get_topic_names_and_types()}   # noqa: E731
        wait_for(lambda: wanted <= topics(), 30, interval=0.5,
                 what=f'{sorted(wanted - topics())} on the graph')
        # Every node of both robots reported (each publishes /diagnostics at 1 Hz or more).
        def every_node_seen():
            return all(any(n.startswith(tuple(p)) for n in statuses)
                       for p in prefixes.values())
        wait_for(every_node_seen, 30, interval=0.5, what='a status from every analyzer\'s node')
        for name in statuses:
            owners = [key for key, p in prefixes.items() if name.startswith(tuple(p))]
            robot = name.lstrip('/').split('/')[0]
            if robot in ('left', 'right'):
                assert len(owners) == 1 and owners[0][0] == robot, (name, owners)
    finally:
        spinner.stop()
        rclpy.try_shutdown()


def test_sysid_on_one_robot_while_the_other_deploys(two_robots):
    env = two_robots
    code, out = simreal('-n', 'right', 'enable', env=env)
    assert code == 0, out
    try:
        wait_for(lambda: state_of('right', env)['output'] == 'forwarding', 60, interval=0.5,
                 what='right forwarding its policy')
    except AssertionError as exc:
        raise AssertionError(f'{exc}; right: {state_of("right", env)}') from None
    # Run once (issue 42): a disturbed experiment was run again here while two graphs on
    # 2 cores could stall the SysID node; with the nodes on SCHED_FIFO it passed 6 of 6 runs
    # without it (beside a CPU-bound bench, one beside a third graph), so a disturbance now
    # fails the test.
    code, out = simreal('-n', 'left', 'sysid', 'latency', '--joints', 'elbow_pitch', env=env,
                        timeout=300)
    assert code == 0 and 'latency_id: ok' in out, out
    # Right was never e-stopped nor switched, and forwards its policy: a moment of safe output
    # (its policy stale for a tick while the machine runs two graphs and an experiment) is
    # load, and ends by itself.
    right = state_of('right', env)
    assert not right['estop'] and right['mode'] == 'policy' and right['estops'] == 0, right
    try:
        wait_for(lambda: state_of('right', env)['output'] == 'forwarding', 20, interval=0.5,
                 what='right forwarding after the experiment')
    except AssertionError as exc:
        raise AssertionError(f'{exc}; right: {state_of("right", env)}') from None
    assert state_of('left', env)['mode'] == 'policy'   # the SysID client hands it back
    sysid = os.path.join(env['HOME'], '.ros', 'simreal_ros', 'sysid')
    mine = sorted(os.listdir(os.path.join(sysid, 'left')))
    assert any(f.endswith('.yaml') for f in mine) and any(f.endswith('.mcap') for f in mine), mine
    assert sorted(os.listdir(sysid)) == ['left'], os.listdir(sysid)   # nothing shared, no right

"""The ROS-native path for real: `ros2 launch` and the `ros2` command line, as a user runs them.

Every test drives the real `ros2` executable in subprocesses, with the session's colcon install
space sourced (conftest.ros2_env), from a working directory outside the repository. Stopping is
a SIGINT to the launch's process group with no terminal (as systemd or a script does), so every
node gets two SIGINTs: it must still finish cleanly. Under CI=true none of these may skip
(conftest: ros_native). Where neither a sourced ROS 2 nor ../shared/wheels/ros2-launch provides
`ros2`, they skip with the reason (the pip-only path; test_launch_static.py covers the files).
"""
import json
import os
from pathlib import Path
import re
import shlex
import signal
import subprocess
import time

import pytest
import yaml

from conftest import REPO
from rosproc import NodeProcess, Spinner, wait_for

pytestmark = [pytest.mark.ros, pytest.mark.ros_native]

DEFAULT_NODES = {'sim_robot', 'safety_supervisor', 'policy_runner'}
SYSID_NODES = DEFAULT_NODES | {'friction_id', 'inertia_id', 'latency_id', 'sim_bridge'}
STOP_WITHIN_S = 10.0
ARM3 = yaml.safe_load((REPO / 'config' / 'robots' / 'arm3.yaml').read_text())


JOURNEY = REPO / 'docs' / 'journey_ros.md'


def journey_block(name):
    """Return a command block of docs/journey_ros.md: one argv per command line, in order."""
    text = JOURNEY.read_text()
    match = re.search(rf'<!-- {name}[^>]*-->\s*```bash\n(.*?)```', text, re.S)
    assert match, f'{JOURNEY} has no <!-- {name} --> block'
    block = match.group(1).replace('\\\n', ' ')    # continuation lines
    return [words for words in (shlex.split(line, comments=True)
                                for line in block.splitlines()) if words]


def readme_sequence():
    """Return the ROS journey's friction sequence (docs/journey_ros.md, step 6)."""
    return journey_block('friction-sequence')


def session_processes(sid):
    """Return the pids of processes still in session `sid` (the launch and its nodes)."""
    pids = []
    for entry in Path('/proc').iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / 'stat').read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(')') + 2:].split()
        if fields[0] != 'Z' and int(fields[3]) == sid:
            pids.append(int(entry.name))
    return pids


class Launch:
    """`ros2 launch simreal_ros <args>` in its own session, without a terminal."""

    def __init__(self, ros2_env, cwd, args, name='launch'):
        ros2, env = ros2_env
        self.log_path = Path(cwd) / f'{name}.log'
        self._log = open(self.log_path, 'w')
        self.proc = subprocess.Popen([ros2, 'launch', 'simreal_ros', *args],
                                     stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, cwd=cwd, env=env,
                                     start_new_session=True)

    def text(self):
        return self.log_path.read_text(errors='replace')

    def stop(self):
        """SIGINT the process group; return (exit code or None, seconds, pids left)."""
        start = time.monotonic()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
        try:
            code = self.proc.wait(timeout=STOP_WITHIN_S)
        except subprocess.TimeoutExpired:
            code = None
        left = session_processes(self.proc.pid)
        while left and time.monotonic() - start < STOP_WITHIN_S:
            time.sleep(0.05)
            left = session_processes(self.proc.pid)
        return code, time.monotonic() - start, left

    def kill(self):
        """Leave nothing behind; print the log's end (shown when the test failed)."""
        lines = self.text().splitlines()
        print(f'--- last 80 of {len(lines)} lines of {self.log_path} ---')
        print('\n'.join(line for line in lines[-80:]))
        for pid in session_processes(self.proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def ros2(ros2_env, cwd, *words, timeout=90):
    """Run one `ros2 ...` command line as a user would; return the CompletedProcess."""
    exe, env = ros2_env
    return subprocess.run([exe, *words], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


def assert_ok(result):
    """A `ros2 service call` or `ros2 param set` that worked: exit 0 and success."""
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-2000:]
    if result.args[1] == 'service':
        assert 'success=True' in out, out[-2000:]
    elif result.args[1] == 'param':
        assert 'successful' in out, out[-2000:]
    return out


class Probe:
    """A listener in the test process: joint_states, hardware/command, safety/state, result."""

    def __init__(self, namespace=''):
        import rclpy
        from sensor_msgs.msg import JointState
        from std_msgs.msg import String

        from simreal_ros.nodes.common import COMMAND_QOS, LATCHED_QOS, SENSOR_SUB_QOS
        self.node = rclpy.create_node('launch_probe')
        self.states = 0
        self.commands = []      # (number of positions, velocities, number of efforts)
        self.safety = []
        self.results = []
        prefix = f'/{namespace}/' if namespace else '/'
        self._states = self.node.create_subscription(
            JointState, prefix + 'joint_states', self._on_state, SENSOR_SUB_QOS)
        self._commands = None
        self._command_qos = type(COMMAND_QOS)(depth=100, reliability=COMMAND_QOS.reliability)
        self._joint_state = JointState
        self.node.create_subscription(String, '/safety/state',
                                      lambda m: self.safety.append(json.loads(m.data)),
                                      LATCHED_QOS)
        self.node.create_subscription(String, '/sysid/result',
                                      lambda m: self.results.append(m.data), LATCHED_QOS)
        self.spinner = Spinner(self.node)

    def watch_commands(self):
        """Record hardware/command from now on (a 500 Hz Python subscriber costs CPU)."""
        self._commands = self.node.create_subscription(
            self._joint_state, '/hardware/command', self._on_command, self._command_qos)

    def stop_states(self):
        """Stop counting joint_states (its 500 Hz callbacks take CPU the graph needs)."""
        self.node.destroy_subscription(self._states)

    def _on_state(self, msg):
        self.states += 1

    def _on_command(self, msg):
        self.commands.append((len(msg.position), tuple(msg.velocity), len(msg.effort)))

    def nodes(self):
        return {name for name, _ in self.node.get_node_names_and_namespaces()}

    def forwarding(self):
        return bool(self.commands) and self.commands[-1][0] > 0

    def last_is_safe(self):
        """The damping safe command (arm3's safe_mode): no positions, zero velocities."""
        if not self.commands:
            return False
        positions, velocities, efforts = self.commands[-1]
        return positions == 0 and efforts == 0 and velocities and not any(velocities)

    def close(self):
        self.spinner.stop()


@pytest.fixture
def probe():
    import rclpy
    rclpy.init()
    probes = []

    def make(namespace=''):
        probes.append(Probe(namespace))
        return probes[-1]
    yield make
    for p in probes:
        p.close()
    rclpy.try_shutdown()


@pytest.fixture
def outside(tmp_path):
    """A working directory outside the repository."""
    assert REPO not in tmp_path.parents
    return tmp_path


def stopped_cleanly(text):
    """The nodes a launch's output shows stopped cleanly, and its other deaths.

    launch watches its children with asyncio's child watcher, which now and then finds a
    node's pid already reaped: it logs "Unknown child process pid N, will report returncode
    255", and launch then says "process has died [pid N, exit code 255". A fresh-clone CI run
    saw it once (test_g1_gantry_ros), for a policy_runner whose own last line was
    "[policy_runner] finished cleanly" (nodes/common.py prints it only on its way out with
    0). Such a node counts as stopped cleanly when both lines are there; every other death
    is returned as one.
    """
    clean = re.findall(r'\[INFO\] \[([a-z_]+)-\d+\]: process has finished cleanly', text)
    unknown = set(re.findall(r'Unknown child process pid (\d+), will report returncode 255',
                             text))
    deaths = []
    for name, pid, code in re.findall(r'\[([a-z_]+)-\d+\]: process has died \[pid (\d+), '
                                      r'exit code (-?\d+)', text):
        if code == '255' and pid in unknown and f'[{name}] finished cleanly' in text:
            clean.append(name)
        else:
            deaths.append((name, pid, code))
    return clean, deaths


def test_a_death_the_child_watcher_misreported_is_told_from_a_real_one():
    """stopped_cleanly: the watcher's 255 after the node's own clean line counts as clean;
    without that line, with another code or another pid, it is a death."""
    ok = ('[policy_runner-3] [policy_runner] finished cleanly\n'
          'Unknown child process pid 15229, will report returncode 255\n'
          "[ERROR] [policy_runner-3]: process has died [pid 15229, exit code 255, cmd 'x'].\n"
          '[INFO] [sim_robot-1]: process has finished cleanly [pid 15225]\n')
    assert stopped_cleanly(ok) == (['sim_robot', 'policy_runner'], [])
    for bad in (ok.replace('[policy_runner] finished cleanly', ''),
                ok.replace('exit code 255', 'exit code -11'),
                ok.replace('pid 15229, will', 'pid 15230, will')):
        assert stopped_cleanly(bad)[1] and stopped_cleanly(bad)[0] == ['sim_robot'], bad


def assert_stopped_cleanly(launch, nodes):
    code, took, left = launch.stop()
    text = launch.text()
    assert code == 0, f'exit code {code}\n{text[-4000:]}'
    assert took <= STOP_WITHIN_S, f'stop took {took:.1f} s'
    assert not left, f'processes left after the launch: {left}'
    assert 'Traceback' not in text and 'KeyboardInterrupt' not in text, text[-4000:]
    clean, deaths = stopped_cleanly(text)
    assert not deaths, f'{deaths}\n{text[-4000:]}'
    # every "process has died" line was read as one of the two kinds
    assert text.count('process has died') == len(re.findall(
        r'\]: process has died \[pid \d+, exit code -?\d+', text)), text[-4000:]
    assert sorted(clean) == sorted(nodes), text[-4000:]
    return text


def test_deploy_launch_without_arguments_runs_the_default_robot(ros2_env, ros2_service_call,
                                                                outside, probe):
    """No arguments, outside the repo: all three nodes, joint states, e-stop, clean stop."""
    p = probe()
    p.watch_commands()
    launch = Launch(ros2_env, outside, ['deploy.launch.py'])
    try:
        wait_for(lambda: DEFAULT_NODES <= p.nodes() or launch.proc.poll() is not None, 90,
                 what='sim_robot, safety_supervisor and policy_runner')
        assert DEFAULT_NODES <= p.nodes(), launch.text()[-3000:]
        wait_for(lambda: p.states > 50, 30, what='joint_states from sim_robot')
        policy = Path(ros2_env[1]['XDG_DATA_HOME']) / 'simreal_ros' / 'arm3_policy.onnx'
        assert policy.is_file() and str(policy) in launch.text()
        assert_ok(ros2(ros2_env, outside, 'service', 'call', '/policy_runner/enable',
                       'std_srvs/srv/SetBool', '{data: true}'))

        # No reset of a bring-up watchdog e-stop any more (issue 42): its cause, the loops
        # starved on a busy 2-core machine, is what thread_priority (SCHED_FIFO) removes.
        def forwarding():
            assert not (p.safety and p.safety[-1].get('estop')), p.safety[-1]
            return p.forwarding()
        wait_for(forwarding, 60, interval=1.0, what='the policy forwarded on hardware/command')
        out = assert_ok(ros2(ros2_env, outside, 'service', 'call', '/safety/estop',
                             'std_srvs/srv/Trigger'))
        # Latched by this call, or just before it by a watchdog: in one CI run the supervisor
        # stalled 458 ms as this `ros2` process started (under LOCALHOST's shared memory; see
        # docs/real_robot.md, middleware) and answered 'e-stop already latched (supervisor
        # stalled ...)'. Either way the operator's e-stop must hold; printed when it was earlier.
        assert 'e-stop latched' in out or 'e-stop already latched' in out, out
        if 'already latched' in out:
            print(f'E-STOP before the operator call: {out.strip()[-300:]}')
        wait_for(lambda: p.safety and p.safety[-1]['estop'], 10, what='safety/state latched')
        wait_for(p.last_is_safe, 10, what='the safe command after the e-stop')
        # Released again, so that the stop below starts from a forwarding supervisor: its
        # before_shutdown must be what leaves the safe command last.
        # The arm sags while damped: a reset is refused until the joints are still (as an
        # operator would, it is tried again: the refusal is the product's rule, kept).
        wait_for(lambda: 'success=True' in ros2(ros2_env, outside, 'service', 'call',
                                                '/safety/reset', 'std_srvs/srv/Trigger').stdout,
                 60, interval=1.0, what='the reset accepted')
        wait_for(p.forwarding, 30, what='forwarding again after the reset')
        text = assert_stopped_cleanly(launch, DEFAULT_NODES)
        assert 'E-STOP: supervisor shutting down' in text, text[-3000:]
        wait_for(p.last_is_safe, 5, what='the safe command as the last on hardware/command')
    finally:
        launch.kill()


def test_ros_journey_first_launch_enable_status_swing_estop(ros2_env, ros2_service_call, outside,
                                                            probe):
    """docs/journey_ros.md step 4 as it is: launch, enable, `ros2 run simreal_ros simreal
    status` (the CLI reachable after colcon), a tenth of the swing, the e-stop."""
    sequence = journey_block('first-launch')
    expected = ['ros2 launch simreal_ros deploy.launch.py &',
                'ros2 service call /policy_runner/enable std_srvs/srv/SetBool {data: true}',
                'ros2 run simreal_ros simreal status', 'ros2 topic pub --times 50 -r 10 /cmd_vel',
                'ros2 run simreal_ros simreal estop']
    assert [' '.join(w)[:len(e)] for w, e in zip(sequence, expected)] == expected
    assert len(sequence) == len(expected)
    p = probe()
    p.watch_commands()
    launch = Launch(ros2_env, outside, sequence[0][3:-1], name='first')
    try:
        wait_for(lambda: DEFAULT_NODES <= p.nodes() or launch.proc.poll() is not None, 90,
                 what='sim_robot, safety_supervisor and policy_runner')
        assert DEFAULT_NODES <= p.nodes(), launch.text()[-3000:]
        wait_for(lambda: p.states > 50, 30, what='joint_states from sim_robot')
        # Disabled at start: nothing of the policy is forwarded before the enable step.
        assert not any(c[0] for c in p.commands), 'the policy was forwarded before enable'
        enabled_at = len(p.commands)
        assert_ok(ros2(ros2_env, outside, *sequence[1][1:]))

        def forwarding_or_reset():
            # A bring-up watchdog e-stop on a starved machine is reset as the journey says.
            if any(c[0] for c in p.commands[enabled_at:]):   # a command with positions
                return True
            if p.safety and p.safety[-1].get('estop'):
                print(f"RESET after a bring-up e-stop: {p.safety[-1].get('estop_cause')}")
                ros2(ros2_env, outside, 'run', 'simreal_ros', 'simreal', 'reset')
            return False
        wait_for(forwarding_or_reset, 60, interval=1.0,
                 what='the policy forwarded on hardware/command')
        status = ros2(ros2_env, outside, *sequence[2][1:])
        print(status.stdout)
        assert status.returncode == 0, status.stdout + status.stderr
        # The lines docs/journey_ros.md quotes. A watchdog e-stop of a starved machine (the
        # `ros2 run` process starting beside the graph; the journey says to reset it) is the
        # supervisor doing its job: printed, and the status must then name it.
        out = status.stdout
        if 'e-stop      : LATCHED' in out:
            cause = out.split('LATCHED (', 1)[1].split(')')[0]
            assert cause.startswith(('joint_states stale', 'supervisor stalled')), out
            print(f'WATCHDOG E-STOP before status: {cause}')
            assert f'output      : safe (e-stop: {cause}' in out, out
        else:
            assert 'e-stop      : clear' in out, out
            assert 'output      : forwarding (forwarding)' in out, out
        assert 'mode policy, safe mode damping' in out, out
        assert 'stage       : 0.1 (1/5), highest ' in out, out
        pub = ros2(ros2_env, outside, *sequence[3][1:], timeout=60)
        assert pub.returncode == 0, pub.stdout + pub.stderr
        estop = ros2(ros2_env, outside, *sequence[4][1:])
        print(estop.stdout, estop.stderr)
        assert estop.returncode == 0 and 'latched' in estop.stdout, estop.stdout + estop.stderr
        wait_for(lambda: p.safety and p.safety[-1]['estop'], 10, what='safety/state latched')
        wait_for(p.last_is_safe, 10, what='the safe command after the e-stop')
        assert_stopped_cleanly(launch, DEFAULT_NODES)
    finally:
        launch.kill()


def echo_until_result(ros2_env, cwd, words, launch, timeout=240):
    """Run the README's `ros2 topic echo --once` line; fail at once if the run is aborted."""
    exe, env = ros2_env
    out = Path(cwd) / 'echo.out'
    with open(out, 'w') as f:
        proc = subprocess.Popen([exe, *words[1:]], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=f, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: proc.poll() is not None or 'no result published' in launch.text(),
                 timeout, interval=0.5, what='the sysid result (ros2 topic echo --once)')
        assert proc.poll() == 0, launch.text()[-3000:] + out.read_text()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return out.read_text()


# A watchdog e-stop (in the launch log) while a `ros2` command line starts, or during the
# experiment: the supervisor saw no joint_states for 200 ms in about 1 of 3 runs here. It is
# the supervisor doing its job on a starved machine; the run is repeated (at most twice, each
# printed), and the issue note records the rate. Any other failure fails at once.
WATCHDOG_ESTOP = ('E-STOP: joint_states stale', 'E-STOP: supervisor stalled')


def test_readme_friction_sequence_with_sysid_and_policy(ros2_env, ros2_service_call, outside,
                                                        probe):
    """The README's command block as it is: a friction result within 5 %, gap scored.

    Run once (issue 42): a watchdog e-stop or a disturbed experiment on a loaded machine was
    run again here; their causes were the product's (the SysID node's stalls, the loops on
    the normal scheduler) and are fixed, so either now fails the test.
    """
    readme_friction_sequence(ros2_env, outside / 'run', probe, 'sysid')


def readme_friction_sequence(ros2_env, outside, probe, name):
    outside.mkdir(parents=True, exist_ok=True)
    sequence = readme_sequence()
    first = sequence[0]
    assert first[:3] == ['ros2', 'launch', 'simreal_ros'] and first[-1] == '&', first
    expected = ['ros2 param set /friction_id joints', 'ros2 service call /safety/reset',
                'ros2 service call /policy_runner/enable',
                'ros2 service call /safety/select_sysid', 'ros2 service call /friction_id/start',
                'ros2 topic echo --once /sysid/result',
                'ros2 service call /sim_bridge/evaluate_gap']
    assert [' '.join(w[:len(e.split())]) for w, e in zip(sequence[1:], expected)] == expected
    p = probe()
    launch = Launch(ros2_env, outside, first[3:-1], name=name)
    try:
        wait_for(lambda: SYSID_NODES <= p.nodes() or launch.proc.poll() is not None, 120,
                 what='the seven nodes of sysid:=true')
        assert SYSID_NODES <= p.nodes(), launch.text()[-3000:]
        wait_for(lambda: p.states > 50, 30, what='joint_states from sim_robot')
        p.stop_states()
        # As a user who sees the launch up: every node said it is ready (before that `ros2
        # param set` answered "Node not found" in 1 of 10 runs), and the ros2 daemon (which
        # `ros2 param` asks) has discovered the nodes too; a daemon spawned by the first
        # command has not ("Node not found").
        wait_for(lambda: launch.text().count('identification ready for') >= 3
                 and 'sim_bridge ready' in launch.text(), 120, interval=0.5,
                 what='the SysID nodes and sim_bridge saying they are ready')
        wait_for(lambda: SYSID_NODES <= set(
            n.strip('/') for n in ros2(ros2_env, outside, 'node', 'list').stdout.split()),
            120, interval=0.5, what='ros2 node list (the daemon) showing the seven nodes')
        joint = None
        for words in sequence[1:]:
            if words[1:3] == ['topic', 'echo']:
                stdout = echo_until_result(ros2_env, outside, words, launch)
                assert 'experiment: friction' in stdout, stdout[-3000:]
                continue
            # ci16: `ros2 param set /friction_id` answered "Node not found" after `ros2 node
            # list` (the same daemon) had shown the seven nodes; a user types it again, and
            # so does this test, for 20 s (each try named in the output). Kept (issue 42):
            # the ros2 command line's discovery, not the robot's graph
            results = []

            def run_once(words=words):
                results.append(ros2(ros2_env, outside, *words[1:]))
                found = 'Node not found' not in results[-1].stderr
                if not found:
                    print(f'RETRY {" ".join(words[:4])}: Node not found')
                return found
            wait_for(run_once, 20, interval=2.0, what=f'{" ".join(words[:4])} finding its node')
            out = assert_ok(results[-1])
            if words[1] == 'param':
                joint = yaml.safe_load(words[-1])[0]
            if words[1:3] == ['service', 'call'] and words[3] == '/sim_bridge/evaluate_gap':
                assert 'gap' in out, out
        wait_for(lambda: p.results, 10, what='sysid/result in the test process')
        doc = yaml.safe_load(p.results[-1])
        got = {(r['parameter'], r['joint']): r['value'] for r in doc['results']}
        plant = ARM3['/**/sim_robot']['ros__parameters']['plant']
        names = ARM3['/**']['ros__parameters']['joint_names']
        truth = plant['coulomb_friction'][names.index(joint)]
        assert ('coulomb_friction', joint) in got, f'no friction result: {doc.get("failures")}'
        assert got[('coulomb_friction', joint)] == pytest.approx(truth, rel=0.05), doc
        p.watch_commands()
        wait_for(lambda: p.commands, 10, what='hardware/command in the test process')
        assert_stopped_cleanly(launch, SYSID_NODES)
        wait_for(p.last_is_safe, 5, what='the safe command as the last on hardware/command')
    finally:
        launch.kill()


def test_unknown_robot_stops_the_launch_with_a_sentence(ros2_env, outside):
    launch = Launch(ros2_env, outside, ['deploy.launch.py', 'robot:=no_such_bot'])
    try:
        code = launch.proc.wait(timeout=60)
        text = launch.text()
        assert code != 0
        assert "unknown robot 'no_such_bot'" in text and 'known robots' in text, text
        assert 'Traceback' not in text, text
    finally:
        launch.kill()


def test_hardware_mode_waits_and_sim_robot_launch_runs_alone(ros2_env, outside, probe):
    """use_sim:=false with no driver: nothing on hardware/command, 'waiting for joint_states'.

    sim_robot.launch.py runs beside it in another namespace (its joint_states do not reach
    the root namespace), so both launch files are started for real.
    """
    p = probe('solo')
    p.watch_commands()
    hardware = Launch(ros2_env, outside, ['deploy.launch.py', 'use_sim:=false'], 'hardware')
    alone = Launch(ros2_env, outside, ['sim_robot.launch.py', 'namespace:=solo'], 'alone')
    try:
        wait_for(lambda: {'safety_supervisor', 'policy_runner', 'sim_robot'} <= p.nodes(), 90,
                 what='safety_supervisor, policy_runner and the lone sim_robot')
        wait_for(lambda: p.states > 50, 30, what='/solo/joint_states from sim_robot.launch.py')
        wait_for(lambda: len(p.safety) >= 10, 30, what='ten safety/state messages')
        assert p.safety[-1]['output'] == 'waiting', p.safety[-1]
        assert 'waiting for joint_states' in hardware.text()
        assert p.commands == []
        assert_stopped_cleanly(hardware, {'safety_supervisor', 'policy_runner'})
        assert_stopped_cleanly(alone, {'sim_robot'})
        assert p.commands == []
    finally:
        hardware.kill()
        alone.kill()


def test_rviz_under_a_namespace_starts_the_markers_with_namespaced_files(ros2_env, outside,
                                                                         probe):
    """rviz:=true namespace:=watch: status_markers publishes /watch/monitor/markers, and the
    rviz, rqt and aggregator files the launch writes name topics under /watch. rviz2 itself
    runs where it is installed; here the log must say that it is not."""
    from visualization_msgs.msg import MarkerArray
    from simreal_ros.deploy import monitor_files as monitor
    from simreal_ros.deploy.graph import rviz_available
    p = probe('watch')
    markers = []
    p.node.create_subscription(MarkerArray, '/watch/monitor/markers', markers.append, 10)
    launch = Launch(ros2_env, outside, ['deploy.launch.py', 'namespace:=watch', 'rviz:=true'],
                    'rviz')
    try:
        nodes = DEFAULT_NODES | {'status_markers'}
        wait_for(lambda: nodes <= p.nodes() or launch.proc.poll() is not None, 90,
                 what='the graph with status_markers')
        assert nodes <= p.nodes(), launch.text()[-3000:]
        wait_for(lambda: len(markers) >= 3, 30, what='three marker arrays on /watch/monitor/markers')
        assert markers[-1].markers[0].header.frame_id == 'world'
        found = re.search(r'monitoring files for this robot: rviz (\S+), rqt (\S+), '
                          r'diagnostic_aggregator (\S+)', launch.text())
        assert found, launch.text()[-3000:]
        rviz, rqt, analyzers = (Path(x.rstrip(',')) for x in found.groups())
        assert monitor.rviz_topics(rviz.read_text()) == {'/watch/monitor/markers',
                                                         '/watch/robot_description'}
        assert all(t.startswith('/watch/')
                   for t in monitor.perspective_topics(rqt.read_text()))
        groups = monitor.analyzer_prefixes(yaml.safe_load(analyzers.read_text()))
        assert {g for g, _ in groups} == {'watch'}, groups
        if not rviz_available():
            assert 'rviz2 is not installed here' in launch.text()
        assert_stopped_cleanly(launch, nodes)
    finally:
        launch.kill()


@pytest.mark.parametrize('signals', [(signal.SIGINT, signal.SIGINT),
                                     (signal.SIGINT, signal.SIGTERM),
                                     (signal.SIGTERM, signal.SIGTERM)],
                         ids=['int-int', 'int-term', 'term-term'])
def test_a_second_signal_while_stopping_is_quiet(signals, tmp_path):
    """A node stopping on one signal finishes quietly on a second one: exit 0, no traceback."""
    with NodeProcess('safety_supervisor',
                     params_file=REPO / 'config' / 'robots' / 'arm3.yaml',
                     params={'stage_file': str(tmp_path / 'stages.json')}) as node:
        wait_for(lambda: 'waiting for joint_states' in node.output(), 60,
                 what='safety_supervisor up')
        first, again = signals
        node.proc.send_signal(first)
        # The second signal again and again until the process is gone, so that some arrive
        # while it is shutting down (destroy_node, context shutdown), whenever that is.
        deadline = time.monotonic() + STOP_WITHIN_S
        while node.proc.poll() is None and time.monotonic() < deadline:
            node.proc.send_signal(again)
            time.sleep(0.005)
        code = node.wait_exit(timeout=1.0)
        text = node.output()
    assert code == 0, text[-3000:]
    assert 'Traceback' not in text and 'KeyboardInterrupt' not in text, text[-3000:]

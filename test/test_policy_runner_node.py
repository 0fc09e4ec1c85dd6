"""policy_runner as its own process against a real sim_robot process, over real DDS."""
import importlib.util
import math
import threading

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import Twist
import pytest
import rclpy
from sensor_msgs.msg import JointState
from std_srvs.srv import SetBool, Trigger

from conftest import REPO
from rosproc import NodeProcess, Spinner, wait_for
from simreal_ros.nodes.common import COMMAND_QOS, SENSOR_SUB_QOS, stamp_to_sec

pytestmark = pytest.mark.ros
ARM = 'config/robots/arm3.yaml'
NAMES = ['shoulder_yaw', 'shoulder_pitch', 'elbow_pitch']

_spec = importlib.util.spec_from_file_location('onnx_policies',
                                               REPO / 'scripts' / 'onnx_policies.py')
onnx_policies = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(onnx_policies)


class Probe:
    """Records policy/command, joint_states stamps and the runner's diagnostics."""

    def __init__(self):
        self.node = rclpy.create_node('policy_runner_probe')
        self.lock = threading.Lock()
        self.commands, self.state_stamps, self.diag = [], set(), {}
        self.node.create_subscription(JointState, 'policy/command', self._on_command,
                                      COMMAND_QOS)
        self.node.create_subscription(JointState, 'joint_states', self._on_state,
                                      SENSOR_SUB_QOS)
        self.node.create_subscription(DiagnosticArray, '/diagnostics', self._on_diag, 10)
        self.cmd_vel = self.node.create_publisher(Twist, 'cmd_vel', 10)
        self.enable = self.node.create_client(SetBool, 'policy_runner/enable')
        self.reset = self.node.create_client(Trigger, 'policy_runner/reset')
        self.spinner = Spinner(self.node)

    def _on_command(self, msg):
        with self.lock:
            self.commands.append(msg)

    def _on_state(self, msg):
        with self.lock:
            self.state_stamps.add((msg.header.stamp.sec, msg.header.stamp.nanosec))

    def _on_diag(self, msg):
        for status in msg.status:
            if status.name == 'policy_runner: loop':
                with self.lock:
                    self.diag = {kv.key: kv.value for kv in status.values}

    def count(self):
        with self.lock:
            return len(self.commands)

    def value(self, key):
        with self.lock:
            return self.diag.get(key)

    def number(self, key):
        value = self.value(key)
        return None if value is None else float(value)

    def call(self, client, request):
        assert client.wait_for_service(timeout_sec=20), 'policy_runner services not found'
        future = client.call_async(request)
        wait_for(future.done, 10, what='service response')
        return future.result()

    def send_cmd(self, vx):
        msg = Twist()
        msg.linear.x = float(vx)
        self.cmd_vel.publish(msg)


def overlay(tmp_path, params):
    """A second parameter file for policy_runner (node sections beat `-p`, which is '/**')."""
    import yaml
    path = tmp_path / 'overlay.yaml'
    path.write_text(yaml.safe_dump({'policy_runner': {'ros__parameters': params}}))
    return ['--params-file', str(path)]


def diag_advances(probe, key, beyond):
    """Wait for the next diagnostics report that shows `key` above `beyond`."""
    try:
        wait_for(lambda: (probe.number(key) or 0) > beyond, 15, what=f'{key} > {beyond}')
    except AssertionError:
        with probe.lock:
            print(f'policy_runner diagnostics: {probe.diag}')
        raise


@pytest.fixture(scope='module')
def ros():
    rclpy.init()
    yield
    rclpy.try_shutdown()


def test_enable_command_nan_reset_disable_and_stale(ros, tmp_path):
    policy = onnx_policies.arm3(str(tmp_path / 'arm3_nan.onnx'), nan_gate=9)
    sim = NodeProcess('sim_robot', params_file=ARM,
                      extra_args=['-r', 'hardware/command:=policy/command'])
    runner = NodeProcess('policy_runner', params_file=ARM, extra_args=overlay(
        tmp_path, {'policy_path': policy, 'max_input_age_s': 0.05,
                   'late_input_max_age_s': 0.05, 'cmd_vel_min': [-5.0, -5.0, -5.0],
                   'ease_in_s': 0.0}))   # the start phase: test_policy_start.py
    probe = Probe()
    try:
        # Disabled: the loop ticks, nothing is published.
        diag_advances(probe, 'ticks', 100)
        assert runner.proc.poll() is None, runner.output()
        assert probe.value('enabled') == 'False' and probe.count() == 0

        # Enabled: commands with the driver's names, stamped with a joint_states stamp.
        assert probe.call(probe.enable, SetBool.Request(data=True)).success
        wait_for(lambda: probe.count() > 50, 20, what='policy/command after enable')
        with probe.lock:
            cmd = probe.commands[-1]
        assert list(cmd.name) == NAMES and len(cmd.position) == 3

        def stamped_from_a_state():
            # The probe's own joint_states subscription may match later than the commands'
            # on a loaded machine: wait for it, then the newest command's stamp must be one.
            with probe.lock:
                cmd = probe.commands[-1]
                return (cmd.header.stamp.sec, cmd.header.stamp.nanosec) in probe.state_stamps
        wait_for(stamped_from_a_state, 10, what='a command stamped with a joint_states stamp')
        # Every joint_states message read from its bytes by the runner itself (core/cdr).
        assert probe.value('inputs_via_rclpy') == '0', probe.diag
        # On the wall clock the enable aligned the tick phase to joint_states, once: each tick
        # falls align_lead_s before a message and computes when it arrives (align_mode await).
        diag_advances(probe, 'phase_alignments', 0)
        assert -2.0 < probe.number('align_offset_ms') <= -0.3
        diag_advances(probe, 'awaited_ticks', 20)

        # A non-finite policy output is counted and never published; it resumes after.
        # The test policy's NaN gate: obs[9] = cmd vx < -1, sent like a teleop (cmd_vel times
        # out after cmd_vel_timeout_s).
        wait_for(lambda: probe.send_cmd(-3.0) or (probe.number('non_finite') or 0) > 20, 15,
                 what='non_finite > 20')
        probe.send_cmd(0.0)
        before = probe.count()
        wait_for(lambda: probe.count() > before + 20, 20, what='commands after NaN cleared')
        with probe.lock:
            assert all(math.isfinite(v) for c in probe.commands for v in c.position)

        resets = probe.number('resets') or 0
        assert probe.call(probe.reset, Trigger.Request()).success
        diag_advances(probe, 'resets', resets)

        # Disabled again: ticks go on, commands stop.
        assert probe.call(probe.enable, SetBool.Request(data=False)).success
        stopped_at = probe.count()
        ticks = probe.number('ticks')
        diag_advances(probe, 'ticks', ticks + 100)
        assert probe.count() == stopped_at

        # Stale inputs: without joint_states the enabled runner publishes nothing and counts.
        assert probe.call(probe.enable, SetBool.Request(data=True)).success
        wait_for(lambda: probe.count() > stopped_at + 10, 20, what='commands re-enabled')
        sim.stop()
        stale = probe.number('stale_ticks') or 0
        diag_advances(probe, 'stale_ticks', stale + 50)
        silent_from = probe.count()
        diag_advances(probe, 'stale_ticks', probe.number('stale_ticks') + 50)
        assert probe.count() == silent_from
        assert 'no joint_states' in probe.value('last_problem') or \
            'old' in probe.value('last_problem')
    finally:
        probe.spinner.stop()
        runner.stop()
        sim.stop()


@pytest.mark.parametrize('override, message', [
    ({'observation': {'terms': ['joint_pos', 'joint_vel', 'last_action']}},
     'observation length 9 does not match the policy input'),
    ({'policy_joint_names': ['shoulder_yaw', 'wrist_roll', 'elbow_pitch']},
     "['wrist_roll'] are not among the driver joint_names"),
    ({'align_mode': 'before'}, "parameter align_mode: 'before' is neither"),
])
def test_bad_configuration_exits_with_a_clear_message(tmp_path, override, message):
    policy = onnx_policies.arm3(str(tmp_path / 'arm3.onnx'))
    params = dict({'policy_path': policy}, **override)
    proc = NodeProcess('policy_runner', params_file=ARM, extra_args=overlay(tmp_path, params))
    try:
        code = proc.wait_exit(60)
        out = proc.output()
    finally:
        proc.stop()
    assert code == 2, out
    assert message in out and 'configuration error' in out
    assert 'Traceback' not in out


def test_runs_on_simulated_time(ros, tmp_path):
    """With use_sim_time the loop ticks on sim_robot's /clock and stamps commands with it."""
    policy = onnx_policies.arm3(str(tmp_path / 'arm3.onnx'))
    sim_params = tmp_path / 'sim.yaml'
    import yaml
    sim_params.write_text(yaml.safe_dump({'sim_robot': {'ros__parameters': {
        'publish_clock': True}}}))
    sim = NodeProcess('sim_robot', params_file=ARM, extra_args=[
        '--params-file', str(sim_params), '-r', 'hardware/command:=policy/command'])
    runner = NodeProcess('policy_runner', params_file=ARM, extra_args=overlay(
        tmp_path, {'policy_path': policy, 'use_sim_time': True, 'max_input_age_s': 0.05}))
    probe = Probe()
    try:
        assert probe.call(probe.enable, SetBool.Request(data=True)).success
        wait_for(lambda: probe.count() > 30, 30, what='policy/command on sim time')
        with probe.lock:
            stamps = [stamp_to_sec(c.header.stamp) for c in probe.commands]
        # Simulated time started at 0 with sim_robot: far from the wall clock's epoch seconds.
        assert 0 < stamps[-1] < 600 and stamps == sorted(stamps)
    finally:
        probe.spinner.stop()
        runner.stop()
        sim.stop()


def test_lockstep_waits_for_its_clock_when_the_state_comes_first(ros, tmp_path):
    """In lockstep the runner computes once per observation stamp. joint_states for a step can
    be taken before the /clock message of that step (two topics, no order between them): the
    observation is then from the runner's future. It must not be used while it is (nothing is
    published), and the step must be computed once /clock reaches it: refused for good, the
    step was never computed and sim_robot waited for ever (the H1-2 lockstep stalled at
    t = 0.02 s). sim_robot's side is played by this test: its /clock and its joint_states."""
    from builtin_interfaces.msg import Time as TimeMsg
    from rosgraph_msgs.msg import Clock
    import time
    policy = onnx_policies.arm3(str(tmp_path / 'arm3.onnx'))
    runner = NodeProcess('policy_runner', params_file=ARM, extra_args=overlay(
        tmp_path, {'policy_path': policy, 'use_sim_time': True, 'lockstep': True}))
    probe = Probe()
    clock = probe.node.create_publisher(Clock, '/clock', 10)
    states = probe.node.create_publisher(JointState, 'joint_states', SENSOR_SUB_QOS)

    def tick(sec):
        msg = Clock()
        msg.clock = TimeMsg(sec=0, nanosec=int(round(sec * 1e9)))
        clock.publish(msg)

    state = JointState(name=NAMES, position=[0.0, 0.3, -0.4], velocity=[0.0] * 3,
                       effort=[0.0] * 3)
    state.header.stamp = TimeMsg(sec=0, nanosec=20_000_000)
    try:
        wait_for(lambda: states.get_subscription_count() and clock.get_subscription_count(),
                 20, what='policy_runner subscribed to joint_states and /clock')
        # The state of t = 0.02 s arrives while the runner's clock reads 0: sent for half a
        # second (a stream, as sim_robot's), so the runner holds it before it is enabled.
        until = time.monotonic() + 0.5
        while time.monotonic() < until:
            tick(0.0)
            states.publish(state)
            time.sleep(0.02)
        assert probe.call(probe.enable, SetBool.Request(data=True)).success
        states.publish(state)
        time.sleep(0.3)   # a command computed from the future state would arrive meanwhile
        assert probe.count() == 0, 'a command computed from a state ahead of /clock'

        def advanced():   # /clock reaches the state's time: the step is computed now
            tick(0.02)
            return probe.count() > 0
        wait_for(advanced, 10, interval=0.1, what='the step computed once /clock reached it')
        with probe.lock:
            stamp = stamp_to_sec(probe.commands[0].header.stamp)
        assert abs(stamp - 0.02) < 1e-9, stamp
    finally:
        probe.spinner.stop()
        runner.stop()

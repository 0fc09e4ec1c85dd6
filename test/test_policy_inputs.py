"""policy_runner's input rules (issues 13 and 17), against joint_states this test publishes.

A real policy_runner process over real DDS with a real ONNX policy; the test is the driver, so
it can send what a faulty driver would: future stamps, duplicate names, no velocities, late
messages, bursts.
"""
import threading
import time

from geometry_msgs.msg import Twist
import pytest
import rclpy
from sensor_msgs.msg import JointState
from std_srvs.srv import SetBool

from rosproc import NodeProcess, wait_for
from simreal_ros.nodes.common import SENSOR_PUB_QOS
from test_policy_runner_node import ARM, NAMES, Probe, diag_advances, onnx_policies, overlay

pytestmark = pytest.mark.ros
RATE = 100.0   # arm3's policy rate (Hz)


class Driver:
    """Publish joint_states at 500 Hz from a thread; what it sends is set by attributes."""

    def __init__(self, node):
        self.pub = node.create_publisher(JointState, 'joint_states', SENSOR_PUB_QOS)
        self.clock = node.get_clock()
        self.names = list(NAMES)
        self.velocity = [0.0, 0.0, 0.0]
        self.age = 0.0          # stamp = now - age (negative: in the future)
        self.burst_every = 0    # every this many messages, a burst of `burst` more
        self.burst = 0
        self.back_every = 0     # every this many messages, one stamped 30 ms before the last
        self.back_sent = 0
        self._last_ns = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _message(self, back=False):
        msg = JointState(name=self.names, position=[0.1 if back else 0.0] * len(self.names),
                         velocity=self.velocity)
        if back:
            ns = self._last_ns - 30_000_000
        else:
            ns = self._last_ns = self.clock.now().nanoseconds - int(self.age * 1e9)
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(ns, 10**9)
        return msg

    def _run(self):
        k = 0
        while not self._stop.is_set():
            back = bool(self.back_every and k % self.back_every == self.back_every - 1)
            self.pub.publish(self._message(back))
            self.back_sent += back
            k += 1
            if self.burst_every and k % self.burst_every == 0:
                for _ in range(self.burst):
                    self.pub.publish(self._message())
            self._stop.wait(0.002)

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=2)


@pytest.fixture(scope='module')
def ros():
    rclpy.init()
    yield
    rclpy.try_shutdown()


@pytest.fixture
def rig(ros, tmp_path):
    policy = onnx_policies.arm3(str(tmp_path / 'arm3_nan.onnx'), nan_gate=9)
    runner = NodeProcess('policy_runner', params_file=ARM, extra_args=overlay(tmp_path, {
        'policy_path': policy, 'max_input_age_s': 0.01, 'late_input_max_age_s': 0.05,
        'cmd_vel_min': [-5.0, -1.0, -1.0], 'cmd_vel_max': [1.0, 1.0, 1.0],
        'cmd_vel_timeout_s': 0.5, 'ease_in_s': 0.0}))   # the start phase: test_policy_start
    probe = Probe()
    driver = Driver(probe.node)
    try:
        assert probe.call(probe.enable, SetBool.Request(data=True)).success
        wait_for(lambda: probe.count() > 20, 30, what='commands from fresh joint_states')
        yield probe, driver, runner
    finally:
        driver.stop()
        probe.spinner.stop()
        runner.stop()


def refused_while(probe, driver, key, **sent):
    """Send a faulty stream until `key` grows by 50; return commands published meanwhile."""
    before = probe.number(key) or 0
    for name, value in sent.items():
        setattr(driver, name, value)
    diag_advances(probe, key, before)   # the stream is faulty from this report on
    start = probe.count()
    diag_advances(probe, key, (probe.number(key) or 0) + 50)
    published = probe.count() - start
    driver.names, driver.velocity, driver.age = list(NAMES), [0.0, 0.0, 0.0], 0.0
    count = probe.count()
    wait_for(lambda: probe.count() > count + 20, 20, what='commands after the fault')
    return published


def test_refuses_future_stamps_duplicate_names_and_missing_velocities(rig):
    probe, driver, _ = rig
    assert refused_while(probe, driver, 'future_stamped', age=-0.1) == 0
    assert 'in the future' in probe.value('last_problem')
    assert refused_while(probe, driver, 'duplicate_names',
                         names=NAMES + [NAMES[0]]) == 0
    assert 'more than once' in probe.value('last_problem')
    assert refused_while(probe, driver, 'missing_velocity', velocity=[]) == 0
    assert 'not zero-filled' in probe.value('last_problem')


def test_late_inputs_are_used_and_counted_stale_ones_are_not(rig):
    probe, driver, _ = rig
    # 30 ms old: over max_input_age_s (10 ms), within late_input_max_age_s (50 ms): used.
    late = probe.number('late_inputs_used') or 0
    driver.age = 0.03
    diag_advances(probe, 'late_inputs_used', late + 50)
    start = probe.count()
    wait_for(lambda: probe.count() > start + 50, 20, what='commands from late inputs')
    # 80 ms old: stale, the ticks publish nothing.
    assert refused_while(probe, driver, 'stale_ticks', age=0.08) == 0


def test_cmd_vel_is_clipped_and_times_out_to_zero(rig):
    probe, driver, _ = rig
    msg = Twist()
    msg.linear.x, msg.angular.z = 0.5, 3.0   # wz over cmd_vel_max: clipped, counted
    probe.cmd_vel.publish(msg)
    diag_advances(probe, 'cmd_vel_clipped', 0)
    # The test policy's NaN gate: cmd vx < -1 gives a non-finite action. One cmd_vel of -3
    # (inside cmd_vel_min) stops the commands; after cmd_vel_timeout_s it is zero again and
    # they resume without any other cmd_vel.
    timeouts = probe.number('cmd_vel_timeouts') or 0
    probe.send_cmd(-3.0)
    diag_advances(probe, 'non_finite', probe.number('non_finite') or 0)
    diag_advances(probe, 'cmd_vel_timeouts', timeouts)
    start = probe.count()
    wait_for(lambda: probe.count() > start + 50, 20, what='commands after cmd_vel timed out')
    non_finite = probe.number('non_finite')
    diag_advances(probe, 'ticks', probe.number('ticks') + 100)
    assert probe.number('non_finite') == non_finite


def test_an_input_burst_gives_at_most_one_command_per_period(rig):
    probe, driver, _ = rig
    diag_advances(probe, 'awaited_ticks', 20)   # the 'await' alignment path is in use
    driver.burst_every, driver.burst = 25, 20   # 20 extra messages every 50 ms
    ticks0 = probe.number('ticks')
    diag_advances(probe, 'ticks', ticks0)
    t0, n0, ticks0 = time.monotonic(), probe.count(), probe.number('ticks')
    diag_advances(probe, 'ticks', ticks0 + 3 * RATE)
    wall, sent = time.monotonic() - t0, probe.count() - n0
    ticks = probe.number('ticks') - ticks0
    assert sent > 0.5 * ticks, f'{sent} commands in {ticks} ticks'
    # Never more commands than ticks (a report in flight: one second's worth of slack).
    assert sent <= ticks + RATE, f'{sent} commands in {ticks} ticks ({wall:.1f} s)'
    assert sent <= wall * RATE * 1.1 + 5, f'{sent} commands in {wall:.1f} s at {RATE} Hz'


def test_an_observation_is_never_built_from_a_sample_older_than_the_last(rig):
    # Every fifth joint_states stamped 30 ms before the one before it (a reordering network,
    # a driver's second thread): never used, counted, so every command's stamp (the stamp of
    # the observation it was computed from) is at least the one before it.
    probe, driver, _ = rig
    before = probe.number('joint_states_out_of_order') or 0
    n0 = probe.count()
    driver.back_every = 5
    diag_advances(probe, 'joint_states_out_of_order', before + 200)
    driver.back_every = 0
    with probe.lock:
        stamps = [c.header.stamp.sec + c.header.stamp.nanosec * 1e-9
                  for c in probe.commands[n0:]]
    assert len(stamps) > 100
    back = [(a, b) for a, b in zip(stamps, stamps[1:]) if b < a]
    assert not back, f'{len(back)} commands stamped before the one before them: {back[:3]}'

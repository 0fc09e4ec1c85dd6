"""safety_supervisor as its own process between a test 'policy' and a real sim_robot process.

`SafetyProbe` (simreal_ros/client/rig.py, shared with the benches) plays the policy on
`policy/command`, records every `hardware/command` with its arrival time, follows the latched
`safety/state` and calls the supervisor's services.
"""
import math
import os
import signal
import time

import pytest
import rclpy
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from std_srvs.srv import SetBool

from rosproc import NodeProcess, wait_for
from simreal_ros.client.rig import environment, is_safe, loopback_udp_env, SafetyProbe  # noqa: F401

ARM = 'config/robots/arm3.yaml'
NAMES = ['shoulder_yaw', 'shoulder_pitch', 'elbow_pitch']
JS_TIMEOUT = 1.0
POLICY_TIMEOUT = 0.2
RECORD_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1000,
                        reliability=ReliabilityPolicy.RELIABLE)


@pytest.fixture(scope='module')
def rig(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('safety')
    # Loopback UDP for this process and its nodes: the test SIGSTOPs sim_robot, and over
    # shared memory a publish to a stopped process blocks (rig.environment explains).
    env = environment(loopback_udp_env())
    env.__enter__()
    rclpy.init()
    probe = SafetyProbe()
    sup = NodeProcess('safety_supervisor', params_file=ARM, params={
        'stage_file': str(tmp / 'stages.json'), 'reject_trip_count': 3,
        # A loaded 2-core CI machine can delay joint_states by a few 100 ms; the rule is
        # tested here, not the machine's scheduling (bench/safety_faults.py measures).
        'joint_states_timeout_s': JS_TIMEOUT, 'policy_timeout_s': POLICY_TIMEOUT})
    sims = []

    def start_sim():
        if not sims:
            sims.append(NodeProcess('sim_robot', params_file=ARM))
        return sims[0]
    try:
        yield probe, sup, start_sim
    finally:
        probe.close()
        for proc in sims + [sup]:
            proc.stop()
        rclpy.try_shutdown()
        env.__exit__(None, None, None)


@pytest.mark.ros
def test_waiting_forwarding_nan_and_stale_policy(rig):
    probe, sup, start_sim = rig
    # Before joint_states: it says so and publishes nothing.
    wait_for(lambda: probe.get('output') == 'waiting', 30, what='safety/state: waiting')
    assert probe.get('safe_reason').startswith('waiting for joint_states')
    probe.target = [0.0, 0.0, 0.0]
    wait_for(lambda: probe.get('rejected') is not None
             and probe.get('inputs')['policy']['received'] > 20, 20, what='policy received')
    assert probe.count() == 0, 'hardware/command published before joint_states'
    start_sim()
    wait_for(lambda: probe.joint_states is not None, 30, what='joint_states from sim_robot')
    wait_for(lambda: probe.get('output') == 'forwarding', 20, what='forwarding')
    start = time.monotonic()
    wait_for(lambda: any(not is_safe(m) for _, m in probe.since(start)), 10,
             what='forwarded hardware/command')

    # NaN: rejected, counted, never forwarded (two in a row: below reject_trip_count 3).
    # The policy thread pauses so no valid command overwrites them (keep-last 1).
    probe.target = None
    for k in (1, 2):
        probe.publish([math.nan, 0.0, 0.0])
        wait_for(lambda: probe.get('rejected')['policy'] >= k, 10, what='NaN counted')
    probe.hold_current()
    time.sleep(0.05)  # let in-flight outputs arrive before the check (not synchronisation)
    with probe.lock:
        assert all(math.isfinite(v) for _, m in probe.outputs for v in m.position)
    assert 'non-finite' in probe.get('last_reject')
    assert not probe.get('estop')
    wait_for(lambda: probe.get('output') == 'forwarding', 10, what='forwarding after NaN')
    resumed = time.monotonic()
    wait_for(lambda: any(not is_safe(m) for _, m in probe.since(resumed)), 5,
             what='forwarded outputs')

    # Stale policy -> safe mode (damping), not latched; fresh commands resume forwarding.
    probe.target = None
    stopped = time.monotonic()
    wait_for(lambda: any(is_safe(m) for _, m in probe.since(stopped)), 5, what='safe mode')
    t_safe = next(t for t, m in probe.since(stopped) if is_safe(m))
    assert t_safe - stopped < POLICY_TIMEOUT + 0.5   # timeout + generous scheduling margin
    wait_for(lambda: 'policy stale' in probe.get('safe_reason'), 5, what='reason in state')
    assert not probe.get('estop')
    probe.hold_current()
    wait_for(lambda: probe.get('output') == 'forwarding', 10, what='forwarding resumed')


@pytest.mark.ros
def test_estop_latency_reset_refusal_and_stale_joint_states(rig):
    probe, sup, start_sim = rig
    sim = start_sim()
    wait_for(lambda: probe.joint_states is not None, 30, what='joint_states')
    probe.hold_current()
    wait_for(lambda: probe.get('output') == 'forwarding', 20, what='forwarding')

    # E-stop: the safe output is published in the service call itself; nothing forwarded after.
    sent = time.monotonic()
    reply = probe.call(probe.clients['estop'])
    answered = time.monotonic()
    assert reply.success, reply.message
    wait_for(lambda: len(probe.since(answered)) > 10, 5, what='outputs after e-stop')
    # After it in the order the supervisor published them (one publisher, reliable: arrival
    # order), not by this process's clock: a command forwarded just before the e-stop whose
    # callback ran after the service's reply was counted as after it (CI, once).
    outputs = probe.since(sent)
    first = next(k for k, (_, m) in enumerate(outputs) if is_safe(m))
    after = outputs[first:]
    assert all(is_safe(m) for _, m in after), 'a command was forwarded after the e-stop'
    first_safe = outputs[first][0]
    assert first_safe - sent < 0.5
    wait_for(lambda: probe.get('estop') is True, 5, what='latched state')
    assert 'safety/estop' in probe.get('estop_cause')

    # Reset refused while the policy commands a pose far from the state, with the reason.
    with probe.lock:
        q = list(probe.joint_states.position)
    probe.target = [q[0] + 0.5, q[1], q[2]]
    time.sleep(0.05)  # a few policy periods so the far command is the latest
    reply = probe.call(probe.clients['reset'])
    assert not reply.success and 'reset_tolerance' in reply.message, reply.message
    # Policy silent: the reset is accepted, but nothing is forwarded until fresh commands
    # near the state arrive (they pass the same checks as a reset).
    probe.target = None
    wait_for(lambda: (probe.get('inputs')['policy']['arrival_age_ms'] or 0)
             > POLICY_TIMEOUT * 1e3 + 50, 5, what='policy stale')
    reply = probe.call(probe.clients['reset'])
    assert reply.success and 'once it sends fresh commands' in reply.message, reply.message
    reset_at = time.monotonic()
    wait_for(lambda: len(probe.since(reset_at)) > 10, 5, what='outputs after the reset')
    assert all(is_safe(m) for _, m in probe.since(reset_at))
    probe.hold_current()
    wait_for(lambda: probe.get('output') == 'forwarding', 10, what='forwarding after reset')

    # Mode switch refused outside a safe state.
    reply = probe.call(probe.select, SetBool.Request(data=True))
    assert not reply.success and 'estop' in reply.message

    # Stale joint_states (sim_robot frozen) -> e-stop latched, in timeout + margin.
    os.kill(sim.proc.pid, signal.SIGSTOP)
    frozen = time.monotonic()
    try:
        wait_for(lambda: probe.get('estop') is True, 10, what='e-stop on stale joint_states')
        assert 'joint_states stale' in probe.get('estop_cause')
        wait_for(lambda: any(is_safe(m) for _, m in probe.since(frozen)), 5, what='safe')
        t_safe = next(t for t, m in probe.since(frozen) if is_safe(m))
        assert t_safe - frozen < JS_TIMEOUT + 0.5
    finally:
        os.kill(sim.proc.pid, signal.SIGCONT)
    sim.stop()
    assert sup.proc.poll() is None, sup.output()

"""safety_supervisor's outputs as a process: the ros2_control Float64MultiArray in its configured
joint order, the `hold` and `zero_torque` safe modes on the wire, and `auto_advance` promoting
through the stages by itself (recorded to its stage file), against a real sim_robot.
"""
import json
import threading
import time

import numpy as np
import pytest
import rclpy
from std_msgs.msg import Float64MultiArray

from rosproc import NodeProcess, wait_for
from test_safety_node import ARM, NAMES, RECORD_QOS, SafetyProbe

pytestmark = pytest.mark.ros
ORDER = ['elbow_pitch', 'shoulder_yaw', 'shoulder_pitch']   # not the driver's order
ARRAY_TOPIC = 'forward_position_controller/commands'


class ArrayProbe(SafetyProbe):
    """SafetyProbe that also records the Float64MultiArray output."""

    def __init__(self, topic):
        super().__init__(name='safety_array_probe')
        self.arrays = []
        self.node.create_subscription(Float64MultiArray, topic, self._on_array, RECORD_QOS)

    def _on_array(self, msg):
        with self.lock:
            self.arrays.append((time.monotonic(), list(msg.data)))

    def arrays_since(self, t):
        with self.lock:
            return [d for ta, d in self.arrays if ta >= t]


@pytest.fixture()
def ros():
    rclpy.init()
    procs = []
    try:
        yield procs
    finally:
        for proc in procs:
            proc.stop()
        rclpy.try_shutdown()


def start(procs, tmp_path, **params):
    procs.append(NodeProcess('sim_robot', params_file=ARM))
    procs.append(NodeProcess('safety_supervisor', params_file=ARM, params={
        'stage_file': str(tmp_path / 'stages.json'), 'joint_states_timeout_s': 1.0,
        'policy_timeout_s': 0.2, **params}))
    return procs[-1]


def forwarding(probe):
    wait_for(lambda: probe.joint_states is not None, 30, what='joint_states from sim_robot')
    probe.hold_current()
    wait_for(lambda: probe.get('output') == 'forwarding', 20, what='forwarding')


def test_array_output_in_configured_order_and_hold_safe_mode(ros, tmp_path):
    sup = start(ros, tmp_path, safe_mode='hold', array_topic=ARRAY_TOPIC,
                array_joint_order=ORDER, array_field='position')
    probe = ArrayProbe(ARRAY_TOPIC)
    try:
        forwarding(probe)
        # Forwarding: a pose off the measured one (within the limits), arrays in ORDER.
        q = list(probe.joint_states.position)
        target = [q[0] + 0.05, q[1] - 0.04, q[2] + 0.03]
        probe.target = target
        by_name = dict(zip(NAMES, target))
        want = [by_name[n] for n in ORDER]
        t0 = time.monotonic()
        wait_for(lambda: any(np.allclose(d, want, atol=1e-9) for d in probe.arrays_since(t0)),
                 10, what='the array carrying the target in array_joint_order')
        # The JointState output carries the same values by name (each topic in its own time).
        wait_for(lambda: any(dict(zip(m.name, m.position)) == pytest.approx(by_name, abs=1e-9)
                             for _, m in probe.since(t0)), 10,
                 what='the JointState output carrying the target by name')

        # E-stop in hold mode: the JointState output holds the position at the trip (by name),
        # and so does the array, in ORDER; nothing forwarded afterwards.
        wait_for(lambda: np.allclose(probe.joint_states.position, target, atol=0.02), 10,
                 what='the arm at the target')
        reply = probe.call(probe.clients['estop'])
        assert reply.success, reply.message
        answered = time.monotonic()
        probe.target = [q[0] - 0.2, q[1], q[2]]   # the policy goes on: must not pass
        wait_for(lambda: len(probe.since(answered)) > 20
                 and len(probe.arrays_since(answered)) > 20, 5, what='outputs after e-stop')
        # A forwarded target published just before the e-stop may arrive just after the
        # service's answer (two DDS channels): the hold starts with the first output that is
        # not the forwarded target, and nothing after it moves.
        held = probe.since(answered)
        skip = 0
        while skip < min(20, len(held)) and dict(zip(held[skip][1].name, held[skip][1].position)) \
                == pytest.approx(by_name, abs=1e-9):
            skip += 1
        held = held[skip:]
        first = dict(zip(held[0][1].name, held[0][1].position))
        assert set(first) == set(NAMES)
        assert all(dict(zip(m.name, m.position)) == first for _, m in held), (
            'hold moved', [(round(t - answered, 4), dict(zip(m.name, m.position)))
                           for t, m in held[:40]], by_name)
        assert first == pytest.approx(by_name, abs=0.03)   # where the arm was at the trip
        arrays = probe.arrays_since(answered)
        skip = 0
        while skip < min(20, len(arrays)) and np.allclose(arrays[skip], want, atol=1e-9):
            skip += 1
        arrays = arrays[skip:]
        assert all(d == [first[n] for n in ORDER] for d in arrays), arrays[:3]
        wait_for(lambda: probe.get('estop') is True, 5, what='latched state')
        assert probe.get('safe_mode') == 'hold'
    finally:
        probe.close()
    assert sup.proc.poll() is None, sup.output()


def test_zero_torque_safe_mode_on_the_wire(ros, tmp_path):
    sup = start(ros, tmp_path, safe_mode='zero_torque', array_topic=ARRAY_TOPIC,
                array_joint_order=ORDER, array_field='effort')
    probe = ArrayProbe(ARRAY_TOPIC)
    try:
        forwarding(probe)
        reply = probe.call(probe.clients['estop'])
        assert reply.success, reply.message
        answered = time.monotonic()
        wait_for(lambda: len(probe.since(answered)) > 20
                 and len(probe.arrays_since(answered)) > 20, 5, what='outputs after e-stop')
        for _, m in probe.since(answered):
            assert len(m.position) == 0 and len(m.velocity) == 0, m
            assert sorted(m.name) == sorted(NAMES) and list(m.effort) == [0.0, 0.0, 0.0], m
        assert all(d == [0.0, 0.0, 0.0] for d in probe.arrays_since(answered))
    finally:
        probe.close()
    assert sup.proc.poll() is None, sup.output()


def test_auto_advance_promotes_one_stage_per_clean_dwell_and_records_it(ros, tmp_path):
    dwell = 1.0
    sup = start(ros, tmp_path, auto_advance=True, stages=[0.1, 0.25, 0.5],
                stage_dwell_s=[dwell], resume_stage=False)
    probe = SafetyProbe(name='safety_auto_probe')
    stages = []
    stop = threading.Event()

    def watch():   # the stage over time, from the latched safety/state
        while not stop.is_set():
            stage = (probe.get('stage') or {}).get('stage')
            if stage is not None and (not stages or stages[-1][1] != stage):
                stages.append((time.monotonic(), stage))
            stop.wait(0.01)
    thread = threading.Thread(target=watch, daemon=True)
    try:
        forwarding(probe)
        thread.start()
        # Waited on the watcher's record, so the last stage is in it before it stops.
        wait_for(lambda: stages and stages[-1][1] == 0.5, 30, what='auto_advance to 0.50')
        stop.set()
        thread.join()
        seen = [s for _, s in stages]
        scales = [0.1, 0.25, 0.5]
        idx = [scales.index(x) for x in seen]
        # One stage at a time, none skipped (a loaded machine may cost a demotion meanwhile).
        assert seen[0] == 0.1 and all(abs(b - a) == 1 for a, b in zip(idx, idx[1:])), seen
        times = [t for t, _ in stages]
        assert times[-1] - times[-2] >= dwell - 0.2  # after a clean dwell (state at 10 Hz)
        # The record is written off the control path, by a thread of its own: soon after.
        record = wait_for(lambda: (lambda r: r if r['highest'] == 0.5 else None)(
            json.loads((tmp_path / 'stages.json').read_text())), 5, what='the record')
        # Read up to the first arrival at 0.50, which the watcher waited for: by the time the
        # record is read a demotion and a new promotion may follow (Jazzy CI: 0.50 -> 0.25 ->
        # 0.50, the record's last two promotions both 0.25 -> 0.50). Every demotion is in the
        # record with its cause; the promotions are one stage at a time, each automatic.
        trans = record['transitions']
        first = next(k for k, t in enumerate(trans) if t['to'] == 0.5)
        moves = [t for t in trans[:first + 1] if t['to'] > t['from']]   # promotions
        shown = json.dumps(trans)
        assert [(t['from'], t['to']) for t in moves][-2:] == [(0.1, 0.25), (0.25, 0.5)], shown
        assert all('auto' in t['cause'] for t in trans if t['to'] > t['from']), shown
        assert all(t['cause'] for t in trans), shown
    finally:
        stop.set()
        probe.close()
    assert sup.proc.poll() is None, sup.output()

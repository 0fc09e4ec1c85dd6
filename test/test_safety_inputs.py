"""The supervisor's input contract (issue 28): inputs valid alone but wrong in rate, order,
timing, naming or coverage. Each test fails when its rule is removed."""
import numpy as np
import pytest

from simreal_ros.core.safety import Supervisor, SupervisorConfig

NAMES = ['a', 'b', 'c']
PERIOD = 0.002


def config(**over):
    p = dict(joint_names=NAMES, kp=[100.0] * 3, kd=[2.0] * 3, position_lower=[-1.0] * 3,
             position_upper=[1.0] * 3, velocity_limit=[2.0] * 3, torque_limit=[1e4] * 3,
             max_target_rate=[1.0] * 3, max_target_accel=[50.0] * 3, trip_velocity=[5.0] * 3,
             stages=[0.5, 1.0], stage_dwell_s=[0.2], policy_timeout_s=0.06,
             joint_states_timeout_s=0.05, rate_hz=1.0 / PERIOD, policy_rate_hz=100.0)
    p.update(over)
    return SupervisorConfig.from_params(p)


class Node:
    """Feeds a Supervisor as the node does: states every tick, commands as they come
    (forward_input), the tick (tick_output); records what would be published and when."""

    def __init__(self, sup=None, t=1.0, **over):
        self.t = t
        self.sup = sup or Supervisor(config(**over), t)
        self.sent = []          # (time, Output, 'input' | 'tick')
        self.latency = 0.0      # commands are stamped this long before they arrive

    def state(self, q=(0.0, 0.0, 0.0)):
        assert self.sup.on_joint_state(NAMES, q, (0.0, 0.0, 0.0), self.t, self.t)[0]

    def command(self, pos, stamp=None, names=NAMES):
        ok, why = self.sup.on_command('policy', names, pos, (), (),
                                      self.t - self.latency if stamp is None else stamp,
                                      self.t)
        if ok:
            out = self.sup.forward_input(self.t)
            if out is not None:
                self.sent.append((self.t, out, 'input'))
        return ok, why

    def tick(self, forward_on_tick=True, q=None):
        self.t += PERIOD
        self.state(q if q is not None else tuple(self.sup.q))
        out = self.sup.tick_output(self.t, forward_on_tick=forward_on_tick)
        if out is not None:
            self.sent.append((self.t, out, 'tick'))
        return self.sent[-1][1] if self.sent else None   # what the driver executes now

    def forwarding(self):
        return self.sup.status(self.t)['output'] == 'forwarding'

    def outputs_per_slot(self, since):
        """The most outputs sent in one tick slot (between two ticks) after `since`."""
        slots = {}
        for t, _, _ in self.sent:
            if t > since:
                k = int(np.ceil((t - 1.0) / PERIOD - 1e-6))
                slots[k] = slots.get(k, 0) + 1
        return max(slots.values())


def start(node, pos=(0.0, 0.0, 0.0)):
    node.state()
    for _ in range(5):
        node.command(pos)
        node.tick()
    assert node.forwarding()


# -- rate: one output per tick slot ---------------------------------------------------------
def test_a_source_faster_than_the_tick_never_multiplies_the_output_rate():
    n = Node()
    start(n)
    t0, ticks = n.t, 200
    for _ in range(ticks):      # a 2 kHz source: four commands per 500 Hz tick slot
        for k in range(4):
            n.t += PERIOD / 4 if k else 0.0
            n.command((0.0, 0.0, 0.0))
        n.t -= 3 * PERIOD / 4
        n.tick()
    sent = [s for s in n.sent if s[0] > t0]
    assert ticks - 1 <= len(sent) <= ticks    # one per slot, not 4 or 5
    assert n.outputs_per_slot(t0) == 1
    assert any(kind == 'input' for _, _, kind in sent)   # sent at once, for latency
    s = n.sup.status(n.t)
    assert s['deferred_inputs'] == 3 * ticks and s['replaced_ticks'] >= ticks - 1
    # Counted against the declared 100 Hz (and reported), not a fault: the stage holds.
    assert s['commands']['policy']['too_fast'] > 0
    assert s['commands']['policy']['superseded'] > 0
    assert n.sup.stage.scale == 0.5 and not n.sup.latched and n.forwarding()


def test_a_source_at_its_declared_rate_is_not_counted_too_fast_even_after_a_short_stall():
    n = Node()
    start(n)
    before = n.sup.too_fast['policy']
    for k in range(300):     # 100 Hz, then a 40 ms stall and its queue of 4 at once
        if k % 5 == 0 and not 100 <= k < 120:
            n.command((0.0, 0.0, 0.0))
        if k == 120:
            for _ in range(4):
                n.command((0.0, 0.0, 0.0))
        n.tick()
    assert n.sup.too_fast['policy'] == before


def test_a_change_to_safe_is_sent_in_the_slot_the_input_already_used():
    n = Node()
    start(n)
    n.t += PERIOD / 2
    n.command((0.0, 0.0, 0.0))
    assert n.sent[-1][2] == 'input' and not n.sent[-1][1].safe
    n.t += PERIOD / 2
    n.sup.on_joint_state(NAMES, (0.0, 0.0, 0.0), (5.5, 0.0, 0.0), n.t, n.t)   # trip speed
    out = n.sup.tick_output(n.t)
    assert out is not None and out.safe and n.sup.latched


def test_without_forward_on_tick_a_command_that_waited_goes_out_on_the_tick():
    n = Node()
    start(n)
    n.t += PERIOD / 3
    n.command((0.0, 0.0, 0.0))
    n.t += PERIOD / 3
    n.command((0.01, 0.0, 0.0))     # the slot is taken: it waits
    assert n.sent[-1][1].position[0] == 0.0
    n.t += PERIOD / 3
    assert n.sup.tick_output(n.t, forward_on_tick=False) is None   # the slot had its output
    n.t += PERIOD
    out = n.sup.tick_output(n.t, forward_on_tick=False)             # the next slot: it
    assert out is not None and out.position[0] > 0.0
    n.t += PERIOD
    assert n.sup.tick_output(n.t, forward_on_tick=False) is None   # nothing new


def test_a_command_a_period_after_the_last_one_opens_its_own_slot_without_a_tick():
    """Lockstep: the supervisor's tick follows /clock, and /clock waits for the command
    stepping the simulator. A command a tick period after the last one sent on input goes
    out at once, tick or not; one inside that period still waits (one output per slot)."""
    n = Node()
    start(n)
    sent = len(n.sent)
    for k in range(5):      # no tick in between: each command a period later
        n.t += PERIOD
        n.command((0.001 * (k + 1), 0.0, 0.0))
        assert len(n.sent) == sent + k + 1 and n.sent[-1][2] == 'input', k
    n.t += PERIOD / 2
    n.command((0.006, 0.0, 0.0))
    assert len(n.sent) == sent + 5 and n.sup.deferred_inputs == 1


# -- the rate limit's clock: the source's stamps, not the scheduler ----------------------------
def _ramp(n, speed, burst_at=None, lie=1.0):
    """100 Hz stamped commands of a ramp at `speed` rad/s; at `burst_at` (tick) the source
    stalls 40 ms and its four queued commands arrive within 1 ms. Return clip counts."""
    pos, k, stamp = 0.0, 0, n.t - 0.01
    while k < 300:
        if burst_at is not None and k == burst_at:
            for _ in range(20):   # the stall: ticks go on, the source is silent
                n.tick()
                k += 1
            for j in range(4):
                stamp += 0.01
                pos += speed * 0.01
                n.t += 0.00025
                n.command((pos, 0.0, 0.0), stamp=stamp)
        if k % 5 == 0:
            stamp += 0.01 * lie
            pos += speed * 0.01
            n.command((pos, 0.0, 0.0), stamp=stamp)
        n.tick()
        k += 1
    return n.sup.clips['rate'][0] + n.sup.clips['acceleration'][0]


RAMP = dict(max_target_accel=[1000.0] * 3)


def test_a_burst_of_commands_taken_together_is_not_clipped_nor_demoted():
    n = Node(**RAMP)
    start(n)
    n.sup.stage.index = 1            # stage 1.00: rate limit 1 rad/s
    clips = _ramp(n, 0.8, burst_at=100)   # within the rate on the source's clock
    assert clips == 0, n.sup.clips
    assert n.sup.stage.scale == 1.0 and n.forwarding()


def test_a_target_that_truly_moves_too_fast_is_still_clipped():
    n = Node(**RAMP)
    start(n)
    n.sup.stage.index = 1
    assert _ramp(n, 1.6) > 0          # 1.6 x the rate, stamps in real time


def test_a_source_whose_stamps_run_fast_cannot_buy_rate():
    # Stamps advancing three times faster than time: the stamp watchdog stops it within a
    # timeout (future stamps), and the target never travels more than the rate allows over
    # the time plus two timeouts.
    n = Node(**RAMP)
    start(n)
    n.sup.stage.index = 1
    t0, q0 = n.t, n.sup.previous_target[0]
    _ramp(n, 3.0, lie=3.0)
    travelled = np.nanmax([o.position[0] for _, o, _ in n.sent
                           if o.position is not None]) - q0
    assert travelled <= 1.0 * (n.t - t0 + 2 * 0.06) + 1e-9


def test_a_smooth_command_stamped_just_after_the_last_is_not_an_acceleration():
    # A 2 kHz source that runs late stamps some commands off its grid (bench/safety_faults.py
    # policy_flood): here one 14 us after the command before. Between two secants of a smooth
    # curve the rate differs by the curvature over the previous step (50 rad/s^2 x 1 ms);
    # divided by 14 us that read as 3,500 rad/s^2 and was clipped. An output goes out at
    # most once per tick period, so the rate may change by the limit x one period per output.
    n = Node(max_target_rate=[10.0] * 3, max_target_accel=[100.0] * 3)
    start(n)
    n.sup.stage.index = 1
    s0, curve = n.t, 50.0             # rad/s^2, half the limit

    def at(stamp):
        return (0.5 * curve * (stamp - s0) ** 2, 0.0, 0.0)
    for _ in range(40):
        n.tick()
        n.command(at(n.t), stamp=n.t)
    n.t += 14e-6
    last = n.t
    n.command(at(last), stamp=last)   # slot taken: it waits for the tick
    n.tick()
    n.tick()
    assert n.sup.clips['acceleration'][0] == 0, n.sup.status(n.t)['stage']['last_fault']
    assert n.sup.stage.scale == 1.0
    # ... while a true change of rate within one period is still clipped.
    n.command((n.sup.previous_target[0] + 0.012, 0.0, 0.0), stamp=last + 0.002)  # 4 -> 6 rad/s
    n.tick()
    assert n.sup.clips['acceleration'][0] == 1


# -- coverage and naming: every joint on every tick ----------------------------------------------
FAST = dict(max_target_rate=[10.0] * 3, max_target_accel=[])


def test_a_command_naming_a_subset_is_rejected_whole_and_counted():
    n = Node(**FAST)
    start(n, (0.0, 0.0, 0.05))
    ok, why = n.command((0.02, 0.02), names=['a', 'b'])
    assert not ok and "missing ['c']" in why
    assert n.sup.status(n.t)['commands']['policy']['incomplete'] == 1
    out = n.tick()
    assert out.names == NAMES and out.position.tolist() == pytest.approx([0.0, 0.0, 0.05])


def test_a_joint_that_leaves_and_comes_back_meets_the_reset_checks():
    n = Node(reject_trip_count=100, **FAST)
    start(n)
    for k in range(60):          # 120 ms of commands naming a and b only; c sags meanwhile
        if k % 5 == 0:
            n.command((0.0, 0.0), names=['a', 'b'])
        out = n.tick(q=(0.0, 0.0, -0.005 * k))
        assert out.names == NAMES
    assert not n.forwarding()    # the full command went stale: safe
    n.command((0.0, 0.0, 0.0))   # back with c at its old target, 0.3 rad from the state
    out = n.tick()
    assert out.safe and 'reset_tolerance' in n.sup.safe_reason


def test_hardware_command_names_every_joint_in_the_supervisor_order():
    n = Node(**FAST)
    start(n)
    n.command((0.0, 0.02, 0.01), names=['c', 'a', 'b'])
    out = n.tick()
    assert out.names == NAMES
    assert out.position.tolist() == pytest.approx([0.02, 0.01, 0.0])


# -- order and timing --------------------------------------------------------------------------
def test_a_command_stamped_before_the_latest_one_is_never_used():
    n = Node(**FAST)
    start(n)
    n.command((0.005, 0.0, 0.0))
    n.tick()
    ok, why = n.command((-0.005, 0.0, 0.0), stamp=n.t - 0.005)
    assert not ok and 'out of order' in why
    assert n.sup.status(n.t)['commands']['policy']['out_of_order'] == 1
    out = n.tick()
    assert out.position[0] == pytest.approx(0.005)


def test_a_command_stamped_in_the_past_within_the_timeout_is_forwarded_unclipped():
    n = Node(**RAMP)
    n.latency = 0.04             # 40 ms old, timeout 60
    start(n)
    n.sup.stage.index = 1
    pos = 0.0
    for k in range(100):
        if k % 5 == 0:
            pos += 0.008
            n.command((pos, 0.0, 0.0))
        n.tick()
    assert n.forwarding() and n.sup.clips['rate'][0] == 0


def test_a_command_stamped_beyond_the_timeout_in_the_future_is_never_used():
    n = Node(**FAST)
    start(n)
    ok, why = n.command((0.01, 0.0, 0.0), stamp=n.t + 1.0)
    assert not ok and 'ahead' in why
    assert n.sup.status(n.t)['commands']['policy']['from_future'] == 1
    assert n.tick().position[0] == 0.0
    # ... nor the stamp the next commands are ordered against: one within the timeout passes.
    assert n.command((0.01, 0.0, 0.0), stamp=n.t + 0.02)[0]
    assert n.tick().position[0] == pytest.approx(0.01)


# -- measured state in order (issue 42) ----------------------------------------------------------
def _js(n, q, stamp):
    return n.sup.on_joint_state(NAMES, q, (0.0, 0.0, 0.0), stamp, n.t)


def test_a_joint_state_stamped_before_the_one_in_use_is_never_used():
    # A driver whose every fifth sample goes back 30 ms (a reordering network, two threads),
    # carrying another position: never used, counted, named; the robot keeps its targets.
    n = Node(**FAST)
    start(n)
    since = n.t
    for k in range(1, 101):
        n.t += PERIOD
        if k % 5 == 0:
            ok, why = _js(n, (0.1, 0.0, 0.0), n.t - 0.03)
            assert not ok and 'before the one in use' in why
        else:
            assert _js(n, (0.0, 0.0, 0.0), n.t)[0]
        assert n.sup.q[0] == 0.0          # never the older sample's 0.1 rad
        n.command((0.0, 0.0, 0.0))
        out = n.sup.tick_output(n.t)
        if out is not None:
            n.sent.append((n.t, out, 'tick'))
    s = n.sup.status(n.t)
    assert s['inputs']['joint_states']['out_of_order'] == 20 == s['state_out_of_order']
    assert s['state_rejected'] == 20 and s['implausible_states'] == 0
    assert 'joint_states stamped 28.0 ms before the one in use' in s['last_state_disorder']
    outs = [o for t, o, _ in n.sent if t > since]
    assert not n.sup.latched and n.forwarding() and len(outs) >= 100
    assert all(not o.safe and o.position[0] == 0.0 for o in outs)   # the targets kept
    assert n.sup.state_stamp == pytest.approx(n.t - PERIOD)   # the newest in-order sample


def test_persistent_joint_state_disorder_is_a_sensor_fault_named():
    n = Node(**FAST)
    start(n)
    for k in range(4):                   # 4 in a row (state_disorder_trip_count 5): counted
        assert not _js(n, (0.0, 0.0, 0.0), n.t - 0.01 - k * PERIOD)[0]
    assert not n.sup.latched
    assert _js(n, (0.0, 0.0, 0.0), n.t)[0]    # one in order between: not in a row
    for k in range(5):
        assert not _js(n, (0.0, 0.0, 0.0), n.t - 0.01)[0]
    assert n.sup.latched and 'sensor fault: 5 joint_states in a row out of order' in n.sup.cause
    assert n.sup.status(n.t)['inputs']['joint_states']['out_of_order'] == 9


def test_state_disorder_trip_count_is_a_parameter():
    n = Node(state_disorder_trip_count=2, **FAST)
    start(n)
    assert not _js(n, (0.0, 0.0, 0.0), n.t - 0.01)[0] and not n.sup.latched
    assert not _js(n, (0.0, 0.0, 0.0), n.t - 0.01)[0] and n.sup.latched
    with pytest.raises(ValueError, match='state_disorder_trip_count'):
        config(state_disorder_trip_count=0)


def test_after_a_simulator_restart_the_order_starts_again_and_a_reset_recovers():
    # /clock and the driver's stamps go back 5 s together (a restarted simulator): the
    # supervisor e-stops (its clock went back); the new stamps are all before the one in use,
    # and after state_disorder_trip_count of them the order starts from the next fresh one,
    # so an operator's reset is possible at once (without it: refused for 5 s, joint_states
    # stale).
    n = Node(**FAST)
    start(n)
    n.t -= 5.0
    n.sup.tick(n.t)
    assert n.sup.latched and 'clock went back' in n.sup.cause
    for _ in range(6):
        n.t += PERIOD
        _js(n, (0.0, 0.0, 0.0), n.t)
    assert n.sup.state_stamp == pytest.approx(n.t)
    n.command((0.0, 0.0, 0.0))
    n.sup.tick(n.t)
    ok, why = n.sup.reset(n.t)
    assert ok, why


def test_a_fresh_sample_is_needed_to_start_the_order_again():
    n = Node(**FAST)
    start(n)
    for _ in range(5):
        _js(n, (0.0, 0.0, 0.0), n.t - 0.01)
    assert n.sup.latched
    ok, why = _js(n, (0.0, 0.0, 0.0), n.t - 0.2)   # older than joint_states_timeout_s
    assert not ok and 'after the disorder' in why and 'waiting for a fresh one' in why
    assert _js(n, (0.0, 0.0, 0.0), n.t - 0.01)[0]


def test_a_joint_state_from_the_future_is_never_used_nor_ordered_against():
    n = Node(**FAST)
    start(n)
    ok, why = _js(n, (0.1, 0.0, 0.0), n.t + 1.0)
    assert not ok and 'ahead of this clock' in why and n.sup.q[0] == 0.0
    assert n.sup.status(n.t)['inputs']['joint_states']['from_future'] == 1
    n.t += PERIOD
    assert _js(n, (0.0, 0.0, 0.0), n.t)[0]      # the next honest sample is in order
    assert _js(n, (0.0, 0.0, 0.0), n.t + 0.02)[0]   # ahead within the timeout: used


def test_a_joint_state_with_the_stamp_in_use_is_checked_and_counted():
    # A duplicate (or a coarse clock) is not older: used when plausible, counted; a different
    # reading under the same stamp may differ by one period's motion only.
    n = Node(**FAST)
    start(n)
    assert _js(n, (0.0, 0.0, 0.0), n.t)[0]
    assert n.sup.status(n.t)['inputs']['joint_states']['same_stamp'] == 1
    ok, why = _js(n, (0.05, 0.0, 0.0), n.t)       # 6 rad/s x 2 ms = 0.012 rad at most
    assert not ok and 'jumped' in why


def test_an_imu_sample_stamped_before_the_one_in_use_is_never_used():
    n = Node(use_imu=True, max_tilt_rad=0.5, **FAST)
    upright, tilted = (1.0, 0.0, 0.0, 0.0), (0.7071068, 0.7071068, 0.0, 0.0)
    assert n.sup.on_imu(upright, n.t, n.t)[0]
    n.t += PERIOD
    ok, why = n.sup.on_imu(tilted, n.t - 0.03, n.t)
    assert not ok and 'imu stamped' in why and n.sup.tilt == 0.0
    assert n.sup.status(n.t)['inputs']['imu']['out_of_order'] == 1
    # Each input is ordered against itself: an imu sample older than the joint state in use
    # (another sensor, maybe another clock) is used when it is newer than the last imu one.
    assert n.sup.on_joint_state(NAMES, (0.0,) * 3, (0.0,) * 3, n.t, n.t)[0]
    assert n.sup.on_imu(upright, n.t - 0.001, n.t)[0]
    for _ in range(5):
        n.sup.on_imu(upright, n.t - 0.02, n.t)
    assert n.sup.latched and 'sensor fault: 5 imu in a row' in n.sup.cause


# -- start-up -------------------------------------------------------------------------------------
def test_a_supervisor_started_before_its_policy_keeps_a_resumed_stage(tmp_path):
    record = str(tmp_path / 'stage.json')
    n = Node(stage_file=record)
    start(n)
    for _ in range(150):                 # a clean dwell of 0.3 s, then promotion
        n.command((0.0, 0.0, 0.0))
        n.tick()
    assert n.sup.advance_stage(n.t)[0] and n.sup.stage.scale == 1.0
    _write_record(n.sup)
    again = Node(sup=Supervisor(config(stage_file=record, resume_stage=True), n.t), t=n.t)
    assert again.sup.stage.scale == 1.0
    again.state()
    for _ in range(100):                 # joint_states for 0.2 s, no policy yet
        again.tick()
    assert again.sup.stage.scale == 1.0, again.sup.stage.to_dict()['transitions']
    start(again)                         # the policy comes, then goes silent: that demotes
    for _ in range(60):
        again.tick()
    assert again.sup.stage.scale == 0.5


def _write_record(sup):
    """Write the stage record now (the node's RecordWriter thread does it)."""
    from simreal_ros.core.safety.stages import RecordWriter
    import threading
    w = RecordWriter(sup.stage.pending, sup.stage.written, threading.Lock())
    assert w.flush()
    w.stop()


def test_a_clipped_target_moves_on_at_the_rate_while_its_command_is_held():
    # A step beyond the rate: the target reaches it over the following ticks, at the rate
    # (the source's clock runs on in real time for a command held), and no faster.
    n = Node(**RAMP)
    start(n)
    n.sup.stage.index = 1
    path = []
    for k in range(40):
        if k % 5 == 0:
            n.command((0.05, 0.0, 0.0))     # the same step, republished at 100 Hz
        path.append(n.tick().position[0])
    assert path[0] < 0.05 and path[-1] == pytest.approx(0.05)
    steps = np.diff([0.0] + path)
    assert steps.max() <= 1.0 * 0.06 + 1e-9           # the first: one timeout's credit
    assert np.all(steps[1:] <= 1.0 * PERIOD * 1.5 + 1e-9)

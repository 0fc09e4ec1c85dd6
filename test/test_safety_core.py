"""Unit tests of the safety supervisor core: each rule has a test that fails without it."""
import json
import math

import numpy as np
import pytest

from simreal_ros.core.config import ConfigError
from simreal_ros.core.safety import (DEFAULT_STAGES, Limits, Rejected, StageMachine, Supervisor,
                                     SupervisorConfig, Watchdog, filter_command, implied_torque,
                                     tilt_of, validate_command)

NAMES = ['a', 'b']


def limits(**over):
    data = dict(kp=[100.0, 100.0], kd=[2.0, 2.0], position_lower=[-1.0, -1.0],
                position_upper=[1.0, 1.0], velocity_limit=[2.0, 2.0], torque_limit=[20.0, 20.0],
                max_target_rate=[10.0, 10.0])
    data.update(over)
    return Limits.from_mapping(NAMES, data)


def run(lim, names=NAMES, pos=(), vel=(), eff=(), q=(0.0, 0.0), dq=(0.0, 0.0), prev=None,
        dt=1.0, scale=1.0):
    cmd = validate_command(names, pos, vel, eff, lim.names)
    prev = np.full(2, np.nan) if prev is None else np.asarray(prev, float)
    return filter_command(lim, scale, cmd, np.asarray(q, float), np.asarray(dq, float), prev,
                          dt)


# -- validation: whole command rejected with a reason ---------------------------------------
@pytest.mark.parametrize('names,pos,vel,eff,why', [
    (['a', 'b'], [0.1, math.nan], [], [], 'non-finite'),
    (['a', 'b'], [0.1, math.inf], [], [], 'non-finite'),
    (['a', 'b'], [], [], [1.0, -math.inf], 'non-finite'),
    (['a', 'b'], [0.1], [], [], '1 values for 2 names'),
    (['a', 'x'], [0.1, 0.2], [], [], 'unknown joint'),
    (['a', 'a'], [0.1, 0.2], [], [], 'duplicate'),
    ([], [], [], [], 'no joints'),
    (['a'], [], [], [], 'no position, velocity or effort'),
])
def test_malformed_command_is_rejected_whole_with_reason(names, pos, vel, eff, why):
    with pytest.raises(Rejected, match=why):
        validate_command(names, pos, vel, eff, NAMES)


def test_shuffled_subset_maps_by_name():
    cmd = validate_command(['b'], [0.3], [], [], NAMES)
    assert cmd.index.tolist() == [1]


# -- limit filter rules -----------------------------------------------------------------------
def test_command_within_limits_is_unchanged_at_stage_one():
    out, clips = run(limits(), pos=[0.05, -0.05], prev=[0.0, 0.0], dt=0.01)
    assert out.position.tolist() == [0.05, -0.05]
    assert not any(m.any() for m in clips.values())


def test_position_soft_limit():
    out, clips = run(limits(torque_limit=[1e4, 1e4]), pos=[5.0, 0.0], q=(0.9, 0.0))
    assert out.position[0] == pytest.approx(1.0)
    assert clips['position'].tolist() == [True, False]


def test_rate_limit_on_target_change_scaled_by_stage():
    lim = limits(torque_limit=[1e4, 1e4])
    out, clips = run(lim, pos=[0.5, 0.0], prev=[0.0, 0.0], dt=0.002)
    assert out.position[0] == pytest.approx(10.0 * 0.002)
    assert clips['rate'].tolist() == [True, False]
    out, _ = run(lim, pos=[0.5, 0.0], prev=[0.0, 0.0], dt=0.002, scale=0.1)
    assert out.position[0] == pytest.approx(10.0 * 0.1 * 0.002)


def test_rate_limit_starts_from_measured_position_without_previous_target():
    out, _ = run(limits(torque_limit=[1e4, 1e4]), pos=[0.5, 0.0], q=(0.2, 0.0), dt=0.01)
    assert out.position[0] == pytest.approx(0.2 + 10.0 * 0.01)


def test_torque_implied_by_pd_target_is_limited_by_moving_the_target():
    lim = limits()
    out, clips = run(lim, pos=[0.5, 0.0], q=(0.0, 0.0), dq=(-2.0, 0.0), dt=1.0)
    # kp*(q_t - q) - kd*dq = 100*q_t + 4 <= 20  ->  q_t = 0.16
    assert out.position[0] == pytest.approx(0.16)
    assert implied_torque(lim, out, np.zeros(2), np.array([-2.0, 0.0]))[0] == pytest.approx(20)
    assert clips['torque'].tolist() == [True, False]


def test_torque_limit_scaled_by_stage():
    out, _ = run(limits(), pos=[0.5, 0.0], dt=1.0, scale=0.25)
    assert out.position[0] == pytest.approx(20.0 * 0.25 / 100.0)


def test_velocity_target_and_effort_are_clipped():
    out, clips = run(limits(), vel=[5.0, -5.0], eff=[0.0, 0.0], scale=0.5)
    assert out.velocity.tolist() == [1.0, -1.0]
    assert clips['velocity'].all()
    out, clips = run(limits(), eff=[50.0, -3.0])
    assert out.effort.tolist() == [20.0, -3.0]
    assert clips['torque'].tolist() == [True, False]


def test_damping_torque_of_velocity_target_is_limited():
    lim = limits(kd=[10.0, 10.0])
    out, _ = run(lim, vel=[2.0, 0.0], dq=(-1.0, 0.0))
    # kd*(v - dq) = 10*(v + 1) <= 20  ->  v = 1
    assert out.velocity[0] == pytest.approx(1.0)


def test_joint_faster_than_velocity_limit_may_only_brake():
    lim = limits()
    out, clips = run(lim, pos=[0.1, 0.0], q=(0.0, 0.0), dq=(3.0, 0.0), dt=1.0)
    tau = implied_torque(lim, out, np.zeros(2), np.array([3.0, 0.0]))
    assert tau[0] <= 1e-9
    assert clips['velocity'][0]


def test_filter_never_forwards_non_finite():
    lim = limits()
    cmd = validate_command(NAMES, [0.1, 0.1], [], [], NAMES)
    with pytest.raises(Rejected):
        filter_command(lim, 1.0, cmd, np.array([0.0, np.nan]), np.zeros(2), np.full(2, np.nan),
                       0.01)


@pytest.mark.parametrize('key,value', [('kp', [-1.0, 1.0]), ('torque_limit', [0.0, 1.0]),
                                       ('position_lower', [2.0, 0.0]),
                                       ('velocity_limit', [1.0])])
def test_bad_limits_are_config_errors(key, value):
    if value == [1.0]:
        value = [1.0, 2.0, 3.0]
    with pytest.raises(ConfigError, match=key):
        limits(**{key: value})


# -- stage machine ------------------------------------------------------------------------------
def clean(sm, t0, t1, dt=0.01):
    """Report clean forwarding ticks from t0 to t1 (inclusive), as the supervisor does."""
    for t in np.arange(t0, t1 + dt / 2, dt):
        sm.accrue(float(t), True)


def test_promotion_needs_clean_dwell_and_goes_one_stage(tmp_path):
    sm = StageMachine(dwell_s=[1.0], now=0.0, record_path=tmp_path / 's.json')
    clean(sm, 0.0, 0.5)
    ok, why = sm.request_advance(0.5)
    assert not ok and 'needs 1.00 s' in why
    clean(sm, 0.5, 1.0)
    ok, _ = sm.request_advance(1.0)
    assert ok and sm.scale == 0.25
    clean(sm, 1.0, 1.5)
    ok, _ = sm.request_advance(1.5)  # dwell restarts at each stage: no skipping
    assert not ok and sm.scale == 0.25


def test_dwell_accrues_only_on_clean_ticks():
    """Idle time earns nothing: the hole that let a stage be earned without the policy."""
    sm = StageMachine(dwell_s=[1.0], now=0.0)
    ok, why = sm.request_advance(10.0)       # ten seconds of nothing forwarded
    assert not ok and 'clean for 0.00 s' in why
    clean(sm, 10.0, 10.6)
    sm.accrue(10.61, False)                  # one unclean tick breaks the run ...
    clean(sm, 20.0, 20.3)                    # ... and the gap is not counted
    assert sm.clean_for() == pytest.approx(0.9, abs=1e-6)
    ok, why = sm.request_advance(20.3, not_clean='policy stale')
    assert not ok and 'policy stale' in why  # refused with the reason, whatever the dwell
    clean(sm, 20.3, 20.4)
    assert sm.request_advance(20.4)[0]


def test_fault_demotes_and_restarts_clean_timer_with_holdoff():
    sm = StageMachine(dwell_s=[0.0], now=0.0, holdoff_s=0.5)
    for t in (0.0, 0.0, 0.0):
        sm.request_advance(t)
    assert sm.scale == 0.75
    assert sm.fault('limit', 1.0) is not None and sm.scale == 0.5
    assert sm.fault('limit', 1.2) is None and sm.scale == 0.5  # within holdoff
    assert sm.fault('limit', 1.6) is not None and sm.scale == 0.25
    sm2 = StageMachine(dwell_s=[2.0], now=0.0)
    clean(sm2, 0.0, 2.0)
    sm2.request_advance(2.0)
    clean(sm2, 2.0, 2.9)
    sm2.fault('limit', 3.0)
    clean(sm2, 3.0, 4.0)
    assert sm2.clean_for() == pytest.approx(1.0)


def test_demotion_kinds_are_configurable():
    sm = StageMachine(dwell_s=[0.0], now=0.0, demote_on=('limit',))
    sm.request_advance(0.0)
    clean(sm, 0.0, 0.9)
    assert sm.fault('watchdog', 1.0) is None and sm.scale == 0.25
    assert sm.clean_for() == 0.0  # still not clean


def test_auto_advance_after_clean_dwell():
    sm = StageMachine(dwell_s=[1.0], now=0.0, auto_advance=True)
    assert sm.update(5.0) is None            # time alone is not clean dwell
    clean(sm, 5.0, 5.9)
    assert sm.update(5.9) is None
    clean(sm, 5.9, 6.05)
    assert sm.update(6.05)['to'] == 0.25


def test_record_file_keeps_highest_and_transitions_and_resumes(tmp_path):
    path = tmp_path / 'stages.json'
    sm = StageMachine(dwell_s=[0.0], now=0.0, record_path=path)
    sm.request_advance(0.0)
    sm.request_advance(0.0)
    sm.fault('limit', 1.0, 'torque clipped for a')
    rec = json.loads(path.read_text())
    assert rec['highest'] == 0.5 and rec['stage'] == 0.25
    assert rec['stages'] == list(DEFAULT_STAGES)
    assert [t['to'] for t in rec['transitions']][-3:] == [0.25, 0.5, 0.25]
    assert 'torque clipped' in rec['transitions'][-1]['cause']
    resumed = StageMachine(dwell_s=[0.0], now=5.0, record_path=path, resume=True)
    assert resumed.scale == 0.25 and not resumed.warnings
    fresh = StageMachine(dwell_s=[0.0], now=6.0, record_path=path)
    assert fresh.scale == 0.10 and fresh.scales[fresh.highest] == 0.5
    assert json.loads(path.read_text())['transitions'][-1]['cause'] == 'start'


def test_resume_with_another_stage_list_starts_at_the_first_stage(tmp_path):
    path = tmp_path / 'stages.json'
    sm = StageMachine(dwell_s=[0.0], now=0.0, record_path=path)
    for _ in range(3):
        sm.request_advance(0.0)
    assert json.loads(path.read_text())['stage'] == 0.75
    other = StageMachine(scales=[0.2, 0.75, 1.0], dwell_s=[0.0], now=1.0, record_path=path,
                         resume=True)
    assert other.index == 0 and other.highest == 0
    assert other.warnings and 'earned with stages' in other.warnings[0]


def test_record_is_written_off_the_control_path_and_a_failed_write_is_counted(tmp_path):
    import threading
    from simreal_ros.core.safety.stages import RecordWriter
    blocked = tmp_path / 'ro'
    blocked.write_text('a file where the record folder should be')
    sm = StageMachine(dwell_s=[0.0], now=0.0, record_path=blocked / 'stages.json',
                      write_through=False)
    sm.request_advance(0.0)                  # no I/O here: only marked pending
    assert sm.scale == 0.25 and sm.pending() is not None
    lock = threading.Lock()
    writer = RecordWriter(sm.pending, sm.written, lock, retry_s=0.05)
    try:
        assert not writer.flush()
        assert writer.failures >= 1 and 'not written' in writer.error
        assert sm.scale == 0.25 and sm.pending() is not None   # memory holds; retried later
        sm.record_path = tmp_path / 'ok' / 'stages.json'
        assert writer.flush() and writer.error == '' and sm.pending() is None
        assert json.loads(sm.record_path.read_text())['stage'] == 0.25
        assert not list(sm.record_path.parent.glob('*.tmp'))
    finally:
        writer.stop()


def test_bad_stages_are_config_errors():
    with pytest.raises(ConfigError, match='increase'):
        StageMachine(scales=[0.5, 0.25])
    with pytest.raises(ConfigError, match='stage_dwell_s'):
        StageMachine(scales=[0.5, 1.0], dwell_s=[1.0, 2.0, 3.0])


# -- watchdogs ------------------------------------------------------------------------------------
def test_watchdog_by_arrival_and_by_stamp():
    w = Watchdog('policy', 0.05)
    assert 'no policy' in w.stale(0.0)
    w.feed(10.0, 10.0)
    assert w.stale(10.04) is None
    assert 'arrived' in w.stale(10.06)
    w.feed(9.9, 10.1)  # arrived now but stamped 200 ms ago
    assert 'stamp' in w.stale(10.1)
    w.feed(0.0, 10.2)
    assert 'zero' in w.stale(10.2)
    assert Watchdog('x', 0.05, check_stamp=False).stale(0.0)
    sim = Watchdog('policy', 0.05)   # on /clock, a simulation's first instant is t = 0
    sim.feed(0.0, 0.0)
    assert sim.stale(0.01) is None
    assert 'arrived' in sim.stale(0.06)


def test_supervision_starts_at_simulated_time_zero():
    sup = Supervisor(config(), 0.0)
    assert sup.on_joint_state(NAMES, (0.0, 0.0), (0.0, 0.0), 0.0, 0.0)[0]
    assert sup.on_command('policy', NAMES, (0.0, 0.0), (), (), 0.0, 0.0)[0]
    out = sup.tick(0.0)
    assert out is not None and not out.safe


# -- supervisor ----------------------------------------------------------------------
def config(**over):
    p = dict(joint_names=NAMES, kp=[100.0, 100.0], kd=[2.0, 2.0], position_lower=[-1.0, -1.0],
             position_upper=[1.0, 1.0], velocity_limit=[2.0, 2.0], torque_limit=[20.0, 20.0],
             max_target_rate=[10.0, 10.0], trip_velocity=[5.0, 5.0], stages=[0.5, 1.0],
             stage_dwell_s=[1.0], policy_timeout_s=0.06, joint_states_timeout_s=0.05)
    p.update(over)
    return SupervisorConfig.from_params(p)


class Rig:
    """A supervisor fed like the node feeds it, with one clock."""

    def __init__(self, **over):
        self.t = 1.0
        self.sup = Supervisor(config(**over), self.t)

    def state(self, q=(0.0, 0.0), dq=(0.0, 0.0)):
        return self.sup.on_joint_state(NAMES, q, dq, self.t, self.t)

    def cmd(self, pos=(0.0, 0.0), source='policy', names=NAMES, vel=(), eff=()):
        return self.sup.on_command(source, names, pos, vel, eff, self.t, self.t)

    def step(self, dt=0.002, q=(0.0, 0.0), dq=(0.0, 0.0), pos=(0.0, 0.0), feed=True):
        self.t += dt
        if feed:
            self.state(q, dq)
            if pos is not None:
                self.cmd(pos)
        return self.sup.tick(self.t)


def is_damping(out):
    return out.safe and out.position is None and list(out.velocity) == [0.0, 0.0]


def test_nothing_is_published_before_joint_states():
    r = Rig()
    r.cmd()
    assert r.sup.tick(r.t + 0.001) is None
    assert r.sup.status(r.t + 0.001)['output'] == 'waiting'
    r.state()
    assert r.sup.tick(r.t + 0.002) is not None


def test_supervision_starts_only_with_a_fresh_joint_state():
    r = Rig()
    r.cmd()
    ok, why = r.sup.on_joint_state(NAMES, (0.0, 0.0), (0.0, 0.0), r.t - 0.2, r.t)
    assert not ok and 'start-up' in why
    assert r.sup.tick(r.t) is None and not r.sup.latched
    assert r.state()[0] and r.sup.tick(r.t) is not None


def test_forwarded_output_keeps_the_command_stamp():
    r = Rig()
    r.state()
    r.sup.on_command('policy', NAMES, (0.0, 0.0), (), (), r.t - 0.01, r.t)
    assert r.sup.tick(r.t).stamp == pytest.approx(r.t - 0.01)


def test_rate_limit_allows_the_time_since_the_target_last_moved():
    # 500 Hz ticks, a 100 Hz staircase at 0.8 x the 10 rad/s rate: unchanged, no clips.
    r = Rig(stages=[1.0], torque_limit=[1e4, 1e4])
    for _ in range(5):   # the target stands at 0 for 10 ms
        r.step()
    target = 0.0
    for k in range(20):
        if k % 5 == 0:
            target += 0.8 * 10.0 * 0.01
        out = r.step(pos=(target, 0.0))
        assert out.position[0] == pytest.approx(target)
    assert r.sup.status(r.t)['clips']['rate'] == {}
    # Twice the rate: slewed at 10 rad/s over the following ticks, each clip counted.
    start = target
    target += 2 * 10.0 * 0.01
    out = r.step(pos=(target, 0.0))
    assert out.position[0] == pytest.approx(start + 10.0 * 0.01)
    out = r.step(pos=(target, 0.0))
    assert out.position[0] == pytest.approx(start + 10.0 * 0.012)
    assert r.sup.status(r.t)['clips']['rate'] == {'a': 2}
    # The latest fault says what was asked and over what time: the target still 0.08 rad
    # short of its command gets one tick (2 ms) more, after a step at the 10 rad/s limit.
    cause = r.sup.status(r.t)['stage']['last_fault']['cause']
    assert 'rate clipped for a (asked 50 rad/s over 2 ms, previous 10 rad/s; limits 10' in cause
    # Credit is capped by the source's timeout (60 ms), however long the target stood still.
    for _ in range(200):
        out = r.step(pos=(target, 0.0))
    out = r.step(pos=(target - 5.0, 0.0))
    assert out.position[0] == pytest.approx(target - 10.0 * 0.06)


def test_forwarding_and_clip_counting_per_joint_and_kind():
    r = Rig()
    out = r.step(pos=(0.0, 0.0))
    assert not out.safe and out.names == NAMES
    r.step(pos=(0.9, 0.0))
    s = r.sup.status(r.t)
    assert s['clips']['rate'] == {'a': 1} or s['clips']['torque'] == {'a': 1}
    assert s['clipped_outputs'] == 1


def test_estop_output_is_safe_in_the_same_call_and_latched():
    r = Rig()
    r.step()
    out = r.sup.estop('operator', r.t)
    assert is_damping(out)
    for _ in range(5):
        assert is_damping(r.step())
    assert r.sup.status(r.t)['estop_cause'] == 'operator'


@pytest.mark.parametrize('mode', ['hold', 'zero_torque'])
def test_other_safe_modes(mode):
    r = Rig(safe_mode=mode)
    r.step(q=(0.3, -0.2))
    out = r.sup.estop('operator', r.t)
    if mode == 'hold':
        assert out.position.tolist() == [0.3, -0.2] and out.velocity.tolist() == [0.0, 0.0]
    else:
        assert out.position is None and out.velocity is None
        assert out.effort.tolist() == [0.0, 0.0]


def test_stale_policy_gives_safe_mode_not_latched_then_resumes():
    r = Rig()
    r.step()
    r.t += 0.02
    r.state()
    assert not r.sup.tick(r.t).safe
    r.t += 0.05  # policy now 70 ms old, joint_states fresh
    r.state()
    out = r.sup.tick(r.t)
    assert is_damping(out) and 'policy stale' in out.reason
    assert not r.sup.latched
    assert not r.step().safe  # fresh command: forwarding again


def test_stale_joint_states_trip_the_estop():
    r = Rig()
    r.step()
    r.t += 0.06
    r.cmd()
    out = r.sup.tick(r.t)
    assert is_damping(out) and r.sup.latched and 'joint_states stale' in r.sup.cause


def test_velocity_trip():
    r = Rig()
    out = r.step(dq=(6.0, 0.0))
    assert is_damping(out) and 'trip_velocity' in r.sup.cause


def test_tilt_trip_and_stale_imu():
    r = Rig(use_imu=True, max_tilt_rad=0.5, imu_timeout_s=0.05)
    r.sup.on_imu((1.0, 0.0, 0.0, 0.0), r.t, r.t)
    assert not r.step().safe
    half = 0.6 / 2
    r.sup.on_imu((math.cos(half), math.sin(half), 0.0, 0.0), r.t, r.t)
    assert is_damping(r.step()) and 'tilt' in r.sup.cause
    assert tilt_of((math.cos(half), 0.0, math.sin(half), 0.0)) == pytest.approx(0.6)
    r3 = Rig(use_imu=True, max_tilt_rad=0.5)
    assert r3.step() is None and not r3.sup.latched  # no imu yet: waiting, not tripping
    assert 'imu' in r3.sup.status(r3.t)['safe_reason']
    r2 = Rig(use_imu=True, max_tilt_rad=0.5, imu_timeout_s=0.05)
    r2.sup.on_imu((1.0, 0.0, 0.0, 0.0), r2.t, r2.t)
    r2.step(dt=0.06)
    assert r2.sup.latched and 'imu stale' in r2.sup.cause


def test_repeated_rejects_trip_and_rejects_are_never_forwarded():
    r = Rig(reject_trip_count=3)
    r.step(pos=(0.1, 0.0))
    for _ in range(2):
        ok, why = r.cmd(pos=(math.nan, 0.0))
        assert not ok and 'non-finite' in why
        out = r.step(pos=None)
        assert np.all(np.isfinite(out.position))
    assert not r.sup.latched
    r.cmd(pos=(math.nan, 0.0))
    assert r.sup.latched and 'rejected' in r.sup.cause
    assert r.sup.status(r.t)['rejected']['policy'] == 3


def test_reset_refused_with_reasons_then_accepted():
    r = Rig()
    r.step()
    r.sup.estop('operator', r.t)
    r.t += 0.1
    ok, why = r.sup.reset(r.t)
    assert not ok and 'joint_states' in why
    r.state(q=(0.0, 0.0), dq=(0.8, 0.0))
    ok, why = r.sup.reset(r.t)
    assert not ok and 'reset_velocity_tolerance' in why   # velocities, not only positions
    r.state(q=(0.0, 0.0))
    r.cmd(pos=(0.5, 0.0))
    ok, why = r.sup.reset(r.t)
    assert not ok and '0.500 rad' in why and 'reset_tolerance' in why
    r.cmd(pos=(0.05, 0.0))
    ok, why = r.sup.reset(r.t)
    assert ok, why
    assert not r.step(pos=(0.05, 0.0)).safe


def test_mode_switch_only_in_safe_state_and_sysid_limits_are_tighter():
    r = Rig(**{'sysid.limit_scale': 0.5, 'max_target_rate': [1e3, 1e3]})
    r.step()
    ok, why = r.sup.select_mode('sysid', r.t)
    assert not ok and 'estop' in why
    r.sup.estop('switch', r.t)
    assert r.sup.select_mode('sysid', r.t)[0]
    r.t += 0.002
    r.state()
    r.cmd(pos=(0.9, 0.0), source='sysid')  # far: reset refused
    assert not r.sup.reset(r.t)[0]
    r.cmd(pos=(0.0, 0.0), source='sysid')
    assert r.sup.reset(r.t)[0]
    r.t += 0.002
    r.state()
    r.cmd(pos=(0.9, 0.0), source='policy')  # the policy is not forwarded any more
    r.cmd(pos=(0.9, 0.0), source='sysid')
    out = r.sup.tick(r.t)
    # sysid scale 0.5, not scaled by the policy's stage 0.5: torque 20*0.5 = 10 N*m -> 0.1
    assert out.position[0] == pytest.approx(0.1)


def sysid_rig(promote=0, **over):
    """A Rig forwarding sysid (estop, select, reset), after `promote` policy promotions."""
    r = Rig(**{'sysid.limit_scale': 0.5, 'max_target_rate': [1e3, 1e3], **over})
    r.step()
    for _ in range(promote):
        assert r.sup.advance_stage(r.t)[0]
    r.sup.estop('switch', r.t)
    assert r.sup.select_mode('sysid', r.t)[0]
    r.t += 0.002
    r.state()
    r.cmd(pos=(0.0, 0.0), source='sysid')
    assert r.sup.reset(r.t)[0]
    return r


def test_stage_scales_the_policy_but_not_the_sysid_limits():
    r = sysid_rig(stages=[0.1, 1.0])
    assert r.sup.stage.scale == 0.1
    r.t += 0.002
    r.state()
    r.cmd(pos=(0.9, 0.0), source='sysid')
    out = r.sup.tick(r.t)
    assert out.position[0] == pytest.approx(0.1)   # sysid torque 20*0.5 = 10 N*m at any stage
    p = Rig(stages=[0.1, 1.0], max_target_rate=[1e3, 1e3])
    p.step()
    out = p.step(pos=(0.9, 0.0))
    assert out.position[0] == pytest.approx(0.02)  # policy torque 20*0.1 = 2 N*m at stage 0.1


def test_sysid_faults_are_counted_but_do_not_demote_the_policy_stage():
    r = sysid_rig(promote=1, stages=[0.25, 0.5, 1.0], stage_dwell_s=[0.0])
    assert r.sup.stage.scale == 0.5
    assert 'SysID' in r.sup.advance_stage(r.t)[1]   # no stage is earned in SysID mode
    r.t += 0.002
    r.state()
    r.cmd(pos=(0.9, 0.0), source='sysid')          # clipped
    r.sup.tick(r.t)
    r.t += 1.0
    r.cmd(pos=(math.nan, 0.0), source='sysid')     # rejected
    r.state()
    assert r.sup.tick(r.t).safe                    # sysid stale
    s = r.sup.status(r.t)
    assert s['clipped_outputs'] == 1 and s['rejected']['sysid'] == 1
    assert s['inputs']['sysid']['watchdog_trips'] == 1
    assert r.sup.stage.scale == 0.5
    r.step(dq=(6.0, 0.0), pos=None)                # an automatic trip demotes in any mode
    assert r.sup.latched and r.sup.stage.scale == 0.25


def test_operator_estop_demotes_only_when_configured():
    for demote_on, expected in ((['limit', 'watchdog', 'estop', 'rejected'], 1.0),
                                (['operator'], 0.5)):
        r = Rig(stages=[0.5, 1.0], stage_dwell_s=[0.0], demote_on=demote_on)
        r.step()
        assert r.sup.advance_stage(r.t)[0]
        r.sup.estop('operator', r.t)
        assert r.sup.stage.scale == expected, demote_on


def test_stage_demotion_on_limit_hit_and_no_promotion_while_latched():
    r = Rig(stage_dwell_s=[0.0])
    r.step()
    assert r.sup.advance_stage(r.t)[0] and r.sup.stage.scale == 1.0
    r.step(pos=(0.9, 0.0))  # clipped -> demoted
    assert r.sup.stage.scale == 0.5
    r.sup.estop('x', r.t)
    ok, why = r.sup.advance_stage(r.t)
    assert not ok and 'latched' in why


def test_watchdog_trip_demotes_stage():
    r = Rig(stage_dwell_s=[0.0])
    r.step()
    r.sup.advance_stage(r.t)
    r.t += 0.07
    r.state()
    assert r.sup.tick(r.t).safe
    assert r.sup.stage.scale == 0.5
    info = r.sup.status(r.t)['inputs']['policy']
    assert info['watchdog_trips'] == 1
    assert info['trip_past_timeout_ms'] == pytest.approx((0.07 - 0.06) * 1e3)


# -- real-robot grade: the holes of issue 13 -------------------------------------------------------
def test_supervisor_earns_dwell_only_while_forwarding_the_policy_cleanly():
    r = Rig(stages=[0.5, 1.0], stage_dwell_s=[0.5])
    for _ in range(500):                     # 1 s of fresh state, no policy command at all
        r.step(pos=None)
    ok, why = r.sup.advance_stage(r.t)
    assert not ok and 'not forwarding the policy cleanly' in why
    for _ in range(200):                     # 0.4 s forwarded cleanly: not yet
        assert not r.step().safe
    assert not r.sup.advance_stage(r.t)[0]
    for _ in range(60):
        r.step()
    assert r.sup.advance_stage(r.t)[0] and r.sup.stage.scale == 1.0


def test_implausible_joint_state_is_never_used_and_repeats_trip_a_sensor_fault():
    r = Rig(max_target_rate=[1e3, 1e3], implausible_trip_count=3)
    r.step(pos=(0.1, 0.0))
    ok, why = r.state(q=(40.0, 0.0))        # a glitched sample
    assert not ok and 'beyond the range' in why
    r.t += 0.002
    r.cmd(pos=(0.1, 0.0))
    out = r.sup.tick(r.t)
    assert not out.safe and abs(out.position[0]) < 1.0     # computed from the last good state
    assert r.sup.status(r.t)['implausible_states'] == 1 and not r.sup.latched
    assert not r.sup.on_joint_state(['a', 'a'], (0.0, 0.0), (0.0, 0.0), r.t, r.t)[0]
    assert not r.sup.on_joint_state(['a', 'b'], (0.0, 0.0), (0.0, 100.0), r.t, r.t)[0]
    assert r.sup.latched and 'sensor fault: 3 implausible' in r.sup.cause


@pytest.mark.parametrize('q,dq,stamp_dt,why', [
    ((1.4, 0.0), (0.0, 0.0), 0.002, 'beyond the range'),        # range 1.0 + margin 0.3
    ((0.0, 0.0), (0.0, 6.5), 0.002, 'state_velocity_factor'),    # 3 x 2 rad/s
    ((0.05, 0.0), (0.0, 0.0), 0.002, 'jumped'),                 # 6 rad/s x 4 ms = 0.024
    ((math.nan, 0.0), (0.0, 0.0), 0.002, 'non-finite'),
])
def test_each_implausibility_rule(q, dq, stamp_dt, why):
    r = Rig()
    r.step()
    r.t += stamp_dt
    ok, reason = r.state(q=q, dq=dq)
    assert not ok and why in reason
    r.t += 0.05                              # a real move over a longer time is plausible
    assert r.state(q=(0.2, 0.0))[0]
    assert not r.sup.on_joint_state(['a'], (0.0,), (0.0,), r.t, r.t)[0]   # b missing


def test_position_target_stays_in_range_whatever_the_measured_state():
    lim = limits(max_target_rate=[1e3, 1e3])
    out, clips = run(lim, pos=[0.9, 0.0], q=(39.8, 0.0), prev=[np.nan, np.nan], dt=0.02)
    assert out.position[0] <= 1.0 and clips['position'][0]


def test_target_acceleration_is_limited_and_scaled_by_the_stage():
    lim = limits(max_target_rate=[1e3, 1e3], max_target_accel=[100.0, 100.0],
                 torque_limit=[1e4, 1e4])
    prev = np.array([0.0, 0.0])
    # From rest, 10 ms: the target may reach 100 * 0.01 = 1 rad/s, i.e. move 0.01 rad.
    out, clips = run(lim, pos=[0.5, 0.0], prev=prev, dt=0.01)
    assert out.position[0] == pytest.approx(0.01) and clips['acceleration'][0]
    cmd = validate_command(NAMES, [0.5, 0.0], [], [], lim.names)
    half, _ = filter_command(lim, 0.5, cmd, np.zeros(2), np.zeros(2), prev, 0.01, np.zeros(2))
    assert half.position[0] == pytest.approx(0.005)
    # Moving at -1 rad/s, a reversal stops first; slowing down is not limited.
    out, clips = filter_command(lim, 1.0, cmd, np.zeros(2), np.zeros(2), prev, 0.002,
                                np.array([-1.0, 0.0]))
    assert out.position[0] == 0.0 and clips['acceleration'][0]
    cmd = validate_command(NAMES, [0.001, 0.0], [], [], lim.names)
    out, clips = filter_command(lim, 1.0, cmd, np.zeros(2), np.zeros(2), prev, 0.002,
                                np.array([5.0, 0.0]))
    assert out.position[0] == pytest.approx(0.001) and not clips['acceleration'][0]


def test_supervisor_rate_limits_target_acceleration_across_ticks():
    r = Rig(max_target_rate=[1e3, 1e3], max_target_accel=[50.0, 50.0], torque_limit=[1e3, 1e3])
    r.step()
    positions = []
    for _ in range(20):
        positions.append(r.step(pos=(0.8, 0.0)).position[0])
    rates = np.diff([0.0] + positions) / 0.002
    assert np.all(np.abs(np.diff(rates)) <= 50.0 * 0.002 * 1.01 + 1e-9)
    assert r.sup.status(r.t)['clips']['acceleration']['a'] > 0


def test_an_old_target_rate_cannot_hold_the_target_still_for_good():
    # A torque-rule shift within a fraction of a tick once left a rate of -50 rad/s behind;
    # the target then held, the rate was never updated, and every later step towards +0.05
    # was an 'acceleration' clip: the target stood still for good (seen on the array output).
    r = Rig(max_target_rate=[1.0, 1.0], max_target_accel=[40.0, 40.0], torque_limit=[1e3, 1e3])
    r.step()
    r.step()
    r.sup.previous_rate[0] = -50.0
    positions = [r.step(pos=(0.05, 0.0)).position[0] for _ in range(200)]
    assert positions[-1] == pytest.approx(0.05)
    # Capped at the rate limit, the old rate is undone within rate / accel = 25 ms.
    assert positions[20] > 0.0


def forwarding_on_the_wall_clock(r, wall, ticks=3):
    """Tick `r` forwarding, on time, with a wall clock from `wall`; return the wall time."""
    for _ in range(ticks):
        r.t += 0.002
        wall += 0.002
        r.state()
        r.cmd()
        assert not r.sup.tick(r.t, wall=wall).safe
    return wall


def test_late_tick_forwards_nothing_computed_from_old_state_and_is_counted():
    r = Rig()
    wall = forwarding_on_the_wall_clock(r, 100.0)
    last = r.sup.last_forward[1].position.copy()
    r.t += 0.002
    wall += 0.030                            # the process was not scheduled for 30 ms
    r.cmd(pos=(0.05, 0.0))                   # a command queued meanwhile: not forwarded
    out = r.sup.tick(r.t, wall=wall)
    assert out.safe and 'late' in out.reason
    assert list(out.position) == list(last)  # the last output again, nothing new
    assert r.sup.status(r.t)['late_ticks'] == 1 and not r.sup.latched
    r.t += 0.002
    wall += 0.002
    r.state()
    r.cmd()
    assert not r.sup.tick(r.t, wall=wall).safe   # on time again: forwarding resumes
    r.t += 0.002
    wall += 0.2                              # stalled beyond the joint_states timeout
    r.state()
    assert r.sup.tick(r.t, wall=wall).safe and r.sup.latched and 'stalled' in r.sup.cause


def test_a_command_taken_first_after_a_long_stall_is_not_forwarded():
    # After a stall beyond the joint_states timeout the executor may take a fresh state and a
    # queued command before the late tick: the forward-on-input tick must e-stop too, not
    # resume the robot for one command.
    r = Rig()
    wall = forwarding_on_the_wall_clock(r, 100.0)
    r.t += 0.002
    wall += 0.2
    r.state()
    r.cmd(pos=(0.05, 0.0))
    out = r.sup.tick(r.t, count=False, wall=wall)
    assert out.safe and r.sup.latched and 'stalled' in r.sup.cause


def test_slow_ticks_with_new_state_keep_forwarding_the_policy():
    # A loaded computer: every tick 15 ms after the previous (7.5 periods), with new joint
    # states in between. The targets must follow the policy, not freeze on the last output.
    r = Rig(max_target_rate=[1e3, 1e3], torque_limit=[1e3, 1e3])
    wall = 100.0
    r.step()
    r.sup.tick(r.t, wall=wall)
    seen = []
    for i in range(10):
        r.t += 0.015
        wall += 0.015
        r.state()
        r.cmd(pos=(0.01 * (i + 1), 0.0))
        out = r.sup.tick(r.t, wall=wall)
        assert not out.safe, out.reason
        seen.append(out.position[0])
    assert seen == pytest.approx([0.01 * (i + 1) for i in range(10)])
    status = r.sup.status(r.t)
    assert status['late_ticks'] == 0 and status['slow_ticks'] == 10


def test_clock_going_back_or_jumping_forward_is_an_estop():
    r = Rig()
    r.step()
    r.sup.tick(r.t - 0.5)
    assert r.sup.latched and 'clock went back' in r.sup.cause
    r2 = Rig()
    r2.step()
    r2.sup.clock_jump(0.01, r2.t)             # a small forward step: ignored
    r3 = Rig(joint_states_timeout_s=0.2)
    r3.step()
    r3.sup.clock_jump(0.1, r3.t)   # beyond policy_timeout_s, within the state watchdog: a
    assert not r3.sup.latched      # simulator catching up (inputs look older: safe side)
    r3.sup.clock_jump(0.25, r3.t)
    assert r3.sup.latched
    assert not r2.sup.latched
    r2.sup.clock_jump(3.0, r2.t)
    assert r2.sup.latched and 'clock jumped forward' in r2.sup.cause
    assert r2.sup.status(r2.t)['clock_jumps'] == 1


def test_sysid_path_is_granted_to_one_experiment_at_a_time():
    r = Rig(sysid_release_s=0.5)
    r.step()
    ok = r.sup.on_command('sysid', NAMES, (0.0, 0.0), (), (), r.t, r.t, sender='friction_id')
    assert ok[0] and r.sup.sysid_owner == 'friction_id'
    for _ in range(20):                      # never a trip: another node's mistake
        ok, why = r.sup.on_command('sysid', NAMES, (0.0, 0.0), (), (), r.t, r.t,
                                   sender='inertia_id')
        assert not ok and "granted to 'friction_id'" in why
    assert not r.sup.latched and r.sup.status(r.t)['foreign_sysid'] == 20
    r.t += 0.6                               # the owner fell silent: released
    assert r.sup.on_command('sysid', NAMES, (0.0, 0.0), (), (), r.t, r.t,
                            sender='inertia_id')[0]
    assert r.sup.sysid_owner == 'inertia_id'


def test_select_sysid_needs_a_safe_output_and_reset_needs_no_source_command():
    r = Rig()
    r.step()
    ok, why = r.sup.select_mode('sysid', r.t)
    assert not ok and 'safe state' in why
    for _ in range(40):                      # the policy stops: its output goes safe
        r.step(pos=None)
    assert r.sup.select_mode('sysid', r.t)[0]
    r.sup.estop('operator', r.t)
    r.step(pos=None)
    ok, why = r.sup.reset(r.t)               # no sysid command yet: allowed, output stays safe
    assert ok and 'once it sends fresh commands' in why
    assert r.step(pos=None).safe


def test_recovery_from_a_stale_policy_goes_through_the_reset_checks():
    r = Rig()
    r.step()
    for _ in range(40):                      # stale beyond its timeout: safe mode
        out = r.step(pos=None)
    assert is_damping(out) and not r.sup.latched
    out = r.step(pos=(0.5, 0.0))             # back, but far from the state
    assert out.safe and 'reset_tolerance' in out.reason
    out = r.step(pos=(0.05, 0.0))
    assert not out.safe
    out = r.step(pos=(0.5, 0.0))             # once forwarding, the limits do the rest
    assert not out.safe


def test_stale_policy_holds_the_last_target_for_the_grace_then_damps():
    r = Rig(stale_hold_s=0.1, stage_dwell_s=[0.0], stages=[0.5, 1.0])
    for _ in range(5):
        r.step(pos=(0.05, 0.0))
    assert r.sup.advance_stage(r.t)[0]
    held = None
    for _ in range(50):                      # 100 ms without a policy command
        out = r.step(pos=None, q=(0.04, 0.0))
        if out.safe and out.position is not None:
            held = out
    assert held is not None and held.position[0] == pytest.approx(0.05)
    assert r.sup.status(r.t)['grace_holds'] == 1
    assert r.sup.stage.scale == 1.0          # a brief hiccup within the grace: no demotion
    for _ in range(40):                      # stale at 60 ms + 100 ms of grace: over
        out = r.step(pos=None, q=(0.04, 0.0))
    assert is_damping(out) and r.sup.stage.scale == 0.5


def test_policy_back_within_the_grace_is_forwarded_at_once():
    r = Rig(stale_hold_s=0.2)
    r.step(pos=(0.05, 0.0))
    for _ in range(40):
        r.step(pos=None)
    out = r.step(pos=(0.09, 0.0))
    assert not out.safe                      # no reset checks inside the grace


def test_hold_safe_mode_is_not_capped_by_a_low_stage():
    r = Rig(safe_mode='hold', stages=[0.1, 1.0])
    r.step(q=(0.3, 0.0))
    r.sup.estop('drill', r.t)
    out = r.step(q=(0.1, 0.0), pos=None)     # sagging 0.2 rad: the hold pulls with up to 20 N*m
    assert out.safe and out.position[0] == pytest.approx(0.3)


def test_forwarding_starts_only_with_a_command_within_the_torque_limit_at_the_state():
    r = Rig(reset_tolerance=1.0)             # positions far apart are allowed here ...
    r.step(pos=None)
    out = r.step(pos=(0.5, 0.0))             # ... but 100 * 0.5 = 50 N*m > 20 * 0.5 is not
    assert out.safe and 'would push 50.0 N*m' in out.reason
    assert not r.step(pos=(0.08, 0.0)).safe  # 8 N*m


@pytest.mark.parametrize('orientation', [
    (1.0, 0.0, 0.0), (1.0, 0.0, 0.0, 0.0, 0.0), (0.9, 0.0, 0.0, 0.0), (float('nan'), 0, 0, 1.0),
    (1.0, float('inf'), 0.0, 0.0), [0.5, 0.5, 0.5], np.array([2.0, 0.0, 0.0, 0.0])])
def test_imu_orientation_that_is_not_a_unit_quaternion_is_refused(orientation):
    """Tuple (core/cdr.py's decoder), list or array: a wrong size, a non-finite value or a
    norm off by more than 0.05 is refused, counted, and never feeds the imu watchdog."""
    r = Rig(use_imu=True, max_tilt_rad=0.5)
    ok, why = r.sup.on_imu(orientation, r.t, r.t)
    assert not ok and 'not a unit quaternion' in why
    assert r.sup.state_rejected == 1 and not r.sup.dogs['imu'].ever


@pytest.mark.parametrize('orientation', [
    (1.0, 0.0, 0.0, 0.0), [0.0, 1.0, 0.0, 0.0], np.array([0.96, 0.0, 0.0, 0.0]),
    (np.float32(1.0), 0, 0, 0)])
def test_imu_unit_quaternion_in_any_sequence_is_taken(orientation):
    r = Rig(use_imu=True, max_tilt_rad=0.5)
    assert r.sup.on_imu(orientation, r.t, r.t) == (True, '')
    assert r.sup.dogs['imu'].ever


def test_joint_state_names_are_checked_whenever_they_are_not_the_tuple_checked_before():
    """The names of an accepted sample are recognised by identity (the decoder's cached
    tuple); a different tuple or a list is checked again, and a refused one is never
    remembered as good."""
    r = Rig()
    good = tuple(NAMES)
    assert r.sup.on_joint_state(good, (0.1, 0.2), (0.0, 0.0), r.t, r.t)[0]
    assert r.sup.on_joint_state(good, (0.1, 0.2), (0.0, 0.0), r.t, r.t)[0]
    swapped = tuple(reversed(NAMES))    # the same joints in the other order: mapped by name
    assert r.sup.on_joint_state(swapped, (0.2, 0.1), (0.0, 0.0), r.t, r.t)[0]
    assert r.sup.q.tolist() == [0.1, 0.2]
    dup = (NAMES[0], NAMES[0])
    for _ in range(2):                  # the same refused tuple twice: refused twice
        ok, why = r.sup.on_joint_state(dup, (0.1, 0.1), (0.0, 0.0), r.t, r.t)
        assert not ok and 'more than once' in why
    assert r.sup.on_joint_state(good, (0.1, 0.2), (0.0, 0.0), r.t, r.t)[0]
    missing = (NAMES[0], 'elbow_not_here')
    for _ in range(2):
        ok, why = r.sup.on_joint_state(missing, (0.1, 0.1), (0.0, 0.0), r.t, r.t)
        assert not ok and 'lacks' in why
    names = list(NAMES)                 # a list can change between calls: never recognised
    assert r.sup.on_joint_state(names, (0.1, 0.2), (0.0, 0.0), r.t, r.t)[0]
    names[1] = names[0]
    ok, why = r.sup.on_joint_state(names, (0.1, 0.2), (0.0, 0.0), r.t, r.t)
    assert not ok and 'more than once' in why

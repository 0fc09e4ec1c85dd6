"""The bring-up (safety/go_default) in the supervisor core: each rule fails without it."""
import numpy as np
import pytest

from simreal_ros.core.config import ConfigError
from simreal_ros.core.safety import Supervisor, SupervisorConfig
from simreal_ros.core.safety.bringup import (PEAK_ACCEL, PEAK_SPEED, PLAN_FRACTION, min_jerk,
                                             plan_duration)

NAMES = ['a', 'b']
HOME = [0.5, -0.3]
DT = 0.002


def config(**over):
    p = {'joint_names': NAMES, 'kp': [100.0, 100.0], 'kd': [2.0, 2.0],
         'position_lower': [-1.0, -1.0], 'position_upper': [1.0, 1.0],
         'velocity_limit': [2.0, 2.0], 'torque_limit': [20.0, 20.0],
         'max_target_rate': [10.0, 10.0], 'trip_velocity': [5.0, 5.0], 'stages': [0.5, 1.0],
         'stage_dwell_s': [1.0], 'policy_timeout_s': 0.06, 'joint_states_timeout_s': 0.05,
         'bringup.default_position': HOME, 'bringup.max_velocity': [0.5],
         'bringup.min_duration_s': 2.0}
    p.update(over)
    return SupervisorConfig.from_params(p)


class Robot:
    """A supervisor and a robot that follows each position target exactly (one clock)."""

    def __init__(self, q=(-0.4, 0.2), **over):
        self.t = 1.0
        self.sup = Supervisor(config(**over), self.t)
        self.q = np.array(q, dtype=float)
        self.dq = np.zeros(2)
        self.feed()
        self.out = self.sup.tick(self.t)
        self.speeds = []        # |measured velocity| per step, while the bring-up moves

    def feed(self):
        return self.sup.on_joint_state(NAMES, self.q, self.dq, self.t, self.t)

    def policy(self, pos):
        return self.sup.on_command('policy', NAMES, pos, (), (), self.t, self.t)

    def step(self, dt=DT, wall=None, follow=True):
        self.t += dt
        self.feed()
        self.out = self.sup.tick(self.t, wall=wall)
        if follow and self.out is not None and self.out.position is not None:
            new = np.array(self.out.position)
            self.dq = (new - self.q) / dt
            self.q = new
            if self.out.bringup:
                self.speeds.append(np.abs(self.dq))
        elif follow:
            self.dq = np.zeros(2)
        return self.out

    def run(self, seconds, **kw):
        for _ in range(int(round(seconds / DT))):
            self.step(**kw)
        return self.out

    def bringup(self):
        return self.sup.status(self.t)['bringup']


def is_damping(out):
    return out.safe and out.position is None and list(out.velocity) == [0.0, 0.0]


# -- the trajectory ------------------------------------------------------------------------
def test_min_jerk_profile_and_duration():
    assert min_jerk(0.0) == (0.0, 0.0) and min_jerk(1.0) == (1.0, 0.0)
    taus = np.linspace(0, 1, 10001)
    ds = np.array([min_jerk(t)[1] for t in taus])
    assert ds.max() == pytest.approx(PEAK_SPEED, rel=1e-6)
    dds = np.gradient(ds, taus)
    assert np.abs(dds).max() == pytest.approx(PEAK_ACCEL, rel=1e-3)
    # the longest of: the minimum, the speed limit's, the acceleration limit's
    assert plan_duration([0.1, 0.0], [0.5, 0.5], [np.inf] * 2, 2.0) == 2.0
    assert plan_duration([0.9, -0.5], [0.5, 0.5], [np.inf] * 2, 2.0) == pytest.approx(
        PEAK_SPEED * 0.9 / 0.5)
    assert plan_duration([0.9, 0.0], [10.0, 10.0], [0.1, 0.1], 0.0) == pytest.approx(
        np.sqrt(PEAK_ACCEL * 0.9 / 0.1))


def test_bringup_moves_to_the_default_pose_and_holds_it():
    r = Robot()
    assert is_damping(r.out)                       # no policy: the safe output before
    ok, msg = r.sup.go_default(r.t)
    assert ok, msg
    b = r.bringup()
    assert b['phase'] == 'moving' and b['target'] == dict(zip(NAMES, HOME))
    assert b['duration_s'] == pytest.approx(PEAK_SPEED * 0.9 / (PLAN_FRACTION * 0.5), abs=1e-3)
    out = r.step()
    assert out.bringup and out.safe and out.position is not None and out.effort is None
    assert r.sup.status(r.t)['output'] == 'bringup'
    r.run(b['duration_s'] / 2)
    assert r.bringup()['phase'] == 'moving' and 0.4 < r.bringup()['progress'] < 0.6
    r.run(b['duration_s'] / 2 + 0.1)
    assert r.bringup()['phase'] == 'holding'
    assert r.q.tolist() == pytest.approx(HOME, abs=1e-9)
    r.run(2.0)                                     # held for as long as no policy comes
    assert r.out.bringup and r.out.position.tolist() == pytest.approx(HOME)
    assert r.out.velocity.tolist() == [0.0, 0.0]
    assert r.bringup()['phase'] == 'holding' and r.bringup()['max_error_rad'] < 1e-9
    assert 'holding the default pose' in r.sup.status(r.t)['safe_reason']


def test_peak_speed_stays_within_max_velocity_and_duration_within_the_minimum():
    r = Robot(**{'bringup.max_velocity': [0.5, 0.2]})
    assert r.sup.go_default(r.t)[0]
    r.run(r.bringup()['duration_s'] + 0.1)
    speeds = np.array(r.speeds)
    assert speeds[:, 0].max() <= 0.5 + 1e-9 and speeds[:, 1].max() <= 0.2 + 1e-9
    # the slower joint sets the duration: 0.5 rad at 0.2 rad/s; its plan peaks at 80 % of it
    # (the joint's tracking error gets the rest)
    assert PLAN_FRACTION == 0.8
    assert r.bringup()['duration_s'] == pytest.approx(PEAK_SPEED * 0.5 / (0.8 * 0.2), abs=1e-3)
    assert speeds[:, 1].max() == pytest.approx(0.8 * 0.2, rel=0.01)
    assert r.bringup()['peak_speed_rad_s']['b'] == pytest.approx(0.16, abs=1e-3)
    assert r.bringup()['clipped_outputs'] == 0     # the plan itself stays within the filter
    # a short move still takes the minimum duration
    r = Robot(q=(0.45, -0.3))
    assert r.sup.go_default(r.t)[0]
    assert r.bringup()['duration_s'] == pytest.approx(2.0)


def test_target_speed_stays_within_max_velocity_when_the_clock_jumps():
    # A slow tick (ROS time jumped 0.5 s, with a new state): the plan is 0.25 rad further on,
    # the output moves no faster than max_velocity over the time the rate limit credits.
    r = Robot()
    assert r.sup.go_default(r.t)[0]
    r.run(1.5)
    before = r.out.position.copy()
    out = r.step(dt=0.5)
    assert out.bringup
    assert np.abs(out.position - before).max() <= 0.5 * 0.06 + 1e-9   # policy_timeout_s cap


def test_a_stalled_tick_resumes_the_trajectory_where_it_stopped():
    # A supervisor stalled 0.1 s mid-move: the trajectory's time advances by two periods, not
    # by the stall, so the target does not jump ahead for the joints' PD to chase (they would
    # move faster than max_velocity: 1.67 rad/s against 0.5 in bench/hardware_path.py).
    r = Robot()
    assert r.sup.go_default(r.t)[0]
    r.run(0.8)
    progress = r.bringup()['progress']
    before = r.out.position.copy()
    out = r.step(dt=0.1)
    assert out.bringup
    duration = r.bringup()['duration_s']
    assert r.bringup()['progress'] == pytest.approx(progress + 2 * DT / duration, abs=2e-4)
    assert np.abs(out.position - before).max() <= 0.5 * 2 * DT + 1e-9
    r.run(duration)                                 # and it still arrives
    assert r.bringup()['phase'] == 'holding'


def test_the_stage_limits_bind_when_tighter_than_max_velocity():
    # Stage 0.10 of velocity_limit 2 rad/s: 0.2 rad/s, below bringup.max_velocity 0.5.
    r = Robot(stages=[0.1, 1.0])
    ok, msg = r.sup.go_default(r.t)
    assert ok and 'limit 0.200 rad/s at stage 0.10' in msg
    b = r.bringup()
    assert b['speed_limit_rad_s'] == {'a': pytest.approx(0.2), 'b': pytest.approx(0.2)}
    assert b['duration_s'] == pytest.approx(PEAK_SPEED * 0.9 / (PLAN_FRACTION * 0.2), abs=1e-3)
    r.run(b['duration_s'] + 0.1)
    assert np.array(r.speeds).max() <= 0.2 + 1e-9 and r.bringup()['clipped_outputs'] == 0


def test_acceleration_limit_lengthens_the_plan():
    r = Robot(max_target_accel=[0.5, 0.5])          # 0.25 rad/s^2 at stage 0.50
    assert r.sup.go_default(r.t)[0]
    b = r.bringup()
    assert b['duration_s'] == pytest.approx(np.sqrt(PEAK_ACCEL * 0.9 / 0.25), abs=1e-3)
    r.run(b['duration_s'] + 0.1)
    assert r.bringup()['clipped_outputs'] == 0
    assert r.q.tolist() == pytest.approx(HOME, abs=1e-6)


def test_torque_rule_of_the_stage_applies_to_the_bringup():
    # A joint that lags (a heavy link, held back): the target never implies more than the
    # stage's torque limit (20 N*m x 0.5) at the measured state.
    r = Robot()
    assert r.sup.go_default(r.t)[0]
    for _ in range(2000):
        out = r.step(follow=False)                  # the robot does not move at all
        tau = 100.0 * (out.position - r.q) + 2.0 * (out.velocity - r.dq)
        assert np.abs(tau).max() <= 10.0 + 1e-9
    assert r.bringup()['clipped_outputs'] > 0


# -- refusals ------------------------------------------------------------------------------
def test_refused_while_estopped():
    r = Robot()
    r.sup.estop('operator', r.t)
    ok, msg = r.sup.go_default(r.t)
    assert not ok and 'e-stop latched' in msg
    assert is_damping(r.step()) and r.bringup()['phase'] == 'idle'


def test_refused_without_fresh_joint_states():
    sup = Supervisor(config(), 1.0)
    ok, msg = sup.go_default(1.0)
    assert not ok and 'no joint_states received yet' in msg
    r = Robot()
    ok, msg = r.sup.go_default(r.t + 0.2)          # 200 ms without a sample (timeout 50 ms)
    assert not ok and 'joint_states last arrived' in msg
    assert r.bringup()['phase'] == 'idle'


def test_refused_without_a_default_pose_naming_the_parameter():
    r = Robot(**{'bringup.default_position': []})
    ok, msg = r.sup.go_default(r.t)
    assert not ok and 'bringup.default_position is empty' in msg
    assert r.sup.status(r.t)['bringup']['configured'] is False


def test_refused_while_sysid_owns_the_output():
    r = Robot()
    r.sup.estop('operator', r.t)
    assert r.sup.select_mode('sysid', r.t)[0]
    r.step()
    assert r.sup.reset(r.t)[0]
    ok, msg = r.sup.go_default(r.t)
    assert not ok and 'SysID owns the output' in msg


def test_refused_while_the_policy_is_forwarded_or_the_joints_move():
    r = Robot()
    r.policy(r.q)
    assert not r.step().safe                        # forwarding the policy
    ok, msg = r.sup.go_default(r.t)
    assert not ok and 'policy is being forwarded' in msg
    r = Robot()
    r.dq = np.array([1.0, 0.0])                     # beyond reset_velocity_tolerance 0.5
    r.feed()
    ok, msg = r.sup.go_default(r.t)
    assert not ok and 'still move' in msg


def test_a_policy_command_that_is_not_admitted_does_not_stand_against_it():
    # policy_runner enabled with a command far from the state: not forwarded (safe output);
    # the bring-up is the supervisor's own motion, the policy's command is not checked.
    r = Robot()
    r.policy([0.9, 0.9])
    assert is_damping(r.step()) and 'not starting to forward' in r.out.reason
    r.policy([0.9, 0.9])
    ok, msg = r.sup.go_default(r.t)
    assert ok, msg


# -- cancelled by an e-stop ----------------------------------------------------------------
def test_cancelled_by_estop_and_not_resumed_by_reset():
    r = Robot()
    assert r.sup.go_default(r.t)[0]
    r.run(1.0)
    out = r.sup.estop('operator: safety/estop service', r.t)
    assert is_damping(out)
    b = r.bringup()
    assert b['phase'] == 'cancelled' and 'e-stop' in b['cause'] and b['cancels'] == 1
    assert 0.0 < b['progress'] < 1.0
    r.run(0.2)
    assert is_damping(r.out)
    assert r.sup.reset(r.t)[0]
    for _ in range(200):                            # reset: the safe output, no bring-up
        assert is_damping(r.step())
    assert r.bringup()['phase'] == 'cancelled'
    assert r.sup.status(r.t)['output'] == 'safe'
    ok, msg = r.sup.go_default(r.t)                 # asked again, it starts from here
    assert ok and r.step().bringup


def test_an_automatic_trip_cancels_it_too():
    r = Robot()
    assert r.sup.go_default(r.t)[0]
    r.run(0.5)
    r.t += 0.1                                      # joint_states stale: e-stop
    assert is_damping(r.sup.tick(r.t))
    assert r.sup.latched and r.bringup()['phase'] == 'cancelled'
    assert 'joint_states stale' in r.bringup()['cause']


def test_hold_safe_mode_after_a_cancel_holds_where_the_trip_found_the_robot():
    r = Robot(safe_mode='hold')
    r.run(0.1)                                      # hold: captured at the pose before
    assert r.sup.go_default(r.t)[0]
    r.run(2.0)
    out = r.sup.estop('operator', r.t)
    assert out.position.tolist() == pytest.approx(r.sup.q.tolist())   # the latest state
    assert abs(r.sup.q[0] - (-0.4)) > 0.3           # it had moved


# -- handing over to the policy ------------------------------------------------------------
def test_policy_takes_over_only_at_the_held_pose_through_the_checks():
    r = Robot()
    assert r.sup.go_default(r.t)[0]
    duration = r.bringup()['duration_s']
    for _ in range(int(duration / 2 / DT)):        # enabled mid-way: not admitted yet
        r.policy(r.q)
        out = r.step()
        assert out.bringup and not r.sup.admits_policy
    assert r.sup.status(r.t)['bringup']['phase'] == 'moving'
    r.run(duration / 2 + 0.1)
    assert r.bringup()['phase'] == 'holding'
    r.policy([0.9, -0.3])                           # far from the state: not admitted
    out = r.step()
    assert out.bringup and 'not admitted' in out.reason
    target = r.q + np.array([0.001, 0.0])           # near the state: the policy takes over
    r.policy(target)
    out = r.step()
    assert not out.safe and not out.bringup and out.position.tolist() == pytest.approx(
        target.tolist())
    b = r.bringup()
    assert b['phase'] == 'done' and 'policy' in b['cause']
    assert r.sup.admits_policy and r.sup.status(r.t)['output'] == 'forwarding'
    r.policy(target)
    assert not r.step().safe and r.bringup()['phase'] == 'done'


def test_bringup_earns_no_stage_dwell_and_blocks_promotion_and_mode_switch():
    r = Robot()
    assert r.sup.go_default(r.t)[0]
    r.run(4.0)
    assert r.sup.status(r.t)['stage']['clean_for_s'] == 0.0
    ok, msg = r.sup.advance_stage(r.t)
    assert not ok and 'bring-up' in msg
    ok, msg = r.sup.select_mode('sysid', r.t)
    assert not ok and 'bring-up owns the output' in msg
    assert r.sup.mode == 'policy'
    ok, msg = r.sup.go_default(r.t)                 # asked again while holding: no restart
    assert ok and 'already' in msg and r.bringup()['starts'] == 1


def test_a_late_tick_repeats_the_last_bringup_output():
    r = Robot()
    assert r.sup.go_default(r.t)[0]
    wall = 100.0
    for _ in range(300):
        wall += DT
        r.step(wall=wall)
    last = r.out.position.copy()
    r.t += 0.02                                     # 20 ms, no joint_states since: stalled
    out = r.sup.tick(r.t, wall=wall + 0.02)
    assert out.bringup and out.position.tolist() == last.tolist()
    assert r.sup.late_ticks == 1


# -- configuration -------------------------------------------------------------------------
@pytest.mark.parametrize('over,why', [
    ({'bringup.default_position': [0.5]}, 'expected 2 finite values'),
    ({'bringup.default_position': [1.5, 0.0]}, 'outside the soft limits'),
    ({'bringup.max_velocity': [0.0]}, 'bringup.max_velocity'),
    ({'bringup.min_duration_s': -1.0}, 'bringup.min_duration_s'),
])
def test_bad_bringup_parameters_are_config_errors(over, why):
    with pytest.raises(ConfigError, match=why):
        config(**over)

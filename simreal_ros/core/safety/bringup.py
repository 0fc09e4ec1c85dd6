"""Bring-up: from wherever the robot is to its default pose, slowly, then hold it (issue 14).

Every real deployment script does this before a policy may act (unitree_rl_gym's deploy_real:
`move_to_default_pos` interpolates from the measured pose to the default pose over 2 s, then
`default_pos_state` holds it until the operator starts the policy). Here it is a phase of the
supervisor's own output (`Supervisor.go_default`, service `safety/go_default`), so it passes
the same limit filter, stage scale and e-stop latch as everything else:

- accepted only when nothing stands against it: no e-stop latched, a default pose configured
  (`bringup.default_position`), the policy source selected (no SysID experiment owns the
  output) and not being forwarded, fresh joint_states (and imu), no implausible sample
  pending, the joints nearly still (`reset_velocity_tolerance`), the base upright;
- `moving`: a minimum-jerk trajectory (zero velocity and acceleration at both ends) from the
  pose measured at acceptance to the default pose, all joints together, over
  `max(bringup.min_duration_s, the time that keeps every joint's peak speed within
  PLAN_FRACTION of its limit and its peak acceleration within max_target_accel x stage)`; the
  speed limit per joint is `min(bringup.max_velocity, velocity_limit x stage, max_target_rate
  x stage)`, and the output is filtered with limits tightened to it (`bringup_limits`), so no
  time jump can make a target move faster. The plan peaks below the limit because the joint
  does not follow the targets exactly: on joint_states, arm3 in sim_robot on a loaded 2-core
  machine ran up to 2 % faster than a limit its plan peaked at, and up to 10 % faster than a
  plan peaking at 90 % of it (0.297 rad/s for 0.27; test/test_bringup_node.py);
- `holding`: the default pose, until the policy passes the usual checks (policy_runner
  enabled, its command near the state: `done`) or an e-stop (`cancelled`; a reset does not
  resume it).

Gains: hardware/command carries no gains; the driver applies the robot file's kp/kd (as
deploy_real's move_to_default_pos uses the policy's gains). What makes the motion gentle is
the slow trajectory and the stage's torque limit on the torque each target implies.
"""
import math

import numpy as np

PHASES = ('idle', 'moving', 'holding', 'cancelled', 'done')
# s(tau) = 10 tau^3 - 15 tau^4 + 6 tau^5: peak ds/dtau at tau = 1/2, peak d2s/dtau2 at
# tau = 1/2 - sqrt(3)/6.
PEAK_SPEED = 15.0 / 8.0
PEAK_ACCEL = 10.0 / math.sqrt(3.0)
PLAN_FRACTION = 0.8   # the plan's peak speed, as a fraction of the limit (tracking margin)


def min_jerk(tau):
    """Return (s, ds/dtau) of the minimum-jerk profile at tau, clipped to [0, 1]."""
    tau = min(max(float(tau), 0.0), 1.0)
    s = tau ** 3 * (10.0 - 15.0 * tau + 6.0 * tau * tau)
    ds = 30.0 * tau * tau * (1.0 - tau) ** 2
    return s, ds


def bringup_limits(limits, max_velocity, scale):
    """Return `limits` with velocity and target-rate limits tightened so that at stage
    `scale` neither exceeds `max_velocity` (per joint, rad/s)."""
    cap = np.asarray(max_velocity, dtype=float) / float(scale)
    return limits.tightened({'velocity_limit': cap, 'max_target_rate': cap}, 'bringup')


def plan_duration(delta, speed, accel, min_duration):
    """Return the duration (s) of a minimum-jerk move of `delta` (rad per joint) whose peak
    speed stays within `speed` and peak acceleration within `accel` (per joint; inf = none),
    and at least `min_duration`."""
    delta = np.abs(np.asarray(delta, dtype=float))
    need = [float(min_duration)]
    need.append(float(np.max(PEAK_SPEED * delta / np.asarray(speed, dtype=float), initial=0.0)))
    accel = np.asarray(accel, dtype=float)
    with np.errstate(divide='ignore'):
        need.append(float(np.max(np.sqrt(PEAK_ACCEL * delta / accel), initial=0.0)))
    return max(need)


class Bringup:
    """The bring-up's phase and trajectory (times in s on the supervisor's clock)."""

    def __init__(self):
        self.phase = 'idle'
        self.cause = ''
        self.start = None       # measured pose at acceptance
        self.goal = None        # default pose
        self.t0 = None
        self.duration = 0.0
        self.limits = None      # the output limits of this bring-up (bringup_limits)
        self.speed = None       # per-joint peak speed allowed (rad/s, at the stage then)
        self.last = None        # the last Command output (repeated on a late tick)
        self.clips = 0          # outputs the filter changed (torque rule at a low stage, ...)
        self.starts = 0
        self.cancels = 0
        self.since = None       # when the current phase began
        self.ended_progress = None
        self.elapsed = 0.0      # trajectory time: advances at most max_step per update
        self.last_update = None

    @property
    def active(self):
        """The bring-up owns the output (moving or holding)."""
        return self.phase in ('moving', 'holding')

    def begin(self, q, goal, now, limits, scale, min_duration):
        """Start moving from `q` to `goal` at `now`, within `limits` (bringup_limits) at
        stage `scale`; return the duration."""
        self.start = np.asarray(q, dtype=float).copy()
        self.goal = np.asarray(goal, dtype=float).copy()
        self.limits = limits
        self.speed = np.minimum(limits.velocity_limit, limits.max_target_rate) * scale
        accel = limits.max_target_accel * scale
        self.duration = plan_duration(self.goal - self.start, PLAN_FRACTION * self.speed, accel,
                                      min_duration)
        self.t0 = float(now)
        self.elapsed, self.last_update = 0.0, float(now)
        self.phase, self.cause, self.since = 'moving', '', float(now)
        self.last = None
        self.clips = 0
        self.starts += 1
        return self.duration

    def progress(self, now):
        if self.t0 is None:
            return 0.0
        if self.duration <= 0.0:
            return 1.0
        return min(max(self.elapsed / self.duration, 0.0), 1.0)

    def update(self, now, max_step=math.inf):
        """Advance the trajectory's time by the time since the last update, at most
        `max_step` (a stalled supervisor resumes where it stopped instead of jumping ahead: the
        target would jump, and the joints' PD would chase it faster than the speed limit; seen
        in bench/hardware_path.py, 1.67 rad/s against 0.5), and move on from `moving` to
        `holding` once it is over."""
        if self.phase == 'moving' and self.last_update is not None:
            self.elapsed += min(max(float(now) - self.last_update, 0.0), max_step)
        self.last_update = float(now)
        if self.phase == 'moving' and self.progress(now) >= 1.0:
            self.phase, self.since = 'holding', float(now)
        return self.phase

    def sample(self, now):
        """Return the (position, velocity) targets at `now`: on the trajectory, then the goal."""
        tau = self.progress(now)
        s, ds = min_jerk(tau)
        delta = self.goal - self.start
        position = self.goal.copy() if tau >= 1.0 else self.start + s * delta
        velocity = (ds / self.duration * delta if self.duration > 0 and tau < 1.0
                    else np.zeros_like(delta))
        return position, velocity

    def peak_speed(self):
        """The trajectory's planned peak speed per joint (rad/s)."""
        if self.duration <= 0.0:
            return np.zeros_like(self.goal)
        return PEAK_SPEED * np.abs(self.goal - self.start) / self.duration

    def end(self, phase, now, cause):
        """Leave the active phases: `cancelled` (an e-stop) or `done` (the policy took over)."""
        self.ended_progress = self.progress(now)
        self.phase, self.cause, self.since = phase, cause, float(now)
        self.cancels += int(phase == 'cancelled')
        self.last = None

    def to_dict(self, now, names, q=None):
        """The bring-up as plain data for safety/state."""
        out = {'phase': self.phase, 'cause': self.cause, 'starts': self.starts,
               'cancels': self.cancels}
        if self.goal is None:
            return out
        ended = not self.active
        out.update({
            'progress': round(self.ended_progress if ended else self.progress(now), 4),
            'duration_s': round(self.duration, 3),
            'elapsed_s': round((self.since if ended else float(now)) - self.t0, 3),
            'start': {n: round(float(v), 4) for n, v in zip(names, self.start)},
            'target': {n: round(float(v), 4) for n, v in zip(names, self.goal)},
            'peak_speed_rad_s': {n: round(float(v), 4)
                                 for n, v in zip(names, self.peak_speed())},
            'speed_limit_rad_s': {n: round(float(v), 4) for n, v in zip(names, self.speed)},
            'clipped_outputs': self.clips,
        })
        if q is not None:
            out['max_error_rad'] = round(float(np.max(np.abs(np.asarray(q) - self.goal))), 4)
        return out

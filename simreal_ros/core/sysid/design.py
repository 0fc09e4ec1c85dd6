"""Experiment design: per-joint command schedules inside the SysID limits and the joint range.

Each experiment moves one joint while the others are held at `hold_position`, starting with a
smooth approach from the robot's current pose. Commands carry position and velocity targets for
every joint and a feed-forward effort that cancels the nominal model's gravity at the target
pose (links are known; only actuator parameters are not).

- friction: quasistatic sweeps at constant velocity, both directions, several speeds, under
  closed-loop velocity tracking (position ramp + velocity target);
- inertia: a band-limited multi-sine target (Schroeder phases) with bounded amplitude;
- latency: a wider-band multi-sine with a higher top frequency (timing resolution).
"""
from dataclasses import dataclass, field, replace
import math
from pathlib import Path

import numpy as np

from simreal_ros.core.config import ConfigError

KINDS = ('friction', 'inertia', 'latency')


@dataclass
class SysidSettings:
    """What the experiments may do (one entry per joint unless scalar); see config/robots."""

    joint_names: list
    hold_position: np.ndarray
    velocity_limit: np.ndarray        # rad/s, the supervisor's SysID velocity limit or tighter
    torque_limit: np.ndarray          # N*m, the supervisor's SysID torque limit or tighter
    acceleration_limit: np.ndarray    # rad/s^2
    kp: np.ndarray                    # the driver's PD gains (they shape the torque we ask for)
    kd: np.ndarray
    position_lower: np.ndarray = None  # rad, the supervisor's SysID soft limits (optional)
    position_upper: np.ndarray = None
    range_margin: float = 0.15        # rad kept from each end of the joint range / soft limits
    # The nodes' default (sysid_experiment): 500 read a 500 Hz robot's held targets' ripple
    # as friction (see ripple_alias).
    command_rate_hz: float = 240.0
    approach_speed_fraction: float = 0.5
    settle_s: float = 0.3
    gravity_feedforward: bool = True
    # friction
    sweep_half_range: float = 0.6     # rad each side of the hold position
    friction_speeds: tuple = (0.2, 0.4, 0.8, 1.6)   # rad/s (capped at 0.9 * velocity_limit)
    friction_passes: int = 1          # back-and-forth sweeps at each speed (at least)
    # Settled constant-speed time (s, each direction) wanted at every speed: more passes where
    # a sweep is short (the top speeds, where viscous friction is most visible); 0: off.
    friction_settled_s: float = 0.0
    # Seconds of robot time a joint's friction experiment may take (approach, sweeps, return):
    # with friction_settled_s, the passes it asks for are added the speeds furthest from it
    # first while the experiment fits; 0: no cap. Where the sweeps are short (the G1's ankle
    # and hip rolls) the time the others spend on range goes to more passes.
    friction_budget_s: float = 0.0
    # inertia
    inertia_duration_s: float = 10.0
    inertia_band_hz: tuple = (0.4, 4.0)
    # A joint whose armature interval comes out wider than armature_goal (the 95 % interval's
    # half-width over the value; 0: off) runs inertia_extend_s more of multi-sine (another
    # phase draw, the same limits; 0: off), and the armature is fit on both runs together.
    armature_goal: float = 0.0
    inertia_extend_s: float = 0.0
    # Robot time (s) one run may spend on extensions (0: no cap): they go to the widest
    # armature intervals first (runner.allot_extensions), once every joint's first multi-sine
    # is fit, so a gantry slot bounds the run whatever the robot's truth.
    inertia_extend_budget_s: float = 0.0
    # latency
    latency_duration_s: float = 4.0
    latency_band_hz: tuple = (1.0, 12.0)
    max_latency_s: float = 0.06
    n_sines: int = 10
    seed: int = 7                    # phases of the multi-sines (deterministic design)
    # kg*m^2 per joint, the heaviest reflected rotor inertia (armature) a joint may have (the
    # motor's rotor inertia x gear ratio^2, with margin). With it the multi-sines are scaled to
    # the torque the PD asks of a joint whose inertia lies between the nominal link's and that
    # plus armature_max (a light joint follows its target: its torque is a fraction of the PD
    # torque of a joint that does not move); None: to the torque of a joint that does not move.
    armature_max: np.ndarray = None

    @classmethod
    def from_params(cls, params, joint_names, kp, kd, source='sysid'):
        """Build from flat node parameters; raise ConfigError naming the parameter."""
        n = len(joint_names)

        def per_joint(key, default=None):
            value = params.get(key, default)
            if value is None:
                raise ConfigError(f'{source}.{key} is missing (one value per joint)')
            arr = np.asarray(value, dtype=float).reshape(-1)
            if arr.size == 1:
                arr = np.full(n, float(arr[0]))
            if arr.size != n or not np.all(np.isfinite(arr)):
                raise ConfigError(f'{source}.{key}: expected {n} finite values (joint_names '
                                  f'{list(joint_names)}), got {value}')
            return arr

        out = cls(joint_names=list(joint_names),
                  hold_position=per_joint('hold_position', [0.0] * n),
                  velocity_limit=per_joint('velocity_limit'),
                  torque_limit=per_joint('torque_limit'),
                  acceleration_limit=per_joint('acceleration_limit', [50.0] * n),
                  kp=per_joint('kp', kp), kd=per_joint('kd', kd))
        if params.get('armature_max') is not None and len(params['armature_max']):
            out.armature_max = per_joint('armature_max')
        if 'position_lower' in params or 'position_upper' in params:
            out.position_lower = per_joint('position_lower', [-np.inf] * n)
            out.position_upper = per_joint('position_upper', [np.inf] * n)
        for key in ('range_margin', 'command_rate_hz', 'approach_speed_fraction', 'settle_s',
                    'sweep_half_range', 'inertia_duration_s', 'latency_duration_s',
                    'max_latency_s', 'friction_settled_s', 'friction_budget_s',
                    'armature_goal', 'inertia_extend_s', 'inertia_extend_budget_s'):
            if key in params:
                setattr(out, key, float(params[key]))
        for key in ('gravity_feedforward',):
            if key in params:
                setattr(out, key, bool(params[key]))
        for key in ('friction_speeds', 'inertia_band_hz', 'latency_band_hz'):
            if key in params:
                setattr(out, key, tuple(float(v) for v in params[key]))
        for key in ('n_sines', 'seed', 'friction_passes'):
            if key in params:
                setattr(out, key, int(params[key]))
        out.validate(source)
        return out

    def validate(self, source='sysid'):
        for key in ('velocity_limit', 'torque_limit', 'acceleration_limit'):
            if np.any(getattr(self, key) <= 0):
                raise ConfigError(f'{source}.{key} must be > 0 for every joint')
        if self.command_rate_hz <= 0 or self.settle_s < 0 or self.sweep_half_range <= 0:
            raise ConfigError(f'{source}: command_rate_hz, sweep_half_range must be > 0 and '
                              'settle_s >= 0')
        if self.friction_passes < 1:
            raise ConfigError(f'{source}.friction_passes must be >= 1')
        if not self.friction_settled_s >= 0:
            raise ConfigError(f'{source}.friction_settled_s must be >= 0 (0: off)')
        if not self.friction_budget_s >= 0:
            raise ConfigError(f'{source}.friction_budget_s must be >= 0 (0: no cap)')
        for key in ('armature_goal', 'inertia_extend_s'):
            if not getattr(self, key) >= 0:
                raise ConfigError(f'{source}.{key} must be >= 0 (0: off)')
        if not self.inertia_extend_budget_s >= 0:
            raise ConfigError(f'{source}.inertia_extend_budget_s must be >= 0 (0: no cap)')
        if 0 < self.inertia_extend_s < 2.0 / self.inertia_band_hz[0]:
            raise ConfigError(f'{source}.inertia_extend_s must be 0 (off) or at least two '
                              f'periods of inertia_band_hz\'s lowest frequency '
                              f'({2.0 / self.inertia_band_hz[0]:g} s)')
        if self.armature_max is not None and np.any(self.armature_max < 0):
            raise ConfigError(f'{source}.armature_max must be >= 0 for every joint (kg*m^2)')
        if len(self.friction_speeds) < 2 or min(self.friction_speeds) <= 0:
            raise ConfigError(f'{source}.friction_speeds needs >= 2 speeds > 0 (Coulomb and '
                              'viscous friction cannot be separated with one)')
        for key in ('inertia_band_hz', 'latency_band_hz'):
            band = getattr(self, key)
            if len(band) != 2 or not 0 < band[0] < band[1]:
                raise ConfigError(f'{source}.{key} must be [low, high] with 0 < low < high')


@dataclass
class Experiment:
    """A command schedule for one joint; rows at the command rate, times from the start."""

    kind: str
    joint: str
    index: int
    names: list
    t: np.ndarray
    position: np.ndarray     # (N, n) targets
    velocity: np.ndarray     # (N, n) targets
    effort: np.ndarray       # (N, n) feed-forward
    segment: np.ndarray      # (N,) segment id of the excitation, -1 outside it
    steady: np.ndarray       # (N,) bool: friction sweep at constant velocity, settled
    target_speed: np.ndarray  # (N,) friction: target velocity of the segment (0 outside)
    phases: list = field(default_factory=list)   # (start_time, name)
    excitation_start: float = 0.0
    # multi-sines: what set the amplitude ('bound': range, velocity, acceleration or torque),
    # its scale and the peak torque the design predicts (N*m); see _multisine
    excitation: dict = field(default_factory=dict)
    # an inertia run added to one whose armature interval was wider than armature_goal (or
    # the two joined: runner.join_runs)
    extension: bool = False

    @property
    def duration(self):
        return float(self.t[-1] - self.t[0]) if len(self.t) else 0.0

    def phase_at(self, t):
        name = self.phases[0][1] if self.phases else ''
        for start, label in self.phases:
            if t >= start:
                name = label
        return name


def _joint_window(settings, index, nominal):
    lo, hi = nominal.position_range[index]
    if settings.position_lower is not None:
        lo = max(lo, settings.position_lower[index])
        hi = min(hi, settings.position_upper[index])
    lo, hi = lo + settings.range_margin, hi - settings.range_margin
    c = float(settings.hold_position[index])
    if not lo < c < hi:
        raise ConfigError(f'hold_position[{index}] = {c} of joint '
                          f'{settings.joint_names[index]!r} is outside its range '
                          f'[{lo:.3f}, {hi:.3f}] (joint range minus range_margin)')
    # the sweep stays clear of the robot's own bodies (a contact torque is no actuator's)
    clear_lo, clear_hi = nominal.clear_range(index, settings.hold_position, lo, hi)
    if not clear_lo < c < clear_hi:
        raise ConfigError(f'joint {settings.joint_names[index]!r}: at hold_position the '
                          'robot touches itself (two of its bodies in contact): choose '
                          'another hold_position')
    # ... also where the joint runs past its target (dynamic_lag): the G1's hanging hip roll
    # swept to -0.31 rad reached -0.38 to -0.42, knee on knee for 0.11 s a run.
    lag = dynamic_lag(settings, index, nominal)
    if clear_lo > lo:
        lo = min(c, clear_lo + lag)
    if clear_hi < hi:
        hi = max(c, clear_hi - lag)
    if not lo < c < hi:
        raise ConfigError(f'joint {settings.joint_names[index]!r}: within {lag:.3f} rad of '
                          'hold_position (the PD lag at acceleration_limit) the robot touches '
                          'itself: choose a hold_position further from the contact, or a '
                          'lower acceleration_limit')
    half = min(settings.sweep_half_range, c - lo, hi - c)
    return c, half


def dynamic_lag(settings, index, nominal):
    """How far (rad) joint `index` may run past its target, at most: the PD's tracking error
    at the acceleration limit, inertia * acceleration / kp, times 1 + its overshoot
    (exp(-pi * zeta / sqrt(1 - zeta^2)), zeta = kd / (2 * sqrt(kp * inertia)); no friction,
    which only damps it). The inertia is the nominal link's at hold_position plus
    armature_max (when given). The G1's hanging hip roll at 20 rad/s^2: 0.13 rad x 1.68."""
    inertia = float(nominal.mass_diagonal(settings.hold_position)[index])
    if settings.armature_max is not None:
        inertia += float(settings.armature_max[index])
    kp, kd = float(settings.kp[index]), float(settings.kd[index])
    if kp <= 0:
        return math.inf     # no position gain: nothing bounds how far the joint runs
    zeta = kd / (2.0 * math.sqrt(kp * inertia)) if inertia > 0 else 1.0
    overshoot = math.exp(-math.pi * zeta / math.sqrt(1.0 - zeta**2)) if zeta < 1.0 else 0.0
    return inertia * float(settings.acceleration_limit[index]) / kp * (1.0 + overshoot)


def _min_jerk(start, goal, duration, rate):
    n = max(2, int(math.ceil(duration * rate)) + 1)
    s = np.linspace(0.0, 1.0, n)
    shape = 10 * s**3 - 15 * s**4 + 6 * s**5
    dshape = (30 * s**2 - 60 * s**3 + 30 * s**4) / duration
    pos = start + (goal - start) * shape[:, None]
    vel = (goal - start) * dshape[:, None]
    return pos, vel


class _Builder:
    """Append rows of targets at the command rate."""

    def __init__(self, settings, index, start):
        self.s = settings
        self.i = index
        self.dt = 1.0 / settings.command_rate_hz
        self.pos = [np.asarray(start, float)[None, :]]
        self.vel = [np.zeros((1, len(start)))]
        self.seg = [np.array([-1])]
        self.steady = [np.array([False])]
        self.speed = [np.array([0.0])]
        self.phases = [(0.0, 'approach')]

    @property
    def rows(self):
        return sum(len(p) for p in self.pos)

    @property
    def now(self):
        return (self.rows - 1) * self.dt

    def append(self, pos, vel, seg=-1, steady=None, speed=0.0):
        k = len(pos)
        self.pos.append(pos)
        self.vel.append(vel)
        self.seg.append(np.full(k, seg))
        self.steady.append(np.zeros(k, bool) if steady is None else steady)
        self.speed.append(np.full(k, speed))

    def hold(self, duration, seg=-1):
        k = int(round(duration / self.dt))
        last = self.pos[-1][-1]
        self.append(np.repeat(last[None, :], k, 0), np.zeros((k, len(last))), seg)

    def approach(self, goal):
        last = self.pos[-1][-1]
        dist = np.abs(goal - last)
        vmax = self.s.approach_speed_fraction * self.s.velocity_limit
        duration = max(0.5, float(np.max(1.875 * dist / vmax)))
        pos, vel = _min_jerk(last, goal, duration, self.s.command_rate_hz)
        self.append(pos[1:], vel[1:])

    def joint_move(self, goal, speed, seg, settle):
        """Trapezoidal move of the tested joint; constant-speed rows after `settle` are steady."""
        last = self.pos[-1][-1]
        start = last[self.i]
        dist = goal - start
        direction = math.copysign(1.0, dist)
        acc = float(self.s.acceleration_limit[self.i])
        t_acc = speed / acc
        if abs(dist) < speed * t_acc:      # triangle profile
            t_acc = math.sqrt(abs(dist) / acc)
            speed = acc * t_acc
        t_const = abs(dist) / speed - t_acc
        total = 2 * t_acc + t_const
        t = np.arange(1, int(math.ceil(total / self.dt)) + 1) * self.dt
        t = np.minimum(t, total)
        v = np.where(t < t_acc, acc * t, np.where(t < t_acc + t_const, speed,
                                                  acc * np.maximum(total - t, 0.0)))
        p = np.where(t < t_acc, 0.5 * acc * t**2,
                     np.where(t < t_acc + t_const, 0.5 * acc * t_acc**2 + speed * (t - t_acc),
                              abs(dist) - 0.5 * acc * np.maximum(total - t, 0.0)**2))
        pos = np.repeat(last[None, :], len(t), 0)
        vel = np.zeros_like(pos)
        pos[:, self.i] = start + direction * p
        vel[:, self.i] = direction * v
        steady = (t >= t_acc + settle) & (t < t_acc + t_const)
        self.append(pos, vel, seg, steady, direction * speed)

    def build(self, kind, nominal, names):
        pos = np.concatenate(self.pos)
        vel = np.concatenate(self.vel)
        t = np.arange(len(pos)) * self.dt
        if self.s.gravity_feedforward:
            effort = nominal.gravity(pos)
        else:
            effort = np.zeros_like(pos)
        seg = np.concatenate(self.seg)
        start = float(t[np.argmax(seg >= 0)]) if np.any(seg >= 0) else 0.0
        return Experiment(kind, names[self.i], self.i, list(names), t, pos, vel, effort, seg,
                          np.concatenate(self.steady), np.concatenate(self.speed),
                          self.phases, start)


def pd_torque(w, kp, kd, inertia):
    """Complex gain from a position target's component at `w` rad/s to the PD's torque.

    A joint of `inertia` (kg*m^2, link + armature), gravity fed forward, no friction (the
    least damped case), J*qdd = kp*(q_t - q) + kd*(qd_t - qd): the torque is J*qdd =
    -J*w^2 * (kp + i*kd*w) / (kp - J*w^2 + i*kd*w) times the target. A joint that does not
    move (inertia -> infinity) gives kp + i*kd*w; near the closed loop's resonance a lightly
    damped one needs more.
    """
    w = np.asarray(w, float)
    pd = kp + 1j * kd * w
    return -inertia * w**2 * pd / (kp - inertia * w**2 + 1j * kd * w)


def _multisine(settings, index, band, duration, half, seed, link_inertia=None):
    """Target offset, velocity and the design's facts of a Schroeder-phased multi-sine.

    The amplitude is the largest the limits allow: 0.8 of the half range, of velocity_limit
    and of acceleration_limit, and half of torque_limit for the torque the design predicts.
    With settings.armature_max and the nominal `link_inertia`, that torque is the PD's on a
    joint whose inertia lies anywhere between the link's and the link's plus armature_max
    (the largest over that range, the components with their phases); without them, the PD
    torque if the joint did not move at all (kp * target + kd * target rate), which over-
    states a light joint's torque ~10 times (arm3's elbow: 8 % of its torque limit used).
    Returns (offset, velocity, facts): facts names the limit that set the amplitude
    ('bound'), the amplitude scale, the predicted peak torque (N*m) and the amplitude over
    the one a joint that does not move would get ('gain_over_still').
    """
    rate = settings.command_rate_hz
    n = settings.n_sines
    t = np.arange(int(round(duration * rate))) / rate
    # Frequencies on the period's grid (log-spaced), so every component has whole cycles.
    f = np.unique(np.round(np.geomspace(band[0], band[1], n) * duration) / duration)
    k = np.arange(1, len(f) + 1)
    phase = -np.pi * k * (k - 1) / len(f) + np.random.default_rng(seed).uniform(0, 0.1, len(f))
    w = 2 * np.pi * f
    amp = 1.0 / w                                     # equal velocity per component
    arg = np.outer(t, w) + phase
    sin, cos = np.sin(arg), np.cos(arg)
    pos = sin @ amp
    vel = cos @ (amp * w)
    acc = -sin @ (amp * w**2)
    kp, kd = settings.kp[index], settings.kd[index]
    # The PD torque if the joint did not move at all.
    tau_still = float(np.max(np.abs(kp * pos + kd * vel)))
    tau_bound = tau_still
    if settings.armature_max is not None and link_inertia is not None:
        lo = max(float(link_inertia), 1e-6)
        hi = lo + float(settings.armature_max[index])
        peak = 0.0
        for inertia in np.unique(np.concatenate([np.geomspace(lo, hi, 24),
                                                 np.linspace(lo, hi, 24)])):
            h = pd_torque(w, kp, kd, inertia)
            peak = max(peak, float(np.max(np.abs(sin @ (amp * h.real) + cos @ (amp * h.imag)))))
        tau_bound = peak
    scales = {'range': 0.8 * half / np.max(np.abs(pos)),
              'velocity': 0.8 * settings.velocity_limit[index] / np.max(np.abs(vel)),
              'acceleration': 0.8 * settings.acceleration_limit[index] / np.max(np.abs(acc)),
              'torque': 0.5 * settings.torque_limit[index] / tau_bound}
    bound = min(scales, key=scales.get)
    scale = float(scales[bound])
    still = min(min(v for k, v in scales.items() if k != 'torque'),
                0.5 * settings.torque_limit[index] / tau_still)
    # Fade in and out over 0.25 s (keeps velocity and acceleration continuous).
    ramp = np.clip(np.minimum(t, duration - t) / 0.25, 0.0, 1.0)
    env = ramp**2 * (3 - 2 * ramp)
    denv = np.gradient(env, t)
    facts = {'bound': bound, 'scale': scale, 'predicted_torque': scale * tau_bound,
             'gain_over_still': scale / still,
             'torque_model': ('link + armature_max' if settings.armature_max is not None
                              and link_inertia is not None else 'joint that does not move')}
    return scale * pos * env, scale * (vel * env + pos * denv), facts


# A sweep's samples count as settled this many time constants of the joint's PD loop after
# its acceleration ends (the velocity error down to e^-2 = 14 %, inside the 25 % band the
# friction estimate keeps; its acceleration column takes out the rest), and at most settle_s.
SETTLE_TIME_CONSTANTS = 2.0


def loop_time_constant(settings, index, nominal):
    """The slowest time constant (s) of joint `index`'s PD loop, J*s^2 + kd*s + kp = 0.

    J is the nominal link's inertia at hold_position, or that plus armature_max (when
    given), whichever is slower; no friction (which only damps it). Underdamped: 2*J/kd (the
    envelope); overdamped: the slow root's. The G1's hanging hip pitch 0.86 s, its ankles
    0.05 s (kp 40, kd 2: the slow root ~kp/kd whatever the armature).
    """
    link = float(nominal.mass_diagonal(settings.hold_position)[index])
    kp, kd = float(settings.kp[index]), float(settings.kd[index])
    if kd <= 0:
        return math.inf
    inertias = [max(link, 1e-9)]
    if settings.armature_max is not None:
        inertias.append(link + float(settings.armature_max[index]))
    out = 0.0
    for inertia in inertias:
        disc = kd * kd - 4.0 * inertia * kp
        tau = (2.0 * inertia / kd if disc < 0 else
               2.0 * inertia / (kd - math.sqrt(disc)) if kd > math.sqrt(disc) else math.inf)
        out = max(out, tau)
    return out


def sweep_settle(settings, index, nominal):
    """Seconds after a sweep's acceleration before its samples count as settled:
    SETTLE_TIME_CONSTANTS of the joint's PD loop (loop_time_constant), at most settle_s.
    A light joint settles in a fraction of settle_s: the G1's ankle roll, 0.42 rad of sweep
    at +-0.21 rad, had no settled sample at 1.8 rad/s and 0.07 s a sweep at 1 rad/s with
    settle_s 0.3; with 0.1 s, 0.04 and 0.27 s."""
    return min(settings.settle_s,
               SETTLE_TIME_CONSTANTS * loop_time_constant(settings, index, nominal))


def settled_per_sweep(settings, index, half, speed, settle=None):
    """Seconds of one sweep over 2 * `half` at `speed` that count as settled constant speed
    (`settle`: the sweep's settle time, sweep_settle; default settle_s)."""
    settle = settings.settle_s if settle is None else settle
    acc = float(settings.acceleration_limit[index])
    t_acc = speed / acc
    if 2 * half < speed * t_acc:       # triangle profile: never at the speed
        return 0.0
    return max(0.0, 2 * half / speed - t_acc - settle)


def friction_passes(settings, index, half, joint, settle=None):
    """[(speed, passes)] of the friction sweeps of joint `index` over +-`half` rad.

    Speeds are capped at 0.9 * velocity_limit. With friction_settled_s, each speed gets the
    passes (at least friction_passes) that give it that settled time per direction: a sweep
    at the top speed is short and its first `settle` s (sweep_settle; default settle_s) are
    not steady, so without them the top speed, which carries the viscous friction, had 1 %
    of the lowest speed's samples (the G1's hip pitch: 0.13 s against 12 s). A speed whose
    sweep never settles is left out.
    With friction_budget_s too, those passes are granted while the experiment fits in it
    (_fit_budget): a short sweep's joint gets the time a long one spends on range.
    """
    vmax = 0.9 * settings.velocity_limit[index]
    speeds = sorted({min(float(v), vmax) for v in settings.friction_speeds})
    out = []
    for v in speeds:
        settled = settled_per_sweep(settings, index, half, v, settle)
        passes = settings.friction_passes
        if settings.friction_settled_s > 0:
            if settled <= 0:
                continue
            passes = max(passes, math.ceil(settings.friction_settled_s / settled - 1e-9))
        out.append((v, passes))
    if settings.friction_budget_s > 0 and settings.friction_settled_s > 0:
        out = _fit_budget(settings, index, half, out)
    if len(out) < 2:
        raise ConfigError(f'friction_speeds: fewer than 2 distinct speeds below 0.9 * '
                          f'velocity_limit ({vmax:.3f} rad/s) settle within the sweep of '
                          f'{joint!r} (+-{half:.3f} rad, settled after '
                          f'{settings.settle_s if settle is None else settle:.3g} s): '
                          'lower the speeds or settle_s')
    return out


def pass_seconds(settings, index, half, speed):
    """Seconds of one back-and-forth sweep over 2 * `half` at `speed` (trapezoids)."""
    acc = float(settings.acceleration_limit[index])
    if 2 * half < speed * speed / acc:      # triangle profile
        return 2 * 2 * math.sqrt(2 * half / acc)
    return 2 * (2 * half / speed + speed / acc)


def friction_overhead_s(settings, index, half):
    """Seconds of a friction experiment outside its sweeps, started at hold_position: the
    approach to one end of the sweep, the settle there and the return."""
    vmax = settings.approach_speed_fraction * float(settings.velocity_limit[index])
    return 2 * max(0.5, 1.875 * half / vmax) + settings.settle_s


def _fit_budget(settings, index, half, wanted):
    """[(speed, passes)] within friction_budget_s: from friction_passes at every speed, one
    pass at a time to the speed furthest below the passes it wants (`wanted`), while the
    experiment fits. The minimum passes are kept even where they alone exceed the budget."""
    passes = {v: min(n, settings.friction_passes) for v, n in wanted}
    want = dict(wanted)
    total = friction_overhead_s(settings, index, half) + sum(
        n * pass_seconds(settings, index, half, v) for v, n in passes.items())
    while True:
        fits = [v for v in passes if passes[v] < want[v]
                and total + pass_seconds(settings, index, half, v)
                <= settings.friction_budget_s + 1e-9]
        if not fits:
            break
        v = min(fits, key=lambda x: (passes[x] / want[x], -x))
        passes[v] += 1
        total += pass_seconds(settings, index, half, v)
    return [(v, passes[v]) for v, _ in wanted]


def design_for(kind, joint, settings, nominal, current_position):
    """Return the Experiment `kind` for joint `joint`, starting at `current_position`."""
    if kind not in KINDS:
        raise ValueError(f'unknown experiment {kind!r}; expected one of {KINDS}')
    names = settings.joint_names
    if joint not in names:
        raise ConfigError(f'joint {joint!r} is not in joint_names {names}')
    i = names.index(joint)
    current = np.asarray(current_position, float)
    if current.shape != (len(names),) or not np.all(np.isfinite(current)):
        raise ValueError(f'current position must be {len(names)} finite values')
    c, half = _joint_window(settings, i, nominal)
    b = _Builder(settings, i, current)
    hold = settings.hold_position.astype(float).copy()
    if kind == 'friction':
        start = hold.copy()
        start[i] = c - half
        b.approach(start)
        b.hold(settings.settle_s)
        b.phases.append((b.now, 'sweeps'))
        seg = 0
        settle = sweep_settle(settings, i, nominal)
        for v, passes in friction_passes(settings, i, half, joint, settle):
            b.phases.append((b.now, f'sweep {v:.2f} rad/s'))
            for _ in range(passes):
                b.joint_move(c + half, v, seg, settle)
                b.joint_move(c - half, v, seg + 1, settle)
                seg += 2
        b.phases.append((b.now, 'return'))
        b.approach(hold)
    else:
        duration = (settings.inertia_duration_s if kind == 'inertia'
                    else settings.latency_duration_s)
        band = settings.inertia_band_hz if kind == 'inertia' else settings.latency_band_hz
        b.approach(hold)
        b.hold(settings.settle_s)
        b.phases.append((b.now, 'excitation'))
        link = (float(nominal.mass_diagonal(hold)[i]) if settings.armature_max is not None
                else None)
        dq, dv, facts = _multisine(settings, i, band, duration, half, settings.seed, link)
        pos = np.repeat(hold[None, :], len(dq), 0)
        vel = np.zeros_like(pos)
        pos[:, i] += dq
        vel[:, i] = dv
        b.append(pos, vel, seg=0)
        b.phases.append((b.now, 'settle'))
        b.hold(settings.settle_s)
        exp = b.build(kind, nominal, names)
        exp.excitation = facts
        return exp
    return b.build(kind, nominal, names)


def design_extension(joint, settings, nominal, current_position):
    """The inertia multi-sine added to a joint whose armature interval came out wider than
    `armature_goal`: `inertia_extend_s` long, another draw of the phases (seed + 1), the same
    limits and scaling rules as the first."""
    longer = replace(settings, inertia_duration_s=settings.inertia_extend_s,
                     seed=settings.seed + 1)
    exp = design_for('inertia', joint, longer, nominal, current_position)
    exp.extension = True
    exp.phases = [(t, f'{name} (extension)') for t, name in exp.phases]
    return exp


def extension_cost(settings, nominal, joints=None):
    """Robot time (s) of the extension each joint may get (an empty dict when off)."""
    if settings.armature_goal <= 0 or settings.inertia_extend_s <= 0:
        return {}
    hold = settings.hold_position.astype(float)
    return {j: design_extension(j, settings, nominal, hold).duration
            for j in (joints or settings.joint_names)}


def check_limits(experiment, settings, nominal):
    """Return a list of violations (empty when every command is inside the SysID limits)."""
    problems = []
    i = experiment.index
    lo, hi = nominal.position_range[:, 0], nominal.position_range[:, 1]
    if np.any(experiment.position < lo) or np.any(experiment.position > hi):
        problems.append('position target outside the joint range')
    if np.any(np.abs(experiment.velocity) > settings.velocity_limit * (1 + 1e-9)):
        problems.append('velocity target above velocity_limit')
    if np.any(np.abs(experiment.effort) > settings.torque_limit):
        problems.append('feed-forward effort above torque_limit')
    del i
    return problems


def limit_usage(settings, rec):
    """Return the largest fraction of each SysID limit the sent commands used (<= 1 is inside).

    torque: the torque a command implies at the measured state, kp*(q_t - q) + kd*(dq_t - dq)
    + effort, as the supervisor computes it; target_rate: the position target's rate of change.
    """
    rows = np.clip(np.searchsorted(rec.cmd_t, rec.t, side='right') - 1, 0, len(rec.cmd_t) - 1)
    implied = (settings.kp * (rec.cmd_position[rows] - rec.position)
               + settings.kd * (rec.cmd_velocity[rows] - rec.velocity) + rec.cmd_effort[rows])
    rate = (np.abs(np.diff(rec.cmd_position, axis=0))
            / np.maximum(np.diff(rec.cmd_t), 1e-9)[:, None])
    lo = settings.position_lower if settings.position_lower is not None else -np.inf
    hi = settings.position_upper if settings.position_upper is not None else np.inf
    outside = np.any((rec.cmd_position < lo) | (rec.cmd_position > hi))
    return {'torque': float(np.max(np.abs(implied) / settings.torque_limit)),
            'velocity': float(np.max(np.abs(rec.cmd_velocity) / settings.velocity_limit)),
            'target_rate': float(np.max(rate / settings.velocity_limit)) if len(rate) else 0.0,
            'position_inside': not bool(outside)}


# The held targets' ripple (check_sample_rate): harmonics looked at, and how near 0 Hz an
# alias must come to read as friction (a sweep's settled time at one speed is about 1 s).
RIPPLE_HARMONICS = 10
RIPPLE_NEAR_HZ = 2.0


def ripple_alias(command_rate_hz, sample_rate_hz, harmonics=RIPPLE_HARMONICS):
    """The lowest harmonic of the command rate that the sample rate folds to within
    RIPPLE_NEAR_HZ of 0 Hz, as (harmonic, alias Hz), or None.

    A position target held for one command period makes the PD torque a sawtooth at the
    command rate (kp * speed / rate peak to peak, harmonic k at 1/k of it). Sampled at a rate
    its k-th harmonic is a multiple of, the joint state reads the sawtooth at one phase each
    time: a torque offset proportional to the speed, which the fits take for viscous friction.
    arm3 (bench --sample-rate-hz) read viscous friction 32 % off, with intervals of 1-2 %,
    at 500 Hz commands and a 500 Hz robot, and -4.6 to +5.7 % at 240 Hz commands and 200 Hz (the
    5th harmonic); 230 Hz commands at 200 Hz and 240 Hz at 250 or 500 Hz read within 3 %.
    """
    for k in range(1, harmonics + 1):
        f = k * command_rate_hz
        alias = abs(f - round(f / sample_rate_hz) * sample_rate_hz)
        if alias < RIPPLE_NEAR_HZ:
            return k, alias
    return None


def clear_command_rate(command_rate_hz, sample_rate_hz, harmonics=RIPPLE_HARMONICS):
    """The whole-Hz command rate nearest `command_rate_hz` (within 30 %) whose first
    `harmonics` harmonics all fold at least 2 x RIPPLE_NEAR_HZ from 0 Hz at `sample_rate_hz`,
    or None."""
    def margin(rate):
        return min(abs(k * rate - round(k * rate / sample_rate_hz) * sample_rate_hz)
                   for k in range(1, harmonics + 1))
    base = int(round(command_rate_hz))
    for step in range(0, int(0.3 * base) + 1):
        for rate in (base - step, base + step):
            if rate >= 20 and margin(rate) >= 2 * RIPPLE_NEAR_HZ:
                return rate
    return None


def check_sample_rate(settings, sample_rate_hz, source='sysid'):
    """None when `sample_rate_hz` (the joint states' rate) and settings.command_rate_hz keep
    the held targets' ripple out of the fits (ripple_alias), else why, naming the parameter
    and a rate that does."""
    hit = ripple_alias(settings.command_rate_hz, sample_rate_hz)
    if hit is None:
        return None
    k, alias = hit
    better = clear_command_rate(settings.command_rate_hz, sample_rate_hz)
    fix = (f'set {source}.command_rate_hz to {better}' if better is not None else
           f'choose {source}.command_rate_hz so that no harmonic up to the '
           f'{RIPPLE_HARMONICS}th is within {RIPPLE_NEAR_HZ:g} Hz of a multiple of the joint '
           'states\' rate')
    nth = {1: 'fundamental', 2: '2nd harmonic', 3: '3rd harmonic'}.get(k, f'{k}th harmonic')
    return (f'joint_states come at {sample_rate_hz:.1f} Hz and {source}.command_rate_hz is '
            f'{settings.command_rate_hz:g} Hz: the {nth} ({k * settings.command_rate_hz:g} Hz) '
            'of the PD torque\'s ripple under the held position targets is sampled at '
            f'{alias:.2f} Hz, where the fits read it as friction (a torque in proportion to the '
            f'speed); {fix}')


NODE_OF = {'friction': 'friction_id', 'inertia': 'inertia_id', 'latency': 'latency_id'}


def load_settings(config_path, kind):
    """SysidSettings of experiment `kind` from a robot parameter file (its <kind>_id section)."""
    from simreal_ros.core.config import load_node_params
    node = NODE_OF[kind]
    params = load_node_params(config_path, node)
    names = params.get('joint_names')
    if not names:
        raise ConfigError(f'{config_path}: joint_names missing (in /** or {node})')
    if 'velocity_limit' not in params:
        raise ConfigError(f'{config_path}: section {node} (velocity_limit, torque_limit, ...) is '
                          'missing; see config/robots/arm3.yaml')
    return SysidSettings.from_params(params, list(names), params.get('kp'), params.get('kd'),
                                     source=f'{config_path}:{node}')


def plan(config_path, kinds=KINDS, joints=None, nominal=None):
    """The schedule every SysID experiment of a robot file would run, without moving anything.

    Return {'robot_file', 'experiments': [{kind, joint, duration_s, range_rad, peak_speed,
    velocity_limit, peak_torque, torque_limit, excitation, violations}], 'total_s',
    'per_joint_s'}: each joint's
    experiment designed from the hold pose as the node designs it (every experiment ends
    there), checked against the SysID limits. peak_torque is the torque the nominal links
    need along the planned targets (inverse dynamics, no actuator friction) plus the torque
    limit the design itself keeps (the multi-sine's PD bound); excitation (multi-sines) names
    the limit that set the amplitude and the PD torque predicted for it; per_joint_s is each
    joint's robot time over the kinds planned; violations names any command outside the
    limits (a plan with one must not be run).
    """
    from simreal_ros.core.config import load_node_params, resolve_path
    from simreal_ros.core.sysid.model import NominalModel
    rows = []
    budget = 0.0
    for kind in kinds:
        node = NODE_OF[kind]
        settings = load_settings(config_path, kind)
        params = load_node_params(config_path, node)
        if kind == 'inertia':
            budget = settings.inertia_extend_budget_s
        if nominal is None:
            path = resolve_path(params.get('model_path', ''), f'{config_path}:{node}.model_path',
                                relative_to=Path(config_path).parent)
            nominal = NominalModel(path, settings.joint_names)
        names = settings.joint_names
        chosen = list(joints or params.get('joints') or names)
        unknown = [j for j in chosen if j not in names]
        if unknown:
            raise ConfigError(f'{config_path}:{node}: joints {unknown} not in joint_names')
        start = settings.hold_position.astype(float)
        for joint in chosen:
            exp = design_for(kind, joint, settings, nominal, start)
            start = exp.position[-1]
            i = exp.index
            dt = 1.0 / settings.command_rate_hz
            acc = np.gradient(exp.velocity, dt, axis=0)
            rigid = nominal.inverse_dynamics(exp.position[::4], exp.velocity[::4],
                                             acc[::4])[:, i]
            sweeps = (friction_passes(settings, i, _joint_window(settings, i, nominal)[1], joint,
                                      sweep_settle(settings, i, nominal))
                      if kind == 'friction' else None)
            rows.append({
                'kind': kind, 'joint': joint, 'duration_s': round(exp.duration, 2),
                'range_rad': [round(float(exp.position[:, i].min()), 3),
                              round(float(exp.position[:, i].max()), 3)],
                'peak_speed': round(float(np.max(np.abs(exp.velocity[:, i]))), 3),
                'velocity_limit': float(settings.velocity_limit[i]),
                'speeds': ([round(float(v), 3) for v, _ in sweeps] if sweeps else None),
                'passes': ([n for _, n in sweeps] if sweeps else None),
                # friction: seconds after each sweep's acceleration before its samples count
                'settle_s': (round(sweep_settle(settings, i, nominal), 3)
                             if kind == 'friction' else None),
                'peak_torque': round(float(np.max(np.abs(rigid))), 2),
                'torque_limit': float(settings.torque_limit[i]),
                # multi-sines: the limit that set the amplitude and the PD torque the design
                # predicts for it (link + armature_max, or a joint that does not move)
                'excitation': ({'bound': exp.excitation['bound'],
                                'predicted_torque': round(exp.excitation['predicted_torque'], 2),
                                'gain_over_still': round(exp.excitation['gain_over_still'], 2),
                                'torque_model': exp.excitation['torque_model']}
                               if exp.excitation else None),
                'violations': check_limits(exp, settings, nominal) + _soft_limits(exp,
                                                                                  settings)})
            if kind == 'inertia' and extension_cost(settings, nominal, [joint]):
                # The extension a joint may get (armature_goal): its time, and its own check.
                ext = design_extension(joint, settings, nominal, start)
                rows[-1]['extension'] = {
                    'duration_s': round(ext.duration, 2),
                    'armature_goal': settings.armature_goal,
                    'violations': check_limits(ext, settings, nominal) + _soft_limits(
                        ext, settings)}
                rows[-1]['violations'] += [f'extension: {v}' for v in
                                           rows[-1]['extension']['violations']]
    per_joint, extra = {}, {}
    for r in rows:
        per_joint[r['joint']] = round(per_joint.get(r['joint'], 0.0) + r['duration_s'], 2)
        if r.get('extension'):
            extra[r['joint']] = r['extension']['duration_s']
    return {'robot_file': str(config_path), 'experiments': rows,
            'total_s': round(sum(r['duration_s'] for r in rows), 1),
            'per_joint_s': per_joint,
            # every joint's inertia extension (armature_goal), and what a run may spend on
            # them at most: inertia_extend_budget_s (0: no cap) bounds it
            'extensions_s': round(sum(extra.values()), 1),
            'extension_budget_s': budget,
            'extensions_max_s': round(min(sum(extra.values()), budget)
                                      if budget > 0 else sum(extra.values()), 1),
            'per_joint_max_s': {j: round(v + extra.get(j, 0.0), 2)
                                for j, v in per_joint.items()}}


def _soft_limits(exp, settings):
    if settings.position_lower is None:
        return []
    i = exp.index
    q = exp.position[:, i]
    if np.any(q < settings.position_lower[i] - 1e-9) or np.any(q > settings.position_upper[i]
                                                              + 1e-9):
        return ['position target outside the SysID soft limits (position_lower/upper)']
    return []

"""The safety limit filter: pure functions from (command, state, limits, stage) to a safe command.

A command names joints (a subset of the robot's, by name) and carries any of three fields, as a
`sensor_msgs/JointState` on `hardware/command` does: position targets, velocity targets,
feed-forward effort. The driver turns it into a torque

    tau = kp * (q_t - q) + kd * (dq_t - dq) + tau_ff

(velocity target 0 when only positions are given; no position term when positions are absent).

`validate_command` rejects a malformed command as a whole (`Rejected` with the reason): unknown or
duplicate names, no names, a field whose length differs from the names, non-finite values, no
field at all. A rejected command is never forwarded, not even partly.

`filter_command` clips a valid command, joint by joint, in this order (later rules win):

1. position targets into the soft limits `[position_lower, position_upper]`;
2. position target changes to `max_target_rate * scale * dt` from the previous output target
   (from the measured position when there is none); the supervisor's dt is the time since
   that target last moved, capped by the source's timeout (`Supervisor.rate_dt`); and the
   target's rate of change (the step over the time since the target last moved) may grow
   beyond the previous one (the measured velocity when there is none) by at most
   `max_target_accel * scale * dt`, and a reversal first stops; slowing towards the command is
   not limited, so the target never passes the command (counted as `acceleration`);
3. velocity targets to `+-velocity_limit * scale`, feed-forward effort to `+-torque_limit * scale`;
4. the torque the command implies (the formula above, with the measured q, dq) into
   `+-torque_limit * scale`, by moving the position target (or, without one, the velocity target,
   then the effort); when a joint moves faster than `velocity_limit * scale`, the implied torque
   may only brake it (a velocity clip).

5. the position target, last, into the soft limits again, whatever the measured state: a
   glitched or out-of-range measurement can never drag a target outside the range.

The torque rule wins over the rate rules: a target is never left where it would push harder
than the torque limit, unless the measured state is outside the position range, where the
range wins (rule 5). Every clip is counted per joint and kind (`KINDS`).
"""
from dataclasses import dataclass

import numpy as np

from simreal_ros.core.config import ConfigError

KINDS = ('position', 'rate', 'acceleration', 'velocity', 'torque')
MIN_GAIN = 1e-6  # a PD gain is either 0 (absent) or at least this (a usable knob)
LIMIT_KEYS = ('kp', 'kd', 'position_lower', 'position_upper', 'velocity_limit', 'torque_limit',
              'max_target_rate')
OPTIONAL_KEYS = ('max_target_accel',)   # absent or empty: no acceleration limit (inf)


class Rejected(ValueError):
    """A command that must not be forwarded at all; the message says why."""


@dataclass(frozen=True)
class Limits:
    """Per-joint limits of one command source at stage scale 1.0, and the driver's PD gains."""

    names: tuple
    kp: np.ndarray
    kd: np.ndarray
    position_lower: np.ndarray
    position_upper: np.ndarray
    velocity_limit: np.ndarray
    torque_limit: np.ndarray
    max_target_rate: np.ndarray
    max_target_accel: np.ndarray = None   # rad/s^2 per joint; inf = off

    def __post_init__(self):
        if self.max_target_accel is None:
            object.__setattr__(self, 'max_target_accel', np.full(len(self.names), np.inf))

    @classmethod
    def from_mapping(cls, names, data, source='safety_supervisor'):
        """Build from per-joint lists (one value broadcasts); ConfigError naming the parameter."""
        names = tuple(str(n) for n in names)
        if not names:
            raise ConfigError(f'{source}: joint_names is empty; list the joints to supervise')
        if len(set(names)) != len(names):
            raise ConfigError(f'{source}: joint_names has duplicates: {list(names)}')
        values = {}
        for key in LIMIT_KEYS:
            if key not in data or data[key] is None or len(np.atleast_1d(data[key])) == 0:
                raise ConfigError(f'{source}.{key} is missing: give one value per joint '
                                  f'({len(names)} joints: {list(names)})')
            arr = np.asarray(data[key], dtype=float).reshape(-1)
            if arr.size == 1:
                arr = np.full(len(names), float(arr[0]))
            if arr.size != len(names):
                raise ConfigError(f'{source}.{key} has {arr.size} values for {len(names)} '
                                  f'joints {list(names)}')
            if not np.isfinite(arr).all():
                raise ConfigError(f'{source}.{key} must be finite, got {arr.tolist()}')
            values[key] = arr
        accel = data.get('max_target_accel')
        if accel is not None and len(np.atleast_1d(accel)) > 0:
            arr = np.asarray(accel, dtype=float).reshape(-1)
            if arr.size == 1:
                arr = np.full(len(names), float(arr[0]))
            if arr.size != len(names) or np.any(np.isnan(arr)) or np.any(arr <= 0):
                raise ConfigError(f'{source}.max_target_accel needs one value > 0 per joint '
                                  f'({len(names)} joints), got {arr.tolist()}')
            values['max_target_accel'] = arr
        for key in ('kp', 'kd'):
            v = values[key]
            if np.any(v < 0) or np.any((v > 0) & (v < MIN_GAIN)):
                raise ConfigError(f'{source}.{key} must be 0 or >= {MIN_GAIN:g} per joint (the '
                                  f'gains the driver applies), got {v.tolist()}')
        for key in ('velocity_limit', 'torque_limit', 'max_target_rate'):
            if np.any(values[key] <= 0):
                raise ConfigError(f'{source}.{key} must be > 0, got {values[key].tolist()}')
        if np.any(values['position_lower'] >= values['position_upper']):
            raise ConfigError(f'{source}: position_lower must be < position_upper per joint, got '
                              f'{values["position_lower"].tolist()} / '
                              f'{values["position_upper"].tolist()}')
        return cls(names, **values)

    def tightened(self, data, source):
        """Return limits no looser than these: each given value is min'ed (range intersected)."""
        out = {}
        n = len(self.names)
        for key in ('position_lower', 'position_upper', 'velocity_limit', 'torque_limit',
                    'max_target_rate', 'max_target_accel'):
            own = getattr(self, key)
            value = data.get(key)
            if value is None or len(np.atleast_1d(value)) == 0:
                out[key] = own.copy()
                continue
            arr = np.asarray(value, dtype=float).reshape(-1)
            if arr.size == 1:
                arr = np.full(n, float(arr[0]))
            if arr.size != n or not np.isfinite(arr).all():
                raise ConfigError(f'{source}.{key}: expected {n} finite values, got '
                                  f'{arr.tolist()}')
            if key == 'max_target_accel' and np.any(arr <= 0):
                raise ConfigError(f'{source}.{key} must be > 0, got {arr.tolist()}')
            out[key] = np.maximum(own, arr) if key == 'position_lower' else np.minimum(own, arr)
        if np.any(out['position_lower'] >= out['position_upper']):
            raise ConfigError(f'{source}: the position range does not overlap the main limits')
        if any(np.any(out[k] <= 0) for k in ('velocity_limit', 'torque_limit',
                                             'max_target_rate')):
            raise ConfigError(f'{source}: velocity_limit, torque_limit, max_target_rate must '
                              'be > 0')
        return Limits(self.names, self.kp.copy(), self.kd.copy(), **out)

    def scaled_speed(self, factor):
        """Return these limits with velocity, torque and rate multiplied by factor (0, 1]."""
        return Limits(self.names, self.kp, self.kd, self.position_lower, self.position_upper,
                      self.velocity_limit * factor, self.torque_limit * factor,
                      self.max_target_rate * factor, self.max_target_accel * factor)


@dataclass
class Command:
    """A validated command: joint indices into Limits.names and its fields (None = absent)."""

    index: np.ndarray
    position: np.ndarray = None
    velocity: np.ndarray = None
    effort: np.ndarray = None

    def copy(self):
        return Command(self.index.copy(),
                       *(None if v is None else v.copy()
                         for v in (self.position, self.velocity, self.effort)))


def _clip(x, lo, hi):
    """np.clip, without its Python-level dispatch (half its cost on a robot's dozen joints,
    at 500 Hz): the same minimum(maximum()) for arrays, NaN passing through."""
    return np.minimum(np.maximum(x, lo), hi)


def validate_command(names, position, velocity, effort, joint_names):
    """Return a Command, or raise Rejected naming what is wrong (nothing is partly used)."""
    names = [str(n) for n in names]
    if not names:
        raise Rejected('command names no joints')
    lookup = {n: i for i, n in enumerate(joint_names)}
    unknown = [n for n in names if n not in lookup]
    if unknown:
        raise Rejected(f'unknown joint name(s) {unknown}; supervised joints are '
                       f'{list(joint_names)}')
    if len(set(names)) != len(names):
        raise Rejected(f'duplicate joint names in command: {names}')
    fields = {}
    for key, values in (('position', position), ('velocity', velocity), ('effort', effort)):
        try:
            arr = np.asarray(values, dtype=float).reshape(-1)
        except (TypeError, ValueError) as exc:
            raise Rejected(f'{key} is not numeric: {exc}') from exc
        if arr.size == 0:
            fields[key] = None
            continue
        if arr.size != len(names):
            raise Rejected(f'{key} has {arr.size} values for {len(names)} names')
        if not np.isfinite(arr).all():
            bad = [names[i] for i in np.flatnonzero(~np.isfinite(arr))]
            raise Rejected(f'{key} has non-finite values for {bad}')
        fields[key] = arr
    if all(v is None for v in fields.values()):
        raise Rejected('command has no position, velocity or effort values')
    return Command(np.array([lookup[n] for n in names], dtype=int), **fields)


def implied_torque(limits, cmd, q, dq):
    """Return the torque the driver computes from cmd at state (q, dq), per commanded joint."""
    i = cmd.index
    kp, kd = limits.kp[i], limits.kd[i]
    has_p = cmd.position is not None
    tau = np.zeros(i.size)
    if has_p:
        tau += kp * (cmd.position - q[i])
    if has_p or cmd.velocity is not None:
        v_t = cmd.velocity if cmd.velocity is not None else 0.0
        tau += kd * (v_t - dq[i])
    if cmd.effort is not None:
        tau += cmd.effort
    return tau


def torque_window(limits, scale, index, dq):
    """Return the allowed implied-torque interval (lo, hi): +-torque limit, braking if too fast."""
    tmax = limits.torque_limit[index] * scale
    vmax = limits.velocity_limit[index] * scale
    lo, hi = -tmax, tmax.copy()
    hi = np.where(dq[index] > vmax, np.minimum(hi, 0.0), hi)
    lo = np.where(dq[index] < -vmax, np.maximum(lo, 0.0), lo)
    return lo, hi


def filter_command(limits, scale, cmd, q, dq, previous_target, dt, previous_rate=None,
                   accel_dt_floor=0.0):
    """Return (safe command, clips) for a validated command at state (q, dq).

    `previous_target` holds the last forwarded position target per joint (NaN = none, then the
    rate limit starts from the measured position); `dt` (s, one value or one per robot joint)
    is how long the rate limit may move it for; `previous_rate` (per robot joint, NaN or None =
    unknown: the measured velocity) is the target's last rate of change, for the
    acceleration limit, which allows a change of rate of the limit times `dt`, or times
    `accel_dt_floor` when that is longer (the supervisor's tick period: an output follows the
    one before by at least a period, whatever the two commands' stamps say; a smooth command
    stamped microseconds after the one before would otherwise read as a huge acceleration).
    `clips` maps each kind in KINDS to a bool array over cmd.index (True = clipped).
    """
    if not 0.0 < scale <= 1.0:
        raise ValueError(f'stage scale must be in (0, 1], got {scale}')
    out = cmd.copy()
    i = out.index
    n = i.size
    clips = {k: np.zeros(n, dtype=bool) for k in KINDS}
    kp, kd = limits.kp[i], limits.kd[i]
    qi, dqi = q[i], dq[i]
    vmax = limits.velocity_limit[i] * scale
    tmax = limits.torque_limit[i] * scale
    if out.velocity is not None:
        v = _clip(out.velocity, -vmax, vmax)
        clips['velocity'] |= v != out.velocity
        out.velocity = v
    if out.effort is not None:
        e = _clip(out.effort, -tmax, tmax)
        clips['torque'] |= e != out.effort
        out.effort = e
    lo, hi = torque_window(limits, scale, i, dq)
    plain_lo, plain_hi = -tmax, tmax

    def note_torque(before, after, value_tau):
        """Attribute a torque-rule change to 'velocity' (braking) or 'torque'."""
        changed = before != after
        braking = (value_tau >= plain_lo) & (value_tau <= plain_hi)
        clips['velocity'] |= changed & braking
        clips['torque'] |= changed & ~braking

    if out.position is not None:
        p = _clip(out.position, limits.position_lower[i], limits.position_upper[i])
        clips['position'] |= p != out.position
        prev = previous_target[i]
        prev = np.where(np.isfinite(prev), prev, qi)
        dt = np.asarray(dt, dtype=float)
        dt = np.maximum(dt[i] if dt.ndim else dt, 0.0)
        rmax = limits.max_target_rate[i] * scale
        step = rmax * dt
        r = _clip(p, prev - step, prev + step)
        clips['rate'] |= r != p
        amax = limits.max_target_accel[i] * scale
        limited = np.isfinite(amax) & (dt > 0)
        if limited.any():
            r0 = dqi if previous_rate is None else np.where(
                np.isfinite(previous_rate[i]), previous_rate[i], dqi)
            with np.errstate(divide='ignore', invalid='ignore', over='ignore'):
                want = want0 = np.where(limited, (r - prev) / np.where(dt > 0, dt, 1.0), 0.0)
                dt_a = np.maximum(dt, float(accel_dt_floor))
                v = _clip(want, r0 - amax * dt_a, r0 + amax * dt_a)
                # Speeding up (or reversing) is limited; slowing down towards the command is
                # not: the target never passes the command, and a held step moves nothing.
                v = np.sign(want) * np.minimum(np.abs(want), np.maximum(0.0, np.sign(want) * v))
                # Unchanged steps keep the exact target (no rounding: a held target holds).
                a = np.where(limited & (v != want0), prev + v * dt, r)
            clips['acceleration'] |= limited & (np.abs(a - r) > 1e-12)
            r = np.where(limited, a, r)
        out.position = r
        # Torque rule through the position target, where kp > 0.
        v_t = out.velocity if out.velocity is not None else 0.0
        ff = out.effort if out.effort is not None else 0.0
        rest = kd * (v_t - dqi) + ff
        tau = kp * (out.position - qi) + rest
        knob = kp > 0
        with np.errstate(divide='ignore', invalid='ignore', over='ignore'):
            p_lo = qi + (lo - rest) / kp
            p_hi = qi + (hi - rest) / kp
        new = np.where(knob, _clip(out.position, np.where(knob, p_lo, -np.inf),
                                     np.where(knob, p_hi, np.inf)), out.position)
        note_torque(out.position, new, tau)
        out.position = new
        remaining = ~knob
    else:
        remaining = np.ones(n, dtype=bool)
    if remaining.any():
        _limit_without_position(out, remaining, kd, qi, dqi, kp, lo, hi, vmax, tmax, note_torque)
    if out.position is not None:   # rule 5: the range, whatever the measured state
        p = _clip(out.position, limits.position_lower[i], limits.position_upper[i])
        moved = p != out.position
        clips['position'] |= moved
        out.position = p
        if moved.any():           # the other knobs then do what they can for the torque
            _limit_without_position(out, moved, kd, qi, dqi, kp, lo, hi, vmax, tmax,
                                    note_torque)
    for key in ('position', 'velocity', 'effort'):
        value = getattr(out, key)
        if value is not None and not np.isfinite(value).all():
            raise Rejected(f'filtered {key} is not finite (state q={qi.tolist()}, '
                           f'dq={dqi.tolist()})')
    return out, clips


def _limit_without_position(out, mask, kd, qi, dqi, kp, lo, hi, vmax, tmax, note_torque):
    """Bring the implied torque into [lo, hi] with the velocity target, then the effort."""
    pos_term = kp * (out.position - qi) if out.position is not None else 0.0
    pos_term = np.where(mask, pos_term, 0.0)
    has_damping = out.position is not None or out.velocity is not None
    if out.velocity is not None:
        ff = out.effort if out.effort is not None else 0.0
        rest = pos_term + ff
        tau = pos_term + kd * (out.velocity - dqi) + ff
        knob = mask & (kd > 0)
        with np.errstate(divide='ignore', invalid='ignore', over='ignore'):
            v_lo = np.where(knob, dqi + (lo - rest) / kd, -np.inf)
            v_hi = np.where(knob, dqi + (hi - rest) / kd, np.inf)
        new = _clip(_clip(out.velocity, v_lo, v_hi), -vmax, vmax)
        new = np.where(knob, new, out.velocity)
        note_torque(out.velocity, new, tau)
        out.velocity = new
    if out.effort is not None:
        damping = kd * ((out.velocity if out.velocity is not None else 0.0) - dqi)
        rest = pos_term + (damping if has_damping else 0.0)
        tau = rest + out.effort
        new = _clip(_clip(out.effort, lo - rest, hi - rest), -tmax, tmax)
        new = np.where(mask, new, out.effort)
        note_torque(out.effort, new, tau)
        out.effort = new


def count_clips(counters, clips, index):
    """Add one to counters[kind][joint] for every clipped joint (counters: kind -> int array)."""
    for kind, mask in clips.items():
        np.add.at(counters[kind], index[mask], 1)

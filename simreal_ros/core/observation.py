"""Build a policy's observation vector from robot inputs, as configured per robot in YAML.

The observation is a list of terms, in order, each with a scale, an optional clip and an
optional history length (stacked oldest first), followed by an optional clip of the whole
vector. Each term is: clip (when `clip > 0`, to [-clip, clip]) then scale, as in Isaac Lab's
observation manager. Term kinds:

- `joint_pos`: joint position minus the default pose (policy joint order);
- `joint_vel`: joint velocity;
- `last_action`: the raw policy output of the previous step (zeros after reset);
- `base_ang_vel`: base angular velocity in the base frame (`sensor_msgs/Imu`);
- `projected_gravity`: the unit gravity vector in the base frame, from the Imu orientation;
- `velocity_command`: (vx, vy, wz) from `cmd_vel`, or `default` when none has arrived;
- `gait_phase`: sin and cos of 2*pi*phase, phase = ((t - origin) mod period_s) / period_s;
- `constant`: the fixed `value` list.

Configuration is the flattened `policy_runner` parameters (`observation.terms: [a, b]`,
`observation.a.scale: ...`); a term's kind defaults to its name. The policy's joint order is
mapped by name to and from the driver's joint names (`JointMap`).
"""
from dataclasses import dataclass
import math

import numpy as np

from simreal_ros.core.config import ConfigError

# kind -> (size: 'n' (policy joints) or int or None (from `value`), needs_imu, description)
TERM_KINDS = {
    'joint_pos': ('n', False, 'joint position minus the default pose'),
    'joint_vel': ('n', False, 'joint velocity'),
    'last_action': ('n', False, 'previous raw policy output'),
    'base_ang_vel': (3, True, 'base angular velocity, base frame (Imu)'),
    'projected_gravity': (3, True, 'gravity direction in the base frame (Imu orientation)'),
    'velocity_command': (3, False, '(vx, vy, wz) from cmd_vel'),
    'gait_phase': (2, False, 'sin, cos of the gait phase'),
    'constant': (None, False, 'fixed values'),
}


def term_parameters(name, kind):
    """Return (key, default, description) for each parameter of an observation term.

    Keys are relative to `observation.<name>.`; None means 'not set' (a dynamically typed
    parameter). The node declares exactly these, so every parameter has a descriptor.
    """
    params = [
        ('kind', name, f'kind of observation term {name!r}: one of {sorted(TERM_KINDS)}'),
        ('scale', 1.0, f'scale of term {name!r}: one value, or one per element'),
        ('clip', 0.0, f'clip term {name!r} to [-clip, clip] before scaling (0 = no clip)'),
        ('history', 1, f'number of past values of term {name!r} stacked, oldest first'),
    ]
    if kind == 'velocity_command':
        params.append(('default', [0.0, 0.0, 0.0],
                       'command (vx, vy, wz) used until cmd_vel arrives'))
    elif kind == 'gait_phase':
        params.append(('period_s', 1.0, 'gait period (s)'))
        params.append(('origin', 'clock', "phase origin: 'clock' (t = 0 of ROS time) or "
                                          "'reset' (the time of enable/reset)"))
    elif kind == 'constant':
        params.append(('value', None, 'the constant values (list)'))
    return params


def _floats(value, what, size=None):
    arr = np.asarray(value if value is not None else [], dtype=float).reshape(-1)
    if size is not None and arr.size == 1 and size > 1:
        arr = np.full(size, float(arr[0]))
    if size is not None and arr.size != size:
        raise ConfigError(f'{what}: expected 1 or {size} values, got {arr.size}')
    if not np.all(np.isfinite(arr)):
        raise ConfigError(f'{what}: values must be finite, got {arr.tolist()}')
    return arr


@dataclass
class Term:
    """One configured observation term."""

    name: str
    kind: str
    size: int          # elements of one sample
    scale: np.ndarray
    clip: float
    history: int
    default: np.ndarray = None   # velocity_command
    period_s: float = 0.0        # gait_phase
    origin: str = 'clock'        # gait_phase
    value: np.ndarray = None     # constant

    @property
    def length(self):
        return self.size * self.history


class JointMap:
    """The policy's joint order, mapped by name to and from the driver's joint names."""

    def __init__(self, policy_names, driver_names, source='policy_runner'):
        self.policy_names = [str(n) for n in policy_names]
        self.driver_names = [str(n) for n in driver_names]
        if not self.policy_names:
            raise ConfigError(f'{source}: policy_joint_names is empty')
        dup = sorted({n for n in self.policy_names if self.policy_names.count(n) > 1})
        if dup:
            raise ConfigError(f'{source}: policy_joint_names lists {dup} more than once')
        missing = [n for n in self.policy_names if n not in self.driver_names]
        if missing:
            raise ConfigError(
                f'{source}: the policy joint(s) {missing} are not among the driver joint_names '
                f'{self.driver_names}; fix policy_joint_names or joint_names (names must match '
                'exactly, the order may differ)')
        self.n = len(self.policy_names)
        # The command names the policy's joints in the driver's order.
        self.command_names = [n for n in self.driver_names if n in self.policy_names]
        pos = {n: i for i, n in enumerate(self.policy_names)}
        self.command_index = np.array([pos[n] for n in self.command_names], dtype=int)
        self._cache = {}

    def index_from(self, names):
        """Return indices into a message's arrays that give the policy order.

        Raise ValueError naming the policy joints the message lacks.
        """
        key = tuple(names)
        idx = self._cache.get(key)
        if idx is None:
            lookup = {n: i for i, n in enumerate(names)}
            if len(lookup) != len(names):
                dup = sorted({n for n in names if list(names).count(n) > 1})
                raise ValueError(f'joint_states names {dup} more than once')
            missing = [n for n in self.policy_names if n not in lookup]
            if missing:
                raise ValueError(f'joint_states lacks the policy joint(s) {missing}')
            idx = np.array([lookup[n] for n in self.policy_names], dtype=int)
            self._cache[key] = idx
        return idx

    def to_policy(self, names, values):
        """Reorder a message's per-joint values (driver names) into the policy order."""
        values = np.asarray(values, dtype=float)
        idx = self.index_from(names)
        if values.size != len(names):
            raise ValueError(f'joint_states has {values.size} values for {len(names)} names')
        return values[idx]

    def to_command(self, values):
        """Reorder per-joint values from the policy order into `command_names` order."""
        return np.asarray(values, dtype=float)[self.command_index]


@dataclass
class Inputs:
    """What one observation is built from (policy joint order, SI units)."""

    time: float                     # stamp of the observation (s)
    joint_position: np.ndarray
    joint_velocity: np.ndarray
    orientation: np.ndarray = None  # base quaternion (w, x, y, z)
    angular_velocity: np.ndarray = None  # base frame
    command: np.ndarray = None      # (vx, vy, wz); None = the configured default


def projected_gravity(quat_wxyz):
    """Return the unit gravity vector (world -z) in the base frame of quaternion (w, x, y, z)."""
    qw, qx, qy, qz = quat_wxyz
    return np.array([2.0 * (-qz * qx + qw * qy),
                     -2.0 * (qz * qy + qw * qx),
                     1.0 - 2.0 * (qw * qw + qz * qz)])


class ObservationBuilder:
    """Assemble the observation vector; keep history and the last action between steps."""

    def __init__(self, terms, n_joints, default_position, clip=0.0):
        self.terms = list(terms)
        self.n = int(n_joints)
        self.default_position = np.asarray(default_position, dtype=float)
        self.clip = float(clip)
        self.size = sum(t.length for t in self.terms)
        self.needs_imu = any(TERM_KINDS[t.kind][1] for t in self.terms)
        self.needs_velocity = any(t.kind == 'joint_vel' for t in self.terms)
        self.clipped = 0  # observation elements changed by a clip (term or final), counted
        self.reset()

    @classmethod
    def from_params(cls, params, n_joints, default_position, source='policy_runner'):
        """Build from flattened parameters (`observation.terms`, `observation.<term>.<key>`)."""
        names = params.get('observation.terms') or []
        if isinstance(names, str):
            names = [names]
        if not names:
            raise ConfigError(f'{source}: observation.terms is empty; list the observation '
                              f'terms in order (kinds: {sorted(TERM_KINDS)})')
        dup = sorted({n for n in names if list(names).count(n) > 1})
        if dup:
            raise ConfigError(f'{source}: observation.terms lists {dup} more than once')
        terms = []
        for name in names:
            terms.append(cls._term(params, str(name), n_joints, source))
        clip = float(params.get('observation.clip', 0.0) or 0.0)
        if not math.isfinite(clip) or clip < 0:
            raise ConfigError(f'{source}: observation.clip must be >= 0 (0 = no clip)')
        return cls(terms, n_joints, default_position, clip)

    @staticmethod
    def _term(params, name, n_joints, source):
        pre = f'observation.{name}.'
        where = f'{source}: parameter {pre}'

        def get(key, default=None):
            value = params.get(pre + key)
            return default if value is None else value

        kind = str(get('kind', name))
        if kind not in TERM_KINDS:
            raise ConfigError(f'{where}kind is {kind!r}; known kinds: {sorted(TERM_KINDS)} '
                              f'(a term\'s kind defaults to its name)')
        size = TERM_KINDS[kind][0]
        value = None
        if size == 'n':
            size = n_joints
        elif size is None:
            value = _floats(get('value'), where + 'value')
            if value.size == 0:
                raise ConfigError(f'{where}value is not set: give the constant values')
            size = value.size
        history = int(get('history', 1))
        if history < 1:
            raise ConfigError(f'{where}history must be >= 1, got {history}')
        clip = float(get('clip', 0.0))
        if not math.isfinite(clip) or clip < 0:
            raise ConfigError(f'{where}clip must be >= 0 (0 = no clip), got {clip}')
        term = Term(name, kind, size, _floats(get('scale', 1.0), where + 'scale', size),
                    clip, history, value=value)
        if kind == 'velocity_command':
            term.default = _floats(get('default', [0.0, 0.0, 0.0]), where + 'default', 3)
        elif kind == 'gait_phase':
            term.period_s = float(get('period_s', 1.0))
            if not term.period_s > 0:
                raise ConfigError(f'{where}period_s must be > 0, got {term.period_s}')
            term.origin = str(get('origin', 'clock'))
            if term.origin not in ('clock', 'reset'):
                raise ConfigError(f"{where}origin must be 'clock' or 'reset', got "
                                  f'{term.origin!r}')
        return term

    def describe(self):
        """Return 'name (kind) size[xhistory]' per term, for messages."""
        parts = []
        for t in self.terms:
            hist = f' x{t.history}' if t.history > 1 else ''
            parts.append(f'{t.name} ({t.kind}): {t.size}{hist} = {t.length}')
        return '; '.join(parts)

    def check_length(self, expected, where):
        """Raise ConfigError listing the terms when the total differs from the policy input."""
        if expected is not None and int(expected) != self.size:
            raise ConfigError(
                f'observation length {self.size} does not match the policy input {where} of '
                f'length {expected}. Configured terms: {self.describe()}. Fix observation.terms '
                '(kinds, order, history) to match what the policy was trained with')

    def reset(self, origin_time=0.0):
        """Forget history and the last action; set the gait phase origin for origin 'reset'."""
        self.last_action = np.zeros(self.n)
        self._history = {t.name: None for t in self.terms}
        self.origin_time = float(origin_time)

    def set_last_action(self, action):
        self.last_action = np.asarray(action, dtype=float).reshape(-1).copy()

    def _raw(self, term, inp):
        kind = term.kind
        if kind == 'joint_pos':
            return np.asarray(inp.joint_position, dtype=float) - self.default_position
        if kind == 'joint_vel':
            return np.asarray(inp.joint_velocity, dtype=float)
        if kind == 'last_action':
            return self.last_action
        if kind == 'base_ang_vel':
            if inp.angular_velocity is None:
                raise ValueError('no Imu angular velocity yet')
            return np.asarray(inp.angular_velocity, dtype=float)
        if kind == 'projected_gravity':
            if inp.orientation is None:
                raise ValueError('no Imu orientation yet')
            q = np.asarray(inp.orientation, dtype=float)
            norm = float(np.linalg.norm(q))
            if not abs(norm - 1.0) < 1e-3:
                raise ValueError(f'Imu orientation is not a unit quaternion (norm {norm:.4g})')
            return projected_gravity(q)
        if kind == 'velocity_command':
            return term.default if inp.command is None else np.asarray(inp.command, float)
        if kind == 'gait_phase':
            t = inp.time - (self.origin_time if term.origin == 'reset' else 0.0)
            phase = (t % term.period_s) / term.period_s
            return np.array([math.sin(2 * math.pi * phase), math.cos(2 * math.pi * phase)])
        return term.value

    def build(self, inp):
        """Return the observation (float64) for these inputs and push each term's history.

        Raise ValueError (nothing is pushed) when an input the terms need is missing.
        """
        samples = []
        for term in self.terms:
            raw = self._raw(term, inp)
            if raw.size != term.size:
                raise ValueError(f'term {term.name!r}: {raw.size} values, expected {term.size}')
            if term.clip > 0:
                self.clipped += int(np.count_nonzero(np.abs(raw) > term.clip))
                raw = np.clip(raw, -term.clip, term.clip)
            samples.append(raw * term.scale)
        parts = []
        for term, sample in zip(self.terms, samples):
            if term.history == 1:
                parts.append(sample)
                continue
            hist = self._history[term.name]
            if hist is None:  # after reset: fill with the first sample
                hist = np.tile(sample, (term.history, 1))
            else:
                hist = np.vstack([hist[1:], sample])
            self._history[term.name] = hist
            parts.append(hist.reshape(-1))
        obs = np.concatenate(parts) if parts else np.zeros(0)
        if self.clip > 0:
            self.clipped += int(np.count_nonzero(np.abs(obs) > self.clip))
            obs = np.clip(obs, -self.clip, self.clip)
        return obs

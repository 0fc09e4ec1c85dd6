"""Reference traces: one reader for the tools that compare a robot against a reference run.

A trace is an NPZ file (docs/traces.md). Two layouts are read:

- `simreal`: `time` (N,) s, `joint_names` (J,) strings, `q` (N, J) rad; optional `dq` (N, J)
  rad/s, `effort` (N, J) N*m, `target_q` (N, J) rad (the position targets sent), `actions`
  (N, P) raw policy outputs in the robot file's policy joint order, `obs` (N, O) the policy's
  observations, `base_qpos` (N, 7) a floating base's pose (x, y, z, qw, qx, qy, qz),
  `initial_q` (J,) the joint positions at t = 0 (a trace whose first sample is later);
- `qpos` (the layout of unitree's G1 reference run, `reference_trace.npz`): `time` (N,),
  `qpos` (N, P) or (N, 7 + P) = floating base (x, y, z, qw, qx, qy, qz) then the joints,
  optional `qvel` (N, P) or (N, 6 + P), `actions` (N, P), `obs` (N, O). The file names no
  joints: they are the robot file's `policy_joint_names` (policy_runner; else `joint_names`),
  in that order.

Both layouts may carry `cmd_vel`, the velocity command (vx, vy, wz) the run was recorded with:
(3,) for the whole run or (N, 3) per sample (`bench/sim2sim.py` publishes it on `cmd_vel`).

Derived columns, each with its source said in `Trace.sources` and `Trace.notes`:

- position targets from `actions` (when `target_q` is absent) through the robot file's action
  mapping (`core/actions.py`: `default_position + scale * clip(action)`); in `action.mode:
  effort` the processed actions are the efforts instead;
- velocities, when neither `dq` nor `qvel` is given, from the `joint_vel` term of `obs`
  decoded with the robot file's observation layout (`core/observation.py`), else central
  differences of `q` over `time` (which flatten peaks between samples: on unitree's G1 trace,
  at 50 Hz, 5.11 and 6.06 rad/s at the knees where its observations say 6.75).

Every problem is a `TraceError` (a ConfigError) whose message starts with the file's path and
says what is wrong: a missing key, a shape mismatch, an unknown or repeated joint name, a
non-finite value (with its row and joint), time that does not increase.
"""
from dataclasses import dataclass, field
from pathlib import Path
import zipfile

import numpy as np

from simreal_ros.core.config import ConfigError, load_node_params, robot_config_path

BASE_QPOS = 7    # free joint: position (3) + quaternion w, x, y, z (4)
BASE_QVEL = 6    # free joint: linear (3) + angular (3) velocity
LAYOUTS = ('simreal', 'qpos')


class TraceError(ConfigError):
    """A reference trace that cannot be used; the message names the file and the problem."""


@dataclass
class Trace:
    """One reference run, per joint in `names` order (rad, rad/s, N*m, s)."""

    path: str
    layout: str                  # 'simreal' or 'qpos'
    time: np.ndarray             # (N,)
    names: list                  # J joint names
    q: np.ndarray                # (N, J) measured positions
    dq: np.ndarray = None        # (N, J) measured velocities, or None
    effort: np.ndarray = None    # (N, J) measured efforts, or None
    target: np.ndarray = None    # (N, J) position targets, or None
    actions: np.ndarray = None   # (N, P) raw policy outputs (policy_names order), or None
    policy_names: list = None    # the order of `actions`
    base_qpos: np.ndarray = None  # (N, 7) floating base pose, or None
    obs: np.ndarray = None       # (N, O) policy observations, or None
    cmd_vel: np.ndarray = None   # (N, 3) velocity command (vx, vy, wz), or None
    initial_q: np.ndarray = None  # (J,) joint positions at t = 0, or None
    sources: dict = field(default_factory=dict)   # 'names', 'dq', 'effort', 'target' -> text
    notes: list = field(default_factory=list)

    @property
    def n_samples(self):
        return int(self.time.size)

    @property
    def duration(self):
        return float(self.time[-1] - self.time[0])

    def index(self, name):
        return self.names.index(name)

    def velocity(self):
        """Return (dq, source): the trace's own velocities, or central differences of q."""
        if self.dq is not None:
            return self.dq, self.sources.get('dq', 'dq')
        return (np.gradient(self.q, self.time, axis=0, edge_order=1),
                'central differences of q over time (no velocities in the trace)')


# -- reading -------------------------------------------------------------------------------
def _fail(path, text):
    raise TraceError(f'{path}: {text}')


def _read(z, key, path):
    try:
        return z[key]
    except ValueError as exc:   # an object array (pickle) in a file read without pickle
        _fail(path, f'key {key!r} cannot be read without pickle ({exc}); store numbers, and '
                    'joint names as a string array (np.array(names, dtype=str))')


def _numeric(z, key, path, shape, what, names=None, time=None):
    """Return key as a float array of `shape` (None = any in that position), finite."""
    arr = _read(z, key, path)
    if arr.dtype.kind not in 'fiub':
        _fail(path, f'{key} must hold numbers ({what}), got dtype {arr.dtype}')
    arr = np.asarray(arr, dtype=float)
    if arr.ndim != len(shape) or any(s is not None and s != a
                                     for s, a in zip(shape, arr.shape)):
        want = '(' + ', '.join('?' if s is None else str(s) for s in shape) + ')'
        _fail(path, f'shape mismatch: {key} has shape {arr.shape}, expected {want} ({what})')
    bad = ~np.isfinite(arr)
    if np.any(bad):
        first = np.argwhere(bad)[0]
        where = f'row {first[0]}'
        if time is not None and first[0] < time.size:
            where += f' (t = {time[first[0]]:g} s)'
        if arr.ndim == 2:
            col = int(first[1])
            where += (f', joint {names[col]!r}' if names is not None and col < len(names)
                      else f', column {col}')
        _fail(path, f'{key} has {int(np.count_nonzero(bad))} non-finite value(s) (NaN or '
                    f'inf), the first at {where}')
    return arr


def _time(z, path):
    t = _numeric(z, 'time', path, (None,), 'seconds, one per sample')
    if t.size < 2:
        _fail(path, f'time has {t.size} sample(s): a trace needs at least 2')
    steps = np.diff(t)
    if np.any(steps <= 0):
        k = int(np.argmax(steps <= 0)) + 1
        _fail(path, f'time must increase strictly: row {k} (t = {t[k]:g} s) follows '
                    f't = {t[k - 1]:g} s')
    return t


def _cmd_vel(z, path, keys, t):
    """The optional velocity command: (3,) for the whole run or (N, 3), as (N, 3)."""
    if 'cmd_vel' not in keys:
        return None
    raw = _read(z, 'cmd_vel', path)
    if raw.ndim == 1:
        cmd = _numeric(z, 'cmd_vel', path, (3,), 'velocity command vx, vy, wz for the run')
        return np.tile(cmd, (t.size, 1))
    return _numeric(z, 'cmd_vel', path, (t.size, 3), 'velocity command vx, vy, wz per sample',
                    None, t)


def _joint_names(z, path):
    raw = _read(z, 'joint_names', path)
    if raw.dtype.kind not in 'US' or raw.ndim != 1:
        _fail(path, f'joint_names must be a 1-D string array, got dtype {raw.dtype}, shape '
                    f'{raw.shape}')
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in raw.tolist()]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        _fail(path, f'joint_names repeats {dup}')
    if not names:
        _fail(path, 'joint_names is empty')
    return names


@dataclass
class PolicyContext:
    """What the robot file says about the policy: joint order, action mapping, observation."""

    robot: str
    joint_names: list
    policy_names: list
    params: dict

    @classmethod
    def read(cls, robot):
        path = robot_config_path(robot)
        params = load_node_params(path, 'policy_runner')
        names = [str(n) for n in (params.get('joint_names') or [])]
        if not names:
            raise ConfigError(f'{path}: joint_names is missing (the /** section lists the '
                              'robot joints)')
        policy = [str(n) for n in (params.get('policy_joint_names') or names)]
        unknown = [n for n in policy if n not in names]
        if unknown:
            raise ConfigError(f'{path}: policy_runner.policy_joint_names {unknown} are not in '
                              f'joint_names {names}')
        return cls(str(path), names, policy, params)

    def action_processor(self):
        from simreal_ros.core.actions import ActionProcessor
        n = len(self.policy_names)
        default = self.params.get('default_position')
        return ActionProcessor(n, self.params.get('action.mode') or 'position',
                               self.params.get('action.scale', 1.0),
                               self.params.get('action.clip') or 0.0,
                               None if default is None else default,
                               source=f'{self.robot}: policy_runner')

    def joint_velocity_slice(self, width):
        """Return (start, scale, clip, term) of the newest joint_vel sample in an observation
        of `width`, or (None, reason) when this robot's observation does not decode it."""
        return self.term_slice('joint_vel', width)

    def term_slice(self, kind, width):
        """Return ((start, scale, term clip, observation clip, term), '') for the newest
        sample of the first term of `kind` in an observation of `width` columns, or (None,
        reason) when this robot's observation does not decode it."""
        from simreal_ros.core.observation import ObservationBuilder
        if not self.params.get('observation.terms'):
            return None, 'the robot file configures no observation'
        n = len(self.policy_names)
        default = self.params.get('default_position')
        try:
            builder = ObservationBuilder.from_params(
                self.params, n, np.zeros(n) if default is None else default,
                source=f'{self.robot}: policy_runner')
        except ConfigError as exc:
            return None, str(exc)
        if builder.size != width:
            return None, (f'obs has {width} columns, the robot file\'s observation '
                          f'{builder.size} ({builder.describe()})')
        start = 0
        for term in builder.terms:
            if term.kind == kind:
                start += term.size * (term.history - 1)   # stacked oldest first
                return (start, term.scale, term.clip, builder.clip, term), ''
            start += term.length
        return None, f'the robot file\'s observation has no {kind} term'


def load_trace(path, robot=None):
    """Read a reference trace (either layout); `robot` (a robot file or name) gives joint
    names to a `qpos` trace, maps actions to targets and decodes velocities from `obs`."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f'{path}: no such file')
    if not zipfile.is_zipfile(path):
        with open(path, 'rb') as f:
            single = f.read(6) == b'\x93NUMPY'
        raise TraceError(f'{path}: ' + ('a single .npy array' if single else 'not an NPZ file')
                         + ': a trace is an NPZ archive of named arrays, as '
                         'np.savez(path, time=..., joint_names=..., q=...) writes it')
    try:
        z = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise TraceError(f'{path}: not a readable NPZ file ({exc})') from exc
    with z:
        keys = set(z.files)
        if 'time' not in keys:
            _fail(path, f'missing key \'time\' (seconds, shape (N,)); keys present: '
                        f'{sorted(keys)}')
        if 'q' in keys:
            return _load_simreal(z, path, keys, robot)
        if 'qpos' in keys:
            return _load_qpos(z, path, keys, robot)
        _fail(path, 'missing joint positions: key \'q\' (N, J) with \'joint_names\' (J,) '
                    '(simreal layout) or \'qpos\' (N, 7 + P) (MuJoCo layout, joint names from '
                    f'the robot file); keys present: {sorted(keys)}')


def _load_simreal(z, path, keys, robot):
    t = _time(z, path)
    n = t.size
    if 'joint_names' not in keys:
        _fail(path, 'missing key \'joint_names\' (J,) strings: the joints of the columns of q')
    names = _joint_names(z, path)
    j = len(names)
    trace = Trace(str(path), 'simreal', t, names,
                  _numeric(z, 'q', path, (n, j), 'rad, one column per joint_names entry',
                           names, t))
    trace.sources['names'] = 'joint_names in the trace'
    ctx = None
    if robot is not None:
        ctx = PolicyContext.read(robot)
        unknown = [x for x in names if x not in ctx.joint_names]
        if unknown:
            _fail(path, f'unknown joint name(s) {unknown}: not in joint_names of {ctx.robot} '
                        f'({ctx.joint_names})')
    for key, attr, unit in (('dq', 'dq', 'rad/s'), ('effort', 'effort', 'N*m'),
                            ('target_q', 'target', 'rad, position targets')):
        if key in keys:
            setattr(trace, attr, _numeric(z, key, path, (n, j), unit + ', like q', names, t))
            trace.sources[attr] = f'{key} in the trace'
    if 'obs' in keys:
        trace.obs = _numeric(z, 'obs', path, (n, None), 'the policy\'s observations', None, t)
    if 'base_qpos' in keys:
        trace.base_qpos = _numeric(z, 'base_qpos', path, (n, BASE_QPOS),
                                   'floating base x, y, z, qw, qx, qy, qz', None, t)
    trace.cmd_vel = _cmd_vel(z, path, keys, t)
    if 'initial_q' in keys:
        trace.initial_q = _numeric(z, 'initial_q', path, (j,), 'rad at t = 0, like a row of q',
                                   names)
    if 'actions' in keys:
        width = len(ctx.policy_names) if ctx is not None else None
        trace.actions = _numeric(z, 'actions', path, (n, width),
                                 'raw policy outputs, policy joint order',
                                 ctx.policy_names if ctx is not None else None, t)
        trace.policy_names = ctx.policy_names if ctx is not None else None
    if ctx is not None:
        _derive(trace, ctx, path)
    return trace


def _load_qpos(z, path, keys, robot):
    t = _time(z, path)
    n = t.size
    if robot is None:
        _fail(path, 'a qpos trace names no joints: give the robot file (its policy_runner '
                    'policy_joint_names are the order of the joint columns)')
    ctx = PolicyContext.read(robot)
    names = list(ctx.policy_names)
    p = len(names)
    qpos = _numeric(z, 'qpos', path, (n, None), 'floating base then joint positions')
    if qpos.shape[1] == p + BASE_QPOS:
        base, q = qpos[:, :BASE_QPOS], qpos[:, BASE_QPOS:]
    elif qpos.shape[1] == p:
        base, q = None, qpos
    else:
        _fail(path, f'shape mismatch: qpos has {qpos.shape[1]} columns; {ctx.robot} has {p} '
                    f'policy joints, so expected {p} (joints) or {p + BASE_QPOS} (floating '
                    f'base x, y, z, qw, qx, qy, qz, then the joints)')
    trace = Trace(str(path), 'qpos', t, names, q, base_qpos=base)
    trace.sources['names'] = (f'{Path(ctx.robot).name}: policy_runner.policy_joint_names '
                              '(the trace names no joints)')
    if 'qvel' in keys:
        qvel = _numeric(z, 'qvel', path, (n, None), 'floating base then joint velocities')
        if qvel.shape[1] not in (p, p + BASE_QVEL):
            _fail(path, f'shape mismatch: qvel has {qvel.shape[1]} columns, expected {p} or '
                        f'{p + BASE_QVEL}')
        trace.dq = qvel[:, -p:]
        trace.sources['dq'] = 'qvel in the trace'
    for key, attr in (('effort', 'effort'), ('target_q', 'target')):
        if key in keys:
            setattr(trace, attr, _numeric(z, key, path, (n, p), 'policy joint order', names, t))
            trace.sources[attr] = f'{key} in the trace'
    if 'obs' in keys:
        trace.obs = _numeric(z, 'obs', path, (n, None), 'the policy\'s observations', None, t)
    trace.cmd_vel = _cmd_vel(z, path, keys, t)
    if 'actions' in keys:
        trace.actions = _numeric(z, 'actions', path, (n, p),
                                 f'raw policy outputs, one per policy joint of {ctx.robot}',
                                 names, t)
        trace.policy_names = names
    _derive(trace, ctx, path)
    return trace


def _derive(trace, ctx, path):
    """Targets (or efforts) from actions, velocities from obs, with the robot file's rules."""
    robot = Path(ctx.robot).name
    if trace.actions is not None and (trace.target is None or trace.effort is None):
        proc = ctx.action_processor()
        mapped = np.array([proc.process(a) for a in trace.actions])
        cols = [trace.names.index(n) if n in trace.names else -1 for n in ctx.policy_names]
        covered = [i for i, c in enumerate(cols) if c >= 0]
        scale = np.unique(proc.scale)
        scale_text = f'{scale[0]:g}' if scale.size == 1 else 'scale'
        clip = f'clip(action, +-{proc.clip:g})' if proc.clip > 0 else 'action'
        if len(covered) < len(trace.names):
            trace.notes.append(f'actions cover {len(covered)} of the trace\'s {len(trace.names)} '
                               'joints')
        if proc.mode == 'position' and trace.target is None:
            target = np.full_like(trace.q, np.nan)
            for i in covered:
                target[:, cols[i]] = mapped[:, i]
            trace.target = target
            trace.sources['target'] = (f'actions through {robot}\'s action mapping: '
                                       f'default_position + {scale_text} * {clip}')
            if proc.clipped:
                trace.notes.append(f'action.clip changed {proc.clipped} action value(s)')
        elif proc.mode == 'effort' and trace.effort is None:
            effort = np.full_like(trace.q, np.nan)
            for i in covered:
                effort[:, cols[i]] = mapped[:, i]
            trace.effort = effort
            trace.sources['effort'] = (f'actions through {robot}\'s action mapping '
                                       f'(mode effort: {scale_text} * {clip})')
    if trace.dq is None and trace.obs is not None:
        found, why = ctx.joint_velocity_slice(trace.obs.shape[1])
        if found is None:
            trace.notes.append(f'velocities not taken from obs: {why}')
            return
        start, scale, term_clip, obs_clip, term = found
        p = len(ctx.policy_names)
        block = trace.obs[:, start:start + p]
        if np.any(scale == 0):
            trace.notes.append('velocities not taken from obs: a joint_vel scale is 0')
            return
        raw = block / scale
        clipped = ((term_clip > 0 and np.any(np.abs(raw) >= term_clip * (1 - 1e-6)))
                   or (obs_clip > 0 and np.any(np.abs(block) >= obs_clip * (1 - 1e-6))))
        if clipped:
            trace.notes.append('velocities not taken from obs: its joint_vel values reach '
                               'the observation clip (a clipped velocity under-reads)')
            return
        dq = np.full_like(trace.q, np.nan)
        for i, name in enumerate(ctx.policy_names):
            if name in trace.names:
                dq[:, trace.names.index(name)] = raw[:, i]
        if np.any(np.isnan(dq)):
            trace.notes.append('velocities not taken from obs: it does not cover every joint')
            return
        trace.dq = dq
        trace.sources['dq'] = (f'obs: the {term.name!r} term of {robot}\'s observation '
                               f'(columns {start}-{start + p - 1}) / scale '
                               + (f'{scale[0]:g}' if np.unique(scale).size == 1 else ''))

"""Propose safety_supervisor limits from a reference trace, within the robot model's ranges.

`propose_from_files(reference, robot)` reads a trace (`core/trace.py`, docs/traces.md), the
robot file (its `safety_supervisor` section and `kp`/`kd`) and the MuJoCo model the file names
(`sim_robot.model_path`, else `sim_bridge`'s or a SysID node's), and returns a `Proposal`: per
joint, what the reference needs, the proposed limit, the model's bound and the file's current
value, for each of the supervisor's limit parameters (`core/safety/limits.py`):

- `position_lower`, `position_upper`: the lowest / highest measured position or position
  target;
- `velocity_limit`: the largest measured speed (`dq`, else decoded from `obs`, else central
  differences);
- `torque_limit`: the largest measured effort, else the PD effort `kp*(target - q) - kd*dq`
  with the robot file's gains;
- `max_target_rate`: the largest target step over the time since that target last moved
  (at most `policy_timeout_s`), as the supervisor's `rate_dt` measures it;
- `max_target_accel`: the largest growth of the target's rate, in its own direction, from
  one move to the next, over the move's time (slowing down is not limited, as in the
  supervisor).

Proposed = need + `position_margin` (rad) for positions, need * (1 + `margin`) for the rest,
rounded outwards (3 decimals for positions, 3 significant digits for the rest), and never
beyond the model: joint `range` for positions, the smallest of the joint's
`actuatorfrcrange`, the actuator's `forcerange` and a motor's `ctrlrange` (times gear) for the
torque. When the reference itself needs more than the model allows (the measured position
beyond the joint range, a target beyond it, an effort beyond the actuator), the proposal stops
at the model's bound and the joint is FLAGGED with the numbers: it is never clipped silently.
Velocity, target rate and acceleration have no bound in an MJCF.

Nothing here imports rclpy: the `simreal limits` verb runs without ROS.
"""
from dataclasses import dataclass, field
import json
import math
from pathlib import Path
import textwrap

import numpy as np

from simreal_ros.core.config import ConfigError, load_node_params, resolve_path, \
    robot_config_path
from simreal_ros.core.trace import load_trace

DEFAULT_MARGIN = 0.10            # fraction added to velocity, torque, target rate and accel
DEFAULT_POSITION_MARGIN = 0.10   # rad added outside the positions and targets
DEFAULT_POLICY_TIMEOUT = 0.06    # the supervisor's default policy_timeout_s (s)
DEFAULT_RATE_HZ = 500.0          # the supervisor's tick rate when the file gives none (Hz)
DEFAULT_JITTER = 0.5             # a policy step may arrive this fraction of a period late/early
DEFAULT_STATE_VELOCITY_FACTOR = 3.0   # the supervisor's defaults (measurement plausibility)
DEFAULT_STATE_POSITION_MARGIN = 0.3
PARAMS = ('position_lower', 'position_upper', 'velocity_limit', 'torque_limit',
          'max_target_rate', 'max_target_accel')
UNITS = {'position_lower': 'rad', 'position_upper': 'rad', 'velocity_limit': 'rad/s',
         'torque_limit': 'N*m', 'max_target_rate': 'rad/s', 'max_target_accel': 'rad/s^2'}
MODEL_SECTIONS = ('sim_robot', 'sim_bridge', 'friction_id', 'inertia_id', 'latency_id')
TOLERANCE = 1e-9


# -- the model's ranges ----------------------------------------------------------------------
@dataclass
class ModelJoint:
    """One joint's bounds in the MJCF (None = unbounded there)."""

    lower: float = None
    upper: float = None
    torque: float = None          # symmetric bound on the joint's actuator torque (N*m)
    torque_source: str = ''


def read_model(model_path, names):
    """Return {name: ModelJoint} for the 1-dof joints `names` of an MJCF file."""
    import mujoco
    from simreal_ros.core.plant import load_model
    m = load_model(model_path)
    one_dof = (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE))
    known = [m.joint(i).name for i in range(m.njnt) if int(m.jnt_type[i]) in one_dof]
    missing = [n for n in names if n not in known]
    if missing:
        raise ConfigError(f'{model_path}: no hinge or slide joint named {missing}; its 1-dof '
                          f'joints are {known}')
    out = {}
    for name in names:
        j = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, name)
        mj = ModelJoint()
        if m.jnt_limited[j]:
            mj.lower, mj.upper = (float(v) for v in m.jnt_range[j])
        bounds = []
        if m.jnt_actfrclimited[j]:
            lo, hi = m.jnt_actfrcrange[j]
            bounds.append((min(-lo, hi), 'joint actuatorfrcrange'))
        for a in range(m.nu):
            if (int(m.actuator_trntype[a]) != int(mujoco.mjtTrn.mjTRN_JOINT)
                    or m.actuator_trnid[a, 0] != j):
                continue
            gear = abs(float(m.actuator_gear[a, 0]))
            if m.actuator_forcelimited[a]:
                lo, hi = m.actuator_forcerange[a]
                bounds.append((gear * min(-lo, hi),
                               f'actuator {m.actuator(a).name!r} forcerange x gear'))
            motor = (int(m.actuator_gaintype[a]) == int(mujoco.mjtGain.mjGAIN_FIXED)
                     and int(m.actuator_biastype[a]) == int(mujoco.mjtBias.mjBIAS_NONE))
            if motor and m.actuator_ctrllimited[a]:
                lo, hi = m.actuator_ctrlrange[a]
                gain = abs(float(m.actuator_gainprm[a, 0]))
                bounds.append((gear * gain * min(-lo, hi),
                               f'motor {m.actuator(a).name!r} ctrlrange x gear'))
        if bounds:
            value, source = min(bounds, key=lambda b: b[0])
            mj.torque, mj.torque_source = max(float(value), 0.0), source
        out[name] = mj
    return out


# -- the robot file ----------------------------------------------------------------------------
@dataclass
class RobotFile:
    """The supervisor's joints, gains, current limits and the model's bounds."""

    path: str
    names: list
    kp: np.ndarray = None
    kd: np.ndarray = None
    current: dict = field(default_factory=dict)    # parameter -> array (None = not set)
    trip_velocity: np.ndarray = None
    default_position: np.ndarray = None              # bringup.default_position
    policy_timeout: float = DEFAULT_POLICY_TIMEOUT
    rate_hz: float = DEFAULT_RATE_HZ
    model_path: str = ''
    model_note: str = ''
    model: dict = None                               # name -> ModelJoint, or None
    state_position_margin: float = DEFAULT_STATE_POSITION_MARGIN
    state_velocity_factor: float = DEFAULT_STATE_VELOCITY_FACTOR


def _per_joint(params, key, n, path, required=False):
    value = params.get(key)
    if value is None or (isinstance(value, (list, tuple)) and not value):
        if required:
            raise ConfigError(f'{path}: safety_supervisor.{key} is missing (one per joint)')
        return None
    try:
        arr = np.asarray(value, dtype=float).reshape(-1)
    except (TypeError, ValueError):
        raise ConfigError(f'{path}: safety_supervisor.{key} must be numbers, got '
                          f'{value!r}') from None
    if arr.size == 1:
        arr = np.full(n, float(arr[0]))
    if arr.size != n:
        raise ConfigError(f'{path}: safety_supervisor.{key} has {arr.size} values for {n} '
                          'joints (joint_names)')
    if np.any(np.isnan(arr)):
        raise ConfigError(f'{path}: safety_supervisor.{key} has a NaN: {arr.tolist()}')
    return arr


def read_robot(robot, model=None, use_model=True):
    """Read a robot file (name or path): joints, gains, current limits, model bounds.

    `model` replaces the MJCF the file names; `use_model=False` reads none (no bounds)."""
    path = robot_config_path(robot)
    params = load_node_params(path, 'safety_supervisor')
    names = [str(n) for n in (params.get('joint_names') or [])]
    if not names:
        raise ConfigError(f'{path}: joint_names is missing (the /** section, or '
                          'safety_supervisor\'s)')
    n = len(names)
    out = RobotFile(str(path), names)
    out.kp = _per_joint(params, 'kp', n, path)
    out.kd = _per_joint(params, 'kd', n, path)
    for key in PARAMS:
        out.current[key] = _per_joint(params, key, n, path)
    out.trip_velocity = _per_joint(params, 'trip_velocity', n, path)
    out.default_position = _per_joint(params, 'bringup.default_position', n, path)
    for key in ('state_position_margin', 'state_velocity_factor'):
        if params.get(key) is not None:
            setattr(out, key, float(params[key]))
    for key, attr, default in (('policy_timeout_s', 'policy_timeout', DEFAULT_POLICY_TIMEOUT),
                               ('rate_hz', 'rate_hz', DEFAULT_RATE_HZ)):
        value = params.get(key, default)
        try:
            value = float(value)
        except (TypeError, ValueError):
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            raise ConfigError(f'{path}: safety_supervisor.{key} must be a number > 0, got '
                              f'{params.get(key)!r}')
        setattr(out, attr, value)
    if not use_model:
        out.model_note = 'not read (--no-model): proposals are not checked against a model'
        return out
    if model:
        where = 'the --model option'
    else:
        for section in MODEL_SECTIONS:
            model = load_node_params(path, section).get('model_path')
            if model:
                where = f'{section}.model_path'
                break
    if not model:
        out.model_note = ('the robot file names no model (sim_robot.model_path): proposals '
                          'are not checked against joint or actuator ranges')
        return out
    resolved = resolve_path(model, what=f'{path}: {where}',
                            relative_to=None if where == 'the --model option' else
                            Path(path).parent)
    out.model_path = str(resolved)
    out.model_note = f'{resolved} ({where})'
    out.model = read_model(resolved, names)
    return out


# -- what the trace needs ------------------------------------------------------------------------
def _target_moves(t, target, cap, start=None, period=None):
    """Per move of one joint's target: (rate, previous rate, dt, time), as the supervisor
    sees it. `start`: the target held for `period` before the first sample (the bring-up's
    hold of the first measured pose, as `core/limits_replay` starts): the first target's
    step from it is a move too (the H1's left ankle: -0.07 -> -1.48 rad in its first policy
    step from the MJCF's zero pose, 70 rad/s)."""
    rates, prev_rates, dts, times = [], [], [], []
    last_move = t[0]
    last_value = target[0]
    prev = math.nan
    first = 1
    if start is not None and period and math.isfinite(start) and target[0] != start:
        last_move, last_value, first = t[0] - period, start, 0
    for k in range(first, t.size):
        if target[k] == last_value:
            continue
        dt = min(t[k] - last_move, cap)
        rate = (target[k] - last_value) / dt
        rates.append(rate)
        prev_rates.append(prev)
        dts.append(dt)
        times.append(t[k])
        prev, last_move, last_value = rate, t[k], target[k]
    return np.array(rates), np.array(prev_rates), np.array(dts), np.array(times)


def jittered(rate, accel, period, jitter):
    """Return (rate, accel) a target sequence shows when its steps arrive `jitter` x period
    late then early: each step's rate over (1 - j) T, after a rate over (1 + j) T.

    rate' = rate / (1 - j); accel' = accel / (1 - j)^2 + rate * 2j / ((1 - j^2)(1 - j) T):
    even a target moving at a steady rate (no acceleration on a regular clock) shows one."""
    j = float(jitter)
    if j <= 0 or not period > 0:
        return rate, accel
    return (rate / (1.0 - j),
            accel / (1.0 - j) ** 2 + rate * 2.0 * j / ((1.0 - j * j) * (1.0 - j) * period))


def joint_needs(trace, j, kp=None, kd=None, rate_cap=DEFAULT_POLICY_TIMEOUT,
                jitter=DEFAULT_JITTER):
    """Return what the reference needs of joint column j: a dict of figures and sources."""
    t = trace.time
    q = trace.q[:, j]
    dq_all, dq_source = trace.velocity()
    dq = dq_all[:, j]
    need = {'q_min': float(q.min()), 'q_max': float(q.max()),
            'q_min_time': float(t[int(np.argmin(q))]), 'q_max_time': float(t[int(np.argmax(q))]),
            'velocity': float(np.abs(dq).max()), 'velocity_time': float(t[np.argmax(np.abs(dq))]),
            'velocity_source': dq_source}
    target = trace.target[:, j] if trace.target is not None else None
    if target is not None and not np.all(np.isfinite(target)):
        target = None
    if target is not None:
        need.update(target_min=float(target.min()), target_max=float(target.max()),
                    target_min_time=float(t[int(np.argmin(target))]),
                    target_max_time=float(t[int(np.argmax(target))]),
                    target_source=trace.sources.get('target', 'target_q'))
        period = float(np.median(np.diff(t))) if t.size > 1 else None
        rates, prev, dts, times = _target_moves(t, target, rate_cap, start=float(q[0]),
                                                period=period)
        need['target_rate'] = need['target_accel'] = 0.0
        if rates.size:
            k = int(np.argmax(np.abs(rates)))
            need['target_rate'], need['target_rate_time'] = float(abs(rates[k])), float(times[k])
            grow = np.where(np.isfinite(prev),
                            np.maximum(0.0, np.sign(rates) * (rates - np.nan_to_num(prev))) / dts,
                            0.0)
            k = int(np.argmax(grow))
            need['target_accel'], need['target_accel_time'] = float(grow[k]), float(times[k])
        if rates.size:   # what the same moves show on a jittery real-time clock
            need['move_period'] = float(np.median(dts))
            need['target_rate_jitter'], need['target_accel_jitter'] = jittered(
                need['target_rate'], need['target_accel'], need['move_period'], jitter)
            need['jitter'] = float(jitter)
    else:
        need['target_source'] = 'none: no target_q or actions in the trace'
    # The supervisor checks the torque a target implies when it arrives, kp*(q_t - q) - kd*dq
    # at the state it meets, not the effort the joint ends up making (on a wrist 4-8 x less):
    # the need is the larger of the two.
    effort = trace.effort[:, j] if trace.effort is not None else None
    candidates = []
    if target is not None and kp is not None and kd is not None:
        tau = kp * (target - q) - kd * dq
        candidates.append((tau, 'PD effort kp*(target - q) - kd*dq with the robot file\'s kp, '
                                'kd: the torque each target implies on arrival, as the '
                                'supervisor checks it'))
        need['kp'], need['kd'] = kp, kd
        need['torque_implied'] = float(np.abs(tau).max())
    if effort is not None and np.all(np.isfinite(effort)):
        candidates.append((effort, trace.sources.get('effort', 'effort')))
        need['torque_effort'] = float(np.abs(effort).max())
    if candidates:
        tau, source = max(candidates, key=lambda c: float(np.abs(c[0]).max()))
        need['torque'] = float(np.abs(tau).max())
        need['torque_time'] = float(t[np.argmax(np.abs(tau))])
        need['torque_max'], need['torque_min'] = float(tau.max()), float(tau.min())
        need['torque_source'] = source
        need['torque_is_implied'] = source.startswith('PD effort')
    else:
        need['torque_source'] = ('none: no effort in the trace, and no targets or no kp/kd '
                                 'for the PD effort')
    return need


# -- rounding ---------------------------------------------------------------------------------
def round_up(value, digits=3):
    """Round a positive value up to `digits` significant digits (2.2000000001 -> 2.2)."""
    if value <= 0 or not math.isfinite(value):
        return value
    step = 10.0 ** (math.floor(math.log10(value)) - digits + 1)
    return round(math.ceil(value / step - 1e-9) * step, max(0, digits - 1
                                                             - math.floor(math.log10(value))))


def round_out(value, decimals=3, upwards=True):
    """Round a position outwards (up for an upper limit, down for a lower one)."""
    scale = 10.0 ** decimals
    x = value * scale
    x = math.ceil(x - 1e-9) if upwards else math.floor(x + 1e-9)
    return round(x / scale, decimals)


# -- the proposal -------------------------------------------------------------------------------
@dataclass
class Proposal:
    """Per joint: need, proposed, model bound, current value for each limit; and flags."""

    reference: str
    robot: str
    layout: str
    samples: int
    time_span: tuple
    sources: dict
    notes: list
    margin: float
    position_margin: float
    model: str
    joints: dict                 # name -> {'limits': {param: {...}}, 'need': {...}, 'flags'}
    names: list                  # every supervised joint, robot file order
    untraced: list               # supervised joints the trace does not cover
    current: dict = field(default_factory=dict)   # param -> the robot file's array, or None
    jitter: float = DEFAULT_JITTER
    plausibility: dict = field(default_factory=dict)   # state_* proposals (not limits)
    replay: dict = None          # jitter -> limits_replay.Replay, when replayed

    @property
    def flagged(self):
        """[(joint, text)] for every flag, robot file order."""
        return [(n, f) for n in self.names if n in self.joints for f in self.joints[n]['flags']]

    def clipped_by_current(self):
        """{param: [joints]} where the robot file's current value would clip the reference."""
        out = {}
        for name in self.names:
            for param, row in self.joints.get(name, {}).get('limits', {}).items():
                if row.get('current_clips'):
                    out.setdefault(param, []).append(name)
        return out

    def to_dict(self):
        return _jsonable({
            'reference': self.reference, 'robot': self.robot, 'layout': self.layout,
            'samples': self.samples, 'time_span_s': list(self.time_span),
            'sources': self.sources, 'notes': self.notes, 'margin': self.margin,
            'position_margin_rad': self.position_margin, 'model': self.model,
            'joints': self.joints, 'untraced_joints': self.untraced,
            'flagged': [{'joint': n, 'problem': f} for n, f in self.flagged],
            'current_clips_reference': self.clipped_by_current(),
            'proposed': self.proposed_lists(), 'jitter': self.jitter,
            'plausibility': self.plausibility,
            'replay': (None if self.replay is None else
                       {str(k): v.to_dict() for k, v in self.replay.items()})})

    def to_json(self):
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    def proposed_lists(self):
        """{param: [value per supervised joint]}: proposals, the current value where the
        trace says nothing (None when there is none)."""
        out = {}
        for param in PARAMS:
            values = []
            for i, name in enumerate(self.names):
                row = self.joints.get(name, {}).get('limits', {}).get(param)
                if row is not None and row.get('proposed') is not None:
                    values.append(row['proposed'])
                else:
                    values.append(None)
            out[param] = values
        return out

    # -- rendering --------------------------------------------------------------------------
    def header_lines(self):
        lines = [f'reference : {self.reference} ({self.layout} layout, {self.samples} samples, '
                 f't = {self.time_span[0]:g} to {self.time_span[1]:g} s)',
                 f'robot     : {self.robot}',
                 f'model     : {self.model}']
        for key, label in (('names', 'joints'), ('dq', 'velocity'), ('target', 'targets'),
                           ('effort', 'torque')):
            if self.sources.get(key):
                lines.append(f'{label:<10}: {self.sources[key]}')
        lines.append(f'margins   : {self.position_margin:g} rad outside positions and targets, '
                     f'+{100 * self.margin:g} % on the rest (within the model\'s bounds); '
                     f'target rate and acceleration for steps arriving {self.jitter:g} of a '
                     'period late or early (real-time jitter, --jitter)')
        for note in self.notes:
            lines.append(f'note      : {note}')
        if self.untraced:
            lines.append(f'untraced  : no proposal, the current values kept: '
                         f'{", ".join(self.untraced)}')
        return [wrapped for line in lines for wrapped in
                textwrap.wrap(line, 100, subsequent_indent=' ' * 12, break_on_hyphens=False)]

    def table(self):
        """Return the readable report (lines): header, two tables, flags, current clips."""
        return [line.rstrip() for line in self._table()]

    def _table(self):
        lines = self.header_lines()
        w = max([len(n) for n in self.joints] + [5])
        lines += ['', 'positions (rad): the reference\'s range (measured and targets) -> '
                  'proposed [model range] {current}']
        lines.append(f'{"joint":<{w}}  {"need lower":>10} {"need upper":>10}   '
                     f'{"proposed":>17}   {"model range":>19}   {"current":>17}')
        for name in self.names:
            if name not in self.joints:
                continue
            lim = self.joints[name]['limits']
            lo, hi = lim['position_lower'], lim['position_upper']
            lines.append(
                f'{name:<{w}}  {_f(lo["need"], 4):>10} {_f(hi["need"], 4):>10}   '
                f'{"[" + _f(lo["proposed"]) + ", " + _f(hi["proposed"]) + "]":>17}   '
                f'{"[" + _f(lo["model"]) + ", " + _f(hi["model"]) + "]":>19}   '
                f'{_current(lo) + " " + _current(hi):>17}'
                + ('   FLAGGED' if any(f.startswith(('position', 'target'))
                                      for f in self.joints[name]['flags']) else ''))
        lines += ['', 'need -> proposed {current}; torque bound of the model in ()']
        heads = (('velocity_limit', 'velocity (rad/s)'), ('torque_limit', 'torque (N*m)'),
                 ('max_target_rate', 'target rate (rad/s)'),
                 ('max_target_accel', 'target accel (rad/s^2)'))
        cells = {name: [self._cell(name, p) for p, _ in heads] for name in self.joints}
        widths = [max([len(h)] + [len(cells[n][i]) for n in cells]) for i, (_, h) in
                  enumerate(heads)]
        lines.append(f'{"joint":<{w}}  ' + '   '.join(f'{h:<{widths[i]}}' for i, (_, h)
                                                     in enumerate(heads)))
        for name in self.names:
            if name not in self.joints:
                continue
            lines.append(f'{name:<{w}}  ' + '   '.join(f'{c:<{widths[i]}}' for i, c in
                                                     enumerate(cells[name]))
                         + ('   FLAGGED' if any(f.startswith('torque')
                                                for f in self.joints[name]['flags']) else ''))
        flagged = self.flagged
        lines.append('')
        if flagged:
            lines.append(f'FLAGGED: the reference itself needs more than the model allows on '
                         f'{len({n for n, _ in flagged})} joint(s); the proposal stops at the '
                         'model\'s bound (decide: model, trace or limit):')
            for name, text in flagged:
                lines.append(f'  !! {name}: {text}')
        else:
            lines.append('flagged: none (the reference stays inside the model\'s ranges)')
        clips = self.clipped_by_current()
        if clips:
            lines.append('the robot file\'s current values would clip the reference ({...!}): '
                         + '; '.join(f'{p} on {len(js)} joint(s)' for p, js in clips.items()))
        for name in self.names:
            for text in self.joints.get(name, {}).get('warnings', []):
                lines.append(f'warning: {name}: {text}')
        if self.plausibility:
            pl = self.plausibility
            lines.append('')
            lines.append('measurement plausibility (not command limits: a state beyond them is '
                         'a sensor fault, an e-stop):')
            for key in ('state_position_margin', 'state_velocity_factor'):
                lines.append(f'  {key}: {pl[key]:g} {{{pl["current"][key]:g}}}'
                             + (f'  ({pl["why"][key]})' if key in pl['why'] else ''))
        if self.replay:
            lines.append('')
            for jitter, rep in self.replay.items():
                lines.append(f'replay through the supervisor\'s filter at stage 1.00: '
                             f'{rep.summary()}')
        return lines

    def _cell(self, name, param):
        row = self.joints[name]['limits'][param]
        if row['need'] is None:
            return f'- {_current(row)}'
        text = f'{_f(row["need"], 4)} -> {_f(row["proposed"])} {_current(row)}'
        if param == 'torque_limit' and row['model'] is not None:
            text += f' ({_f(row["model"])})'
        return text

    def yaml_snippet(self):
        """Return the safety_supervisor section to paste into the robot file (text)."""
        lists = self.proposed_lists()
        flagged = {n for n, _ in self.flagged}
        lines = [f'# Proposed by `simreal limits` from {Path(self.reference).name} '
                 f'({self.samples} samples, {self.time_span[1] - self.time_span[0]:g} s) with '
                 f'margins {self.position_margin:g} rad / +{100 * self.margin:g} %, within the '
                 'model\'s ranges.',
                 f'# joints: {", ".join(self.names)}']
        if flagged:
            lines.append('# FLAGGED (the reference needs more than the model allows; these '
                         'stop at the model\'s bound): ' + ', '.join(
                             n for n in self.names if n in flagged))
        if self.untraced:
            lines.append('# not in the trace (current values kept): ' + ', '.join(self.untraced))
        lines = [wrapped for line in lines for wrapped in
                 textwrap.wrap(line, 99, subsequent_indent='#   ', break_on_hyphens=False)]
        lines += ['/**/safety_supervisor:', '  ros__parameters:']
        for param in PARAMS:
            values = lists[param]
            current = self.current_values(param)
            filled = [v if v is not None else (current[i] if current is not None else None)
                      for i, v in enumerate(values)]
            if any(v is None for v in filled):
                missing = [self.names[i] for i, v in enumerate(filled) if v is None]
                lines.append(f'    # {param}: no proposal for {", ".join(missing)} (nothing in '
                             'the trace, nothing in the robot file)')
                continue
            lines.append(f'    {param}: [{", ".join(_yaml_number(v) for v in filled)}]'
                         f'   # {UNITS[param]}')
        if self.plausibility:
            lines.append('    # measurement plausibility, not command limits (a state beyond '
                         'them is a sensor fault):')
            for key in ('state_position_margin', 'state_velocity_factor'):
                lines.append(f'    {key}: {_yaml_number(self.plausibility[key])}')
        return '\n'.join(lines) + '\n'

    def current_values(self, param):
        cur = self.current.get(param)
        return None if cur is None else [float(v) for v in cur]


def _f(value, digits=6):
    if value is None:
        return '-'
    if isinstance(value, float) and not math.isfinite(value):
        return 'inf' if value > 0 else '-inf'
    return f'{value:.{digits}g}'


def _yaml_number(value):
    """A float as YAML reads it back as a float (ROS double arrays refuse ints): 33.0."""
    return np.format_float_positional(float(value), unique=True, trim='0')


def _current(row):
    cur = row.get('current')
    if cur is None:
        return '{-}'
    return '{' + _f(cur) + ('!' if row.get('current_clips') else '') + '}'


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.floating, float)):
        value = float(value)
        return value if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def propose(trace, robot, margin=DEFAULT_MARGIN, position_margin=DEFAULT_POSITION_MARGIN,
            jitter=DEFAULT_JITTER, beyond_model=False):
    """Return the Proposal for a loaded Trace and a RobotFile.

    `beyond_model`: propose what the reference needs even past the model's range or torque
    bound (each such limit FLAGGED: the user confirms the hardware allows it), so that the
    proposal lets the motion through; by default the proposal stops at the model's bound."""
    margin = float(margin)
    position_margin = float(position_margin)
    if not (math.isfinite(margin) and margin >= 0):
        raise ConfigError(f'margin must be a fraction >= 0 (0.1 = 10 %), got {margin}')
    if not (math.isfinite(position_margin) and position_margin >= 0):
        raise ConfigError(f'position margin must be >= 0 rad, got {position_margin}')
    unknown = [n for n in trace.names if n not in robot.names]
    if unknown:
        raise ConfigError(f'{trace.path}: unknown joint name(s) {unknown}: not among the '
                          f'supervised joints of {robot.path} ({robot.names})')
    joints = {}
    sources = dict(trace.sources)
    for i, name in enumerate(robot.names):
        if name not in trace.names:
            continue
        j = trace.names.index(name)
        kp = float(robot.kp[i]) if robot.kp is not None else None
        kd = float(robot.kd[i]) if robot.kd is not None else None
        need = joint_needs(trace, j, kp, kd, robot.policy_timeout, jitter)
        sources['dq'] = need['velocity_source']
        sources['target'] = need['target_source']
        sources['effort'] = need['torque_source']
        mj = robot.model.get(name) if robot.model else None
        joints[name] = _joint_proposal(name, i, need, mj, robot, margin, position_margin,
                                       beyond_model)
    untraced = [n for n in robot.names if n not in joints]
    notes = list(trace.notes)
    period = float(np.median(np.diff(trace.time)))
    if period > 1.5 / robot.rate_hz:
        notes.append(f'the trace has a sample every {period * 1e3:.3g} ms, the supervisor checks '
                     f'every {1e3 / robot.rate_hz:.3g} ms: velocity and effort peaks between '
                     'samples are not in the trace (a larger --margin, or a trace at the '
                     'supervisor\'s rate, covers them)')
    for key, what in (('velocity', 'velocity'), ('torque', 'torque'),
                      ('target_rate', 'target rate')):
        first = [n for n in joints if joints[n]['need'].get(key + '_time') == trace.time[0]]
        if first:
            notes.append(f'the {what} peak of {", ".join(first)} is at the trace\'s first '
                         f'sample (t = {trace.time[0]:g} s): a start transient? (each peak\'s '
                         'time is in the JSON)')
    prop = Proposal(trace.path, robot.path, trace.layout, trace.n_samples,
                    (float(trace.time[0]), float(trace.time[-1])), sources, notes,
                    margin, position_margin, robot.model_note or '-', joints, list(robot.names),
                    untraced, dict(robot.current))
    prop.jitter = float(jitter)
    prop.plausibility = _plausibility(prop, robot)
    return prop


def _plausibility(prop, robot):
    """Propose the measurement plausibility (separate from the command limits): a measured
    state the supervisor refuses as a sensor fault must be one the robot cannot be in, not a
    stumble. Positions: as far outside the proposed soft range as the model's joint range
    reaches; speeds: state_velocity_factor x velocity_limit at least the trip velocity (a
    faster joint is an e-stop anyway)."""
    lists = prop.proposed_lists()
    margin = robot.state_position_margin
    factor = robot.state_velocity_factor
    why = {}
    for i, name in enumerate(prop.names):
        mj = robot.model.get(name) if robot.model else None
        lo, hi = lists['position_lower'][i], lists['position_upper'][i]
        if mj is not None and lo is not None and mj.lower is not None:
            gap = max(lo - mj.lower, mj.upper - hi)
            if gap > margin:
                margin, why['state_position_margin'] = gap, (
                    f'{name}: the joint range [{mj.lower:.4g}, {mj.upper:.4g}] reaches '
                    f'{gap:.3g} rad outside the proposed [{lo:.4g}, {hi:.4g}]')
        vlim = lists['velocity_limit'][i]
        if vlim and robot.trip_velocity is not None:
            need = float(robot.trip_velocity[i]) / float(vlim)
            if need > factor:
                factor, why['state_velocity_factor'] = need, (
                    f'{name}: trip_velocity {float(robot.trip_velocity[i]):g} rad/s over the '
                    f'proposed velocity_limit {vlim:g}')
    return {'state_position_margin': round_out(margin, 2),
            'state_velocity_factor': round_up(factor, 2),
            'current': {'state_position_margin': robot.state_position_margin,
                        'state_velocity_factor': robot.state_velocity_factor},
            'why': why}


def _joint_proposal(name, i, need, mj, robot, margin, position_margin, beyond_model=False):
    flags, warnings = [], []
    limits = {}
    model_where = f' of {Path(robot.model_path).name}' if robot.model_path else ''

    def current(param):
        cur = robot.current.get(param)
        return None if cur is None else float(cur[i])

    # positions: measured and targets, the margin outside, within the joint range
    lo_need = min(need['q_min'], need.get('target_min', math.inf))
    hi_need = max(need['q_max'], need.get('target_max', -math.inf))
    m_lo = mj.lower if mj is not None else None
    m_hi = mj.upper if mj is not None else None
    rng = f'[{_f(m_lo)}, {_f(m_hi)}]'
    if m_lo is not None:
        if need['q_min'] < m_lo - TOLERANCE:
            flags.append(f'position: the reference reaches {need["q_min"]:.4g} rad at t = '
                         f'{need["q_min_time"]:g} s, {m_lo - need["q_min"]:.3g} rad below the '
                         f'joint range {rng}{model_where}')
        if 'target_min' in need and need['target_min'] < m_lo - TOLERANCE:
            flags.append(f'target: the reference\'s position targets reach '
                         f'{need["target_min"]:.4g} rad at t = {need["target_min_time"]:g} s, '
                         f'{m_lo - need["target_min"]:.3g} rad below the joint range {rng}')
    if m_hi is not None:
        if need['q_max'] > m_hi + TOLERANCE:
            flags.append(f'position: the reference reaches {need["q_max"]:.4g} rad at t = '
                         f'{need["q_max_time"]:g} s, {need["q_max"] - m_hi:.3g} rad above the '
                         f'joint range {rng}{model_where}')
        if 'target_max' in need and need['target_max'] > m_hi + TOLERANCE:
            flags.append(f'target: the reference\'s position targets reach '
                         f'{need["target_max"]:.4g} rad at t = {need["target_max_time"]:g} s, '
                         f'{need["target_max"] - m_hi:.3g} rad above the joint range {rng}')
    lo = round_out(lo_need - position_margin, upwards=False)
    hi = round_out(hi_need + position_margin, upwards=True)
    lo_capped = m_lo is not None and lo < m_lo and not beyond_model
    hi_capped = m_hi is not None and hi > m_hi and not beyond_model
    if beyond_model and any(f.startswith(('position', 'target')) for f in flags):
        flags.append(f'beyond the model: the proposed range [{_f(lo)}, {_f(hi)}] passes the '
                     f'joint range {rng}{model_where} to let the reference through: confirm '
                     'the hardware allows it')
    limits['position_lower'] = {'need': lo_need, 'proposed': max(lo, m_lo) if lo_capped else lo,
                                'model': m_lo, 'capped_at_model': lo_capped,
                                'current': current('position_lower')}
    limits['position_upper'] = {'need': hi_need, 'proposed': min(hi, m_hi) if hi_capped else hi,
                                'model': m_hi, 'capped_at_model': hi_capped,
                                'current': current('position_upper')}
    row = limits['position_lower']
    row['current_clips'] = row['current'] is not None and row['current'] > lo_need + TOLERANCE
    row = limits['position_upper']
    row['current_clips'] = row['current'] is not None and row['current'] < hi_need - TOLERANCE

    # rates and efforts: need * (1 + margin), the torque within the actuator's range
    for param, key, bound in (('velocity_limit', 'velocity', None),
                              ('torque_limit', 'torque', mj.torque if mj is not None else None),
                              ('max_target_rate', 'target_rate', None),
                              ('max_target_accel', 'target_accel', None)):
        value = need.get(key)
        cur = current(param)
        if value is None:
            limits[param] = {'need': None, 'proposed': None, 'model': bound,
                             'capped_at_model': False, 'current': cur, 'current_clips': False}
            continue
        base = need.get(key + '_jitter', value)   # rate, accel: with real-time jitter
        proposed = round_up(base * (1.0 + margin))
        if proposed <= 0:
            proposed = None   # the joint never moved/pushed: no figure to propose
            warnings.append(f'{param}: the reference needs 0; no proposal (current value kept)')
        capped = (bound is not None and proposed is not None and proposed > bound
                  and not beyond_model)
        if beyond_model and bound is not None and proposed is not None and proposed > bound:
            flags.append(f'beyond the model: {param} {_f(proposed)} is more than the '
                         f'actuator allows (+-{bound:g}, {mj.torque_source}{model_where}), '
                         'to let the reference through: confirm the hardware allows it')
        if capped:
            proposed = bound
        if bound is not None and value > bound + TOLERANCE:
            how = (f'PD torque at kp {need["kp"]:g}, kd {need["kd"]:g}'
                   if need.get('torque_is_implied') else 'measured effort')
            flags.append(f'torque: the reference needs {value:.4g} N*m ({how}, from '
                         f'{need["torque_min"]:.4g} to {need["torque_max"]:.4g}), '
                         f'{value - bound:.3g} N*m more than the actuator allows '
                         f'(+-{bound:g}, {mj.torque_source}{model_where})')
        limits[param] = {'need': value, 'proposed': proposed, 'model': bound,
                         'capped_at_model': capped, 'current': cur,
                         'current_clips': cur is not None and cur < value - TOLERANCE}
    if robot.trip_velocity is not None and need['velocity'] >= robot.trip_velocity[i]:
        warnings.append(f'the reference moves at {need["velocity"]:.4g} rad/s, at or above the '
                        f'robot file\'s trip_velocity {robot.trip_velocity[i]:g} (an e-stop)')
    elif (robot.trip_velocity is not None and limits['velocity_limit']['proposed'] is not None
          and limits['velocity_limit']['proposed'] >= robot.trip_velocity[i]):
        warnings.append(f'the proposed velocity_limit {_f(limits["velocity_limit"]["proposed"])} '
                        f'reaches trip_velocity {robot.trip_velocity[i]:g}: raise '
                        'trip_velocity above it')
    if robot.default_position is not None:
        pose = float(robot.default_position[i])
        lo_p, hi_p = limits['position_lower']['proposed'], limits['position_upper']['proposed']
        if not lo_p <= pose <= hi_p:
            warnings.append(f'bringup.default_position {pose:g} is outside the proposed range '
                            f'[{_f(lo_p)}, {_f(hi_p)}]: safety/go_default would be refused')
    return {'limits': limits, 'need': need, 'flags': flags, 'warnings': warnings}


def propose_from_files(reference, robot, margin=DEFAULT_MARGIN,
                       position_margin=DEFAULT_POSITION_MARGIN, model=None, use_model=True,
                       jitter=DEFAULT_JITTER, replay=False, beyond_model=False):
    """Read the trace, the robot file and its model; return the Proposal.

    `replay`: also replay the reference through the supervisor's own limit filter with the
    proposal (`Proposal.replay`, core/limits_replay.py)."""
    robot_file = read_robot(robot, model=model, use_model=use_model)
    trace = load_trace(reference, robot=robot_file.path)
    prop = propose(trace, robot_file, margin, position_margin, jitter, beyond_model)
    if replay:
        prop.replay = replay_proposal(prop, trace)
    return prop


def replay_proposal(prop, trace):
    """Replay the trace through the supervisor with the robot file's parameters and the
    proposal; return {jitter: Replay} for no jitter and the proposal's."""
    from simreal_ros.core.limits_replay import replay
    if trace.target is None:
        prop.notes.append('no replay through the supervisor: the trace has no targets '
                          '(target_q or actions)')
        return {}
    params = load_node_params(prop.robot, 'safety_supervisor')
    lists = prop.proposed_lists()
    for param, values in lists.items():
        current = prop.current_values(param)
        params[param] = [v if v is not None else (current[i] if current else None)
                         for i, v in enumerate(values)]
        if any(v is None for v in params[param]):
            raise ConfigError(f'{prop.robot}: safety_supervisor.{param}: no proposal and no '
                              'value for some joints; cannot replay')
    for key in ('state_position_margin', 'state_velocity_factor'):
        params[key] = prop.plausibility[key]
    out = {}
    for jitter in sorted({0.0, prop.jitter}):
        out[jitter] = replay(params, trace, 1.0, jitter, source=f'{prop.robot}: '
                             'safety_supervisor (with the proposal)')
    return out

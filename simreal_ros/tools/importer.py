"""Turn a training export into a complete robot file (`simreal import`).

    simreal import deploy.yaml --model scene.xml [--policy policy.onnx] -o robot.yaml
    simreal import deploy_config.yaml --format legged_gym --model scene.xml \
        --policy policy.onnx -o robot.yaml

Two formats (docs/bring_your_own.md, "Import"):

- `unitree_rl_lab`: the `deploy.yaml` unitree_rl_lab's exporter writes from a live Isaac Lab
  environment (`utils/export_deploy_cfg.py`) and its C++ deploy reads
  (`deploy/include/isaaclab/`). `joint_ids_map[i]` is the motor (SDK) index of the policy's
  joint i; `stiffness` and `damping` are in motor order; `default_joint_pos`, the action's
  `scale` / `offset` and every per-joint observation scale are in policy order. The motors are
  the MJCF's actuators, in order (unitree_mujoco's models list them in SDK order). An
  observation term is a registered function of that deploy: each term clipped (`clip: [lo,
  hi]`) then scaled, each with its own history (`history_length`, oldest first), terms in the
  file's order. The target is `offset + scale * action`; `velocity_commands` is clamped to
  `commands.base_velocity.ranges`; the policy period is `step_dt`.
- `legged_gym`: unitree_rl_gym's `deploy/deploy_mujoco/configs/*.yaml` (`kps`, `kds`,
  `default_angles`, `*_scale`, `cmd_scale`, `num_actions`, `num_obs`, `simulation_dt`,
  `control_decimation`). Its observation is not in the file but in deploy_mujoco.py: base
  angular velocity, projected gravity, command, joint positions, velocities, last action
  (then sin/cos of a 0.8 s gait phase on the simulation clock when `num_obs` has room for it).
  Joint order everywhere is the MJCF's actuators'.

Everything the robot file needs and the export does not say (the supervisor's limits beyond
the model's ranges, timeouts) is written with a comment saying where it came from; every field
of the export that is not mapped is named in `Imported.notes` (and in the file's header). An
unknown observation term or action term is an `ImportRefused` naming it and the supported
ones, and no file is written. Pure file work: no rclpy.
"""
from dataclasses import dataclass, field
import math
import os
from pathlib import Path

import numpy as np
import yaml

from simreal_ros.core.assets import url_for
from simreal_ros.core.config import ASSET_URL, ConfigError, resolve_path

FORMATS = ('unitree_rl_lab', 'legged_gym', 'mjlab')

# unitree_rl_lab's registered observation functions (deploy/include/isaaclab/envs/mdp/
# observations.h) -> this package's term kinds (core/observation.py TERM_KINDS).
RL_LAB_TERMS = {
    'base_ang_vel': 'base_ang_vel',
    'projected_gravity': 'projected_gravity',
    'velocity_commands': 'velocity_command',
    'joint_pos_rel': 'joint_pos',
    'joint_vel_rel': 'joint_vel',
    'last_action': 'last_action',
    'gait_phase': 'gait_phase',
}
RL_LAB_ACTIONS = ('JointPositionAction',)
LEGGED_GYM_PHASE_PERIOD = 0.8   # s, deploy_mujoco.py's `period = 0.8` (not in its config)

# What the export does not say, the values written and why (stated in the file).
PHYSICS_DT = 0.002              # s: sim_robot's step (500 Hz, as the robot's low-level loop)
VELOCITY_LIMIT = 20.0           # rad/s: no velocity bound in the export or the MJCF
TRIP_FACTOR = 1.5               # trip_velocity = 1.5 x velocity_limit
STATE_VELOCITY_FACTOR = 3.0     # a measured speed beyond 3 x velocity_limit is implausible
STATE_POSITION_MARGIN = 0.3     # rad: a measured position beyond the range by this: implausible
TARGET_RATE = 40.0              # rad/s: a target may move 0.8 rad per 20 ms period
TARGET_ACCEL = 5000.0           # rad/s^2: a step arriving half a period early after one late
POSITION_MARGIN = 0.1           # rad a target may reach past the joint's range (torque only)
START_TOLERANCE = 0.01          # rad: the MJCF's own pose is another start past this


class ImportRefused(ConfigError):
    """The export cannot be turned into a robot file (named field, what is supported)."""


@dataclass
class Imported:
    """A robot file made from an export: its sections, and what was not mapped."""

    source: str
    fmt: str
    robot_name: str
    shared: dict = field(default_factory=dict)        # /** parameters
    sections: dict = field(default_factory=dict)      # node -> parameters (nested dicts)
    comments: dict = field(default_factory=dict)      # (node, key) -> comment line(s)
    notes: list = field(default_factory=list)         # fields not mapped, assumptions
    flags: list = field(default_factory=list)         # limits beyond the model: confirm
    reference_cmd: list = None                        # cmd_vel of the import's reference
    replays: dict = field(default_factory=dict)       # (jitter, run) -> limits_replay.Replay

    def note(self, text):
        self.notes.append(text)

    def text(self):
        """Return the robot file's YAML text (deterministic: same inputs, same bytes)."""
        lines = [f'# {self.robot_name}: imported by `simreal import` (format {self.fmt}) from',
                 f'#   {self.source}',
                 '# Regenerate rather than edit: the import is checked byte for byte by '
                 'the tests',
                 '# for the files in config/robots/. A relative path is relative to this',
                 '# file\'s folder.']
        if self.notes:
            lines.append('# Not mapped from the export, or assumed (also printed by the '
                         'import):')
            for text in self.notes:
                lines += _wrap_comment(f'- {text}', '#   ', first='# ')
        if self.flags:
            lines.append('# FLAGGED: the policy\'s own motion needs more than the MJCF allows; '
                         'these')
            lines.append('# limits let it through: confirm the hardware allows each one.')
            for text in self.flags:
                lines += _wrap_comment(f'- {text}', '#   ', first='# ')
        lines.append('/**:')
        lines.append('  ros__parameters:')
        lines += _block(self.shared, 4, self.comments, '/**')
        for node, params in self.sections.items():
            lines.append('')
            lines.append(f'/**/{node}:')
            lines.append('  ros__parameters:')
            lines += _block(params, 4, self.comments, node)
        return '\n'.join(lines) + '\n'


# -- YAML writing (flow lists wrapped at 99 columns, comments kept) -----------------------
WIDTH = 99


def _wrap_comment(text, cont, first='# '):
    words, out, line = text.split(' '), [], first
    for w in words:
        if len(line) + len(w) + 1 > WIDTH and line.strip() not in ('#', ''):
            out.append(line.rstrip())
            line = cont
        line += w + ' '
    out.append(line.rstrip())
    return out


def _scalar(v):
    if isinstance(v, bool):
        return 'true' if v else 'false'
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        v = float(v)
        if not math.isfinite(v):
            raise ValueError(f'non-finite value {v} cannot be written')
        return repr(v)
    text = str(v)
    dumped = yaml.safe_dump(text, default_style=None).strip()
    if dumped.endswith('\n...'):
        dumped = dumped[:-4].strip()
    return dumped if dumped.split('\n')[0] == text else "'" + text.replace("'", "''") + "'"


def _flow(key, values, indent):
    head = ' ' * indent + f'{key}: ['
    items = [_scalar(v) for v in values]
    lines, line = [], head
    for k, item in enumerate(items):
        piece = item + (', ' if k < len(items) - 1 else ']')
        if len(line) + len(piece.rstrip()) > WIDTH and line != head:
            lines.append(line.rstrip())
            line = ' ' * len(head)
        line += piece
    if not items:
        line += ']'
    lines.append(line.rstrip())
    return lines


def _block(params, indent, comments, node, prefix=''):
    lines = []
    for key, value in params.items():
        full = f'{prefix}{key}'
        for c in comments.get((node, full), ()):
            lines += _wrap_comment(c, ' ' * indent + '# ', first=' ' * indent + '# ')
        if isinstance(value, dict):
            lines.append(' ' * indent + f'{key}:')
            lines += _block(value, indent + 2, comments, node, full + '.')
        elif isinstance(value, (list, tuple, np.ndarray)):
            lines += _flow(key, list(value), indent)
        else:
            lines.append(' ' * indent + f'{key}: {_scalar(value)}')
    return lines


# -- reading --------------------------------------------------------------------------------
class _ExportLoader(yaml.SafeLoader):
    """SafeLoader that reads the one Python tag Isaac Lab exports write: a slice."""


def _slice(loader, node):
    args = loader.construct_sequence(node)
    return slice(*args)


_ExportLoader.add_constructor('tag:yaml.org,2002:python/object/apply:builtins.slice', _slice)


def read_export(path):
    """Read an export's YAML (an Isaac Lab slice tag allowed); name the file on errors."""
    try:
        with open(path) as f:
            data = yaml.load(f, Loader=_ExportLoader)   # noqa: S506 - SafeLoader subclass
    except OSError as exc:
        raise ImportRefused(f'cannot read {path}: {exc.strerror}') from exc
    except yaml.YAMLError as exc:
        raise ImportRefused(f'{path} is not YAML this import reads: {exc}') from exc
    if not isinstance(data, dict):
        raise ImportRefused(f'{path}: expected a mapping at the top level')
    return data


def detect_format(data, path):
    """Return the export's format from its keys, or refuse naming what is missing."""
    if 'joint_ids_map' in data and 'observations' in data:
        return 'unitree_rl_lab'
    if 'kps' in data and 'num_obs' in data:
        return 'legged_gym'
    raise ImportRefused(
        f'{path}: neither format: unitree_rl_lab needs joint_ids_map and observations, '
        'legged_gym needs kps and num_obs; give --format and see docs/bring_your_own.md')


@dataclass
class Model:
    """The MJCF's actuated joints in actuator order, and their bounds."""

    path: Path
    names: list
    floating: bool
    bounds: dict                   # name -> limits_proposal.ModelJoint


def read_model(path):
    """Read the MJCF: the joints its actuators drive (in actuator order), their bounds."""
    import mujoco
    from simreal_ros.core import limits_proposal
    from simreal_ros.core.plant import load_model
    m = load_model(path)
    names = []
    for a in range(m.nu):
        if int(m.actuator_trntype[a]) != int(mujoco.mjtTrn.mjTRN_JOINT):
            raise ImportRefused(f'{path}: actuator {m.actuator(a).name!r} does not drive a '
                                'joint; the import maps joints to actuators')
        names.append(m.joint(int(m.actuator_trnid[a, 0])).name)
    if len(set(names)) != len(names):
        raise ImportRefused(f'{path}: a joint has more than one actuator: {names}')
    floating = m.njnt > 0 and int(m.jnt_type[0]) == int(mujoco.mjtJoint.mjJNT_FREE)
    return Model(Path(path), names, floating, limits_proposal.read_model(path, names))


def _floats(data, key, path, n=None, where=None):
    where = where or key
    value = data.get(key) if isinstance(data, dict) else None
    if value is None:
        raise ImportRefused(f'{path}: {where} is missing')
    try:
        arr = np.asarray(value, dtype=float).reshape(-1)
    except (TypeError, ValueError):
        raise ImportRefused(f'{path}: {where} must be numbers, got {value!r}') from None
    if n is not None and arr.size != n:
        raise ImportRefused(f'{path}: {where} has {arr.size} values, expected {n}')
    if not np.all(np.isfinite(arr)):
        raise ImportRefused(f'{path}: {where} has a non-finite value: {arr.tolist()}')
    return arr


def _one_or_list(arr):
    """A per-element value: one number when all agree, else the list."""
    arr = np.asarray(arr, dtype=float).reshape(-1)
    if arr.size and np.all(arr == arr[0]):
        return float(arr[0])
    return [float(v) for v in arr]


def _path_for(given, out_dir, what):
    """The path as the robot file should name it: relative to the robot file's folder (as
    every reader resolves it), absolute or a `scheme://` path as given."""
    resolved = resolve_path(given, what=what)
    text = str(given)
    if text.startswith(('package://', ASSET_URL)):
        return text, resolved
    in_asset = url_for(resolved)        # a third-party asset's file: named as one, anywhere
    if in_asset is not None:
        return in_asset, resolved
    if os.path.isabs(text) or '://' in text:
        return text, resolved
    return os.path.relpath(resolved, Path(out_dir).resolve()).replace(os.sep, '/'), resolved


# -- the common parts of a robot file ------------------------------------------------------
def _sim_robot(imp, model_path, physics_dt, floating, n, initial=None):
    imp.sections['sim_robot'] = {
        'model_path': model_path,
        'physics_dt': physics_dt,
        'publish_rate_hz': round(1.0 / physics_dt, 6),
        'command_mode': 'position',
        'command_timeout_s': 0.1,
        'real_time_factor': 1.0,
        'publish_clock': False,
        'plant_enabled': False,
        'hold_until_command': bool(floating),
        'motor_indices': list(range(n)),
    }
    if initial is not None:
        imp.sections['sim_robot']['initial_position'] = [float(v) for v in initial]
        imp.comments[('sim_robot', 'initial_position')] = [
            'The default pose (motor order): a training episode starts there (Isaac Lab\'s '
            'reset, legged_gym\'s init_state), so the policy\'s first command is near the '
            'measured pose; the base starts at the MJCF\'s own pose.']
    imp.comments[('sim_robot', 'plant_enabled')] = [
        'The MJCF is the truth (no hidden plant): sim2sim matches the training-side loop.']
    if floating:
        imp.comments[('sim_robot', 'hold_until_command')] = [
            'A floating base hangs until the first command (simulated time stands still).']
    imp.comments[('sim_robot', 'motor_indices')] = [
        'joint_names are the motors in order (the MJCF\'s actuators).']


def _supervisor(imp, model, names, kp, kd, default_motor, period):
    n = len(names)
    lower, upper, torque = [], [], []
    for name in names:
        b = model.bounds[name]
        lower.append(-math.inf if b.lower is None else round(b.lower - POSITION_MARGIN, 4))
        upper.append(math.inf if b.upper is None else round(b.upper + POSITION_MARGIN, 4))
        if b.torque is None:
            raise ImportRefused(f'{model.path}: joint {name!r} has no torque bound (no '
                                'actuatorfrcrange, forcerange or motor ctrlrange): the '
                                'supervisor needs a torque_limit per joint')
        torque.append(round(float(b.torque), 4))
    if not all(map(math.isfinite, lower + upper)):
        unlimited = [nm for nm, lo, hi in zip(names, lower, upper)
                     if not (math.isfinite(lo) and math.isfinite(hi))]
        raise ImportRefused(f'{model.path}: joint(s) {unlimited} have no range: the '
                            'supervisor needs position limits per joint')
    timeout = round(3 * period, 6)
    sup = {
        'rate_hz': 500.0,
        'position_lower': lower,
        'position_upper': upper,
        'velocity_limit': [VELOCITY_LIMIT] * n,
        'torque_limit': torque,
        'max_target_rate': [TARGET_RATE] * n,
        'max_target_accel': [TARGET_ACCEL] * n,
        'state_position_margin': STATE_POSITION_MARGIN,
        'state_velocity_factor': STATE_VELOCITY_FACTOR,
        'trip_velocity': [VELOCITY_LIMIT * TRIP_FACTOR] * n,
        'stages': [1.0],
        'stage_dwell_s': [5.0],
        'safe_mode': 'damping',
        'policy_timeout_s': timeout,
        'stale_hold_s': 0.25,
        'joint_states_timeout_s': 0.2,
        'use_imu': bool(model.floating),
        'imu_timeout_s': 0.2,
        'max_tilt_rad': 0.6,
        'reset_tolerance': 0.8,
        'bringup': {'default_position': [float(v) for v in default_motor],
                    'max_velocity': [0.5], 'min_duration_s': 2.0},
    }
    c = imp.comments
    c[('safety_supervisor', 'position_lower')] = [
        f'Command limits. Positions: the MJCF joint ranges, {POSITION_MARGIN} rad wider for '
        'targets (a target past the stop only sets the torque; the torque limit bounds it).']
    c[('safety_supervisor', 'velocity_limit')] = [
        f'Neither the export nor the MJCF bounds velocities: {VELOCITY_LIMIT} rad/s assumed '
        '(above it the supervisor only brakes). Check against the motors\' data sheet.']
    c[('safety_supervisor', 'torque_limit')] = [
        'The MJCF actuator bound per joint; the supervisor checks the PD torque a target '
        'implies when it arrives, kp*(q_t - q) - kd*dq.']
    c[('safety_supervisor', 'max_target_rate')] = [
        f'Target rate and acceleration: {TARGET_RATE} rad/s and {TARGET_ACCEL} rad/s^2, room '
        'for a policy step that arrives late (real-time jitter); `simreal limits` with a '
        'reference trace proposes tighter ones.']
    c[('safety_supervisor', 'state_position_margin')] = [
        'Measurement plausibility, separate from the command limits above: a measured position '
        'beyond the range by state_position_margin, or a speed beyond state_velocity_factor x '
        'velocity_limit, is a sensor fault (e-stop), not a clip.']
    c[('safety_supervisor', 'stages')] = [
        'One stage: a stage below 1.00 scales velocity, torque, rate and acceleration and '
        'clips a trained gait every step.']
    c[('safety_supervisor', 'policy_timeout_s')] = ['3 policy periods.']
    c[('safety_supervisor', 'bringup')] = [
        'safety/go_default: to the policy\'s default pose (motor order), then held.']
    return sup


def _runner_common(period, cmd_lo, cmd_hi):
    return {'rate_hz': round(1.0 / period, 6), 'threads': 1,
            'max_input_age_s': 0.01, 'late_input_max_age_s': round(3 * period, 6),
            'cmd_vel_min': [float(v) for v in cmd_lo], 'cmd_vel_max': [float(v) for v in cmd_hi]}


# -- unitree_rl_lab --------------------------------------------------------------------------
def _rl_lab(imp, data, path, model, policy_path):
    n_motor = len(model.names)
    known = {'joint_ids_map', 'step_dt', 'stiffness', 'damping', 'default_joint_pos',
             'commands', 'actions', 'observations'}
    for key in data:
        if key not in known:
            imp.note(f'{key}: not a field of unitree_rl_lab\'s deploy.yaml, ignored')
    ids = data.get('joint_ids_map')
    try:
        ids = [int(i) for i in ids]
    except (TypeError, ValueError):
        raise ImportRefused(f'{path}: joint_ids_map must be a list of motor indices, got '
                            f'{ids!r}') from None
    if len(set(ids)) != len(ids) or not all(0 <= i < n_motor for i in ids):
        raise ImportRefused(f'{path}: joint_ids_map {ids} must name distinct motors 0-'
                            f'{n_motor - 1} ({model.path} has {n_motor} actuators)')
    n = len(ids)
    stiffness = _floats(data, 'stiffness', path, n_motor, 'stiffness (one per motor)')
    damping = _floats(data, 'damping', path, n_motor, 'damping (one per motor)')
    default = _floats(data, 'default_joint_pos', path, n, 'default_joint_pos (policy order)')
    step_dt = float(_floats(data, 'step_dt', path, 1)[0])
    if not step_dt > 0:
        raise ImportRefused(f'{path}: step_dt must be > 0, got {step_dt}')
    policy_names = [model.names[i] for i in ids]
    # Motors the policy does not drive: named, the robot file keeps to the policy's joints.
    idle = [model.names[i] for i in range(n_motor) if i not in ids]
    if idle:
        imp.note(f'joint_ids_map leaves motors {idle} out: they are not in the robot file '
                 '(hold them in the driver: unitree_bridge held_motor_indices)')
    motor_names = [nm for nm in model.names if nm in policy_names]
    motor_idx = [model.names.index(nm) for nm in motor_names]
    in_policy = {nm: k for k, nm in enumerate(policy_names)}
    imp.shared.update(robot_name=imp.robot_name, joint_names=motor_names,
                      kp=[float(stiffness[i]) for i in motor_idx],
                      kd=[float(damping[i]) for i in motor_idx])
    imp.comments[('/**', 'joint_names')] = [
        'Motor (SDK) order: the MJCF\'s actuators. The policy\'s own order is '
        'policy_runner.policy_joint_names (joint_ids_map[i] = motor of policy joint i).']
    imp.comments[('/**', 'kp')] = ['stiffness and damping, motor order.']

    # actions
    actions = data.get('actions') or {}
    if not isinstance(actions, dict) or not actions:
        raise ImportRefused(f'{path}: actions is missing (supported: {list(RL_LAB_ACTIONS)})')
    unknown = [a for a in actions if a not in RL_LAB_ACTIONS]
    if unknown or len(actions) != 1:
        raise ImportRefused(f'{path}: actions {list(actions)}: supported is exactly one of '
                            f'{list(RL_LAB_ACTIONS)} (unknown: {unknown})')
    act = actions['JointPositionAction']
    where = 'actions.JointPositionAction'
    scale = _floats(act, 'scale', path, n, f'{where}.scale')
    offset = _floats(act, 'offset', path, n, f'{where}.offset')
    if np.max(np.abs(offset - default)) > 1e-9:
        raise ImportRefused(f'{path}: {where}.offset differs from default_joint_pos; this '
                            'package offsets targets by the default pose '
                            '(policy_runner.default_position): the export cannot be mapped')
    if act.get('clip') is not None:
        imp.note(f'{where}.clip (a clamp of each target): not mapped; the supervisor\'s '
                 'position limits bound the targets')
    ids_field = act.get('joint_ids')
    if not (ids_field is None or ids_field == slice(None)
            or list(ids_field) == list(range(n))):
        raise ImportRefused(f'{path}: {where}.joint_ids {ids_field!r}: only all joints '
                            '(slice(None)) is supported')
    for key in act:
        if key not in ('scale', 'offset', 'clip', 'joint_ids', 'joint_names'):
            imp.note(f'{where}.{key}: not mapped')

    # commands
    ranges = ((data.get('commands') or {}).get('base_velocity') or {}).get('ranges') or {}
    cmd_lo, cmd_hi = [-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]
    for k, key in enumerate(('lin_vel_x', 'lin_vel_y', 'ang_vel_z')):
        r = ranges.get(key)
        if r is None:
            imp.note(f'commands.base_velocity.ranges.{key} missing: cmd_vel limits +-1 kept')
            continue
        lo, hi = _floats(ranges, key, path, 2, f'commands.base_velocity.ranges.{key}')
        cmd_lo[k], cmd_hi[k] = float(lo), float(hi)
    for key, value in ranges.items():
        if key not in ('lin_vel_x', 'lin_vel_y', 'ang_vel_z') and value is not None:
            imp.note(f'commands.base_velocity.ranges.{key}: not mapped')

    # observations
    obs = data.get('observations') or {}
    if not isinstance(obs, dict) or not obs:
        raise ImportRefused(f'{path}: observations is missing')
    unknown = [t for t in obs if t not in RL_LAB_TERMS]
    if unknown:
        raise ImportRefused(
            f'{path}: observations: unknown term(s) {unknown}; supported terms: '
            f'{sorted(RL_LAB_TERMS)} (unitree_rl_lab\'s deploy registers these; another term '
            'needs support in core/observation.py first). No file written.')
    observation = {'terms': list(obs)}
    for name, cfg in obs.items():
        cfg = cfg or {}
        kind = RL_LAB_TERMS[name]
        where = f'observations.{name}'
        size = {'joint_pos': n, 'joint_vel': n, 'last_action': n, 'gait_phase': 2}.get(kind, 3)
        term = {}
        if kind != name:
            term['kind'] = kind
        sc = cfg.get('scale')
        term['scale'] = 1.0 if sc is None else _one_or_list(
            _floats(cfg, 'scale', path, size, f'{where}.scale'))
        clip = cfg.get('clip')
        if clip is not None:
            lo, hi = _floats(cfg, 'clip', path, 2, f'{where}.clip')
            if lo != -hi or hi <= 0:
                raise ImportRefused(f'{path}: {where}.clip {[lo, hi]}: only a symmetric '
                                    'clip [-c, c] maps to observation.<term>.clip')
            term['clip'] = float(hi)
        history = int(cfg.get('history_length') or 1)
        if history > 1:
            term['history'] = history
        params = cfg.get('params') or {}
        if kind == 'gait_phase':
            if 'period' not in params:
                raise ImportRefused(f'{path}: {where}.params.period is missing')
            term['period_s'] = float(params['period'])
            term['origin'] = 'reset'
            imp.note(f'{where}: unitree_rl_lab advances the phase by step_dt per policy step '
                     'from its reset; mapped to origin: reset on the clock (equal while the '
                     'policy keeps its period)')
        for key in params:
            if (kind, key) in (('velocity_command', 'command_name'), ('gait_phase', 'period')):
                continue
            if key == 'asset_cfg':
                raise ImportRefused(f'{path}: {where}.params.asset_cfg (a subset of the '
                                    'joints) is not supported: the term covers every policy '
                                    'joint here')
            imp.note(f'{where}.params.{key}: not mapped')
        for key in cfg:
            if key not in ('params', 'clip', 'scale', 'history_length'):
                imp.note(f'{where}.{key}: not mapped')
        observation[name] = term
    runner = {'policy_path': policy_path, **_runner_common(step_dt, cmd_lo, cmd_hi)}
    runner['policy_joint_names'] = policy_names
    runner['default_position'] = [float(v) for v in default]
    runner['ease_in_s'] = 0.0
    runner['observation'] = observation
    runner['action'] = {'mode': 'position', 'scale': _one_or_list(scale), 'clip': 0.0}
    c = imp.comments
    c[('policy_runner', 'policy_joint_names')] = [
        'The policy\'s order (Isaac Lab\'s): observations, actions and default_position.']
    c[('policy_runner', 'cmd_vel_min')] = [
        'commands.base_velocity.ranges: cmd_vel is clamped to them, as unitree_rl_lab\'s '
        'deploy clamps the joystick.']
    c[('policy_runner', 'ease_in_s')] = [
        'No ease-in: a free-standing robot on a fixed pose topples; the bring-up '
        '(simreal go-default) comes first.']
    c[('policy_runner', 'observation')] = [
        'The export\'s terms in order; each clipped then scaled, each with its own history '
        '(oldest first).']
    c[('policy_runner', 'action')] = ['target = default_position + scale * action '
                                      '(offset = default_joint_pos).']
    imp.sections['policy_runner'] = runner
    default_motor = [default[in_policy[nm]] for nm in motor_names]
    return motor_names, stiffness[motor_idx], damping[motor_idx], default_motor, step_dt


# -- mjlab: the deployment facts in the ONNX's metadata ---------------------------------------
# mjlab's exporter (src/mjlab/tasks/velocity/rl/exporter.py, attach_onnx_metadata) writes these
# metadata_props: lists as comma-separated text, numbers with 3 decimals (list_to_csv_str).
MJLAB_KEYS = ('joint_names', 'joint_stiffness', 'joint_damping', 'default_joint_pos',
              'command_names', 'observation_names', 'action_scale')
MJLAB_TERMS = {   # mjlab's velocity task's policy terms (velocity_env_cfg.py) -> term kinds
    'base_ang_vel': 'base_ang_vel',
    'projected_gravity': 'projected_gravity',
    'joint_pos': 'joint_pos',
    'joint_vel': 'joint_vel',
    'actions': 'last_action',
    'command': 'velocity_command',
}
MJLAB_PERIOD = 0.02   # s: mjlab's velocity task, decimation 4 x timestep 0.005 (not exported)


def onnx_metadata(path):
    """Return the ONNX file's metadata_props as a dict ({} when it has none)."""
    import onnxruntime as ort
    try:
        session = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises several types
        raise ImportRefused(f'cannot read the ONNX file {path}: {exc}') from exc
    return dict(session.get_modelmeta().custom_metadata_map)


def is_mjlab(metadata):
    """True when an ONNX's metadata is mjlab's (its exporter's keys)."""
    return all(k in metadata for k in ('joint_names', 'default_joint_pos',
                                       'observation_names'))


def _csv(meta, key, path, numbers=True, n=None):
    text = meta.get(key)
    if text is None:
        raise ImportRefused(f'{path}: metadata {key} is missing (mjlab\'s exporter writes '
                            f'{", ".join(MJLAB_KEYS)})')
    items = [t.strip() for t in str(text).split(',') if t.strip()]
    if not numbers:
        return items
    try:
        arr = np.array([float(t) for t in items])
    except ValueError:
        raise ImportRefused(f'{path}: metadata {key} must be comma-separated numbers, got '
                            f'{text!r}') from None
    if n is not None and arr.size == 1 and n > 1:
        arr = np.full(n, arr[0])
    if n is not None and arr.size != n:
        raise ImportRefused(f'{path}: metadata {key} has {arr.size} values for {n} '
                            'joint_names')
    if not np.all(np.isfinite(arr)):
        raise ImportRefused(f'{path}: metadata {key} has a non-finite value: {text!r}')
    return arr


def _mjlab(imp, meta, path, model, policy_path):
    """The robot file from mjlab's ONNX metadata (policy order = its joint_names)."""
    policy_names = _csv(meta, 'joint_names', path, numbers=False)
    n = len(policy_names)
    unknown = [nm for nm in policy_names if nm not in model.names]
    if unknown:
        raise ImportRefused(f'{path}: metadata joint_names {unknown} are not joints driven by '
                            f'an actuator of {model.path} (its motors: {model.names})')
    stiffness = _csv(meta, 'joint_stiffness', path, n=n)
    damping = _csv(meta, 'joint_damping', path, n=n)
    default = _csv(meta, 'default_joint_pos', path, n=n)
    scale = _csv(meta, 'action_scale', path, n=n)
    commands = _csv(meta, 'command_names', path, numbers=False)
    terms = _csv(meta, 'observation_names', path, numbers=False)
    bad = [t for t in terms if t not in MJLAB_TERMS]
    if bad:
        why = {'base_lin_vel': 'base_lin_vel needs a base velocity estimate this package\'s '
                               'observation does not provide (retrain without it, as a real '
                               'robot without a state estimator needs)'}
        raise ImportRefused(
            f'{path}: metadata observation_names: unsupported term(s) {bad}; supported: '
            f'{sorted(MJLAB_TERMS)}' + ''.join(f'; {why[t]}' for t in bad if t in why)
            + '. No file written.')
    if 'command' in terms and commands != ['twist']:
        raise ImportRefused(f'{path}: metadata command_names {commands}: only mjlab\'s '
                            'velocity command (twist) maps to cmd_vel (a motion-tracking '
                            'command is not supported)')
    for key in sorted(meta):
        if key == 'run_path':
            imp.note(f'run_path {meta[key]}: the training run (not mapped)')
        elif key not in MJLAB_KEYS:
            imp.note(f'metadata {key}: not mapped')
    idle = [nm for nm in model.names if nm not in policy_names]
    if idle:
        imp.note(f'the policy leaves motors {idle} out: they are not in the robot file')
    motor_names = [nm for nm in model.names if nm in policy_names]
    in_policy = {nm: k for k, nm in enumerate(policy_names)}
    imp.shared.update(robot_name=imp.robot_name, joint_names=motor_names,
                      kp=[float(stiffness[in_policy[nm]]) for nm in motor_names],
                      kd=[float(damping[in_policy[nm]]) for nm in motor_names])
    imp.comments[('/**', 'joint_names')] = [
        'The MJCF\'s actuator order. The policy\'s own order is policy_runner.'
        'policy_joint_names (the metadata\'s joint_names).']
    imp.comments[('/**', 'kp')] = ['joint_stiffness and joint_damping (the MJCF actuators\' '
                                   'kp, kd in training), motor order.']
    observation = {'terms': list(terms)}
    for name in terms:
        kind = MJLAB_TERMS[name]
        observation[name] = {'scale': 1.0} if kind == name else {'kind': kind, 'scale': 1.0}
    imp.note('observation scales, clips and history: not in the metadata; mjlab\'s velocity '
             'task has none (scale 1, no history) and that is written')
    imp.note(f'the policy period is not in the metadata: {MJLAB_PERIOD} s written (mjlab\'s '
             'velocity task: decimation 4 x timestep 0.005)')
    imp.note('cmd_vel limits: not in the metadata, +-1 written (the training ranges bound them)')
    runner = {'policy_path': policy_path, **_runner_common(MJLAB_PERIOD, [-1.0] * 3,
                                                           [1.0] * 3)}
    runner['policy_joint_names'] = list(policy_names)
    runner['default_position'] = [float(v) for v in default]
    runner['ease_in_s'] = 0.0
    runner['observation'] = observation
    runner['action'] = {'mode': 'position', 'scale': _one_or_list(scale), 'clip': 0.0}
    c = imp.comments
    c[('policy_runner', 'policy_joint_names')] = ['The metadata\'s joint_names: the policy\'s '
                                                  'order for observations and actions.']
    c[('policy_runner', 'observation')] = [
        'The metadata\'s observation_names in order (mjlab\'s terms: actions = the last '
        'action, command = the twist command).']
    c[('policy_runner', 'action')] = ['target = default_joint_pos + action_scale * action.']
    c[('policy_runner', 'ease_in_s')] = [
        'No ease-in: a free-standing robot on a fixed pose topples; the bring-up '
        '(simreal go-default) comes first.']
    imp.sections['policy_runner'] = runner
    return (motor_names, np.array([stiffness[in_policy[nm]] for nm in motor_names]),
            np.array([damping[in_policy[nm]] for nm in motor_names]),
            [float(default[in_policy[nm]]) for nm in motor_names], MJLAB_PERIOD)


# -- legged_gym / unitree_rl_gym deploy_mujoco -----------------------------------------------
LEGGED_GYM_KEYS = {'kps', 'kds', 'default_angles', 'ang_vel_scale', 'dof_pos_scale',
                   'dof_vel_scale', 'action_scale', 'cmd_scale', 'num_actions', 'num_obs',
                   'simulation_dt', 'control_decimation'}


def _legged_gym(imp, data, path, model, policy_path):
    n = len(model.names)
    try:
        num_actions, num_obs = int(data.get('num_actions')), int(data.get('num_obs'))
    except (TypeError, ValueError):
        raise ImportRefused(f'{path}: num_actions and num_obs must be integers') from None
    if num_actions != n:
        raise ImportRefused(f'{path}: num_actions {num_actions}, but {model.path} has {n} '
                            'actuators (deploy_mujoco writes one torque per actuator)')
    kp = _floats(data, 'kps', path, n)
    kd = _floats(data, 'kds', path, n)
    default = _floats(data, 'default_angles', path, n)
    sim_dt = float(_floats(data, 'simulation_dt', path, 1)[0])
    decimation = int(_floats(data, 'control_decimation', path, 1)[0])
    period = sim_dt * decimation
    if not period > 0:
        raise ImportRefused(f'{path}: simulation_dt x control_decimation must be > 0')
    base = 9 + 3 * n
    if num_obs == base + 2:
        phase = True
    elif num_obs == base:
        phase = False
    else:
        raise ImportRefused(
            f'{path}: num_obs {num_obs} fits neither deploy_mujoco observation for {n} joints '
            f'({base}: angular velocity, gravity, command, positions, velocities, last action; '
            f'{base + 2}: then the gait phase)')
    names = model.names
    imp.shared.update(robot_name=imp.robot_name, joint_names=list(names),
                      kp=[float(v) for v in kp], kd=[float(v) for v in kd])
    imp.comments[('/**', 'joint_names')] = [
        'The MJCF\'s actuator order, deploy_mujoco\'s order for everything.']
    for key in data:
        if key in LEGGED_GYM_KEYS:
            continue
        if key == 'cmd_init':
            imp.reference_cmd = [float(v) for v in _floats(data, 'cmd_init', path, 3)]
            imp.note('cmd_init (the command deploy_mujoco runs with): the import\'s '
                     'reference runs with it; the robot stands until cmd_vel arrives')
        elif key in ('policy_path', 'xml_path'):
            imp.note(f'{key}: not read ({{LEGGED_GYM_ROOT_DIR}} paths); --policy / --model '
                     'give them')
            if key == 'policy_path' and str(data[key]).endswith(('.pt', '.pth', '.jit')):
                imp.note(f'policy_path {data[key]} is a PyTorch file: --policy takes its '
                         'ONNX export (docs/bring_your_own.md, "A TorchScript policy")')
        elif key == 'simulation_duration':
            imp.note('simulation_duration: not mapped (deploy_mujoco\'s viewer time)')
        else:
            imp.note(f'{key}: not a field deploy_mujoco reads, ignored')
    terms = ['base_ang_vel', 'projected_gravity', 'velocity_command', 'joint_pos',
             'joint_vel', 'last_action'] + (['gait_phase'] if phase else [])
    obs = {'terms': terms,
           'base_ang_vel': {'scale': float(_floats(data, 'ang_vel_scale', path, 1)[0])},
           'velocity_command': {'scale': _one_or_list(_floats(data, 'cmd_scale', path, 3))},
           'joint_pos': {'scale': float(_floats(data, 'dof_pos_scale', path, 1)[0])},
           'joint_vel': {'scale': float(_floats(data, 'dof_vel_scale', path, 1)[0])}}
    obs['projected_gravity'] = {'scale': 1.0}
    obs['last_action'] = {'scale': 1.0}
    obs = {'terms': terms, **{t: obs[t] for t in terms if t in obs}}
    if phase:
        obs['gait_phase'] = {'period_s': LEGGED_GYM_PHASE_PERIOD, 'origin': 'clock'}
        imp.note(f'gait_phase period {LEGGED_GYM_PHASE_PERIOD} s: not in the config, '
                 'deploy_mujoco.py\'s constant (phase of the simulation clock)')
    imp.note('cmd_vel limits: not in the config, +-1 written (the training ranges bound them)')
    runner = {'policy_path': policy_path, **_runner_common(period, [-1.0] * 3, [1.0] * 3)}
    runner['policy_joint_names'] = list(names)
    runner['default_position'] = [float(v) for v in default]
    runner['ease_in_s'] = 0.0
    runner['observation'] = obs
    runner['action'] = {'mode': 'position',
                        'scale': float(_floats(data, 'action_scale', path, 1)[0]), 'clip': 0.0}
    imp.comments[('policy_runner', 'observation')] = [
        'deploy_mujoco.py\'s observation (its order and scales).']
    imp.comments[('policy_runner', 'ease_in_s')] = [
        'No ease-in: a free-standing robot on a fixed pose topples; the bring-up '
        '(simreal go-default) comes first.']
    imp.sections['policy_runner'] = runner
    return list(names), kp, kd, list(default), period, sim_dt


# -- limits from the policy's own motion -------------------------------------------------------
REFERENCE_STEPS = 1000          # policy steps of the import's reference (20 s at 50 Hz)
REFERENCE_CMD = (0.5, 0.0, 0.0)   # its velocity command, within the export's cmd_vel range
LIMIT_PARAMS = ('position_lower', 'position_upper', 'velocity_limit', 'torque_limit',
                'max_target_rate', 'max_target_accel')


def _absolute_copy(imp, model_path, policy_path):
    """The Imported with absolute model and policy paths (a draft written anywhere)."""
    import copy
    draft = copy.deepcopy(imp)
    draft.sections['sim_robot']['model_path'] = str(model_path)
    draft.sections['policy_runner']['policy_path'] = str(policy_path)
    return draft


def _model_pose(model_path, names):
    """The joints' positions in the MJCF's own initial state (qpos0, not a keyframe): where
    a trainer's MuJoCo deploy loop starts (unitree's deploy_mujoco.py steps `MjData(model)`
    as loaded)."""
    import mujoco
    model = mujoco.MjModel.from_xml_path(str(model_path))
    data = mujoco.MjData(model)
    return [float(data.qpos[model.jnt_qposadr[model.joint(n).id]]) for n in names]


def _starts(imp, model_path):
    """The starts of the import's own reference runs: the default pose (where a robot file
    starts, and the robot after go_default), and for a legged_gym config the MJCF's own pose
    when it differs by more than START_TOLERANCE on a joint: unitree_rl_gym's
    deploy_mujoco.py, and so its reference trace, starts there, and the policy's first steps
    from there are a transient of their own. unitree_rl_lab's and mjlab's loops start from
    the default pose (a fixed stand first, the init keyframe), as the robot does."""
    sim = imp.sections['sim_robot']
    names = [str(n) for n in sim.get('joint_names') or imp.shared['joint_names']]
    starts = [('the default pose', None)]
    if imp.fmt != 'legged_gym':
        return starts
    default = sim.get('initial_position')
    own = _model_pose(model_path, names)
    if default is not None and max(abs(a - b) for a, b in zip(own, default)) > \
            START_TOLERANCE:
        starts.append(('the MJCF\'s own pose', own))
    return starts


def reference_limits(imp, model_path, policy_path, reference=None, steps=REFERENCE_STEPS):
    """Widen the supervisor's limits so the policy's own motion passes them untouched.

    The reference is `reference` (a trace of the training loop, docs/traces.md) or runs of
    `steps` policy steps of the policy in MuJoCo on the model (tools/reference_rollout.py,
    the velocity command `imp.reference_cmd`): from the default pose, and from the MJCF's
    own pose when that differs (`_starts`: the H1's policy drives its left ankle target to
    -1.48 rad in its first step from the model's zero pose, -1.33 rad from the default
    pose). The proposal is core/limits_proposal's over every run, with its margins (0.1 rad
    outside positions and targets, +10 % and room for half a period of jitter on the rest)
    and never below the import's own values; where it passes the MJCF's range or torque
    bound the joint is flagged (`imp.flags`). Each run is replayed through the supervisor's
    filter at jitter 0 and 0.5 (`imp.replays`, keyed (jitter, what)).
    """
    import tempfile
    from simreal_ros.core import limits_proposal
    from simreal_ros.core.config import load_node_params
    from simreal_ros.core.limits_replay import replay
    from simreal_ros.core.trace import load_trace
    with tempfile.TemporaryDirectory(prefix='simreal_import_') as tmp:
        draft = Path(tmp) / f'{imp.robot_name}.yaml'
        draft.write_text(_absolute_copy(imp, model_path, policy_path).text())
        runs = []
        if reference:
            runs.append((f'the reference {reference}', load_trace(reference, robot=draft)))
        else:
            from simreal_ros.tools.reference_rollout import rollout
            cmd = '' if imp.reference_cmd is None else f', cmd_vel {list(imp.reference_cmd)}'
            for k, (start, initial) in enumerate(_starts(imp, model_path)):
                arrays = rollout(str(draft), steps=int(steps), cmd_vel=imp.reference_cmd,
                                 initial_position=initial)
                npz = Path(tmp) / f'reference{k}.npz'
                np.savez(npz, **arrays)
                runs.append((f'{int(steps)} policy steps of the policy in MuJoCo from '
                             f'{start}{cmd}', load_trace(npz, robot=draft)))
        what = ' and '.join(w for w, _ in runs)
        sup = imp.sections['safety_supervisor']
        widened = []
        props = []
        for _, trace in runs:
            prop = limits_proposal.propose(trace, limits_proposal.read_robot(draft),
                                           beyond_model=True)
            props.append(prop)
            for param, values in prop.proposed_lists().items():
                lower = param == 'position_lower'
                new = []
                for name, old, value in zip(prop.names, sup[param], values):
                    if value is None or (value >= old if lower else value <= old):
                        new.append(old)
                        continue
                    new.append(float(value))
                    widened.append(f'{name} {param} {_scalar(old)} -> {_scalar(float(value))}')
                sup[param] = new
        sup['trip_velocity'] = [max(t, round(v * TRIP_FACTOR, 4)) for t, v in
                                zip(sup['trip_velocity'], sup['velocity_limit'])]
        # Measurement plausibility against the limits written (not the proposal's own).
        past = [max(lo - prop.joints[nm]['need']['q_min'], prop.joints[nm]['need']['q_max'] - hi)
                for prop in props
                for nm, lo, hi in zip(prop.names, sup['position_lower'], sup['position_upper'])
                if nm in prop.joints]
        if past and max(past) + POSITION_MARGIN > sup['state_position_margin']:
            sup['state_position_margin'] = round(max(past) + POSITION_MARGIN, 2)
        sup['state_velocity_factor'] = max([float(sup['state_velocity_factor'])] + [
            round(t / v + 0.005, 2) for t, v in zip(sup['trip_velocity'], sup['velocity_limit'])])
        for prop in props:
            for name, text in prop.flagged:
                if f'{name}: {text}' not in imp.flags:
                    imp.flags.append(f'{name}: {text}')
        imp.comments[('safety_supervisor', 'position_lower')] = [
            f'Command limits: the MJCF\'s joint ranges ({POSITION_MARGIN} rad wider for '
            f'targets), widened where the policy\'s own motion needs more ({what}: '
            '`simreal limits` margins, 0.1 rad outside what it reaches). Where they pass the '
            'MJCF\'s range the joint is FLAGGED in the header.']
        imp.note(f'limits from the policy\'s own motion ({what}): '
                 + (f'widened {"; ".join(widened)}' if widened else
                    'the MJCF-based limits already let it through'))
        draft.write_text(_absolute_copy(imp, model_path, policy_path).text())
        params = load_node_params(draft, 'safety_supervisor')
        for run, trace in runs:
            for jitter in (0.0, 0.5):
                imp.replays[(jitter, run)] = replay(params, trace, 1.0, jitter)
    for (jitter, run), result in imp.replays.items():
        imp.note(f'limits replay of {run}: {result.summary()}')
    return imp


# -- the whole import ------------------------------------------------------------------------
def _unitree_bridge(imp, model, names):
    """The unitree_bridge section: the joints' motors (the MJCF's actuator indices)."""
    idle = [nm for nm in model.names if nm not in names]
    if idle:
        raise ImportRefused(f'--driver unitree: the model\'s motors {idle} are not driven by '
                            'the policy and the export gives no pose or gains to hold them; '
                            'write unitree_bridge.held_* by hand (docs/real_robot.md)')
    imp.sections['unitree_bridge'] = {
        'interface': 'unitree_hg',
        'motor_indices': [model.names.index(nm) for nm in names],
        'rate_hz': 500.0,
        'command_timeout_s': 0.1,
        'state_timeout_s': 0.05,
        'mode_pr': 0,
        'motor_mode': 1,
        'remote': {'estop_buttons': ['select'], 'reset_buttons': ['start']},
        'unitree': {'peer': 'robot', 'domain_id': 0, 'network_interface': 'eth0'},
    }
    imp.comments[('unitree_bridge', 'motor_indices')] = [
        'The Unitree wire (docs/real_robot.md): rt/lowcmd, rt/lowstate. Motor of each of '
        'joint_names: the MJCF\'s actuator index (unitree_mujoco lists them in SDK order).']
    imp.comments[('unitree_bridge', 'unitree')] = [
        'Written for the robot: peer robot (CRC checked), domain 0, the wired interface to '
        'it. EDIT network_interface to yours (`ip link`: e.g. enp3s0). The rehearsal on the '
        'vendor simulator overrides these without an edit: python -m '
        'simreal_ros.client.rehearsal --robot THIS_FILE --simulator-peer.']
    imp.note('unitree_bridge: written for the robot (peer robot, domain 0, network_interface '
             'eth0): edit network_interface to the interface wired to the robot')


def import_export(export, model, policy=None, fmt=None, out=None, robot_name=None,
                  driver=None, reference=None, reference_steps=REFERENCE_STEPS):
    """Return the `Imported` robot file for an export file (no file written).

    `reference`: a trace of the training loop the limits must let through; without one the
    policy runs `reference_steps` steps in MuJoCo (0: no reference, the MJCF's limits only).

    `model`: the MJCF (its actuators are the motors); `policy`: the ONNX (default: the
    `policy.onnx` beside the export, or in `../exported/` as unitree_rl_lab lays out a run);
    `out`: the robot file it will be written to (paths are written as it will resolve them).
    """
    source = str(export)
    if source.startswith(ASSET_URL):    # an asset's export (unitree_g1_29dof/policy/...)
        export = resolve_path(source, what='the export')
    export = Path(export)
    if fmt not in (None, *FORMATS):
        raise ImportRefused(f'unknown format {fmt!r}; supported: {list(FORMATS)}')
    if export.is_file():
        from simreal_ros.core.policy import refuse_torch_file
        refuse_torch_file(export, 'the export')
    if fmt == 'mjlab' or (fmt is None and export.suffix == '.onnx'):
        data = onnx_metadata(export)
        if not is_mjlab(data):
            raise ImportRefused(f'{export}: an ONNX without mjlab\'s metadata (joint_names, '
                                'default_joint_pos, observation_names: mjlab\'s exporter, '
                                'attach_onnx_metadata, writes them); give the export\'s '
                                'deploy file instead (docs/bring_your_own.md)')
        fmt = 'mjlab'
        policy = policy or str(export)
    else:
        data = read_export(export)
        fmt = fmt or detect_format(data, export)
    out_dir = Path(out).parent if out else Path.cwd()
    if not model:
        raise ImportRefused(f'{export}: give the robot\'s MuJoCo model (--model MJCF): the '
                            'export does not name one, and its actuators are the motors')
    model_text, model_path = _path_for(model, out_dir, '--model')
    if policy is None:
        for cand in (export.parent / 'policy.onnx', export.parent.parent / 'exported' /
                     'policy.onnx'):
            if cand.is_file():
                policy = str(cand)
                break
        else:
            raise ImportRefused(f'{export}: no policy.onnx beside it or in ../exported/: '
                                'give --policy')
        if not os.path.isabs(str(export)):
            policy = os.path.relpath(policy)
    policy_text, policy_path = _path_for(policy, out_dir, '--policy')
    name = robot_name or (Path(out).stem if out else export.stem)
    mdl = read_model(model_path)
    if not source.startswith(ASSET_URL) and not os.path.isabs(source):
        source = source.replace(os.sep, '/')
    imp = Imported(source, fmt, name)
    if fmt == 'unitree_rl_lab':
        names, kp, kd, default_motor, period = _rl_lab(imp, data, export, mdl, policy_text)
        physics_dt = PHYSICS_DT
        imp.note(f'the simulation step is not in the export: sim_robot physics_dt '
                 f'{PHYSICS_DT} s')
    elif fmt == 'mjlab':
        names, kp, kd, default_motor, period = _mjlab(imp, data, export, mdl, policy_text)
        physics_dt = PHYSICS_DT
        imp.note(f'the simulation step is not in the metadata: sim_robot physics_dt '
                 f'{PHYSICS_DT} s (mjlab trains at 0.005 s)')
    else:
        names, kp, kd, default_motor, period, physics_dt = _legged_gym(
            imp, data, export, mdl, policy_text)
    _sim_robot(imp, model_text, physics_dt, mdl.floating, len(names), default_motor)
    imp.sections['safety_supervisor'] = _supervisor(imp, mdl, names, kp, kd, default_motor,
                                                    period)
    if driver not in (None, 'unitree'):
        raise ImportRefused(f'unknown driver {driver!r}; supported: unitree')
    if driver == 'unitree':
        _unitree_bridge(imp, mdl, names)
    # Reorder: sim_robot, policy_runner, safety_supervisor (the path of a command).
    order = ('sim_robot', 'policy_runner', 'safety_supervisor') + (
        ('unitree_bridge',) if driver else ())
    imp.sections = {k: imp.sections[k] for k in order}
    check_sizes(imp, policy_path)
    runner = imp.sections['policy_runner']
    if any(runner['observation'].get(t, {}).get('kind', t) == 'velocity_command'
           for t in runner['observation']['terms']) and imp.reference_cmd is None:
        lo, hi = runner['cmd_vel_min'], runner['cmd_vel_max']
        imp.reference_cmd = [min(max(v, a), b) for v, a, b in zip(REFERENCE_CMD, lo, hi)]
    if reference or reference_steps:
        reference_limits(imp, model_path, policy_path, reference, reference_steps)
    return imp


def check_sizes(imp, policy_path):
    """Refuse when the observation's length or the action's width differs from the ONNX."""
    from simreal_ros.core.policy import PolicySession
    runner = imp.sections['policy_runner']
    n = len(runner['policy_joint_names'])
    sizes = {'joint_pos': n, 'joint_vel': n, 'last_action': n, 'gait_phase': 2}
    obs = runner['observation']
    length = 0
    for name in obs['terms']:
        kind = obs.get(name, {}).get('kind', name)
        length += sizes.get(kind, 3) * int(obs.get(name, {}).get('history', 1))
    session = PolicySession(policy_path)
    inputs, outputs = session.obs_size, session.action_size
    if inputs is not None and inputs != length:
        raise ImportRefused(f'{policy_path}: the policy takes {inputs} observations, the '
                            f'export\'s terms make {length}')
    if outputs is not None and outputs != n:
        raise ImportRefused(f'{policy_path}: the policy gives {outputs} actions for {n} '
                            'policy joints')


def write(imp, out):
    """Write the robot file; return its path."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(imp.text())
    return out

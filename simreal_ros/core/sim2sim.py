"""sim2sim: a deployment through the ROS graph against a reference run, step by step.

The parts of `bench/sim2sim.py` and of the reference rollout (`simreal_ros/reference_rollout.py`)
that need no ROS, so that they are tested without node processes (docs/traces.md, "sim2sim"):

- `Setup.read(robot, policy)`: what the robot file says about the check: the policy's joint
  order, action mapping and control period, sim_robot's model, physics step and gains, whether
  the model has a floating base (a free joint) and where it starts;
- `Setup.recover_actions`: the raw policy action back from the targets (or efforts) of a
  `policy/command` message, by joint name: `(target - default_position) / scale`;
- `action_errors`: per step, the largest difference from the reference's actions (both clipped
  by `action.clip` first: a clipped action cannot be recovered from its target);
- `check_timing`: the reference must hold one sample per control period; its first sample's
  time says how many periods the default pose is held before the policy's first step;
- `reference_command`: the velocity command the reference was recorded with (an option, the
  trace's `cmd_vel`, or decoded from its observations' `velocity_command` term);
- `fall_height`: the base height below which a floating-base robot has fallen (none for a fixed
  base).
"""
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simreal_ros.core.config import (ConfigError, load_node_params, resolve_path,
                                     robot_config_path)

DEFAULT_TOLERANCE = 1e-4   # rad of raw action: float32 inference, reordered float sums
FALL_FRACTION = 0.6        # a floating base below 0.6 x its starting height has fallen


@dataclass
class Setup:
    """One robot file (+ policy) as the sim2sim check and the reference rollout read it."""

    robot: Path
    runner: dict            # policy_runner parameters ('/**' merged), policy_path set
    sim: dict               # sim_robot parameters ('/**' merged)
    policy: Path
    joint_names: list       # the driver's (sim_robot's) joints
    policy_names: list      # the policy's joint order
    command_names: list     # the joints of policy/command, in the driver's order
    default: np.ndarray     # default_position, policy order
    processor: object       # core.actions.ActionProcessor
    period: float           # control period, 1 / policy_runner.rate_hz (s)
    physics_dt: float       # sim_robot.physics_dt (s)
    decimation: int         # physics steps per control period
    model_path: Path
    floating_base: bool
    base0: np.ndarray = None   # the free joint's initial position (x, y, z), or None

    @classmethod
    def read(cls, robot, policy=None):
        """Read the robot file; `policy` (a path) replaces policy_runner's policy_path."""
        from simreal_ros.core.actions import ActionProcessor
        from simreal_ros.core.observation import JointMap
        from simreal_ros.core.plant import load_model
        import mujoco

        path = robot_config_path(robot)
        runner = load_node_params(path, 'policy_runner')
        sim = load_node_params(path, 'sim_robot')
        names = [str(n) for n in (runner.get('joint_names') or [])]
        if not names:
            raise ConfigError(f'{path}: joint_names is missing (the /** section lists the '
                              'robot joints)')
        if policy:
            policy = resolve_path(policy, what='policy')
        elif runner.get('policy_path'):
            # as policy_runner resolves it: relative to the robot file's folder first
            policy = resolve_path(runner['policy_path'], what=f'{path}: policy_runner '
                                  'policy_path', relative_to=Path(path).parent)
        else:
            raise ConfigError(f'{path}: policy_runner has no policy_path: give the policy')
        runner = dict(runner, policy_path=str(policy))
        jmap = JointMap(runner.get('policy_joint_names') or names, names, f'{path}: '
                        'policy_runner')
        n = jmap.n
        default = runner.get('default_position')
        default = np.zeros(n) if default is None else np.asarray(default, float).reshape(-1)
        if default.size != n:
            raise ConfigError(f'{path}: policy_runner default_position has {default.size} '
                              f'values for {n} policy joints')
        processor = ActionProcessor(n, runner.get('action.mode') or 'position',
                                    runner.get('action.scale', 1.0),
                                    runner.get('action.clip') or 0.0, default,
                                    source=f'{path}: policy_runner')
        zero = [jmap.policy_names[i] for i in np.flatnonzero(processor.scale == 0)]
        if zero:
            raise ConfigError(f'{path}: action.scale is 0 for {zero}: their actions cannot be '
                              'recovered from the commands')
        rate = float(runner.get('rate_hz') or 100.0)
        period = 1.0 / rate
        if not sim.get('model_path'):
            raise ConfigError(f'{path}: sim_robot has no model_path: the check runs the '
                              'robot in sim_robot')
        model_path = resolve_path(sim['model_path'], what=f'{path}: sim_robot model_path',
                                  relative_to=Path(path).parent)
        physics_dt = float(sim.get('physics_dt') or 0.001)
        decimation = int(round(period / physics_dt))
        if decimation < 1 or abs(decimation * physics_dt - period) > 1e-9:
            raise ConfigError(f'{path}: the control period 1 / rate_hz = {period:g} s is not a '
                              f'whole number of sim_robot physics steps ({physics_dt:g} s)')
        model = load_model(model_path)
        base0 = None
        for j in range(model.njnt):
            if int(model.jnt_type[j]) == int(mujoco.mjtJoint.mjJNT_FREE):
                adr = model.jnt_qposadr[j]
                base0 = np.array(model.qpos0[adr:adr + 3], dtype=float)
                break
        return cls(Path(path), runner, sim, Path(policy), names, jmap.policy_names,
                   jmap.command_names, default, processor, period, physics_dt, decimation,
                   Path(model_path), base0 is not None, base0)

    @property
    def mode(self):
        return self.processor.mode

    def hold_values(self):
        """The first periods' command (command_names order): the default pose (position
        actions) or no torque (effort actions)."""
        if self.mode != 'position':
            return np.zeros(len(self.command_names))
        pos = {n: i for i, n in enumerate(self.policy_names)}
        return np.array([self.default[pos[n]] for n in self.command_names])

    def recover_actions(self, names, values):
        """Return the raw action (policy order) behind one command's per-joint values
        (positions in position mode, efforts in effort mode), matched by joint name.

        Exact up to rounding for unclipped actions; a clipped action comes back clipped.
        """
        names = list(names)
        missing = [n for n in self.policy_names if n not in names]
        if missing:
            raise ValueError(f'the command lacks the policy joint(s) {missing}')
        values = np.asarray(values, dtype=float)
        v = values[[names.index(n) for n in self.policy_names]]
        return (v - self.processor.offset) / self.processor.scale


def action_errors(recovered, reference, clip=0.0):
    """Per step, the largest |recovered - reference| over the joints; both clipped to
    +-clip first when the action mapping clips (the command carries the clipped action)."""
    recovered = np.asarray(recovered, dtype=float)
    reference = np.asarray(reference, dtype=float)[:len(recovered)]
    if clip > 0:
        recovered = np.clip(recovered, -clip, clip)
        reference = np.clip(reference, -clip, clip)
    return np.abs(recovered - reference).max(axis=1)


def check_timing(trace, period):
    """Return how many control periods the default pose is held before the reference's first
    action (its first sample's time / the period: 1 for unitree's deploy_mujoco, 0 when the
    first action is computed from the initial state); raise ConfigError when the trace is not
    one sample per control period."""
    t = trace.time
    steps = np.diff(t)
    if not np.allclose(steps, period, rtol=1e-6, atol=1e-9):
        bad = int(np.argmax(~np.isclose(steps, period, rtol=1e-6, atol=1e-9)))
        raise ConfigError(
            f'{trace.path}: the reference has a sample every {np.median(steps):g} s (row '
            f'{bad + 1}: {steps[bad]:g} s), the robot file\'s policy runs every {period:g} s '
            '(1 / policy_runner.rate_hz): record one sample per policy step')
    k = int(round(t[0] / period))
    if k < 0 or abs(t[0] - k * period) > 1e-6 * max(period, 1.0):
        raise ConfigError(
            f'{trace.path}: its first sample is at t = {t[0]:g} s, not a whole number of '
            f'control periods ({period:g} s) after the start: stamp each step with the '
            'simulation time of the state its action was computed from, from 0')
    return k


def reference_command(trace, robot, override=None):
    """Return (cmd_vel (vx, vy, wz) or None, source): the velocity command the reference was
    recorded with: `override`, else the trace's `cmd_vel`, else decoded from the
    `velocity_command` term of its observations (robot file's layout), else None (the robot
    file's velocity_command default holds)."""
    from simreal_ros.core.trace import PolicyContext
    if override is not None:
        return np.asarray(override, dtype=float).reshape(3), '--cmd-vel'
    ctx = PolicyContext.read(robot)
    terms = ctx.params.get('observation.terms') or []
    has_term = any(str(ctx.params.get(f'observation.{t}.kind') or t) == 'velocity_command'
                   for t in terms)
    if trace.cmd_vel is not None:
        cmd = trace.cmd_vel
        if np.ptp(cmd, axis=0).max() > 1e-9:
            raise ConfigError(f'{trace.path}: cmd_vel changes during the run; the check '
                              'publishes one command: record with a constant one')
        return cmd[0].copy(), 'cmd_vel in the trace'
    if not has_term:
        return None, 'none (the observation has no velocity_command term)'
    if trace.obs is not None:
        found, why = ctx.term_slice('velocity_command', trace.obs.shape[1])
        if found is not None:
            start, scale, term_clip, _, _ = found
            if np.all(scale != 0):
                block = trace.obs[:, start:start + 3] / scale
                clipped = term_clip > 0 and np.any(np.abs(block) >= term_clip * (1 - 1e-6))
                if np.ptp(block, axis=0).max() > 1e-6:
                    raise ConfigError(f'{trace.path}: the velocity command in its observations '
                                      '(velocity_command term) changes during the run; the '
                                      'check publishes one command: record with a constant one')
                if not clipped:
                    return (block[0].astype(float),
                            f'obs: the velocity_command term (columns {start}-{start + 2}) / '
                            'scale')
    return None, ('none: neither --cmd-vel nor cmd_vel in the trace (nor one decoded from '
                  'its obs): the robot file\'s velocity_command default')


def fall_height(setup, trace=None, override=None):
    """Return (z or None, source): the base height below which the robot has fallen."""
    if override is not None:
        return float(override), '--fall-z'
    if not setup.floating_base:
        return None, 'fixed base: no fall'
    if trace is not None and trace.base_qpos is not None:
        return (FALL_FRACTION * float(trace.base_qpos[0, 2]),
                f'{FALL_FRACTION:g} x the reference\'s first base height')
    return (FALL_FRACTION * float(setup.base0[2]),
            f'{FALL_FRACTION:g} x the model\'s initial base height')


def reference_distance(setup, trace, steps):
    """Horizontal distance the reference's base went from the model's start after `steps`
    policy steps, or None without a base pose."""
    if trace is None or trace.base_qpos is None or setup.base0 is None or steps < 1:
        return None
    end = trace.base_qpos[min(steps, trace.n_samples) - 1]
    return float(np.hypot(end[0] - setup.base0[0], end[1] - setup.base0[1]))


def initial_position(setup, trace, hold_periods):
    """Return (sim_robot initial_position for its joint_names, or None to keep the robot
    file's, source, notes): the reference's joint positions at t = 0, which are its first
    sample when that is at t = 0, else its `initial_q` when it has one."""
    notes = []
    if hold_periods == 0:
        start, source = trace.q[0], 'the reference\'s first sample (t = 0)'
        if trace.dq is not None and np.abs(trace.dq[0]).max() > 1e-6:
            notes.append('the reference moves at t = 0 (dq up to '
                         f'{np.abs(trace.dq[0]).max():.3g} rad/s); sim_robot starts at rest')
    elif trace.initial_q is not None:
        start, source = trace.initial_q, 'initial_q in the trace'
    else:
        return None, 'the robot file\'s (sim_robot initial_position, else the model\'s)', notes
    if trace.base_qpos is not None and setup.base0 is not None and hold_periods == 0 and \
            np.abs(trace.base_qpos[0, :3] - setup.base0).max() > 1e-6:
        notes.append('the reference\'s base starts at '
                     f'{np.round(trace.base_qpos[0, :3], 4).tolist()}, sim_robot\'s at the '
                     f'model\'s {np.round(setup.base0, 4).tolist()}')
    names = [str(n) for n in setup.sim.get('joint_names') or setup.joint_names]
    current = setup.sim.get('initial_position')
    if current:
        full = np.asarray(current, dtype=float).copy()
    else:
        from simreal_ros.core.plant import load_model
        model = load_model(setup.model_path)
        full = np.array([model.qpos0[model.jnt_qposadr[model.joint(n).id]] for n in names])
    for name, value in zip(trace.names, start):
        if name in names:
            full[names.index(name)] = value
    return full, source, notes

"""A training-side reference loop without ROS: the robot's MuJoCo model and its ONNX policy.

    python -m simreal_ros.tools.reference_rollout --robot config/robots/arm3.yaml --out ref.npz \
        [--policy P.onnx] [--steps 1000] [--cmd-vel 0.3 0 0.5] [--no-hold] \
        [--initial-position 0.4 -0.5 0.7]
    .venv/bin/python scripts/reference_rollout.py ...          # the same, from a checkout

The loop unitree's deploy_mujoco runs for the G1 (docs/assets.md, the asset unitree_g1_12dof),
for any robot file: the model is sim_robot's (`model_path`, its `physics_dt`,
`initial_position`), stepped with plain `mujoco.mj_step`; every physics step the torque
`kp * (target - q) - kd * dq` (the robot file's gains) goes to the joint's motor (`ctrl`, divided
by its gear) or, without one, to `qfrc_applied`; every `decimation` = period / physics_dt steps
(period = 1 / policy_runner.rate_hz) the observation is built from `MjData` (joint positions and
velocities, the free joint's quaternion and body-frame angular velocity for a floating base),
the policy is run and its action becomes the next target. Before the first step the default
pose is held for one period, as deploy_mujoco does (`--no-hold`: the first action is computed
from the initial state at t = 0, as Isaac Lab and legged_gym episodes start).

It reuses the package's observation builder (`core/observation.py`), ONNX session
(`core/policy.py`) and action mapping (`core/actions.py`), so it checks neither of those: it
is the reference for what the ROS path adds (sim_robot's physics and stamps, policy_runner's
timing, joint ordering by name, the supervisor; `bench/sim2sim.py`). A reference from your
own training loop (Isaac Lab, legged_gym, mjlab) checks those too (docs/traces.md, sim2sim).

The trace it writes is the simreal layout of docs/traces.md, one sample per policy step:
`time` (the simulation time of the state the action was computed from), `joint_names` (the
policy's joints, the driver's order), `q`, `dq` (that state), `actions` (raw, policy order),
`target_q` (the targets in force from that time on), `obs`, `effort` (the torque of the
physics step before the state), `initial_q` (the joints at t = 0), and `cmd_vel` when given,
`base_qpos` for a floating base.
"""
import argparse
import json
import os
from pathlib import Path
import sys

import numpy as np

from simreal_ros.core.config import ConfigError, resolve_path, load_node_params, robot_config_path


def resolve_policy(robot, policy=None):
    """Return the policy file: `policy`, else the robot file's policy_path (a stand-in the
    package makes, such as arm3's, is made in the user data folder as `simreal up` does)."""
    if policy:
        return resolve_path(policy, what='--policy')
    from simreal_ros.core.onnx_policies import STAND_INS, stand_in_policy
    path = robot_config_path(robot)
    configured = str(load_node_params(path, 'policy_runner').get('policy_path') or '')
    if os.path.basename(configured) in STAND_INS and \
            not configured.startswith(('/', 'package://', 'asset://')):
        return Path(stand_in_policy(os.path.basename(configured)))
    if not configured:
        raise ConfigError(f'{path}: policy_runner has no policy_path: give --policy')
    # as policy_runner resolves it: relative to the robot file's folder first
    return resolve_path(configured, what=f'{path}: policy_runner policy_path',
                        relative_to=Path(path).parent)


def rollout(robot, policy=None, steps=1000, cmd_vel=None, hold=True, initial_position=None):
    """Run the reference loop for `steps` policy steps; return the trace's arrays (a dict).

    `initial_position` (sim_robot's joint_names order) replaces the robot file's
    sim_robot.initial_position."""
    import mujoco
    from simreal_ros.core.policy import PolicyController
    from simreal_ros.core.sim2sim import Setup

    setup = Setup.read(robot, resolve_policy(robot, policy))
    sim = setup.sim
    ctl = PolicyController(setup.runner, source=f'{setup.robot}: policy_runner')
    model = mujoco.MjModel.from_xml_path(str(setup.model_path))
    model.opt.timestep = setup.physics_dt
    data = mujoco.MjData(model)
    names = [str(n) for n in sim.get('joint_names') or setup.joint_names]
    missing = [n for n in setup.command_names if n not in names]
    if missing:
        raise ConfigError(f'{setup.robot}: sim_robot joint_names lacks the policy joint(s) '
                          f'{missing}')
    jid = [model.joint(n).id for n in names]
    qadr = np.array([model.jnt_qposadr[j] for j in jid])
    dadr = np.array([model.jnt_dofadr[j] for j in jid])
    kp = np.broadcast_to(np.asarray(sim['kp'], float), (len(names),)).copy()
    kd = np.broadcast_to(np.asarray(sim['kd'], float), (len(names),)).copy()
    # Each joint's motor (ctrl = torque / gear) or, without one, qfrc_applied (as sim_robot).
    motor = np.full(len(names), -1)
    gear = np.ones(len(names))
    for a in range(model.nu):
        if int(model.actuator_trntype[a]) == int(mujoco.mjtTrn.mjTRN_JOINT) and \
                model.actuator_trnid[a, 0] in jid:
            i = jid.index(model.actuator_trnid[a, 0])
            motor[i], gear[i] = a, model.actuator_gear[a, 0]
    initial = sim.get('initial_position') if initial_position is None else initial_position
    if initial is not None and len(initial):
        if len(initial) != len(names):
            raise ConfigError(f'initial position: {len(initial)} values for the {len(names)} '
                              f'joints {names}')
        data.qpos[qadr] = np.asarray(initial, dtype=float)
    mujoco.mj_forward(model, data)
    initial_q = data.qpos[qadr].copy()
    free = None
    for j in range(model.njnt):
        if int(model.jnt_type[j]) == int(mujoco.mjtJoint.mjJNT_FREE):
            free = (model.jnt_qposadr[j], model.jnt_dofadr[j])
            break

    cmd_index = np.array([names.index(n) for n in setup.command_names])
    effort_mode = setup.mode == 'effort'
    # Until a joint's first command it is damped (kd * (0 - dq)), as sim_robot's motors are.
    target = np.full(len(names), np.nan)   # position targets in force (NaN: none)
    feed = np.full(len(names), np.nan)     # efforts in force (effort actions; NaN: none)
    if hold:
        (feed if effort_mode else target)[cmd_index] = setup.hold_values()
    has_motor = motor >= 0

    def physics(n):
        """n physics steps with the targets in force; return the last step's torque."""
        tau = np.zeros(len(names))
        for _ in range(n):
            q, dq = data.qpos[qadr], data.qvel[dadr]
            tau = np.where(np.isnan(target), 0.0, kp * (np.nan_to_num(target) - q)) - kd * dq
            tau = np.where(np.isnan(feed), tau, np.nan_to_num(feed))   # effort alone: torque
            data.ctrl[motor[has_motor]] = tau[has_motor] / gear[has_motor]
            data.qfrc_applied[dadr[~has_motor]] = tau[~has_motor]
            mujoco.mj_step(model, data)
        return tau

    rows = {k: [] for k in ('time', 'q', 'dq', 'effort', 'actions', 'target_q', 'obs',
                            'base_qpos')}
    ctl.reset()
    tau = np.zeros(len(names))
    if hold:
        tau = physics(setup.decimation)
    for _ in range(int(steps)):
        xyzw = omega = None
        if free is not None:
            qa, va = free
            w, x, y, z = data.qpos[qa + 3:qa + 7]
            xyzw, omega = (x, y, z, w), data.qvel[va + 3:va + 6].copy()
        inputs = ctl.inputs(data.time, names, data.qpos[qadr].copy(), data.qvel[dadr].copy(),
                            xyzw, omega, cmd_vel)
        # PolicyController.step, with the observation kept for the trace.
        obs = ctl.builder.build(inputs)
        if not np.all(np.isfinite(obs)):
            raise ValueError(f'the observation is not finite at t = {data.time:g} s')
        action = ctl.session.run(obs)
        values = ctl.actions.process(action)       # raises on a non-finite action
        ctl.builder.set_last_action(action)
        command = ctl.joint_map.to_command(values)
        rows['time'].append(data.time)
        rows['q'].append(data.qpos[qadr][cmd_index].copy())
        rows['dq'].append(data.qvel[dadr][cmd_index].copy())
        rows['effort'].append(np.asarray(tau)[cmd_index].copy())
        rows['actions'].append(action)
        rows['obs'].append(obs)
        if free is not None:
            rows['base_qpos'].append(data.qpos[free[0]:free[0] + 7].copy())
        (feed if effort_mode else target)[cmd_index] = command
        if not effort_mode:
            rows['target_q'].append(command.copy())
        tau = physics(setup.decimation)
    out = {k: np.array(v, dtype=float) for k, v in rows.items() if v}
    out['joint_names'] = np.array(setup.command_names)
    out['initial_q'] = initial_q[cmd_index]
    if cmd_vel is not None:
        out['cmd_vel'] = np.asarray(cmd_vel, dtype=float).reshape(3)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(
        description='Write a reference trace (docs/traces.md) from the robot\'s MuJoCo model '
        'and ONNX policy, without ROS, for bench/sim2sim.py.')
    parser.add_argument('--robot', required=True, help='robot file (config/robots/<name>.yaml '
                        'or a name)')
    parser.add_argument('--policy', help='ONNX policy (default: the robot file\'s policy_path)')
    parser.add_argument('--out', required=True, help='the .npz trace to write')
    parser.add_argument('--steps', type=int, default=1000, help='policy steps (default 1000)')
    parser.add_argument('--cmd-vel', type=float, nargs=3, metavar=('VX', 'VY', 'WZ'),
                        help='velocity command of the run (saved as cmd_vel); default: the '
                        'robot file\'s velocity_command default')
    parser.add_argument('--no-hold', action='store_true', help='first action from the initial '
                        'state at t = 0 (default: hold the default pose one period first, as '
                        'unitree\'s deploy_mujoco)')
    parser.add_argument('--initial-position', type=float, nargs='+', metavar='Q',
                        help='start pose, one value per sim_robot joint_names entry (default: '
                        'the robot file\'s sim_robot initial_position, else the model\'s); saved '
                        'as initial_q, which bench/sim2sim.py gives sim_robot')
    args = parser.parse_args(argv)
    try:
        arrays = rollout(args.robot, args.policy, args.steps, args.cmd_vel, not args.no_hold,
                         args.initial_position)
    except ConfigError as exc:
        print(f'reference_rollout: {exc}', file=sys.stderr)
        return 2
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    np.savez(args.out, **arrays)
    summary = {'out': str(args.out), 'steps': int(arrays['time'].size),
               't0': float(arrays['time'][0]), 't_end': float(arrays['time'][-1]),
               'joints': arrays['joint_names'].tolist(),
               'max_abs_action': float(np.abs(arrays['actions']).max())}
    if 'base_qpos' in arrays:
        summary['base_end'] = arrays['base_qpos'][-1][:3].round(4).tolist()
    print(json.dumps(summary))
    return 0


if __name__ == '__main__':
    sys.exit(main())

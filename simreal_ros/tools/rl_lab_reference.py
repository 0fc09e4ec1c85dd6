"""unitree_rl_lab's deploy loop, written from its own semantics, on a MuJoCo model; no ROS.

    python -m simreal_ros.tools.rl_lab_reference --deploy deploy.yaml --model scene.xml \
        [--policy policy.onnx] [--steps 1000] [--cmd-vel 0.5 0 0] [--robot ROBOT.yaml] \
        [--out trace.npz]

An independent reference for `simreal import`: it reads the export (`deploy.yaml`) directly,
not the robot file, and computes the observation the way unitree_rl_lab's C++ deploy does
(`deploy/include/isaaclab/`): the state is read in motor (SDK) order, as `rt/lowstate` carries
it, and put in the policy's order through `joint_ids_map` (`data.joint_pos[i] =
motor_state[joint_ids_map[i]].q`); each term is a deque of its own `history_length` raw values,
filled with the value at reset, clipped then scaled when read, oldest first, terms in the
file's order; `velocity_commands` is the command clamped to `commands.base_velocity.ranges`;
the target of policy joint i, `offset + scale * action`, goes to motor `joint_ids_map[i]`,
whose PD runs with `stiffness` / `damping` (motor order) every physics step.

The loop: the model starts at the default pose (an Isaac Lab episode's reset), which is held
for one policy period (unitree's FixStand before the policy takes over), the environment is
reset (histories filled) and then every period: observation, ONNX, targets, `decimation`
physics steps.

With `--robot` (a robot file, e.g. from `simreal import`), the package's own policy path
(`core/policy.PolicyController`: observation builder, ONNX session, action mapping) is fed the
same state at every step, in lockstep, and its actions are compared with the reference's:
`max_action_err`. `--out` writes the run as a reference trace (docs/traces.md, simreal layout,
the robot file's joint names) for bench/sim2sim.py. The last line printed is JSON.
"""
import argparse
from collections import deque
import json
from pathlib import Path
import sys

import numpy as np

from simreal_ros.core.config import ConfigError

TERMS = ('base_ang_vel', 'projected_gravity', 'velocity_commands', 'joint_pos_rel',
         'joint_vel_rel', 'last_action', 'gait_phase')


class RlLabEnv:
    """The deploy's ManagerBasedRLEnv, as its C++ computes it (motor-order state in)."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.ids = np.array(cfg['joint_ids_map'], dtype=int)
        self.n = self.ids.size
        self.step_dt = float(cfg['step_dt'])
        self.default = np.array(cfg['default_joint_pos'], dtype=np.float32)
        (self.act_name, act), = cfg['actions'].items()
        self.scale = np.array(act['scale'], dtype=np.float32)
        self.offset = np.array(act['offset'], dtype=np.float32)
        self.clip = None if act.get('clip') is None else np.array(act['clip'], np.float32)
        self.ranges = cfg['commands']['base_velocity']['ranges']
        self.terms = []
        for name, tc in cfg['observations'].items():
            if name not in TERMS:
                raise ConfigError(f'observation term {name!r} is not registered')
            clip = tc.get('clip')
            self.terms.append((name, int(tc.get('history_length') or 1),
                               None if clip is None else np.array(clip, np.float32),
                               np.array(tc['scale'], np.float32), tc.get('params') or {}))
        self.buffers = {}
        self.action = np.zeros(self.n, np.float32)
        self.phase = 0.0

    def update(self, motor_q, motor_dq, quat_wxyz, gyro, joystick):
        """robot->update(): the state in policy order (BaseArticulation::update)."""
        self.q = np.asarray(motor_q, np.float32)[self.ids]
        self.dq = np.asarray(motor_dq, np.float32)[self.ids]
        w, x, y, z = quat_wxyz
        # quat.conjugate() * (0, 0, -1)
        self.gravity = np.array([2 * (-z * x + w * y), -2 * (z * y + w * x),
                                 1 - 2 * (w * w + z * z)], np.float32)
        self.gyro = np.asarray(gyro, np.float32)
        self.joystick = joystick

    def _term(self, name, params):
        if name == 'base_ang_vel':
            return self.gyro
        if name == 'projected_gravity':
            return self.gravity
        if name == 'joint_pos_rel':
            return self.q - self.default
        if name == 'joint_vel_rel':
            return self.dq
        if name == 'last_action':
            return self.action.copy()
        if name == 'velocity_commands':
            r = self.ranges
            return np.array([np.clip(self.joystick[0], *r['lin_vel_x']),
                             np.clip(self.joystick[1], *r['lin_vel_y']),
                             np.clip(self.joystick[2], *r['ang_vel_z'])], np.float32)
        period = float(params['period'])   # gait_phase: advanced by step_dt before use
        self.phase = (self.phase + self.step_dt / period) % 1.0
        return np.array([np.sin(self.phase * 2 * np.pi), np.cos(self.phase * 2 * np.pi)],
                        np.float32)

    def reset(self):
        self.phase = 0.0
        self.action = np.zeros(self.n, np.float32)
        for name, hist, _, _, params in self.terms:
            value = self._term(name, params)
            self.buffers[name] = deque([value] * hist, maxlen=hist)

    def observation(self):
        parts = []
        for name, _, clip, scale, params in self.terms:
            buf = self.buffers[name]
            buf.append(self._term(name, params))
            for value in buf:        # oldest first
                v = value if clip is None else np.clip(value, clip[0], clip[1])
                parts.append(v * scale)
        return np.concatenate(parts).astype(np.float32)

    def process(self, action):
        self.action = np.asarray(action, np.float32).reshape(-1)
        target = self.action * self.scale + self.offset
        if self.clip is not None:
            target = np.clip(target, self.clip[:, 0], self.clip[:, 1])
        return target                          # policy order; motor joint_ids_map[i]


def run(deploy, model, policy=None, steps=1000, cmd_vel=(0.5, 0.0, 0.0), physics_dt=0.002,
        robot=None):
    """Run the reference loop; with `robot`, the package's controller in lockstep.

    Return a dict of arrays (the trace, docs/traces.md simreal layout) and, with `robot`,
    `action_err` (per step, max over joints) and `joint_names` in the robot file's order."""
    import mujoco
    import onnxruntime as ort
    from simreal_ros.tools.importer import read_export

    deploy = Path(deploy)
    cfg = read_export(deploy)
    env = RlLabEnv(cfg)
    policy = Path(policy) if policy else deploy.parent / 'policy.onnx'
    sess = ort.InferenceSession(str(policy), providers=['CPUExecutionProvider'])
    in_name, out_name = sess.get_inputs()[0].name, sess.get_outputs()[0].name
    m = mujoco.MjModel.from_xml_path(str(model))
    m.opt.timestep = physics_dt
    d = mujoco.MjData(m)
    motors = [m.joint(int(m.actuator_trnid[a, 0])) for a in range(m.nu)]
    qadr = np.array([j.qposadr[0] for j in motors])
    dadr = np.array([j.dofadr[0] for j in motors])
    gear = m.actuator_gear[:, 0].copy()
    kp = np.array(cfg['stiffness'], float)
    kd = np.array(cfg['damping'], float)
    decimation = int(round(env.step_dt / physics_dt))
    # An Isaac Lab episode starts at the default pose; unitree's FixStand holds it before
    # the policy takes over (one period here).
    d.qpos[qadr[env.ids]] = env.default
    mujoco.mj_forward(m, d)
    motor_target = d.qpos[qadr].copy()

    def physics():
        for _ in range(decimation):
            tau = kp * (motor_target - d.qpos[qadr]) - kd * d.qvel[dadr]
            d.ctrl[:] = tau / gear
            mujoco.mj_step(m, d)

    ctl = names = None
    if robot is not None:
        from simreal_ros.core.config import load_node_params
        from simreal_ros.core.policy import PolicyController
        params = load_node_params(robot, 'policy_runner')
        ctl = PolicyController(params, source=f'{robot}: policy_runner', params_file=robot)
        names = [str(n) for n in params['joint_names']]
        robot_idx = np.array([[j.name for j in motors].index(n) for n in names])
        ctl.reset()
    motor_names = [j.name for j in motors]
    initial_q = d.qpos[qadr].copy()

    def state():
        return (d.qpos[qadr].copy(), d.qvel[dadr].copy(), d.qpos[3:7].copy(),
                d.qvel[3:6].copy())

    physics()
    q, dq, quat, gyro = state()
    env.update(q, dq, quat, gyro, cmd_vel)
    env.reset()
    rows = {k: [] for k in ('time', 'q', 'dq', 'actions', 'target_q', 'base_qpos', 'obs')}
    errors = []
    for _ in range(int(steps)):
        q, dq, quat, gyro = state()
        env.update(q, dq, quat, gyro, cmd_vel)
        obs = env.observation()
        action = sess.run([out_name], {in_name: obs[None, :]})[0].reshape(-1)
        target = env.process(action)
        if ctl is not None:
            w, x, y, z = quat
            inp = ctl.inputs(d.time, names, q[robot_idx], dq[robot_idx], (x, y, z, w), gyro,
                             np.clip(cmd_vel, ctl_lo(params), ctl_hi(params)))
            _, mine = ctl.step(inp)
            errors.append(float(np.abs(mine - action).max()))
        rows['time'].append(d.time)
        rows['q'].append(q)
        rows['dq'].append(dq)
        rows['actions'].append(action)
        rows['obs'].append(obs)
        rows['base_qpos'].append(d.qpos[:7].copy())
        motor_target[env.ids] = target
        rows['target_q'].append(motor_target.copy())
        physics()
    out = {k: np.array(v, dtype=float) for k, v in rows.items()}
    order = robot_idx if ctl is not None else np.arange(len(motor_names))
    for key in ('q', 'dq', 'target_q'):
        out[key] = out[key][:, order]
    out['joint_names'] = np.array([motor_names[i] for i in order])
    out['initial_q'] = initial_q[order]
    out['cmd_vel'] = np.asarray(cmd_vel, float).reshape(3)
    if ctl is not None:
        out['action_err'] = np.array(errors)
    return out


def ctl_lo(params):
    return np.asarray(params.get('cmd_vel_min') or [-1.0] * 3, float)


def ctl_hi(params):
    return np.asarray(params.get('cmd_vel_max') or [1.0] * 3, float)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--deploy', required=True, help="unitree_rl_lab's deploy.yaml")
    parser.add_argument('--model', required=True, help='the MuJoCo model (scene)')
    parser.add_argument('--policy', help='ONNX (default: policy.onnx beside deploy.yaml)')
    parser.add_argument('--steps', type=int, default=1000)
    parser.add_argument('--cmd-vel', type=float, nargs=3, default=(0.5, 0.0, 0.0))
    parser.add_argument('--physics-dt', type=float, default=0.002)
    parser.add_argument('--robot', help='a robot file: compare its policy path in lockstep')
    parser.add_argument('--out', help='write the run as a reference trace (.npz)')
    args = parser.parse_args(argv)
    try:
        out = run(args.deploy, args.model, args.policy, args.steps, tuple(args.cmd_vel),
                  args.physics_dt, args.robot)
    except ConfigError as exc:
        print(f'rl_lab_reference: {exc}', file=sys.stderr)
        return 2
    base = out['base_qpos']
    summary = {'steps': int(out['time'].size), 'distance_m': round(float(base[-1, 0]), 4),
               'base_end': base[-1, :3].round(4).tolist(),
               'min_base_z': round(float(base[:, 2].min()), 4)}
    if 'action_err' in out:
        err = out.pop('action_err')
        summary['max_action_err'] = float(err.max())
        summary['first_step_over_1e-4'] = (int(np.argmax(err > 1e-4)) if (err > 1e-4).any()
                                           else None)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        np.savez(args.out, **{k: v for k, v in out.items() if k != 'action_err'})
        summary['out'] = args.out
    print(json.dumps(summary))
    return 0


if __name__ == '__main__':
    sys.exit(main())

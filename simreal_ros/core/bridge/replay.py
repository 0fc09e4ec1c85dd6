"""Replay a recorded run's commands in a MuJoCo model of the robot.

The model is the nominal MJCF with `JointParams` applied through MjSpec. The driver is
modelled as the robot's: each command row (position, velocity, effort targets by joint, NaN =
no such term) arrives at its recorded time and takes effect `latency_s` later through a delay
line at the physics rate; a physics step in which a command takes effect sees the time-weighted
mean of the torques before and after it, so latencies are not rounded to the step (as
`simreal_ros.core.plant.SimPlant`). The torque `kp*(q_t - q) + kd*(dq_t - dq) + effort` is
clipped to `torque_limit` and applied through the joint's motor (ctrl / gear) or, without one,
as a generalised force. Before the first command takes effect the first row is assumed active.

The rollout starts from the first measured sample (position and velocity of the named joints;
everything else at the model's reference pose) and returns positions and velocities at the
recording's sample times.
"""
from dataclasses import replace

import mujoco
import numpy as np

from simreal_ros.core.bridge.params import build_model, joint_dofs, params_in_model
from simreal_ros.core.config import ConfigError
from simreal_ros.core.sysid.model import delayed_means


def _per_joint(values, n, what):
    arr = np.asarray(values, dtype=float).reshape(-1)
    if arr.size == 1:
        arr = np.full(n, float(arr[0]))
    if arr.size != n or np.any(np.isnan(arr)) or np.any(arr < 0):
        raise ConfigError(f'{what}: expected {n} values >= 0 (one per joint), got '
                          f'{np.asarray(values).tolist()}')
    return arr


def command_columns(rec, kp, kd):
    """Per command row: (u, kp_eff, kd_eff), so that torque = u - kp_eff*q - kd_eff*dq."""
    pos, vel = np.asarray(rec.cmd_position, float), np.asarray(rec.cmd_velocity, float)
    eff = np.nan_to_num(np.asarray(rec.cmd_effort, float))
    has_p, has_v = np.isfinite(pos), np.isfinite(vel)
    kp_eff = np.where(has_p, kp, 0.0)
    kd_eff = np.where(has_v, kd, 0.0)
    u = eff + kp_eff * np.nan_to_num(pos) + kd_eff * np.nan_to_num(vel)
    return u, kp_eff, kd_eff


class Replayer:
    """Roll recorded commands out in the model at `model_path` with given parameters."""

    def __init__(self, model_path, names, kp, kd, physics_dt=0.001, torque_limit=np.inf,
                 fixed_base_lift=None):
        self.model_path = str(model_path)
        # A floating-base robot identified hanging in its gantry is replayed there: its base
        # fixed this many m up (core/plant.fixed_base_model), None: the model as it is.
        self.fixed_base_lift = fixed_base_lift
        self.names = list(names)
        n = len(self.names)
        self.kp = _per_joint(kp, n, 'kp')
        self.kd = _per_joint(kd, n, 'kd')
        self.torque_limit = _per_joint(torque_limit, n, 'torque_limit')
        self.dt = float(physics_dt)
        model, _ = build_model(self.model_path, None, self.dt, fixed_base_lift)
        self.qadr, self.dof = joint_dofs(model, self.names, self.model_path)
        self.nominal = params_in_model(model, self.names)
        self.actuator = np.full(n, -1)
        self.gear = np.ones(n)
        for a in range(model.nu):
            if int(model.actuator_trntype[a]) != int(mujoco.mjtTrn.mjTRN_JOINT):
                continue
            j = model.actuator_trnid[a, 0]
            dof = model.jnt_dofadr[j]
            if dof in self.dof:
                i = int(np.nonzero(self.dof == dof)[0][0])
                self.actuator[i] = a
                self.gear[i] = model.actuator_gear[a, 0]
                if model.actuator_forcelimited[a]:
                    lo, hi = model.actuator_forcerange[a]
                    self.torque_limit[i] = min(self.torque_limit[i], max(-lo, hi))

    def model(self, params=None):
        """The compiled model with `params` applied (None: the MJCF file as it is)."""
        model, _ = build_model(self.model_path, params, self.dt, self.fixed_base_lift)
        return model

    def rollout(self, rec, params=None, model=None, start_state=None):
        """Return (q, dq), each (samples, joints), of the model replaying `rec`'s commands.

        params: JointParams applied to the nominal MJCF; or give a compiled `model` (e.g. the
        exported MJCF), whose own joint values and latency numeric are used.
        start_state: (qpos, qvel) of the whole model at rec.t[0] (a floating-base robot's base
        pose and velocity with its joints: a walking robot replayed in windows); default the
        first measured sample of the named joints, the rest at the model's reference pose.
        """
        if model is None:
            model = self.model(params)
        latency = params.latency_s if params is not None else \
            params_in_model(model, self.names).latency_s
        model.opt.timestep = self.dt
        data = mujoco.MjData(model)
        idx = [rec.names.index(n) for n in self.names]
        t = np.asarray(rec.t, float)
        t0 = float(t[0])
        n_steps = int(round((t[-1] - t0) / self.dt))
        step_t = t0 + self.dt * np.arange(n_steps)
        u, kp_eff, kd_eff = command_columns(_subset(rec, idx), self.kp, self.kd)
        cols = np.concatenate([u, kp_eff, kd_eff], axis=1)
        mean = delayed_means(np.asarray(rec.cmd_t, float), cols, step_t, self.dt,
                             [latency])[:, 0, :]
        n = len(self.names)
        u_s, kp_s, kd_s = mean[:, :n], mean[:, n:2 * n], mean[:, 2 * n:]
        if start_state is not None:
            qpos0, qvel0 = (np.asarray(a, float).reshape(-1) for a in start_state)
            if qpos0.size != model.nq or qvel0.size != model.nv:
                raise ConfigError(f'start_state: {qpos0.size} qpos and {qvel0.size} qvel values '
                                  f'for a model with nq {model.nq}, nv {model.nv} '
                                  f'({self.model_path})')
            data.qpos[:] = qpos0
            data.qvel[:] = qvel0
        else:
            data.qpos[self.qadr] = np.asarray(rec.position, float)[0, idx]
            data.qvel[self.dof] = np.asarray(rec.velocity, float)[0, idx]
        mujoco.mj_forward(model, data)
        rows = np.round((t - t0) / self.dt).astype(int)
        q_hist = np.empty((n_steps + 1, n))
        dq_hist = np.empty((n_steps + 1, n))
        has_act = self.actuator >= 0
        act, gear = _fast_index(self.actuator[has_act]), self.gear[has_act]
        free_dof = self.dof[~has_act]
        lim = self.torque_limit
        qadr, dof = _fast_index(self.qadr), _fast_index(self.dof)
        all_act = bool(np.all(has_act))
        act_any = bool(np.any(has_act))
        qpos, qvel, ctrl, qfrc = data.qpos, data.qvel, data.ctrl, data.qfrc_applied
        for s in range(n_steps):
            q = qpos[qadr]
            dq = qvel[dof]
            q_hist[s] = q
            dq_hist[s] = dq
            tau = np.clip(u_s[s] - kp_s[s] * q - kd_s[s] * dq, -lim, lim)
            if all_act:
                ctrl[act] = tau / gear
            elif act_any:
                ctrl[act] = tau[has_act] / gear
            if free_dof.size:
                qfrc[free_dof] = tau[~has_act]
            mujoco.mj_step(model, data)
        q_hist[n_steps] = qpos[qadr]
        dq_hist[n_steps] = qvel[dof]
        return q_hist[rows], dq_hist[rows]

    def windows(self, rec, qpos, qvel, params=None, window_s=0.5, skip_s=0.0, lead_s=0.05):
        """Replay `rec` window by window, each from the recorded whole state at its start.

        A walking robot replayed open loop for long drifts off and falls on any model; from
        the true state (qpos, qvel: the whole model, one row per sample of rec.t) every
        `window_s`, what differs within a window is the actuators. Commands from `lead_s`
        before each window go in with it (the delay line holds those that take effect in it).
        Returns (q: samples x joints, NaN before `skip_s`; the first scored row).
        """
        model = self.model(params)
        t = np.asarray(rec.t, float)
        q = np.full((len(t), len(self.names)), np.nan)
        start = int(np.searchsorted(t, t[0] + skip_s))
        step = max(2, int(round(window_s / float(np.median(np.diff(t))))))
        for i0 in range(start, len(t) - 1, step):
            i1 = min(i0 + step + 1, len(t))
            qw, _ = self.rollout(_rows(rec, i0, i1, lead_s), params, model=model,
                                 start_state=(qpos[i0], qvel[i0]))
            q[i0:i1] = qw
        return q, start


def _rows(rec, i0, i1, lead_s):
    """Samples i0..i1 of a recording with its commands from lead_s before the first sample
    (and the one in force then)."""
    t0, t1 = rec.t[i0], rec.t[i1 - 1]
    c = (rec.cmd_t >= t0 - lead_s) & (rec.cmd_t <= t1)
    if not np.any(c):
        c = rec.cmd_t <= t1
    c[max(int(np.argmax(c)) - 1, 0)] = True
    return replace(rec, t=rec.t[i0:i1], position=rec.position[i0:i1],
                   velocity=rec.velocity[i0:i1], effort=rec.effort[i0:i1], cmd_t=rec.cmd_t[c],
                   cmd_position=rec.cmd_position[c], cmd_velocity=rec.cmd_velocity[c],
                   cmd_effort=rec.cmd_effort[c])


def _fast_index(index):
    """A slice for contiguous ascending indices (much cheaper per physics step), else the array."""
    index = np.asarray(index, int)
    if index.size and np.all(np.diff(index) == 1):
        return slice(int(index[0]), int(index[-1]) + 1)
    return index


def _subset(rec, idx):
    """A view of the recording's command arrays restricted to joints `idx`, in that order."""
    class _Cmd:
        cmd_position = np.asarray(rec.cmd_position, float)[:, idx]
        cmd_velocity = np.asarray(rec.cmd_velocity, float)[:, idx]
        cmd_effort = np.asarray(rec.cmd_effort, float)[:, idx]
    return _Cmd

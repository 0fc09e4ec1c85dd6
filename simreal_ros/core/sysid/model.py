"""The nominal MuJoCo model seen by system identification, and the identified joint's simulator.

Links are known (the nominal MJCF); only actuator parameters are unknown. `NominalModel` gives
the rigid-body part of the joint torques (inverse dynamics, mass matrix, gravity) so that the
estimators regress only what is left: armature, viscous and Coulomb friction.
`simulate_joint` runs one identified joint (the others as measured), driven by the recorded
commands through a transport delay, for many delays at once; the latency estimator aligns the
measured motion with it.
"""
import math

import mujoco
import numpy as np

from simreal_ros.core.config import ConfigError
from simreal_ros.core.plant import STICTION_SOLIMP, STICTION_SOLREF, load_model

# Dry friction as MuJoCo resolves the stiction settings the identified model is exported with
# (sim_bridge, SimPlant): (solref time constant, solimp dmin, dmax).
STICTION = (STICTION_SOLREF[0], STICTION_SOLIMP[0], STICTION_SOLIMP[1])


class NominalModel:
    """Rigid-body dynamics of the nominal model for the exposed joints (no actuator terms)."""

    def __init__(self, model_path, joint_names):
        self.model_path = str(model_path)
        self.model = load_model(model_path)
        m = self.model
        self.names = list(joint_names)
        jid = []
        for name in self.names:
            j = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, name)
            if j < 0:
                raise ConfigError(f'joint {name!r} is not in {model_path}')
            jid.append(j)
        self.jid = np.array(jid)
        self.qadr = m.jnt_qposadr[self.jid]
        self.dof = m.jnt_dofadr[self.jid]
        lo, hi = m.jnt_range[self.jid, 0], m.jnt_range[self.jid, 1]
        limited = m.jnt_limited[self.jid].astype(bool)
        self.position_range = np.stack([np.where(limited, lo, -np.inf),
                                        np.where(limited, hi, np.inf)], axis=1)
        # Only the rigid links: actuator terms of the exposed joints are what we identify.
        m.dof_armature[self.dof] = 0.0
        m.dof_damping[self.dof] = 0.0
        m.dof_frictionloss[self.dof] = 0.0
        # A floating-base robot is identified hanging in its gantry: the base is held (its
        # velocity and acceleration stay zero here) and the feet touch nothing, so contacts
        # are off (a standing pose's floor contact would otherwise enter the torques).
        self.floating = bool(np.any(m.jnt_type == mujoco.mjtJoint.mjJNT_FREE))
        if self.floating:
            m.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONTACT)
        self.data = mujoco.MjData(m)
        self._touch = None     # (model, data) with contacts on, for clear_range

    @property
    def n(self):
        return len(self.names)

    def _set(self, q, qd=None, qdd=None):
        d = self.data
        d.qpos[self.qadr] = q
        d.qvel[:] = 0.0
        d.qacc[:] = 0.0
        if qd is not None:
            d.qvel[self.dof] = qd
        if qdd is not None:
            d.qacc[self.dof] = qdd

    def inverse_dynamics(self, q, qd, qdd):
        """Return rigid-body joint torques (samples x joints) for the given trajectories."""
        q, qd, qdd = (np.atleast_2d(np.asarray(a, dtype=float)) for a in (q, qd, qdd))
        out = np.empty_like(q)
        for k in range(q.shape[0]):
            self._set(q[k], qd[k], qdd[k])
            mujoco.mj_inverse(self.model, self.data)
            out[k] = self.data.qfrc_inverse[self.dof]
        return out

    def gravity(self, q):
        """Return the torque that holds pose(s) q still (samples x joints, or one row)."""
        q2 = np.atleast_2d(np.asarray(q, dtype=float))
        zero = np.zeros_like(q2)
        out = self.inverse_dynamics(q2, zero, zero)
        return out[0] if np.ndim(q) == 1 else out

    def clear_range(self, index, hold, lo, hi, clearance=0.03, step=0.01):
        """Return the part of [lo, hi] around hold[index] where the robot touches nothing.

        Joint `index` moves, the others stay at `hold`. The range ends where two of the
        robot's own bodies come within `clearance` m (bodies built closer than that, such
        as a pelvis and its hip links, where they touch); pairs the MJCF excludes and the
        world (a floor: the robot hangs in its gantry) do not count. A sweep that touches
        puts a contact torque in the data that no actuator model has: the G1's hip roll
        pressed one knee on the other and came out as a model misfit.
        """
        if self._touch is None:
            m = load_model(self.model_path)
            m.opt.disableflags &= ~int(mujoco.mjtDisableBit.mjDSBL_CONTACT)
            m.geom_margin[:] = np.maximum(m.geom_margin, clearance)
            self._touch = (m, mujoco.MjData(m))
        m, d = self._touch
        pose = np.asarray(hold, float).copy()

        def pairs(x):
            pose[index] = x
            d.qpos[self.qadr] = pose
            mujoco.mj_forward(m, d)
            out = {}
            for k in range(d.ncon):
                c = d.contact[k]
                b1, b2 = int(m.geom_bodyid[c.geom1]), int(m.geom_bodyid[c.geom2])
                if b1 and b2:
                    key = (min(b1, b2), max(b1, b2))
                    out[key] = min(out.get(key, np.inf), float(c.dist))
            return out

        c0 = float(hold[index])
        close = {k: v for k, v in pairs(c0).items() if v < clearance}

        def touches(x):
            return any(dist < (0.0 if key in close else clearance)
                       for key, dist in pairs(x).items())

        if touches(c0):
            return c0, c0
        out = []
        for end in (lo, hi):
            x = c0
            n = max(1, int(math.ceil(abs(end - c0) / step)))
            for k in range(1, n + 1):
                y = c0 + (end - c0) * k / n
                if touches(y):
                    break
                x = y
            out.append(x)
        return out[0], out[1]

    def mass_diagonal(self, q):
        """Return the rigid-link inertia each joint sees at pose q (diagonal of mj_fullM)."""
        self._set(np.asarray(q, dtype=float))
        mujoco.mj_forward(self.model, self.data)
        full = np.zeros((self.model.nv, self.model.nv))
        mujoco.mj_fullM(self.model, self.data, full)
        return full[self.dof, self.dof].copy()


def _window_mean(times, values, t0, t1):
    """Mean over [t0[k], t1[k]] of the zero-order-hold signal values[j] held from times[j]."""
    # Cumulative integral of the piecewise-constant signal, extended at both ends.
    dt = np.diff(times)
    cum = np.concatenate([np.zeros((1,) + values.shape[1:]),
                          np.cumsum(values[:-1] * dt[:, None], axis=0)])

    def integral(t):
        j = np.clip(np.searchsorted(times, t, side='right') - 1, 0, len(times) - 1)
        before = t < times[0]
        base = cum[j] + values[j] * (t - times[j])[:, None]
        return np.where(before[:, None], values[0] * (t - times[0])[:, None], base)

    return (integral(t1) - integral(t0)) / (t1 - t0)[:, None]


def delayed_means(cmd_time, values, step_start, physics_dt, delays):
    """Mean of each delayed command column over every physics step, for several delays.

    Returns (steps, delays, columns): commands (rows held from their arrival time) take effect
    `delay` later; a step in which one takes effect sees the time-weighted mean, as the plant.
    """
    cmd_time = np.asarray(cmd_time, float)
    values = np.asarray(values, float)
    delays = np.atleast_1d(np.asarray(delays, float))
    t0 = (step_start[:, None] - delays[None, :]).reshape(-1)
    out = _window_mean(cmd_time, values, t0, t0 + physics_dt)
    return out.reshape(len(step_start), len(delays), values.shape[1])


def simulate_joint(sample_time, q_meas, rest_torque, gravity_slope, inertia, viscous, coulomb,
                   kp, kd, cmd_time, cmd_columns, physics_dt, delays, qd0=0.0,
                   torque_limit=np.inf, stiction=None):
    """Simulate one joint (the others as measured) for several delays at once.

    The joint obeys (inertia) * qdd = tau - rest_torque - gravity_slope * (q - q_meas)
    - viscous * qd - coulomb * sign(qd), with rest_torque the nominal rigid-body torque of the
    measured motion without this joint's own acceleration (gravity, Coriolis, coupling), the
    actuator PD `tau = kp*(q_t - q) + kd*(qd_t - qd) + effort` on the delayed commands
    (cmd_columns: position, velocity, effort targets of this joint) and viscous friction
    implicit, as MuJoCo's Euler step. Coulomb friction: with `stiction` (solref time
    constant, solimp dmin, dmax) as MuJoCo's soft frictionloss constraint resolves it, the
    force clamp(-(a_unc + b*qd) / (A + R)) with b = 2 / (dmax * max(timeconst, 2*dt)) and
    R = A * (1 - dmin) / dmin: a sticking joint's speed decays over a few steps; the hard
    stick/slip step (stiction None) stops it in one. On the G1's hip, the hard step read the
    latency 0.1-0.2 ms late against a 0.5 ms plant.
    inertia (link + armature), viscous and coulomb may be scalars or one value per delay, so
    parameter sensitivities come from the same call.
    Returns (q, qd), each (samples, delays), starting from the measured state.
    """
    delays = np.atleast_1d(np.asarray(delays, float))
    t_start = float(sample_time[0])
    n_steps = int(round((sample_time[-1] - t_start) / physics_dt))
    step_t = t_start + physics_dt * np.arange(n_steps)
    cmd = delayed_means(cmd_time, cmd_columns, step_t, physics_dt, delays)
    # Measured quantities at the physics rate (linear interpolation between samples).
    rest = np.interp(step_t, sample_time, rest_torque)
    qm = np.interp(step_t, sample_time, q_meas)
    slope = np.interp(step_t, sample_time, gravity_slope)
    # Per-column joint parameters (each column: one delay and one parameter set).
    jmass = np.broadcast_to(np.asarray(inertia, float), delays.shape)
    viscous = np.broadcast_to(np.asarray(viscous, float), delays.shape)
    coulomb = np.broadcast_to(np.asarray(coulomb, float), delays.shape)
    denom = jmass + physics_dt * viscous
    kick = physics_dt * coulomb / denom
    stride = np.round((np.asarray(sample_time) - t_start) / physics_dt).astype(int)
    q = np.full(len(delays), float(q_meas[0]))
    qd = np.full(len(delays), float(qd0))
    q_hist = np.empty((n_steps + 1, len(delays)))
    qd_hist = np.empty((n_steps + 1, len(delays)))
    h = physics_dt
    soft = None
    if stiction is not None:
        timeconst, dmin, dmax = stiction
        soft = (2.0 / (dmax * max(timeconst, 2.0 * h)), (1.0 - dmin) / dmin)
    return_rows = stride
    q_hist[0] = q
    qd_hist[0] = qd
    for s in range(n_steps):
        c = cmd[s]
        tau = kp * (c[:, 0] - q) + kd * (c[:, 1] - qd) + c[:, 2]
        tau = np.clip(tau, -torque_limit, torque_limit)
        force = tau - rest[s] - slope[s] * (q - qm[s])
        if soft is None:
            trial = (jmass * qd + h * force) / denom
            qd = np.where(np.abs(trial) <= kick, 0.0, trial - np.sign(trial) * kick)
        else:
            b, leak = soft
            # MuJoCo's constraint force with A = 1/jmass (so R = leak * A), then the
            # implicit-damping step (jmass + h*viscous) qdd = force - viscous*qd + fc.
            unc = (force - viscous * qd) / jmass
            fc = np.clip(-(unc + b * qd) * jmass / (1.0 + leak), -coulomb, coulomb)
            qd = qd + h * (force - viscous * qd + fc) / denom
        q = q + h * qd
        q_hist[s + 1] = q
        qd_hist[s + 1] = qd
    return q_hist[return_rows], qd_hist[return_rows]

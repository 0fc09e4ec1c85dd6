"""The simulated robot's physics: a MuJoCo model with hidden "true" actuator parameters.

`SimPlant` is what `sim_robot` runs and what the SysID benchmarks drive directly (faster than real
time). The nominal MJCF describes the links; the plant truth (per joint Coulomb friction, viscous
damping, armature, torque limit, a command transport latency and sensor noise) is applied in the
physics, not to the measurements, so system identification has something real to recover:

- Coulomb friction -> `dof_frictionloss`, viscous damping -> `dof_damping`, armature ->
  `dof_armature` (these replace the nominal model's values for the exposed joints), less the
  inertia MuJoCo's implicit damping adds (`discrete_armature`): the plant moves as a
  continuous-time robot with the true armature would;
- torque limit -> the commanded torque is clipped before it is applied (and reported as effort);
- latency -> a delay line at the physics rate: a command becomes effective `latency_s` after it
  arrived; when that instant falls inside a physics step, the step applies the time-weighted mean
  of the torques before and after it, so latencies are not rounded to the physics step;
- noise -> Gaussian noise on measured position, velocity and effort.

Commands follow the driver convention of `hardware/command` (sensor_msgs/JointState, by name):
position targets give `kp*(q_t - q)`, velocity targets (default 0 when a position is given) give
`kd*(dq_t - dq)`, effort adds feed-forward torque. A command without positions and velocities is
pure effort; one with velocities only is damping (the supervisor's safe mode).
"""
from dataclasses import dataclass, field
import math

import mujoco
import numpy as np

from simreal_ros.core.commands import joint_indices, parse_joint_command
from simreal_ros.core.config import ConfigError

_ONE_DOF = (int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE))
# Dry friction in MuJoCo is a soft constraint; these settings make it stick: a torque below the
# Coulomb level creeps at under 2e-3 rad/s instead of ~0.1 rad/s with MuJoCo's defaults.
# sim_bridge models friction the same way.
STICTION_SOLREF = (0.002, 1.0)
STICTION_SOLIMP = (0.99, 0.999, 0.001, 0.5, 2.0)
PLANT_KEYS = ('coulomb_friction', 'viscous_damping', 'armature', 'torque_limit')


@dataclass
class PlantTruth:
    """Hidden actuator parameters of the simulated robot (per joint unless scalar)."""

    coulomb_friction: np.ndarray
    viscous_damping: np.ndarray
    armature: np.ndarray
    torque_limit: np.ndarray
    latency_s: float = 0.0
    noise_position: float = 0.0
    noise_velocity: float = 0.0
    noise_effort: float = 0.0

    @classmethod
    def from_mapping(cls, data, n_joints, source='plant'):
        """Build from a mapping (the `plant` section of a robot config, or a --truth file)."""
        if not isinstance(data, dict):
            raise ConfigError(f'{source}: expected a mapping with {", ".join(PLANT_KEYS)}')
        unknown = set(data) - set(PLANT_KEYS) - {'latency_s', 'noise_position',
                                                 'noise_velocity', 'noise_effort'}
        if unknown:
            raise ConfigError(f'{source}: unknown plant parameter(s) {sorted(unknown)}')
        values = {}
        for key in PLANT_KEYS:
            if key not in data:
                raise ConfigError(f'{source}.{key} is missing')
            arr = np.asarray(data[key], dtype=float).reshape(-1)
            if arr.size == 1:
                arr = np.full(n_joints, float(arr[0]))
            if arr.size != n_joints:
                raise ConfigError(f'{source}.{key} has {arr.size} values for {n_joints} joints')
            if not np.all(np.isfinite(arr)) or np.any(arr < 0):
                raise ConfigError(f'{source}.{key} must be finite and >= 0, got {arr.tolist()}')
            values[key] = arr
        if np.any(values['torque_limit'] <= 0):
            raise ConfigError(f'{source}.torque_limit must be > 0')
        for key in ('latency_s', 'noise_position', 'noise_velocity', 'noise_effort'):
            value = float(data.get(key, 0.0))
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f'{source}.{key} must be finite and >= 0, got {value}')
            values[key] = value
        return cls(**values)

    @classmethod
    def from_file(cls, path, n_joints):
        """Read a --truth file: a plant mapping, `{plant: ...}`, or a robot parameter file."""
        from simreal_ros.core.config import read_yaml
        data = read_yaml(path)
        section = isinstance(data, dict) and (data.get('/**/sim_robot') or data.get('sim_robot'))
        if section:
            data = section.get('ros__parameters', {}).get('plant', {})
        elif isinstance(data, dict) and 'plant' in data:
            data = data['plant']
        return cls.from_mapping(data, n_joints, source=str(path))

    def to_mapping(self):
        """Return the plain mapping form (the inverse of from_mapping)."""
        out = {k: getattr(self, k).tolist() for k in PLANT_KEYS}
        out.update(latency_s=self.latency_s, noise_position=self.noise_position,
                   noise_velocity=self.noise_velocity, noise_effort=self.noise_effort)
        return out


@dataclass
class JointCommand:
    """One command for a subset of joints (indices into the plant's joints)."""

    index: np.ndarray
    position: np.ndarray = None
    velocity: np.ndarray = None
    effort: np.ndarray = None
    kp: np.ndarray = None   # gains carried by the command (a Unitree LowCmd_); None = the
    kd: np.ndarray = None   # plant's configured kp/kd (a ROS hardware/command)


@dataclass
class _Active:
    """The command each joint is executing (NaN = no such term)."""

    position: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray
    updated: np.ndarray  # sim time each joint last received a command, -inf = never
    dirty: bool = True   # terms below need recomputing
    terms: tuple = None  # (kp, q_t, kd, dq_t, ff) with the missing terms zeroed
    kp: np.ndarray = None  # gains in use per joint (the configured ones unless a command
    kd: np.ndarray = None  # carried its own)


@dataclass
class Measurement:
    """What the robot's sensors report at one instant."""

    time: float
    position: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray
    orientation: np.ndarray = None        # base quaternion (w, x, y, z), floating base only
    angular_velocity: np.ndarray = None   # base frame
    linear_acceleration: np.ndarray = None  # base frame, proper acceleration (gravity included)
    base_position: np.ndarray = None
    extras: dict = field(default_factory=dict)


def load_model(model_path):
    """Load an MJCF file, with a ConfigError naming the file on failure."""
    try:
        return mujoco.MjModel.from_xml_path(str(model_path))
    except Exception as exc:  # noqa: BLE001 - mujoco raises ValueError with its parser text
        raise ConfigError(f'cannot load MuJoCo model {model_path}: {exc}') from exc


def fixed_base_model(model_path, lift=0.3):
    """The MJCF with its floating base fixed `lift` m above its initial pose: a robot hanging
    in a gantry (its base neither falls nor moves, its legs swing clear of the floor).

    Unlike SimPlant.hang (which resets a free base after every step, so that within a step the
    base falls with the legs and they feel no gravity), the legs here load the fixed base:
    gravity and the leg's coupling act on the joints as on the hanging robot.
    """
    spec = mujoco.MjSpec.from_file(str(model_path))
    fix_base(spec, lift, model_path)
    try:
        return spec.compile()
    except Exception as exc:  # noqa: BLE001 - mujoco raises ValueError with its text
        raise ConfigError(f'cannot fix the base of {model_path}: {exc}') from exc


def fix_base(spec, lift, what='the model'):
    """Fix an MjSpec's floating base `lift` m above its initial pose (fixed_base_model);
    ConfigError naming `what` when it has no free joint."""
    free = [j for j in spec.joints if j.type == mujoco.mjtJoint.mjJNT_FREE]
    if not free:
        raise ConfigError(f'{what}: no free joint (the base is fixed already)')
    body = free[0].parent
    spec.delete(free[0])
    body.pos = [body.pos[0], body.pos[1], body.pos[2] + float(lift)]
    # A base without joints is part of the world, whose children MuJoCo does not spare from
    # contact with it (filterparent skips the world): exclude base-child contacts as before.
    for child in body.bodies:
        spec.add_exclude(bodyname1=body.name, bodyname2=child.name)
    return spec


def implicit_damping_lag(model):
    """Half the time step (s) where `model`'s integrator takes joint damping implicitly, else
    0. Euler (unless its eulerdamp flag is off), implicit and implicitfast integrate the
    damping torque at the end of the step's velocity: against the step's acceleration that is
    half a step late, which a real (continuous) joint does not have, and it moves as if its
    armature were damping * timestep / 2 heavier (arm3's elbow with 2 N*m*s/rad at 1 ms: its
    0.01 kg*m^2 armature read +9.9 % by SysID, noise-free)."""
    return damping_lag(model.opt)


def damping_lag(opt):
    """implicit_damping_lag of a model's or an MjSpec's `option` (integrator, disableflags,
    timestep as they are)."""
    integ = int(opt.integrator)
    implicit = (integ in (int(mujoco.mjtIntegrator.mjINT_IMPLICIT),
                          int(mujoco.mjtIntegrator.mjINT_IMPLICITFAST))
                or (integ == int(mujoco.mjtIntegrator.mjINT_EULER)
                    and not int(opt.disableflags) & int(mujoco.mjtDisableBit.mjDSBL_EULERDAMP)))
    return 0.5 * float(opt.timestep) if implicit else 0.0


def discrete_armature(model, armature, damping):
    """The `dof_armature` that makes `model` (its integrator and time step) move as a
    continuous-time joint of `armature` and viscous `damping` does: the armature less
    damping * implicit_damping_lag (never below 0)."""
    lag = implicit_damping_lag(model)
    return np.maximum(np.asarray(armature, float) - np.asarray(damping, float) * lag, 0.0)


class SimPlant:
    """A MuJoCo robot with hidden true actuator parameters, stepped at `physics_dt`."""

    def __init__(self, model_path, joint_names, physics_dt, kp, kd, truth=None,
                 command_mode='position', command_timeout=0.25, seed=0, initial_position=None,
                 fixed_base_lift=None):
        # fixed_base_lift: a floating-base robot hangs in its gantry, the base fixed this
        # many metres above its initial pose (fixed_base_model).
        self.model = (load_model(model_path) if fixed_base_lift is None
                      else fixed_base_model(model_path, fixed_base_lift))
        self.model.opt.timestep = float(physics_dt)
        self.data = mujoco.MjData(self.model)
        self.names = list(joint_names)
        self.n = len(self.names)
        if self.n == 0:
            raise ConfigError('joint_names is empty')
        if command_mode not in ('position', 'effort'):
            raise ConfigError(f"command_mode must be 'position' or 'effort', got {command_mode!r}")
        self.command_mode = command_mode
        self.command_timeout = float(command_timeout)
        self.dt = float(physics_dt)
        self.rng = np.random.default_rng(seed)
        self._resolve_joints(model_path)
        self.kp = self._per_joint(kp, 'kp')
        self.kd = self._per_joint(kd, 'kd')
        self.truth = truth
        if truth is not None:
            self.model.dof_frictionloss[self.dof] = truth.coulomb_friction
            self.model.dof_damping[self.dof] = truth.viscous_damping
            self.model.dof_armature[self.dof] = discrete_armature(
                self.model, truth.armature, truth.viscous_damping)
            self.model.dof_solref[self.dof] = STICTION_SOLREF
            self.model.dof_solimp[self.dof] = STICTION_SOLIMP
            self.torque_limit = truth.torque_limit.copy()
            self.latency = truth.latency_s
        else:
            self.torque_limit = np.full(self.n, np.inf)
            self.latency = 0.0
        # The model's own actuator force range clamps what a motor can do, as in the MJCF.
        for i, act in enumerate(self.actuator):
            if act >= 0 and self.model.actuator_forcelimited[act]:
                lo, hi = self.model.actuator_forcerange[act]
                self.torque_limit[i] = min(self.torque_limit[i], max(-lo, hi))
        # Until a joint's first command arrives it is damped, as a motor driver powers up.
        self._active = _Active(np.full(self.n, np.nan), np.zeros(self.n), np.zeros(self.n),
                               np.full(self.n, -np.inf), kp=self.kp.copy(), kd=self.kd.copy())
        self._queue = []  # (effective_time, JointCommand), in arrival order
        self.applied = np.zeros(self.n)
        self.timeouts = 0
        self._timed_out = np.ones(self.n, dtype=bool)  # no command yet: the damping fallback
        self.base_body = self._free_base_body()
        # A floating-base robot on a fixed base (fixed_base_lift): the body its free joint
        # moved, now bolted to its gantry; its IMU reads a base at rest.
        self.gantry_body = (self._fixed_base_body(model_path) if fixed_base_lift is not None
                            else None)
        self._pin = None     # (qpos adr, dof adr, pose): the base held by a gantry, or None
        # Physics steps in which the robot touched itself, and the body pairs that touched.
        self.self_contact_steps = 0
        self.self_contact_pairs = set()
        if initial_position is not None:
            self.data.qpos[self.qadr] = np.asarray(initial_position, dtype=float)
        mujoco.mj_forward(self.model, self.data)

    # -- set-up ---------------------------------------------------------------------------
    def _resolve_joints(self, model_path):
        m = self.model
        missing = [n for n in self.names
                   if mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, n) < 0]
        if missing:
            known = [m.joint(i).name for i in range(m.njnt) if int(m.jnt_type[i]) in _ONE_DOF]
            raise ConfigError(f'joint_names: {missing} not in {model_path}; its 1-dof joints are '
                              f'{known}')
        jid = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, n) for n in self.names]
        bad = [n for n, j in zip(self.names, jid) if int(m.jnt_type[j]) not in _ONE_DOF]
        if bad:
            raise ConfigError(f'joint_names: {bad} are not hinge or slide joints')
        self.jid = np.array(jid)
        self.qadr = m.jnt_qposadr[self.jid]
        self.dof = m.jnt_dofadr[self.jid]
        # A motor actuator on the joint takes the torque through ctrl; otherwise qfrc_applied.
        self.actuator = np.full(self.n, -1)
        self.gear = np.ones(self.n)
        for a in range(m.nu):
            if int(m.actuator_trntype[a]) != int(mujoco.mjtTrn.mjTRN_JOINT):
                continue
            j = m.actuator_trnid[a, 0]
            if j in jid:
                i = jid.index(j)
                is_motor = (int(m.actuator_gaintype[a]) == int(mujoco.mjtGain.mjGAIN_FIXED)
                            and int(m.actuator_biastype[a]) == int(mujoco.mjtBias.mjBIAS_NONE))
                if not is_motor:
                    raise ConfigError(f'{model_path}: actuator {m.actuator(a).name!r} on joint '
                                      f'{self.names[i]!r} is not a <motor>; sim_robot computes '
                                      'the PD itself and needs torque actuators (or none)')
                self.actuator[i] = a
                self.gear[i] = m.actuator_gear[a, 0]
        lo = m.jnt_range[self.jid, 0]
        hi = m.jnt_range[self.jid, 1]
        limited = m.jnt_limited[self.jid].astype(bool)
        self.position_range = np.stack([np.where(limited, lo, -np.inf),
                                        np.where(limited, hi, np.inf)], axis=1)

    def _per_joint(self, values, name):
        arr = np.asarray(values, dtype=float).reshape(-1)
        if arr.size == 1:
            arr = np.full(self.n, float(arr[0]))
        if arr.size != self.n or not np.all(np.isfinite(arr)) or np.any(arr < 0):
            raise ConfigError(f'{name}: expected {self.n} finite values >= 0 (one per joint in '
                              f'joint_names), got {np.asarray(values).tolist()}')
        return arr

    def _free_base_body(self):
        m = self.model
        for j in range(m.njnt):
            if int(m.jnt_type[j]) == int(mujoco.mjtJoint.mjJNT_FREE):
                return int(m.jnt_bodyid[j])
        return None

    def _fixed_base_body(self, model_path):
        free = load_model(model_path)
        for j in range(free.njnt):
            if int(free.jnt_type[j]) == int(mujoco.mjtJoint.mjJNT_FREE):
                name = free.body(int(free.jnt_bodyid[j])).name
                return mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, name)
        return None

    @property
    def floating_base(self):
        return self.base_body is not None

    @property
    def has_base_imu(self):
        """True when the robot has a base with an IMU: floating, or fixed in its gantry."""
        return self.base_body is not None or self.gantry_body is not None

    def hang(self, pinned=True):
        """Hold the floating base where it is (a robot hanging in its gantry) or let it go.
        While hung the legs move freely and the base neither falls nor moves."""
        if not self.floating_base:
            return
        if not pinned:
            self._pin = None
            return
        jnt = self.model.body_jntadr[self.base_body]
        qa, va = self.model.jnt_qposadr[jnt], self.model.jnt_dofadr[jnt]
        self._pin = (qa, va, self.data.qpos[qa:qa + 7].copy())

    @property
    def hung(self):
        return self._pin is not None

    @property
    def time(self):
        return float(self.data.time)

    # -- commands -------------------------------------------------------------------------
    def index_of(self, names):
        """Map names to joint indices; raise ValueError naming the unknown ones."""
        return joint_indices(names, self.names)

    def make_command(self, names, position=(), velocity=(), effort=()):
        """Validate a JointState-style command; raise ValueError with the reason when malformed."""
        idx, fields = parse_joint_command(names, self.names, position, velocity, effort)
        if self.command_mode == 'effort' and (fields['position'] is not None
                                              or fields['velocity'] is not None):
            raise ValueError("command_mode is 'effort': position/velocity targets are not used;"
                             ' send effort only')
        return JointCommand(idx, **fields)

    def submit(self, command, arrival_time=None):
        """Queue a command that arrived at `arrival_time` (sim time; default now)."""
        t = self.time if arrival_time is None else float(arrival_time)
        self._queue.append((t + self.latency, command))

    def _apply(self, active, command, t):
        i = command.index
        has_p = command.position is not None
        has_v = command.velocity is not None
        active.position[i] = command.position if has_p else np.nan
        if has_v:
            active.velocity[i] = command.velocity
        else:
            active.velocity[i] = 0.0 if has_p else np.nan
        active.effort[i] = command.effort if command.effort is not None else 0.0
        active.kp[i] = command.kp if command.kp is not None else self.kp[i]
        active.kd[i] = command.kd if command.kd is not None else self.kd[i]
        active.updated[i] = t
        active.dirty = True

    def _torque(self, active, q, dq):
        if active.dirty:
            has_p = np.isfinite(active.position)
            has_v = np.isfinite(active.velocity)
            active.terms = (np.where(has_p, active.kp, 0.0), np.nan_to_num(active.position),
                            np.where(has_v, active.kd, 0.0), np.nan_to_num(active.velocity),
                            np.nan_to_num(active.effort))
            active.dirty = False
        kp, q_t, kd, dq_t, ff = active.terms
        return ff + kp * (q_t - q) + kd * (dq_t - dq)

    @property
    def timed_out(self):
        """Per joint: True while it is on the damping fallback (a copy)."""
        return self._timed_out.copy()

    @property
    def damped(self):
        """True while every joint is on the damping fallback (no fresh command)."""
        return bool(self._timed_out.all())

    def expire_all(self):
        """Drop every joint's command now: damping until new commands arrive."""
        self._active.updated[:] = -np.inf
        self._queue = []

    def _expire(self, active, t):
        """Joints whose command is older than command_timeout get damping (kp=0, kd>0)."""
        if t - active.updated.min() <= self.command_timeout and not self._timed_out.any():
            return
        old = (t - active.updated) > self.command_timeout
        newly = old & ~self._timed_out
        self.timeouts += int(np.count_nonzero(newly))
        self._timed_out = old
        if np.any(newly):
            active.position[newly] = np.nan
            active.velocity[newly] = 0.0
            active.effort[newly] = 0.0
            active.kd[newly] = self.kd[newly]
            active.dirty = True

    # -- stepping -------------------------------------------------------------------------
    def step(self, n=1):
        """Advance the physics by n steps."""
        m, d = self.model, self.data
        for _ in range(n):
            t0 = d.time
            t1 = t0 + self.dt
            q = d.qpos[self.qadr].copy()
            dq = d.qvel[self.dof].copy()
            # Commands that became effective before this step starts.
            while self._queue and self._queue[0][0] <= t0 + 1e-12:
                t_eff, cmd = self._queue.pop(0)
                self._apply(self._active, cmd, t_eff)
            self._expire(self._active, t0)
            tau = self._torque(self._active, q, dq)
            # Commands taking effect inside this step: time-weighted torque (sub-step latency).
            if self._queue and self._queue[0][0] < t1 - 1e-12:
                weighted = np.zeros(self.n)
                t_prev = t0
                while self._queue and self._queue[0][0] < t1 - 1e-12:
                    t_eff, cmd = self._queue.pop(0)
                    weighted += np.clip(tau, -self.torque_limit, self.torque_limit) * (t_eff - t_prev)
                    self._apply(self._active, cmd, t_eff)
                    tau = self._torque(self._active, q, dq)
                    t_prev = t_eff
                weighted += np.clip(tau, -self.torque_limit, self.torque_limit) * (t1 - t_prev)
                applied = weighted / self.dt
            else:
                applied = np.clip(tau, -self.torque_limit, self.torque_limit)
            self.applied = applied
            self._write_torque(applied)
            mujoco.mj_step(m, d)
            if d.ncon:
                self._count_self_contact()
            if self._pin is not None:
                qa, va, pose = self._pin
                d.qpos[qa:qa + 7] = pose
                d.qvel[va:va + 6] = 0.0

    def _count_self_contact(self):
        # A contact between two of the robot's own bodies (neither is the world's: the floor,
        # a gantry) is the robot hitting itself: counted per physics step, with the pairs.
        m, d = self.model, self.data
        b1 = m.geom_bodyid[d.contact.geom1[:d.ncon]]
        b2 = m.geom_bodyid[d.contact.geom2[:d.ncon]]
        own = (b1 != 0) & (b2 != 0)
        if not own.any():
            return
        self.self_contact_steps += 1
        for a, b in zip(b1[own], b2[own]):
            self.self_contact_pairs.add(tuple(sorted((m.body(int(a)).name,
                                                      m.body(int(b)).name))))

    def _write_torque(self, tau):
        # The joint -> actuator / dof maps are fixed: indexed once, not masked every step (the
        # masks were 4 % of sim_robot's CPU at 500 Hz).
        maps = getattr(self, '_torque_maps', None)
        if maps is None:
            has_act = self.actuator >= 0
            joints = np.flatnonzero(has_act)
            free = np.flatnonzero(~has_act)
            maps = self._torque_maps = (joints, self.actuator[joints], self.gear[joints],
                                        free, self.dof[free])
        joints, ctrl, gear, free, dof = maps
        d = self.data
        if joints.size:
            d.ctrl[ctrl] = tau[joints] / gear
        if free.size:
            d.qfrc_applied[dof] = tau[free]

    # -- sensing --------------------------------------------------------------------------
    def measure(self, with_noise=True):
        """Return the sensors' reading now (noise from the plant truth when with_noise)."""
        d = self.data
        q = d.qpos[self.qadr].copy()
        dq = d.qvel[self.dof].copy()
        tau = self.applied.copy()
        if with_noise and self.truth is not None:
            tr = self.truth
            if tr.noise_position:
                q += self.rng.normal(0.0, tr.noise_position, self.n)
            if tr.noise_velocity:
                dq += self.rng.normal(0.0, tr.noise_velocity, self.n)
            if tr.noise_effort:
                tau += self.rng.normal(0.0, tr.noise_effort, self.n)
        out = Measurement(self.time, q, dq, tau)
        if self.floating_base:
            b = self.base_body
            jnt = self.model.body_jntadr[b]
            qa = self.model.jnt_qposadr[jnt]
            va = self.model.jnt_dofadr[jnt]
            out.base_position = d.qpos[qa:qa + 3].copy()
            out.orientation = d.qpos[qa + 3:qa + 7].copy()
            out.angular_velocity = d.qvel[va + 3:va + 6].copy()  # free joint: body frame
            mujoco.mj_rnePostConstraint(self.model, d)
            acc = np.zeros(6)
            mujoco.mj_objectAcceleration(self.model, d, mujoco.mjtObj.mjOBJ_BODY, b, acc, 1)
            out.linear_acceleration = acc[3:].copy()
        elif self.gantry_body is not None:
            # Bolted to the gantry: at rest, so the accelerometer reads gravity's reaction.
            b = self.gantry_body
            out.base_position = d.xpos[b].copy()
            out.orientation = d.xquat[b].copy()
            out.angular_velocity = np.zeros(3)
            rot = d.xmat[b].reshape(3, 3)
            out.linear_acceleration = rot.T @ -self.model.opt.gravity
        return out

    # -- rehearsal: the true plant changes while it runs (test-only, never on hardware) --------
    CHANGEABLE = {'coulomb_friction': 'dof_frictionloss', 'viscous_damping': 'dof_damping',
                  'armature': 'dof_armature'}

    def change_truth(self, factors):
        """Scale the true actuator parameters of named joints, as a motor heating or a gearbox
        wearing changes them: {joint: {coulomb_friction|viscous_damping|armature: factor}},
        relative to the configured truth (an empty mapping restores it). Validated whole
        before anything changes; ValueError names the bad entry. Returns the new values."""
        if self.truth is None:
            raise ValueError('no plant truth to change (plant_enabled is false)')
        if not isinstance(factors, dict):
            raise ValueError(f'expected {{joint: {{parameter: factor}}}}, got {factors!r}')
        scale = {k: np.ones(self.n) for k in self.CHANGEABLE}
        for joint, change in factors.items():
            if joint not in self.names:
                raise ValueError(f'unknown joint {joint!r}; joints are {self.names}')
            if not isinstance(change, dict) or not change:
                raise ValueError(f'{joint}: expected {{parameter: factor}}, got {change!r}')
            for key, factor in change.items():
                if key not in self.CHANGEABLE:
                    raise ValueError(f'{joint}.{key}: not a changeable parameter; use '
                                     f'{", ".join(self.CHANGEABLE)}')
                if isinstance(factor, bool) or not isinstance(factor, (int, float)) or \
                        not np.isfinite(factor) or factor < 0:
                    raise ValueError(f'{joint}.{key}: factor must be a finite number >= 0, '
                                     f'got {factor!r}')
                scale[key][self.names.index(joint)] = float(factor)
        values = {key: getattr(self.truth, key) * scale[key] for key in self.CHANGEABLE}
        for key, field_name in self.CHANGEABLE.items():
            getattr(self.model, field_name)[self.dof] = (
                discrete_armature(self.model, values['armature'], values['viscous_damping'])
                if key == 'armature' else values[key])
        return {key: v.tolist() for key, v in values.items()}

    def set_state(self, position=None, velocity=None):
        """Place the exposed joints (for tests and experiments that start from a pose)."""
        if position is not None:
            self.data.qpos[self.qadr] = position
        if velocity is not None:
            self.data.qvel[self.dof] = velocity
        mujoco.mj_forward(self.model, self.data)

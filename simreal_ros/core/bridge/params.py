"""Joint actuator parameters of the simulator, and how they enter a MuJoCo model (MjSpec).

Per joint: viscous `damping` (N*m*s/rad), Coulomb `frictionloss` (N*m), rotor `armature`
(kg*m^2); one command transport `latency_s` (s). They map one to one onto the plant truth of
`simreal_ros.core.plant` (viscous_damping, coulomb_friction, armature, latency_s) and onto the
SysID estimates. Dry friction uses the plant's stiction solver settings (STICTION_SOLREF/SOLIMP)
so the same numbers mean the same thing in both.

MJCF has no command transport delay of this kind (an actuator `delay` delays the whole torque,
feedback included), so the latency is stored in the model as a custom numeric
`simreal_latency_s`, which plain MuJoCo loads and ignores, and which `Replayer` reads back.
"""
from dataclasses import dataclass, field
import math

import mujoco
import numpy as np

from simreal_ros.core.config import ConfigError
from simreal_ros.core.plant import STICTION_SOLIMP, STICTION_SOLREF, damping_lag

JOINT_KEYS = ('damping', 'frictionloss', 'armature')
LATENCY_NUMERIC = 'simreal_latency_s'
# ROS parameter ranges (also what refinement may explore): generous, physical.
RANGES = {'damping': (0.0, 100.0), 'frictionloss': (0.0, 100.0), 'armature': (0.0, 10.0),
          'latency_s': (0.0, 0.2)}
UNITS = {'damping': 'N*m*s/rad', 'frictionloss': 'N*m', 'armature': 'kg*m^2', 'latency_s': 's'}
# SysID / plant names of the same quantities.
SYSID_NAME = {'damping': 'viscous_damping', 'frictionloss': 'coulomb_friction',
              'armature': 'armature', 'latency_s': 'latency'}


@dataclass
class JointParams:
    """Simulator actuator parameters; `interval` holds 95 % half-widths (NaN = unknown)."""

    names: list
    damping: np.ndarray
    frictionloss: np.ndarray
    armature: np.ndarray
    latency_s: float = 0.0
    interval: dict = field(default_factory=dict)   # key -> array (joint keys) or float
    source: dict = field(default_factory=dict)     # key -> list of method names per joint

    @classmethod
    def zeros(cls, names):
        n = len(names)
        return cls(list(names), np.zeros(n), np.zeros(n), np.zeros(n), 0.0)

    @classmethod
    def from_mapping(cls, data, names, source='sim_bridge'):
        """Build from {damping: [...], frictionloss: [...], armature: [...], latency_s: x}."""
        if not isinstance(data, dict):
            raise ConfigError(f'{source}: expected a mapping with {", ".join(JOINT_KEYS)}, '
                              'latency_s')
        n = len(names)
        out = cls.zeros(names)
        for key in JOINT_KEYS:
            if key not in data:
                continue
            arr = np.asarray(data[key], dtype=float).reshape(-1)
            if arr.size == 1:
                arr = np.full(n, float(arr[0]))
            if arr.size != n:
                raise ConfigError(f'{source}.{key} has {arr.size} values for {n} joints '
                                  f'{list(names)}')
            setattr(out, key, arr)
        out.latency_s = float(data.get('latency_s', 0.0))
        if isinstance(data.get('interval'), dict):
            out.interval = {k: (np.asarray(v, float) if k in JOINT_KEYS else float(v))
                            for k, v in data['interval'].items()}
        out.validate(source)
        return out

    def validate(self, source='sim_bridge'):
        n = len(self.names)
        for key in JOINT_KEYS:
            arr = np.asarray(getattr(self, key), dtype=float)
            lo, hi = RANGES[key]
            if arr.shape != (n,) or not np.all(np.isfinite(arr)) or np.any(arr < lo) \
                    or np.any(arr > hi):
                raise ConfigError(f'{source}.{key}: expected {n} finite values in '
                                  f'[{lo:g}, {hi:g}] {UNITS[key]}, got {arr.tolist()}')
        lo, hi = RANGES['latency_s']
        if not (math.isfinite(self.latency_s) and lo <= self.latency_s <= hi):
            raise ConfigError(f'{source}.latency_s must be in [{lo:g}, {hi:g}] s, got '
                              f'{self.latency_s}')

    def copy(self):
        return JointParams(list(self.names), self.damping.copy(), self.frictionloss.copy(),
                           self.armature.copy(), float(self.latency_s),
                           {k: np.copy(v) for k, v in self.interval.items()},
                           dict(self.source))

    def to_mapping(self, with_interval=True):
        out = {k: [float(v) for v in getattr(self, k)] for k in JOINT_KEYS}
        out['latency_s'] = float(self.latency_s)
        if with_interval and self.interval:
            out['interval'] = {k: (np.asarray(v, float).tolist() if np.ndim(v) else float(v))
                               for k, v in self.interval.items()}
        return out

    def half_width(self, key):
        """95 % half-width of `key` (array per joint, or float for latency); NaN if unknown."""
        value = self.interval.get(key)
        if key == 'latency_s':
            return float('nan') if value is None else float(value)
        if value is None:
            return np.full(len(self.names), np.nan)
        return np.asarray(value, float)

    @classmethod
    def from_sysid(cls, names, fits_by_joint, fallback=None):
        """Closed-form SysID results -> parameters (fits_by_joint: joint -> {kind: Fit}).

        Parameters a joint has no fit for keep `fallback`'s value (default zeros). Latency is
        the mean over the joints that identified one (one transport path for the robot).
        """
        out = (fallback or cls.zeros(names)).copy()
        half = {k: np.full(len(names), np.nan) for k in JOINT_KEYS}
        lat, lat_h = [], []
        for joint, fits in fits_by_joint.items():
            i = names.index(joint)
            for key in JOINT_KEYS:
                kind = 'inertia' if key == 'armature' else 'friction'
                fit = fits.get(kind)
                if fit is None:
                    continue
                est = fit.estimates[SYSID_NAME[key]]
                getattr(out, key)[i] = max(est.value, 0.0)
                half[key][i] = 0.5 * (est.high - est.low)
            fit = fits.get('latency')
            if fit is not None:
                est = fit.estimates['latency']
                lat.append(est.value)
                lat_h.append(0.5 * (est.high - est.low))
        if lat:
            out.latency_s = float(np.mean(lat))
            half['latency_s'] = float(np.sqrt(np.sum(np.square(lat_h))) / len(lat_h))
        out.interval = half
        return out


def joint_dofs(model, names, source='model'):
    """Return (qpos addresses, dof addresses) of the named 1-dof joints."""
    jid = []
    for name in names:
        j = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
        if j < 0:
            raise ConfigError(f'joint {name!r} is not in {source}')
        jid.append(j)
    jid = np.array(jid)
    return model.jnt_qposadr[jid], model.jnt_dofadr[jid]


def load_spec(model_path):
    """MjSpec of an MJCF file, with a ConfigError naming the file on failure."""
    try:
        return mujoco.MjSpec.from_file(str(model_path))
    except Exception as exc:  # noqa: BLE001 - mujoco raises ValueError with its parser text
        raise ConfigError(f'cannot load MuJoCo model {model_path}: {exc}') from exc


def apply_to_spec(spec, params):
    """Write `params` into an MjSpec: joint damping/frictionloss/armature, latency numeric.

    `params` are the robot's own (continuous-time) values, as SysID identifies them. The
    armature written is less damping * timestep / 2 where the spec's integrator takes damping
    implicitly (plant.discrete_armature), so the model moves as the robot does at the
    spec's time step: set the time step first."""
    lag = damping_lag(spec.option)
    for i, name in enumerate(params.names):
        joint = spec.joint(name)
        if joint is None:
            raise ConfigError(f'joint {name!r} is not in the model')
        joint.damping = [float(params.damping[i])] + [0.0] * (len(joint.damping) - 1)
        joint.frictionloss = float(params.frictionloss[i])
        joint.armature = max(float(params.armature[i]) - float(params.damping[i]) * lag, 0.0)
        joint.solref_friction = list(STICTION_SOLREF)
        joint.solimp_friction = list(STICTION_SOLIMP)
    numeric = spec.numeric(LATENCY_NUMERIC)
    if numeric is None:
        numeric = spec.add_numeric()
        numeric.name = LATENCY_NUMERIC
    numeric.data = [float(params.latency_s)]
    return spec


def build_model(model_path, params=None, physics_dt=None, fixed_base_lift=None):
    """Compile the MJCF at `model_path` with `params` applied (None: the file as it is);
    with fixed_base_lift, its floating base fixed that many m up (a robot in its gantry)."""
    spec = load_spec(model_path)
    if fixed_base_lift is not None:
        from simreal_ros.core.plant import fix_base
        fix_base(spec, fixed_base_lift, model_path)
    if physics_dt is not None:
        spec.option.timestep = float(physics_dt)
    if params is not None:
        apply_to_spec(spec, params)
    try:
        return spec.compile(), spec
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(f'cannot compile {model_path} with the bridge parameters: {exc}') \
            from exc


def params_in_model(model, names):
    """Read the parameters a compiled model carries (the inverse of apply_to_spec: the
    armature a continuous-time joint moving as the model's does would have)."""
    _, dof = joint_dofs(model, names)
    damping = model.dof_damping[dof].copy()
    out = JointParams(list(names), damping, model.dof_frictionloss[dof].copy(),
                      model.dof_armature[dof] + damping * damping_lag(model.opt))
    nid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_NUMERIC, LATENCY_NUMERIC)
    if nid >= 0:
        out.latency_s = float(model.numeric_data[model.numeric_adr[nid]])
    return out


# SysID result parameter -> sim_bridge per-joint key (joints.<joint>.<key>); latency is global.
BRIDGE_KEYS = {'viscous_damping': 'damping', 'coulomb_friction': 'frictionloss',
               'armature': 'armature'}


def bridge_parameters(results):
    """Return {sim_bridge parameter: value} for SysID result mappings (by joint)."""
    out, latencies, widths = {}, [], []
    for result in results:
        for r in result.get('results') or []:
            lo, hi = r.get('interval', (None, None))
            half = (float(hi) - float(lo)) / 2.0 if lo is not None else -1.0
            if r.get('parameter') in BRIDGE_KEYS:
                key = f'joints.{r["joint"]}.{BRIDGE_KEYS[r["parameter"]]}'
                out[key] = float(r['value'])
                out[key + '_half_width'] = half
            elif r.get('parameter') == 'latency':
                latencies.append(float(r['value']))
                widths.append(half)
    if latencies:
        out['latency_s'] = sum(latencies) / len(latencies)
        out['latency_s_half_width'] = max(widths)
    return out

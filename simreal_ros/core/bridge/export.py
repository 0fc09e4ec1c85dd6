"""Export what training needs: the identified MJCF, the values with intervals, DR ranges.

Files written to the export folder:
- `<robot>_identified.xml`: the nominal MJCF with the identified joint damping, frictionloss,
  armature (and the stiction solver settings) written in, latency as custom numeric
  `simreal_latency_s`; asset folders made absolute so it loads from anywhere in plain MuJoCo;
- `identified_params.yaml`: per joint and parameter the value, its 95 % interval and how it was
  found; the latency; the gap scores when given;
- `domain_randomization.yaml`: uniform ranges centred on each estimate, half-width
  max(k * interval half-width, floor_fraction * |value|, floor_abs); when that would cross zero
  the half-width is shrunk to the value, so every range stays centred and physical; with a
  note mapping each entry to Isaac Lab and mjlab event terms;
- `isaaclab_actuators.py`: an Isaac Lab actuator configuration snippet (DelayedPDActuatorCfg
  per joint: armature, Coulomb friction, viscous friction, the latency as an action delay in
  physics steps of `train_dt`), its conventions in its header;
- `legged_gym_params.py`: the same as legged_gym-style values (per-DOF armature, friction,
  damping for `_process_dof_props`, the delay in policy and physics steps), conventions in
  its header.
"""
import math
import os

import yaml

from simreal_ros.core.bridge.params import JOINT_KEYS, UNITS, apply_to_spec, load_spec
from simreal_ros.core.files import write_text

DR_FLOOR_FRACTION = 0.10
DR_FLOOR_ABS = {'damping': 0.005, 'frictionloss': 0.005, 'armature': 0.0005,
                'latency_s': 0.0005}
DR_INTERVAL_SCALE = 2.0

DR_NOTE = """How to use these ranges (uniform, absolute values, centred on the identified model):
- mjlab: an EventTermCfg(mode='startup' or 'reset', func=mdp.randomize_field) per entry, with
  params field='dof_damping' / 'dof_frictionloss' / 'dof_armature', ranges=(low, high),
  operation='abs' and SceneEntityCfg('robot', joint_names=[joint]) (newer mjlab: the typed
  dr.joint_damping / joint friction / joint armature functions with the same ranges).
  The values are the robot's own (continuous time). Where your MuJoCo integrator takes
  damping implicitly (Euler, implicit, implicitfast), a joint moves as if its armature were
  damping * timestep / 2 heavier: subtract that from the armature range at your time step
  (the exported MJCF has it subtracted at the time step it was checked at).
- Isaac Lab: EventTerm(func=mdp.randomize_joint_parameters, mode='startup') with
  armature_distribution_params=(low, high), operation='abs', per joint (asset_cfg joint_names).
  PhysX joint friction is not MuJoCo's frictionloss in N*m: convert, or model the Coulomb and
  viscous terms in the actuator (an explicit actuator model) and randomise them there.
- latency_s: Isaac Lab DelayedPDActuatorCfg(min_delay, max_delay) counts whole physics steps:
  use floor(low / dt) and ceil(high / dt); in mjlab/MuJoCo, a delayed action buffer of the
  same number of control or physics steps. The delay applies to the command targets, not to
  the PD feedback.
"""


def dr_range(value, half_width, key, scale=DR_INTERVAL_SCALE, floor_fraction=DR_FLOOR_FRACTION):
    """Return (low, high) centred on value: width from the interval with a floor, >= 0."""
    hw = half_width if half_width is not None and math.isfinite(half_width) else 0.0
    w = max(scale * hw, floor_fraction * abs(value), DR_FLOOR_ABS[key])
    w = min(w, abs(value)) if value - w < 0 else w
    return float(value - w), float(value + w)


def _absolute_asset_dirs(spec, model_path):
    base = os.path.dirname(os.path.abspath(str(model_path)))
    for attr in ('meshdir', 'texturedir'):
        current = getattr(spec, attr, None)
        if current is not None:
            setattr(spec, attr, os.path.normpath(os.path.join(base, current or '')) + os.sep)


def export(out_dir, model_path, params, robot='robot', gap=None, notes=None,
           floor_fraction=DR_FLOOR_FRACTION, interval_scale=DR_INTERVAL_SCALE, kp=None,
           kd=None, physics_dt=None):
    """Write the three export files into out_dir; return their paths (dict). physics_dt:
    the time step the MJCF gets (the one its replay was checked at; its armature is written
    for it, apply_to_spec), else the model's own."""
    os.makedirs(out_dir, exist_ok=True)
    spec = load_spec(model_path)
    if physics_dt is not None:
        spec.option.timestep = float(physics_dt)
    apply_to_spec(spec, params)
    _absolute_asset_dirs(spec, model_path)
    spec.compile()
    mjcf = os.path.join(out_dir, f'{robot}_identified.xml')
    write_text(mjcf, f'<!-- {robot}: identified by simreal_ros sim_bridge from {model_path}; '
               f'latency {params.latency_s:.6f} s is the custom numeric simreal_latency_s -->\n'
               + spec.to_xml())
    values = {}
    dr = {}
    for i, joint in enumerate(params.names):
        values[joint] = {}
        dr[joint] = {}
        for key in JOINT_KEYS:
            v = float(getattr(params, key)[i])
            h = float(params.half_width(key)[i])
            entry = {'value': v, 'units': UNITS[key]}
            if math.isfinite(h):
                entry['interval_95'] = [v - h, v + h]
            src = params.source.get(key)
            if src:
                entry['method'] = src[i]
            values[joint][key] = entry
            dr[joint][key] = list(dr_range(v, h, key, interval_scale, floor_fraction))
    lat_h = params.half_width('latency_s')
    latency = {'value': float(params.latency_s), 'units': 's'}
    if math.isfinite(lat_h):
        latency['interval_95'] = [params.latency_s - lat_h, params.latency_s + lat_h]
    doc = {'robot': robot, 'model': str(model_path), 'identified_model': mjcf,
           'joint_names': list(params.names), 'joints': values, 'latency_s': latency}
    if gap:
        doc['reality_gap'] = gap
    if notes:
        doc['notes'] = notes
    values_path = os.path.join(out_dir, 'identified_params.yaml')
    write_text(values_path, yaml.safe_dump(doc, sort_keys=False))
    dr_doc = {'robot': robot, 'distribution': 'uniform', 'operation': 'abs',
              'centred_on': 'identified estimates',
              'width': f'half-width = max({interval_scale:g} x 95 % interval half-width, '
                       f'{floor_fraction:g} x |value|, absolute floor {DR_FLOOR_ABS}), '
                       'shrunk to the value where the range would go below 0',
              'joints': dr,
              'latency_s': list(dr_range(params.latency_s, lat_h, 'latency_s', interval_scale,
                                         floor_fraction)),
              'note': DR_NOTE}
    dr_path = os.path.join(out_dir, 'domain_randomization.yaml')
    write_text(dr_path, yaml.safe_dump(dr_doc, sort_keys=False, width=99))
    paths = {'mjcf': mjcf, 'params': values_path, 'domain_randomization': dr_path}
    paths.update(export_training(out_dir, model_path, params, robot, kp, kd))
    return paths


def centre_errors(dr_doc, params):
    """Largest |centre - estimate| of a DR file against params (0 when centred)."""
    worst = 0.0
    for i, joint in enumerate(params.names):
        for key in JOINT_KEYS:
            lo, hi = dr_doc['joints'][joint][key]
            worst = max(worst, abs(0.5 * (lo + hi) - float(getattr(params, key)[i])))
    lo, hi = dr_doc['latency_s']
    return max(worst, abs(0.5 * (lo + hi) - params.latency_s))


ISAACLAB_HEADER = """# {robot}: identified actuator parameters, an Isaac Lab actuator config.
# Written by simreal_ros sim_bridge from {model}. Conventions (Isaac Lab >= 2.1 on Isaac
# Sim >= 5.0, where joint friction is an effort):
#   armature          kg*m^2     reflected rotor inertia added to the joint (MuJoCo armature)
#   friction          N*m        static (Coulomb) joint friction (MuJoCo frictionloss); on
#                                Isaac Sim 4.5 this field is a unitless coefficient instead:
#                                do not paste these values there
#   dynamic_friction  N*m        Coulomb friction while sliding (same value: one Coulomb level
#                                was identified)
#   viscous_friction  N*m*s/rad  viscous joint friction (MuJoCo damping)
#   stiffness/damping            the PD gains of the robot file (kp, kd), NOT joint friction
#   min_delay/max_delay          the command latency {latency_ms:.2f} ms as whole physics steps
#                                of sim dt {dt:g} s (floor and ceil of latency / dt); the
#                                delay applies to the targets, the PD feedback stays current
# Usage: ArticulationCfg(..., actuators=ACTUATORS); each joint is its own group so that
# every value is its own (regular expressions are the joint names, anchored).
from isaaclab.actuators import DelayedPDActuatorCfg

"""

LEGGED_GYM_HEADER = """# {robot}: identified actuator parameters, legged_gym style (Isaac Gym).
# Written by simreal_ros sim_bridge from {model}. Conventions:
#   DOF_ARMATURE   kg*m^2     per DOF, into dof_props['armature'] (LeggedRobot._process_dof_props)
#   DOF_FRICTION   N*m        Coulomb friction, into dof_props['friction'] (Isaac Gym's joint
#                             friction; MuJoCo frictionloss)
#   DOF_DAMPING    N*m*s/rad  viscous friction. With DOF_MODE_EFFORT (legged_gym computes the PD
#                             torques itself) dof_props['damping'] is not applied by the drive:
#                             add -DOF_DAMPING * dof_vel to the torques in _compute_torques
#   ACTION_DELAY_S s          command latency; ACTION_DELAY_PHYSICS_STEPS = round(latency /
#                             sim dt {dt:g} s): apply each new target that many physics
#                             steps after the policy produced it (a small FIFO of targets)
# Order: DOF_NAMES (match them against self.dof_names, never assume the order).

"""


def isaaclab_snippet(params, robot='robot', model='', kp=None, kd=None, dt=0.005):
    """Return the text of an Isaac Lab actuator configuration for the identified params."""
    lat = float(params.latency_s)
    lo, hi = int(math.floor(lat / dt + 1e-9)), int(math.ceil(lat / dt - 1e-9))
    lines = [ISAACLAB_HEADER.format(robot=robot, model=model, latency_ms=lat * 1e3, dt=dt),
             'ACTUATORS = {']
    for i, joint in enumerate(params.names):
        gains = ''
        if kp is not None and kd is not None:
            gains = f' stiffness={float(kp[i])!r}, damping={float(kd[i])!r},'
        fc, fv, arm = (float(params.frictionloss[i]), float(params.damping[i]),
                       float(params.armature[i]))
        lines.append(f"    {joint!r}: DelayedPDActuatorCfg(\n"
                     f"        joint_names_expr=[{('^' + joint + '$')!r}],{gains}\n"
                     f"        armature={arm:.6g}, friction={fc:.6g}, dynamic_friction={fc:.6g}, "
                     f"viscous_friction={fv:.6g},\n"
                     f"        min_delay={lo}, max_delay={hi}),")
    lines.append('}')
    return '\n'.join(lines) + '\n'


def legged_gym_snippet(params, robot='robot', model='', dt=0.005, policy_dt=0.02):
    """Return legged_gym-style parameter text (Python) for the identified params."""
    lat = float(params.latency_s)
    out = [LEGGED_GYM_HEADER.format(robot=robot, model=model, dt=dt),
           f'DOF_NAMES = {list(params.names)!r}',
           'DOF_ARMATURE = {' + ', '.join(f'{n!r}: {float(v):.6g}' for n, v in
                                          zip(params.names, params.armature)) + '}',
           'DOF_FRICTION = {' + ', '.join(f'{n!r}: {float(v):.6g}' for n, v in
                                          zip(params.names, params.frictionloss)) + '}',
           'DOF_DAMPING = {' + ', '.join(f'{n!r}: {float(v):.6g}' for n, v in
                                         zip(params.names, params.damping)) + '}',
           f'ACTION_DELAY_S = {lat:.6g}',
           f'ACTION_DELAY_PHYSICS_STEPS = {int(round(lat / dt))}   # sim dt {dt:g} s',
           f'ACTION_DELAY_POLICY_STEPS = {lat / policy_dt:.3f}   # policy dt {policy_dt:g} s '
           '(fraction: the delay is shorter than a policy step)']
    return '\n'.join(out) + '\n'


def export_training(out_dir, model_path, params, robot='robot', kp=None, kd=None, dt=0.005,
                    policy_dt=0.02):
    """Write isaaclab_actuators.py and legged_gym_params.py into out_dir; return the paths."""
    os.makedirs(out_dir, exist_ok=True)
    isaac = os.path.join(out_dir, 'isaaclab_actuators.py')
    write_text(isaac, isaaclab_snippet(params, robot, str(model_path), kp, kd, dt))
    gym = os.path.join(out_dir, 'legged_gym_params.py')
    write_text(gym, legged_gym_snippet(params, robot, str(model_path), dt, policy_dt))
    return {'isaaclab': isaac, 'legged_gym': gym}

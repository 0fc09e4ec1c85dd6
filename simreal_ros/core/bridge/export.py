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
  note mapping each entry to Isaac Lab and mjlab event terms.
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
  The values are MuJoCo's own, so they carry over unchanged.
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
           floor_fraction=DR_FLOOR_FRACTION, interval_scale=DR_INTERVAL_SCALE):
    """Write the three export files into out_dir; return their paths (dict)."""
    os.makedirs(out_dir, exist_ok=True)
    spec = load_spec(model_path)
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
    return {'mjcf': mjcf, 'params': values_path, 'domain_randomization': dr_path}


def centre_errors(dr_doc, params):
    """Largest |centre - estimate| of a DR file against params (0 when centred)."""
    worst = 0.0
    for i, joint in enumerate(params.names):
        for key in JOINT_KEYS:
            lo, hi = dr_doc['joints'][joint][key]
            worst = max(worst, abs(0.5 * (lo + hi) - float(getattr(params, key)[i])))
    lo, hi = dr_doc['latency_s']
    return max(worst, abs(0.5 * (lo + hi) - params.latency_s))

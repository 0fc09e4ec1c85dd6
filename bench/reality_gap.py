"""Reality gap before and after identification, on held-out data, against the plant's truth.

The MuJoCo SimPlant with hidden true actuator parameters (the config's sim_robot.plant, or
--truth) plays the real robot, driven directly (faster than real time, 500 Hz measurements):

1. closed form: the SysID experiments (friction sweeps, multi-sine inertia, latency) per joint
   with simreal_ros.core.sysid (skipped with --no-closed-form: refinement then starts from the
   nominal model, and refined_vs_closed_form is null);
2. refinement: every joint's damping, frictionloss, armature and the latency together, by
   trajectory matching on one whole-robot excitation (multi-sine band A);
3. evaluation on a held-out excitation (another band and amplitude, other phases): NRMSE of
   nominal, closed-form and refined models; noise floor estimated from the data.

    .venv/bin/python bench/reality_gap.py
    .venv/bin/python bench/reality_gap.py --make-truth /tmp/truth_a.yaml --seed 1
    .venv/bin/python bench/reality_gap.py --truth /tmp/truth_a.yaml

--make-truth writes a plant truth moving every parameter of the config's plant by +-30..50 %
(random sign and size from --seed) and exits. Export and HTML report go to --out.
The last line printed is a JSON summary.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import yaml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simreal_ros.core.bridge import BridgeSession, JointParams  # noqa: E402
from simreal_ros.core.bridge.excite import multisine_run, record_run  # noqa: E402
from simreal_ros.core.bridge.refine import refine  # noqa: E402
from simreal_ros.core.config import (ConfigError, load_node_params,  # noqa: E402
                                     robot_config_path)
from simreal_ros.core.plant import PlantTruth, SimPlant  # noqa: E402
from simreal_ros.core.sysid import KINDS, NominalModel  # noqa: E402
from simreal_ros.core.sysid.design import load_settings  # noqa: E402
from simreal_ros.core.sysid.runner import identify_joint  # noqa: E402


def plant_truth(config, names, truth_path):
    if truth_path:
        return PlantTruth.from_file(truth_path, len(names))
    sim = load_node_params(config, 'sim_robot')
    plant = {k[len('plant.'):]: v for k, v in sim.items() if k.startswith('plant.')}
    return PlantTruth.from_mapping(plant, len(names), source=f'{config}:sim_robot.plant')


def make_truth(base, seed, out):
    rng = np.random.default_rng(seed)
    n = len(base.coulomb_friction)

    def move(x):
        x = np.asarray(x, float)
        return x * (1 + rng.choice([-1, 1], x.shape) * rng.uniform(0.3, 0.5, x.shape))

    data = base.to_mapping()
    for key in ('coulomb_friction', 'viscous_damping', 'armature'):
        data[key] = [round(float(v), 5) for v in move(np.asarray(data[key]).reshape(n))]
    data['latency_s'] = round(float(move([base.latency_s])[0]), 6)
    with open(out, 'w') as f:
        yaml.safe_dump({'plant': data}, f, sort_keys=False)
    return data


def rel_errors(params, truth):
    out = {}
    for key, tkey in (('damping', 'viscous_damping'), ('frictionloss', 'coulomb_friction'),
                      ('armature', 'armature')):
        t = getattr(truth, tkey)
        out[key] = float(np.max(np.abs(getattr(params, key) - t) / t))
    out['latency_s'] = float(abs(params.latency_s - truth.latency_s) / truth.latency_s)
    return {k: round(v, 5) for k, v in out.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--robot', default='arm3', help='robot name or parameter file')
    ap.add_argument('--truth', default=None, help='plant truth YAML (sim_robot.plant format)')
    ap.add_argument('--make-truth', default=None, metavar='OUT',
                    help='write a truth moving every parameter by +-30..50 %% and exit')
    ap.add_argument('--seed', type=int, default=0, help='sensor noise / --make-truth seed')
    ap.add_argument('--no-closed-form', action='store_true',
                    help='refine from the nominal model instead of the SysID estimates')
    ap.add_argument('--id-duration', type=float, default=6.0)
    ap.add_argument('--eval-duration', type=float, default=8.0)
    ap.add_argument('--out', default='results/tmp/reality_gap', help='export/report folder')
    args = ap.parse_args(argv)
    wall = time.monotonic()
    try:
        config = robot_config_path(args.robot)
        bridge_params = load_node_params(config, 'sim_bridge')
        if 'model_path' not in bridge_params:
            raise ConfigError(f'{config}: section sim_bridge is missing; see '
                              'config/robots/arm3.yaml')
        session = BridgeSession.from_params(bridge_params, config.parent)
        names = session.names
        truth = plant_truth(config, names, args.truth)
        if args.make_truth:
            data = make_truth(truth, args.seed, args.make_truth)
            print(f'wrote {args.make_truth}: {data}')
            return 0
        sim = load_node_params(config, 'sim_robot')
        settings = None if args.no_closed_form else {k: load_settings(config, k)
                                                     for k in KINDS}
    except ConfigError as exc:
        print(f'reality_gap: {exc}', file=sys.stderr)
        return 2
    nominal_model = NominalModel(session.model_path, names)
    plant = SimPlant(session.model_path, names, session.replayer.dt, sim['kp'], sim['kd'],
                     truth=truth, seed=args.seed, initial_position=sim.get('initial_position'))
    truth_params = JointParams(names, truth.viscous_damping, truth.coulomb_friction,
                               truth.armature, truth.latency_s)

    # 1. Closed-form SysID estimates.
    failures = {}
    if settings is not None:
        fits = {}
        t0 = time.monotonic()
        for joint in names:
            res = identify_joint(plant, settings, nominal_model, joint)
            fits[joint] = res.fits
            if res.errors:
                failures[joint] = res.errors
        closed = JointParams.from_sysid(names, fits)
        print(f'closed form ({time.monotonic() - t0:.0f} s): {closed.to_mapping(False)}'
              + (f' FAILED {failures}' if failures else ''), flush=True)
    else:
        closed = None
    start = closed if closed is not None else session.nominal.copy()

    # 2. Excitations: identification (band A) and held-out (band B, other amplitude/phases).
    r = session.replayer.model().jnt_range
    _, dof = session.replayer.qadr, session.replayer.dof
    half = np.array([min(0.45, 0.3 * (r[j, 1] - r[j, 0]) / 2) for j in
                     [session.replayer.model().dof_jntid[d] for d in dof]])
    centre = np.zeros(len(names))
    sup = load_node_params(config, 'safety_supervisor')
    vlim = np.asarray(sup.get('velocity_limit', [np.inf] * len(names)), float)

    def run(amplitude, band, duration, seed):
        """Multi-sine inside 0.8 x the supervisor's velocity limit (as a deployment would be)."""
        sched = multisine_run(names, centre, amplitude, band, duration, nominal=nominal_model,
                              seed=seed)
        peak = np.max(np.abs(sched.velocity), axis=0)
        shrink = np.minimum(1.0, 0.8 * vlim / peak)
        if np.any(shrink < 1.0):
            sched = multisine_run(names, centre, amplitude * shrink, band, duration,
                                  nominal=nominal_model, seed=seed)
        return record_run(plant, sched)

    ident = run(half, (0.3, 2.5), args.id_duration, 101)
    held = run(0.7 * half, (0.8, 5.0), args.eval_duration, 202)

    # 3. Refinement.
    refined = refine(session.replayer, [ident], start, skip_s=session.skip_s,
                     cma_evaluations=48 if closed is not None else 240,
                     log=lambda m: print(m, flush=True))
    params = refined.params
    print(f'refined ({refined.wall_s:.0f} s, {refined.evaluations} rollouts): '
          f'{params.to_mapping()}', flush=True)

    # 4. Held-out evaluation.
    report = session.evaluate(held, params, name='held-out multi-sine')
    gaps = {'nominal': report.nominal, 'identified': report.identified}
    if closed is not None:
        gaps['closed_form'], sim_cf = session.gap(held, closed, 'closed_form')
        report.sims['closed_form'] = sim_cf
    gaps['truth'], _ = session.gap(held, truth_params, 'truth')
    for g in gaps.values():
        print(g.summary(), flush=True)
    paths = session.export(args.out, params, report, held)
    print(f'export: {paths}', flush=True)
    ident_v = report.identified.value
    floor = report.identified.noise_floor['overall']
    summary = {
        'bench': 'reality_gap', 'robot': str(config), 'truth': args.truth or 'config plant',
        'seed': args.seed, 'start': 'closed_form' if closed is not None else 'nominal',
        'nrmse_nominal': round(report.nominal.value, 6),
        'nrmse_closed_form': round(gaps['closed_form'].value, 6) if closed else None,
        'nrmse_identified': round(ident_v, 6),
        'nrmse_truth_params': round(gaps['truth'].value, 6),
        'noise_floor_nrmse': round(floor, 6),
        'identified_over_floor': round(ident_v / floor, 3),
        'reduction_x': round(report.nominal.value / ident_v, 1),
        'refined_vs_closed_form': (round(gaps['closed_form'].value / ident_v, 2) if closed
                                   else None),
        'shift_ms': {k: round(1e3 * g.shift_s, 1) for k, g in gaps.items()},
        'gate_passed': {k: g.passed for k, g in gaps.items()},
        'param_max_rel_error': {'identified': rel_errors(params, truth),
                                'closed_form': rel_errors(closed, truth) if closed else None},
        'sysid_failures': failures or None,
        'targets_met': {'identified_le_1.2x_floor': bool(ident_v <= 1.2 * floor),
                        'reduction_ge_5x': bool(report.nominal.value / ident_v >= 5)},
        'export': paths, 'wall_s': round(time.monotonic() - wall, 1)}
    print(json.dumps(summary))
    return 0


if __name__ == '__main__':
    sys.exit(main())

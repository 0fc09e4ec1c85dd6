"""Accuracy of the SysID estimators against the MuJoCo plant's hidden truth, and of the seeds.

For N seeds (sensor noise, and true parameters drawn around the robot config's plant when no
--truth is given), runs the friction, inertia and latency experiments on every joint of the
SimPlant directly (faster than real time, measurements at 500 Hz like sim_robot), and reports
per parameter the p95 relative error, the latency RMS error, how often the 95 % intervals cover
the truth, whether the estimates whose interval claims the goal miss it no more often than
calibrated intervals would and none by four standard deviations (`claims`), the robot time per
joint and per run (each joint's friction and first multi-sine, then the inertia extensions
within inertia_extend_budget_s as inertia_id queues them, then every joint's latency), the
limits used, and the
same errors for the seed baselines on the same data. --jobs runs seeds in parallel.

--draw says how far from the file's plant the truths are drawn (what a real robot's are):
wide (default): friction (Coulomb, viscous) and armature x 10^U(-0.5, 0.5), each joint on its
own, latency U(1, 15) ms (continuous: off the sample and physics grids), sensor noise x U(1, 3);
near: friction and armature x U(0.7, 1.3), latency U(2, 40) ms (a gantry robot U(2, 10) ms);
moved: every parameter 30-50 % off either way, latency U(1, 15) ms, noise x 2;
rllab-armature (G1 legs): unitree_rl_lab's actuator armatures, friction and latency as wide.

    .venv/bin/python bench/sysid_accuracy.py --seeds 20
    .venv/bin/python bench/sysid_accuracy.py --robot config/robots/arm3.yaml --truth my_plant.yaml

A floating-base robot (the G1) is identified hanging in its gantry: the base is lifted
`--gantry-lift` m (feet clear of the floor) and held (SimPlant.hang), gravity and the hanging
leg's coupling from its own MJCF. Every true plant steps at
0.5 ms at most (`--physics-dt`; at a robot file's 1-2 ms MuJoCo evaluates gravity half a step
behind the world the plant stands for).

    .venv/bin/python bench/sysid_accuracy.py --robot g1_12dof --seeds 3

--truth takes a YAML mapping in the format of the config's `sim_robot.plant` section (or a file
with that section). The last line printed is a JSON summary.
"""
import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from scipy import stats

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simreal_ros.core.config import (ConfigError, load_node_params,  # noqa: E402
                                     resolve_path, robot_config_path)
from simreal_ros.core.plant import PlantTruth, SimPlant, load_model  # noqa: E402
from simreal_ros.core.sysid import KINDS, NominalModel  # noqa: E402
from simreal_ros.core.sysid.design import NODE_OF, check_sample_rate, load_settings  # noqa: E402
from simreal_ros.core.sysid.records import result_documents  # noqa: E402
from simreal_ros.core.sysid.runner import identify_joints  # noqa: E402

PARAMS = {'coulomb_friction': ('friction', 0.02), 'viscous_damping': ('friction', 0.05),
          'armature': ('inertia', 0.05), 'effective_inertia': ('inertia', 0.05)}
LATENCY_RMS_TARGET = 0.5e-3
Z95 = 1.959964   # a 95 % interval's half-width in standard deviations
# The project's goals (issue 33): a fixed-base arm 1 / 3 / 3 % and 0.2 ms; a humanoid's legs
# in their gantry 2 / 5 / 5 % and 0.5 ms (the PARAMS targets above).
ARM_TARGETS = {'coulomb_friction': 0.01, 'viscous_damping': 0.03, 'armature': 0.03,
               'effective_inertia': 0.03}
ARM_LATENCY_RMS_TARGET = 0.2e-3
# The true plant steps at 0.5 ms at most: MuJoCo evaluates gravity at a step's start, half a
# step behind the world the plant stands for. On the G1's hanging hip (gravity changing ~20
# N*m per rad) the 2 ms of its robot file read as -4 to -9 % viscous friction, on the arm's
# shoulder pitch 1 ms as -1 to -2 % (outside the intervals).
TRUE_PHYSICS_DT = 0.0005
# Latency of the wide draws: continuous, so off the 2 ms sample and 0.5 ms physics grids.
WIDE_LATENCY = (0.001, 0.015)


def plant_section(config):
    params = load_node_params(config, 'sim_robot')
    plant = {k[len('plant.'):]: v for k, v in params.items() if k.startswith('plant.')}
    return params, plant


def draw_truth(base, rng, latency=(0.002, 0.040)):
    """The 'near' draw: friction and armature x U(0.7, 1.3) around the robot file's plant."""
    n = len(base.coulomb_friction)
    out = PlantTruth.from_mapping(base.to_mapping(), n)
    out.coulomb_friction = base.coulomb_friction * rng.uniform(0.7, 1.3, n)
    out.viscous_damping = base.viscous_damping * rng.uniform(0.7, 1.3, n)
    out.armature = base.armature * rng.uniform(0.7, 1.3, n)
    out.latency_s = float(rng.uniform(*latency))
    return out


def draw_wide(base, rng, latency=WIDE_LATENCY):
    """The 'wide' draw: what robots have, not what the file says.

    Friction (Coulomb, viscous) and armature x 10^U(-0.5, 0.5) (a decade around the file's
    plant), each joint (so each side) on its own; latency U(1, 15) ms, continuous (off the
    sample and physics grids); sensor noise (position, velocity, effort) x U(1, 3) each.
    """
    n = len(base.coulomb_friction)
    out = PlantTruth.from_mapping(base.to_mapping(), n)
    for key in ('coulomb_friction', 'viscous_damping', 'armature'):
        setattr(out, key, getattr(base, key) * 10.0 ** rng.uniform(-0.5, 0.5, n))
    out.latency_s = float(rng.uniform(*latency))
    for key in ('noise_position', 'noise_velocity', 'noise_effort'):
        setattr(out, key, getattr(base, key) * float(rng.uniform(1.0, 3.0)))
    return out


def draw_moved(base, rng, latency=WIDE_LATENCY):
    """The 'moved' draw: every parameter 30-50 % off the file's plant (either way, per joint),
    latency U(1, 15) ms off the sample grid, sensor noise doubled."""
    n = len(base.coulomb_friction)
    out = PlantTruth.from_mapping(base.to_mapping(), n)
    for key in ('coulomb_friction', 'viscous_damping', 'armature'):
        sign = rng.choice([-1.0, 1.0], n)
        setattr(out, key, getattr(base, key) * (1.0 + sign * rng.uniform(0.3, 0.5, n)))
    out.latency_s = float(rng.uniform(*latency))
    for key in ('noise_position', 'noise_velocity', 'noise_effort'):
        setattr(out, key, 2.0 * getattr(base, key))
    return out


# unitree's G1 actuator models (unitree_rl_lab's and BeyondMimic's G1 configurations, from
# the motors' rotor inertias and gear ratios): the hip pitch and yaw are 7520-14 motors, the
# hip roll and knee 7520-22, each ankle joint is driven by two 5020 motors.
RLLAB_G1_ARMATURE = {'hip_pitch': 0.010177520, 'hip_yaw': 0.010177520,
                     'hip_roll': 0.025101925, 'knee': 0.025101925,
                     'ankle_pitch': 0.00721945, 'ankle_roll': 0.00721945}


def rllab_armature(names):
    """Per joint the unitree_rl_lab armature of a G1 leg joint (ConfigError for another)."""
    out = []
    for name in names:
        kind = [k for k in RLLAB_G1_ARMATURE if k in name]
        if not kind:
            raise ConfigError(f'--draw rllab-armature: joint {name!r} is not a G1 leg joint '
                              f'({", ".join(RLLAB_G1_ARMATURE)})')
        out.append(RLLAB_G1_ARMATURE[kind[0]])
    return np.array(out)


def draw_rllab(base, rng, names, latency=WIDE_LATENCY):
    """The 'rllab-armature' draw: unitree_rl_lab's actuator armatures, friction drawn wide
    (per joint, so the two legs differ), latency U(1, 15) ms, the file's noise."""
    out = draw_wide(base, rng, latency)
    out.armature = rllab_armature(names)
    for key in ('noise_position', 'noise_velocity', 'noise_effort'):
        setattr(out, key, getattr(base, key))
    return out


DRAWS = ('wide', 'near', 'moved', 'rllab-armature')


def make_truth(draw, base, rng, names, gantry):
    """One seed's true plant from draw `draw` (one of DRAWS) around the file's `base`."""
    if draw == 'near':
        return draw_truth(base, rng, (0.002, 0.010) if gantry else (0.002, 0.040))
    if draw == 'wide':
        return draw_wide(base, rng)
    if draw == 'moved':
        return draw_moved(base, rng)
    return draw_rllab(base, rng, names)


def is_floating(model):
    import mujoco
    m = load_model(model)
    return bool(np.any(m.jnt_type == mujoco.mjtJoint.mjJNT_FREE))


def p95(values):
    values = [v for v in values if math.isfinite(v)]
    return float(np.percentile(values, 95)) if values else float('nan')


def claims(errors, halves, target):
    """What the estimates say of themselves against the goal `target` (relative).

    An estimate whose 95 % interval is within the goal (half-width over value <= target)
    claims the goal's precision; one whose interval is wider says it did not reach it. A 95 %
    interval misses its truth one time in twenty, so some claimed ones miss the goal: as many
    as calibrated intervals of their widths would (each 2 * P(Z > 1.96 * target / half-width)),
    up to that count's 95 % Poisson quantile, is what honest intervals give; more means
    intervals narrower than the errors (`claimed_precision_as_calibrated`). A wrong number
    that looks precise is a claimed one whose truth lies beyond twice its half-width as well
    as beyond the goal: about 4 standard deviations, which a calibrated interval does once in
    some 16,000.
    """
    claimed = [(e, h) for e, h in zip(errors, halves) if h <= target]
    expected = sum(2.0 * stats.norm.sf(Z95 * target / h) for _, h in claimed if h > 0)
    return {'said_imprecise': len(halves) - len(claimed),
            'claimed_precise': len(claimed),
            'claimed_precise_p95_rel_error': (round(p95([e for e, _ in claimed]), 5)
                                              if claimed else None),
            'claimed_precise_missed_goal': int(sum(e > target for e, _ in claimed)),
            'missed_goal_if_calibrated': round(float(expected), 2),
            'missed_goal_allowed': int(stats.poisson.ppf(0.95, expected)),
            'precise_looking_wrong': int(sum(e > target and e > 2 * h for e, h in claimed))}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--robot', default='arm3', help='robot name or parameter file')
    ap.add_argument('--truth', default=None, help='plant truth YAML (sim_robot.plant format)')
    ap.add_argument('--draw', choices=DRAWS, default='wide', help='how the true plant is '
                    'drawn around the robot file\'s (ignored with --truth): wide (default) '
                    'friction and armature x 10^U(-0.5, 0.5) per joint, latency U(1, 15) ms, '
                    'noise x U(1, 3); near x U(0.7, 1.3); moved every parameter 30-50 %% off, '
                    'noise x 2; rllab-armature the G1 legs\' unitree_rl_lab armatures, friction '
                    'as wide')
    ap.add_argument('--seeds', type=int, default=10)
    ap.add_argument('--first-seed', type=int, default=1000)
    ap.add_argument('--joints', nargs='*', default=None, help='joints (default: all)')
    ap.add_argument('--jobs', type=int, default=1, help='seeds run in this many processes at '
                    'once (the summary is the same; a seed takes ~1 min of one core per G1 leg '
                    'set)')
    ap.add_argument('--details', action='store_true', help='per seed and joint, the truth, '
                    'estimates and intervals in the JSON (key "details")')
    ap.add_argument('--gantry-lift', type=float, default=0.3, help='floating base: lift (m) '
                    'before the base is held')
    ap.add_argument('--physics-dt', type=float, default=None, help="the true plant's physics "
                    "step (default: the robot file's sim_robot.physics_dt, at most 0.5 ms: "
                    'see TRUE_PHYSICS_DT)')
    ap.add_argument('--sample-rate-hz', type=float, default=500.0, help='the rate the '
                    'joint states are read and the commands sent at (the robot\'s '
                    'joint_states rate; default 500, the G1\'s and arm3\'s)')
    ap.add_argument('--command-rate-hz', type=float, default=None, help="the experiments' "
                    "command rate (default: the robot file's command_rate_hz); a pair that "
                    "folds the held targets' ripple to 0 Hz is refused, as the nodes stop it")
    args = ap.parse_args(argv)
    try:
        config = robot_config_path(args.robot)
        sim, plant = plant_section(config)
        names = list(sim['joint_names'])
        model = resolve_path(sim['model_path'], 'model_path', relative_to=config.parent)
        settings = {k: load_settings(config, k) for k in KINDS}
        base = (PlantTruth.from_file(args.truth, len(names)) if args.truth
                else PlantTruth.from_mapping(plant, len(names), source=f'{config}:plant'))
        if args.draw == 'rllab-armature' and not args.truth:
            rllab_armature(names)
        for kind in KINDS:   # as the nodes stop on the robot (design.check_sample_rate)
            if args.command_rate_hz:
                settings[kind].command_rate_hz = args.command_rate_hz
            problem = check_sample_rate(settings[kind], args.sample_rate_hz, NODE_OF[kind])
            if problem:
                raise ConfigError(f'{config}: {problem}')
    except ConfigError as exc:
        print(f'sysid_accuracy: {exc}', file=sys.stderr)
        return 2
    joints = [j for arg in (args.joints or names) for j in arg.split(',') if j]
    unknown = [j for j in joints if j not in names]
    if unknown:
        sys.exit(f'--joints: {unknown} not in {config} (its joints: {names})')
    gantry = is_floating(model)
    physics_dt = args.physics_dt or float(sim.get('physics_dt', 0.001))
    if not args.physics_dt:
        physics_dt = min(physics_dt, TRUE_PHYSICS_DT)
    ctx = {'model': model, 'names': names, 'sim': sim, 'settings': settings, 'base': base,
           'truth': args.truth, 'draw': args.draw, 'gantry': gantry, 'physics_dt': physics_dt,
           'joints': joints, 'lift': args.gantry_lift, 'robot': args.robot,
           'sample_rate_hz': args.sample_rate_hz}
    wall = time.monotonic()
    seeds = [args.first_seed + s for s in range(args.seeds)]
    if args.jobs > 1 and len(seeds) > 1:
        # One seed per process (a seed's joints run in order on its own plant); the results
        # are merged in seed order, so the summary does not depend on --jobs.
        with ProcessPoolExecutor(max_workers=min(args.jobs, len(seeds))) as pool:
            runs = list(pool.map(_run_seed, [ctx] * len(seeds), seeds))
    else:
        runs = [_run_seed(ctx, seed) for seed in seeds]
    acc = _merge(runs)
    errors, base_errors, covered = acc['errors'], acc['base_errors'], acc['covered']
    half, share = acc['half'], acc['share']
    lat_err, lat_base_err = acc['lat_err'], acc['lat_base_err']
    failures, robot_time, limit_max = acc['failures'], acc['robot_time'], acc['limit_max']
    details, per_seed, extended = acc['details'], acc['per_seed'], acc['extended']
    skipped = acc['skipped']
    touched = acc['touched']
    summary = {'bench': 'sysid_accuracy', 'robot': str(config), 'seeds': args.seeds,
               'gantry': bool(gantry), 'physics_dt': physics_dt,
               'sample_rate_hz': args.sample_rate_hz,
               'command_rate_hz': settings['friction'].command_rate_hz,
               'joints': joints, 'truth': args.truth or 'drawn around the config plant',
               'draw': None if args.truth else args.draw,
               'samples_per_parameter': len(lat_err), 'parameters': {}, 'failures': len(failures),
               'wall_s': round(time.monotonic() - wall, 1)}
    lat_target = LATENCY_RMS_TARGET if gantry else ARM_LATENCY_RMS_TARGET
    for p, (_, target) in PARAMS.items():
        target = target if gantry else ARM_TARGETS[p]
        est_p95 = p95(errors[p])
        base_p95 = p95(base_errors[p])
        summary['parameters'][p] = {
            'p95_rel_error': round(est_p95, 5), 'target': target,
            'coverage_95': round(float(np.mean(covered[p])), 3),
            'baseline_p95_rel_error': round(base_p95, 5),
            'improvement_over_baseline': round(base_p95 / est_p95, 1) if est_p95 > 0 else None,
            'pass': bool(est_p95 <= target), **claims(errors[p], half[p], target)}
        # Why the wide ones are wide: the parameter's share of the torque its experiment
        # measures (records.precision_note), for the results that said they missed the goal
        # and for those that claimed it; and how many of the first said why in words.
        shares = {'said_imprecise': [s_ for (s_, _), h in zip(share[p], half[p])
                                     if h > target and s_ is not None],
                  'claimed_precise': [s_ for (s_, _), h in zip(share[p], half[p])
                                      if h <= target and s_ is not None]}
        if shares['said_imprecise'] or shares['claimed_precise']:
            summary['parameters'][p]['signal_share_median'] = {
                k: round(float(np.median(v)), 4) if v else None for k, v in shares.items()}
            summary['parameters'][p]['said_imprecise_with_reason'] = int(sum(
                w for (_, w), h in zip(share[p], half[p]) if h > target))
    finite = [e for e in lat_err if math.isfinite(e)]
    rms = float(np.sqrt(np.mean(np.square(finite)))) if finite else float('nan')
    base_fin = [e for e in lat_base_err if math.isfinite(e)]
    base_rms = float(np.sqrt(np.mean(np.square(base_fin)))) if base_fin else float('nan')
    summary['parameters']['latency'] = {
        'rms_error_ms': round(rms * 1e3, 4), 'max_abs_error_ms': round(max(map(abs, finite),
                                                                           default=math.nan)
                                                                       * 1e3, 4),
        'target_rms_ms': lat_target * 1e3,
        'coverage_95': round(float(np.mean(covered['latency'])), 3),
        'baseline_rms_error_ms': round(base_rms * 1e3, 3),
        'improvement_over_baseline': round(base_rms / rms, 1) if rms > 0 else None,
        'pass': bool(rms <= lat_target and len(finite) == len(lat_err))}
    coverage = min(v['coverage_95'] for v in summary['parameters'].values())
    summary['coverage_min'] = coverage
    summary['robot_time_per_joint_s'] = round(max(robot_time), 2)
    # All the joints of one seed's robot (issue 33: the G1's 12 legs in 10 min), and how many
    # joints ran an inertia extension (armature_goal) to get there.
    summary['robot_time_per_run_s'] = round(max(per_seed.values()), 1)
    summary['inertia_extensions'] = {'joints': extended, 'of': len(robot_time),
                                     'skipped_for_budget': skipped,
                                     'budget_s': settings['inertia'].inertia_extend_budget_s}
    # The robot touching itself (a hanging leg's knee on the other's) is a run no owner
    # wants on the real machine, whatever its estimates.
    summary['self_contact'] = {'runs': len(touched),
                               'seconds': round(sum(t['seconds'] for t in touched), 4),
                               'examples': touched[:5]}
    summary['limits_used_fraction'] = {k: (round(v, 3) if isinstance(v, float) else v)
                                       for k, v in limit_max.items()}
    ratios = [v['improvement_over_baseline'] for v in summary['parameters'].values()]
    summary['targets_met'] = {
        'accuracy': all(v['pass'] for v in summary['parameters'].values()),
        'no_precise_looking_wrong_number': all(
            v.get('precise_looking_wrong', 0) == 0 for v in summary['parameters'].values()),
        'claimed_precision_as_calibrated': all(
            v['claimed_precise_missed_goal'] <= v['missed_goal_allowed']
            for v in summary['parameters'].values() if 'missed_goal_allowed' in v),
        'coverage_ge_90pct': coverage >= 0.9,
        'robot_time_le_60s_per_joint': max(robot_time) <= 60.0,
        # issue 33: a gantry session's 12 legs in 10 minutes of robot time
        'robot_time_le_10min_per_run': summary['robot_time_per_run_s'] <= 600.0,
        'no_self_contact': not touched,
        'baseline_5x': all(r is not None and r >= 5 for r in ratios),
        'within_limits': (limit_max.get('position_inside', False)
                          and all(limit_max.get(k, 2.0) <= 1.0
                                  for k in ('torque', 'velocity', 'target_rate')))}
    if failures:
        summary['failure_examples'] = failures[:5]
    if args.details:
        summary['details'] = details
    print(json.dumps(summary))
    return 0


def _run_seed(ctx, seed):
    """One seed's true plant, every joint identified on it; the lists main() summarises."""
    model, names, sim, settings = ctx['model'], ctx['names'], ctx['sim'], ctx['settings']
    base, gantry, physics_dt, joints = ctx['base'], ctx['gantry'], ctx['physics_dt'], ctx['joints']
    nominal = NominalModel(model, names)
    errors = {p: [] for p in PARAMS}
    base_errors = {p: [] for p in PARAMS}
    covered = {p: [] for p in list(PARAMS) + ['latency']}
    half = {p: [] for p in PARAMS}   # each estimate's 95 % half-width over its value
    share = {p: [] for p in PARAMS}  # (signal_share, said why) of each result
    lat_err, lat_base_err = [], []
    failures, robot_time, limit_max, details = [], [], {}, []
    per_seed, extended = {}, 0     # robot time of each seed's run; joints given an extension
    skipped = 0                    # joints whose extension inertia_extend_budget_s did not reach
    touched = []     # (seed, joint, seconds, pairs): the robot touched itself in a run
    rng = np.random.default_rng(seed)
    truth = base if ctx['truth'] else make_truth(ctx['draw'], base, rng, names, gantry)
    plant = SimPlant(model, names, physics_dt, sim['kp'], sim['kd'],
                     truth=truth, seed=seed, initial_position=sim.get('initial_position'),
                     fixed_base_lift=ctx['lift'] if gantry else None)
    steps = [plant.self_contact_steps]

    def after(joint, kind):
        # The robot touching itself during this joint's experiment (a hanging leg's knee
        # on the other's), counted per recording.
        if plant.self_contact_steps > steps[0]:
            touched.append({'seed': seed, 'joint': joint, 'experiment': kind,
                            'seconds': round((plant.self_contact_steps - steps[0])
                                             * physics_dt, 4),
                            'pairs': sorted(map(list, plant.self_contact_pairs))})
            plant.self_contact_pairs.clear()
        steps[0] = plant.self_contact_steps

    # As the nodes run: every joint's friction and first multi-sine, the extensions
    # (inertia_extend_budget_s), every joint's latency.
    results = identify_joints(plant, settings, nominal, joints, after=after,
                              sample_rate_hz=ctx['sample_rate_hz'])
    for joint in joints:
        i = names.index(joint)
        res = results[joint]
        robot_time.append(sum(res.robot_time.values()))
        per_seed[seed] = per_seed.get(seed, 0.0) + robot_time[-1]
        extended += bool(res.extended.get('inertia', {}).get('robot_time_s'))
        skipped += bool(res.extended.get('inertia', {}).get('skipped'))
        for kind, use in res.limits.items():
            for key, value in use.items():
                if key == 'position_inside':
                    limit_max[key] = limit_max.get(key, True) and value
                else:
                    limit_max[key] = max(limit_max.get(key, 0.0), value)
        for kind, msg in res.errors.items():
            failures.append({'seed': seed, 'joint': joint, 'kind': kind, 'error': msg})
        link = nominal.mass_diagonal(settings['inertia'].hold_position)[i]
        true = {'coulomb_friction': truth.coulomb_friction[i],
                'viscous_damping': truth.viscous_damping[i],
                'armature': truth.armature[i],
                'effective_inertia': truth.armature[i] + link}
        # what each result says of itself: its share of the torque, why it is wide
        said = {d['parameter']: d for f in res.fits.values()
                for d in result_documents(ctx['robot'], f, '')}
        for p, (kind, _) in PARAMS.items():
            fit = res.fits.get(kind)
            share[p].append((said.get(p, {}).get('signal_share'),
                             'precision' in said.get(p, {})))
            if fit is None:
                errors[p].append(float('inf'))
                covered[p].append(False)
                half[p].append(float('inf'))
            else:
                est = fit.estimates[p]
                errors[p].append(abs(est.value - true[p]) / true[p])
                covered[p].append(est.covers(true[p]))
                half[p].append((est.high - est.low) / 2 / abs(est.value))
            if kind in res.baselines:
                base_errors[p].append(abs(res.baselines[kind][p] - true[p]) / true[p])
        fit = res.fits.get('latency')
        if fit is None:
            lat_err.append(float('inf'))
            covered['latency'].append(False)
        else:
            est = fit.estimates['latency']
            lat_err.append(est.value - truth.latency_s)
            covered['latency'].append(est.covers(truth.latency_s))
        if 'latency' in res.baselines:
            lat_base_err.append(res.baselines['latency']['latency'] - truth.latency_s)
        lat = res.fits.get('latency')
        details.append(_detail(seed, joint, true, truth.latency_s, res))
        print(f'seed {seed} {joint:>15}: Fc {true["coulomb_friction"]:.3f} -> '
              f'{_v(res, "friction", "coulomb_friction")}, Fv '
              f'{true["viscous_damping"]:.3f} -> {_v(res, "friction", "viscous_damping")}, '
              f'armature {true["armature"]:.4f} -> {_v(res, "inertia", "armature")}, '
              f'latency {truth.latency_s * 1e3:.2f} ms -> '
              f'{lat.value("latency") * 1e3 if lat else float("nan"):.2f} ms'
              + (f'  FAILED {sorted(res.errors)}' if res.errors else '')
              + (f'  TOUCHED ITSELF {touched[-1]["pairs"]}'
                 if touched and touched[-1]['joint'] == joint
                 and touched[-1]['seed'] == seed else ''), flush=True)
    return {'errors': errors, 'base_errors': base_errors, 'covered': covered, 'half': half,
            'share': share, 'lat_err': lat_err, 'lat_base_err': lat_base_err,
            'failures': failures, 'robot_time': robot_time, 'limit_max': limit_max,
            'details': details, 'per_seed': per_seed, 'extended': extended, 'skipped': skipped,
            'touched': touched}


def _merge(runs):
    """The seeds' lists end to end (in seed order), the limits' maxima, the counts summed."""
    out = {'limit_max': {}, 'per_seed': {}, 'extended': 0, 'skipped': 0}
    for run in runs:
        for key, value in run.items():
            if key == 'limit_max':
                for k, v in value.items():
                    out[key][k] = ((out[key].get(k, True) and v) if k == 'position_inside'
                                   else max(out[key].get(k, 0.0), v))
            elif key == 'per_seed':
                out[key].update(value)
            elif key in ('extended', 'skipped'):
                out[key] += value
            elif isinstance(value, dict):
                for k, v in value.items():
                    out.setdefault(key, {}).setdefault(k, []).extend(v)
            else:
                out.setdefault(key, []).extend(value)
    return out


def _detail(seed, joint, true, latency, res):
    row = {'seed': seed, 'joint': joint, 'true': {k: float(v) for k, v in true.items()},
           'true_latency': latency, 'errors': sorted(res.errors)}
    for kind, fit in res.fits.items():
        for p, e in fit.estimates.items():
            row[p] = [e.value, e.low, e.high]
        if kind == 'friction':
            row['misfit_ratio'] = fit.notes['misfit']['ratio']
            row['friction_std_hac'] = fit.notes.get('std_hac')
            row['friction_std_speeds'] = fit.notes.get('std_speeds')
        if kind == 'inertia':
            if 'inertia' in res.extended:
                row['extension'] = res.extended['inertia']
            row['armature_std_noise'] = fit.notes['armature_std_noise']
            row['armature_std_filter'] = fit.notes['armature_std_filter']
    return row


def _v(res, kind, param):
    fit = res.fits.get(kind)
    if fit is None:
        return 'failed'
    e = fit.estimates[param]
    return f'{e.value:.4f} [{e.low:.4f}, {e.high:.4f}]'


if __name__ == '__main__':
    sys.exit(main())

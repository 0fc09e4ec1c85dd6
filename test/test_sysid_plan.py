"""`simreal sysid plan`: the G1's gantry SysID fits its limits and ten minutes of robot time,
and a robot file whose experiments would leave the SysID limits is refused before any motion."""
import json
import os

import pytest

from conftest import REPO
from simreal_ros.client import cli

G1 = os.path.join(REPO, 'config', 'robots', 'g1_12dof.yaml')


def test_g1_legs_plan_inside_the_limits_within_ten_minutes(capsys):
    assert cli.main(['sysid', 'plan', '--robot', G1, '--json']) == 0
    plan = json.loads(capsys.readouterr().out)
    rows = plan['experiments']
    assert {r['kind'] for r in rows} == {'friction', 'inertia', 'latency'}
    assert len({r['joint'] for r in rows}) == 12
    assert all(r['violations'] == [] for r in rows), [r for r in rows if r['violations']]
    assert all(r['peak_speed'] <= r['velocity_limit'] for r in rows)
    assert all(r['peak_torque'] < r['torque_limit'] for r in rows)
    assert 0 < plan['total_s'] <= 600.0
    assert abs(plan['total_s'] - sum(r['duration_s'] for r in rows)) < 0.5
    # ... with every extension its budget allows (the widest armature intervals first).
    assert 0 < plan['extension_budget_s'] < plan['extensions_s']
    assert plan['extensions_max_s'] == pytest.approx(plan['extension_budget_s'], abs=0.05)
    assert plan['total_s'] + plan['extensions_max_s'] <= 600.0
    # Gravity of the hanging leg from the MJCF (contacts off, base held): the hip pitch
    # carries the leg, the ankle roll almost nothing.
    peak = {(r['kind'], r['joint']): r['peak_torque'] for r in rows}
    assert peak[('friction', 'left_hip_pitch_joint')] > 20 * peak[('friction',
                                                                   'left_ankle_roll_joint')]


def test_a_plan_outside_the_limits_exits_1_and_names_it(tmp_path, capsys):
    text = open(G1).read()
    # The knee's SysID torque limit far below what holding the hanging shank takes.
    old = 'torque_limit: [40.0, 60.0, 40.0, 60.0, 20.0, 20.0, 40.0, 60.0, 40.0, 60.0, 20.0, 20.0]'
    assert old in text
    bad = tmp_path / 'g1_bad.yaml'
    bad.write_text(text.replace(old, old.replace('[40.0, 60.0, 40.0, 60.0', '[40.0, 60.0, '
                                                 '40.0, 0.5'), 1))
    assert cli.main(['sysid', 'plan', '--robot', str(bad)]) == 1
    out = capsys.readouterr()
    assert 'OUTSIDE' in out.out and 'left_knee_joint' in out.out
    assert 'do not run them' in out.err


def test_training_exports_carry_every_joint_value_and_the_delay_in_steps(tmp_path):
    """isaaclab_actuators.py and legged_gym_params.py: valid Python, each joint's identified
    armature, Coulomb and viscous friction, the PD gains kept apart from joint friction, the
    latency as floor/ceil physics steps."""
    import ast
    import numpy as np
    from simreal_ros.core.bridge.export import export_training
    from simreal_ros.core.bridge.params import JointParams
    names = ['left_knee_joint', 'left_ankle_roll_joint']
    p = JointParams(names, damping=np.array([0.61, 0.2]), frictionloss=np.array([0.9, 0.31]),
                    armature=np.array([0.035, 0.012]), latency_s=0.0063)
    paths = export_training(str(tmp_path), 'g1.xml', p, 'g1_12dof', kp=[150.0, 40.0],
                            kd=[4.0, 2.0], dt=0.005)
    isaac = open(paths['isaaclab']).read()
    tree = ast.parse(isaac)
    calls = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, 'id', '') == 'DelayedPDActuatorCfg':
            kw = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
            calls[kw['joint_names_expr'][0]] = kw
    knee = calls['^left_knee_joint$']
    assert (knee['armature'], knee['friction'], knee['viscous_friction']) == (0.035, 0.9, 0.61)
    assert (knee['stiffness'], knee['damping']) == (150.0, 4.0)    # PD gains, not friction
    assert (knee['min_delay'], knee['max_delay']) == (1, 2)         # 6.3 ms at 5 ms steps
    assert 'N*m*s/rad' in isaac and 'Isaac Sim 4.5' in isaac
    gym = {}
    exec(compile(open(paths['legged_gym']).read(), 'legged_gym_params.py', 'exec'), gym)
    assert gym['DOF_FRICTION'] == {'left_knee_joint': 0.9, 'left_ankle_roll_joint': 0.31}
    assert gym['DOF_DAMPING']['left_ankle_roll_joint'] == 0.2
    assert gym['DOF_ARMATURE']['left_knee_joint'] == 0.035
    assert gym['ACTION_DELAY_PHYSICS_STEPS'] == 1 and gym['ACTION_DELAY_S'] == 0.0063


def test_the_g1_hangs_on_a_fixed_base_feeling_gravity_and_touching_nothing():
    """fixed_base_model: the base neither falls nor moves, no body touches the hanging legs
    (a jointless base would collide with its children), and a limp leg swings down under
    gravity (SimPlant.hang resets a free base each step, so the legs felt none)."""
    import numpy as np
    from simreal_ros.core.config import load_node_params, resolve_path
    from simreal_ros.core.plant import SimPlant
    sim = load_node_params(G1, 'sim_robot')
    model = resolve_path(sim['model_path'], 'model_path')
    names = list(sim['joint_names'])
    plant = SimPlant(model, names, 0.002, [0.0] * 12, [0.0] * 12, fixed_base_lift=0.3)
    assert not plant.floating_base
    q = np.array([-0.6, 0.0, 0.0, 0.6, -0.2, 0.0, -0.1, 0.0, 0.0, 0.6, -0.2, 0.0])
    plant.data.qpos[plant.qadr] = q
    import mujoco
    mujoco.mj_forward(plant.model, plant.data)
    assert plant.data.ncon == 0, 'the hanging legs touch something'
    plant.step(150)                           # 0.3 s limp (no command: damped by kd = 0)
    moved = plant.measure(with_noise=False).position - q
    assert moved[0] > 0.1, moved              # the raised left thigh falls back under gravity


def test_every_planned_sweep_keeps_the_robot_clear_of_itself():
    """The friction and multi-sine ranges end 3 cm before two of the robot's own bodies would
    touch, and further by how far the joint runs past its target: the PD's lag at the
    acceleration limit (inertia * acceleration / kp). The G1's hanging hip roll (0.66 kg*m^2
    on kp 100) overshot its sweep's end by 0.07-0.11 rad and put one knee on the other for
    0.11 s a run. On the frictionless plant (the most overshoot) hanging in its gantry,
    neither hip roll's friction sweeps nor multi-sine touch anything, for the file's hold
    (legs splayed 0.1 rad) and for legs held straight down."""
    import dataclasses

    import numpy as np
    from simreal_ros.core.config import load_node_params, resolve_path
    from simreal_ros.core.plant import SimPlant
    from simreal_ros.core.sysid import NominalModel
    from simreal_ros.core.sysid.design import design_for, dynamic_lag, load_settings
    from simreal_ros.core.sysid.runner import record
    sim = load_node_params(G1, 'sim_robot')
    model = resolve_path(sim['model_path'], 'model_path')
    names = list(sim['joint_names'])
    nominal = NominalModel(model, names)
    i = names.index('left_hip_roll_joint')
    for kind in ('friction', 'inertia'):
        splayed = load_settings(G1, kind)
        straight = dataclasses.replace(splayed, hold_position=splayed.hold_position.copy())
        straight.hold_position[[i, names.index('right_hip_roll_joint')]] = 0.0
        for settings in (splayed, straight):
            lo, hi = nominal.clear_range(i, settings.hold_position, -0.42, 0.42)
            assert -0.42 < lo < -0.1 and abs(hi - 0.42) < 1e-9, (lo, hi)   # ends at the knee
            lag = dynamic_lag(settings, i, nominal)
            assert lag > 0.1
            plant = SimPlant(model, names, 0.0005, sim['kp'], sim['kd'],
                             initial_position=settings.hold_position, fixed_base_lift=0.3)
            for joint in ('left_hip_roll_joint', 'right_hip_roll_joint'):
                exp = design_for(kind, joint, settings, nominal,
                                 plant.measure(with_noise=False).position)
                if joint == 'left_hip_roll_joint':
                    assert np.min(exp.position[:, i]) >= lo + lag - 1e-9
                record(plant, exp)
                assert plant.self_contact_steps == 0, (
                    kind, joint, settings.hold_position[i], plant.self_contact_pairs)


def test_a_hold_within_the_pd_lag_of_a_contact_is_refused_naming_what_to_change():
    """At 60 rad/s^2 the hanging hip roll's PD lag and overshoot (0.66 rad) reach past where
    the knees meet (0.31 rad inward with the legs straight down): no window is left, and the
    design refuses before any motion, naming hold_position and acceleration_limit."""
    import dataclasses

    import numpy as np
    from simreal_ros.core.config import ConfigError, load_node_params, resolve_path
    from simreal_ros.core.sysid import NominalModel
    from simreal_ros.core.sysid.design import design_for, load_settings
    sim = load_node_params(G1, 'sim_robot')
    names = list(sim['joint_names'])
    nominal = NominalModel(resolve_path(sim['model_path'], 'model_path'), names)
    settings = load_settings(G1, 'friction')
    i, j = names.index('left_hip_roll_joint'), names.index('right_hip_roll_joint')
    straight = settings.hold_position.copy()
    straight[[i, j]] = 0.0
    fast = settings.acceleration_limit.copy()
    fast[i] = 60.0
    bad = dataclasses.replace(settings, hold_position=straight, acceleration_limit=fast)
    with pytest.raises(ConfigError, match='left_hip_roll_joint.*hold_position.*'
                                          'acceleration_limit'):
        design_for('friction', 'left_hip_roll_joint', bad, nominal, straight)
    # the same joint at the file's 20 rad/s^2 keeps a window, the other joints are untouched
    ok = dataclasses.replace(settings, hold_position=straight)
    assert np.ptp(design_for('friction', 'left_hip_roll_joint', ok, nominal,
                             straight).position[:, i]) > 0.1
    design_for('friction', 'left_knee_joint', bad, nominal, straight)


def test_the_hanging_hip_pitch_friction_is_not_biased_by_its_speed_ripple():
    """The hip pitch carries the hanging leg: its gravity speeds the sweep up and slows it
    down, and the lightly damped PD rings, so no sweep is at exactly constant speed. The
    friction fit takes the joint's armature * acceleration out (a column of its own); without
    it the viscous friction came out 34 % low."""
    from simreal_ros.core.config import load_node_params, resolve_path
    from simreal_ros.core.plant import PlantTruth, SimPlant
    from simreal_ros.core.sysid import NominalModel
    from simreal_ros.core.sysid.design import load_settings
    from simreal_ros.core.sysid.runner import identify_joint
    sim = load_node_params(G1, 'sim_robot')
    model = resolve_path(sim['model_path'], 'model_path')
    names = list(sim['joint_names'])
    plant = {k[len('plant.'):]: v for k, v in sim.items() if k.startswith('plant.')}
    truth = PlantTruth.from_mapping(plant, len(names))
    settings = {k: load_settings(G1, k) for k in ('friction', 'inertia', 'latency')}
    sp = SimPlant(model, names, 0.0005, sim['kp'], sim['kd'], truth=truth, seed=4,
                  initial_position=settings['friction'].hold_position, fixed_base_lift=0.3)
    joint = 'left_hip_pitch_joint'
    i = names.index(joint)
    res = identify_joint(sp, settings, NominalModel(model, names), joint, kinds=('friction',))
    fit = res.fits['friction']
    fc, fv = fit.value('coulomb_friction'), fit.value('viscous_damping')
    assert abs(fc / truth.coulomb_friction[i] - 1) < 0.02, fc
    assert abs(fv / truth.viscous_damping[i] - 1) < 0.05, fv
    assert not fit.notes['misfit']['flagged']


def _hip_latency_fit(latency_s, seed=4, noise=True, draw_seed=None):
    """Identify the hanging G1 hip pitch's latency with its true joint parameters given.

    draw_seed: the true plant of bench/sysid_accuracy.py's wide draw of that seed (else the
    file's plant); noise False turns the sensor noise off. Returns (fit, true latency)."""
    import importlib.util
    import numpy as np
    from simreal_ros.core.config import load_node_params, resolve_path
    from simreal_ros.core.plant import PlantTruth, SimPlant
    from simreal_ros.core.sysid import NominalModel, estimate_latency
    from simreal_ros.core.sysid.design import design_for, load_settings
    from simreal_ros.core.sysid.runner import record
    sim = load_node_params(G1, 'sim_robot')
    model = resolve_path(sim['model_path'], 'model_path')
    names = list(sim['joint_names'])
    plant = {k[len('plant.'):]: v for k, v in sim.items() if k.startswith('plant.')}
    truth = PlantTruth.from_mapping(plant, len(names))
    if draw_seed is not None:
        spec = importlib.util.spec_from_file_location(
            'sysid_accuracy_bench', os.path.join(REPO, 'bench', 'sysid_accuracy.py'))
        bench = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bench)
        truth = bench.draw_wide(truth, np.random.default_rng(draw_seed))
    if latency_s is not None:
        truth.latency_s = latency_s
    if not noise:
        truth.noise_position = truth.noise_velocity = truth.noise_effort = 0.0
    s = load_settings(G1, 'latency')
    # A drawn truth starts where the bench's plant does (the file's initial pose).
    start = s.hold_position if draw_seed is None else sim.get('initial_position')
    sp = SimPlant(model, names, 0.0005, sim['kp'], sim['kd'], truth=truth, seed=seed,
                  initial_position=start, fixed_base_lift=0.3)
    nominal = NominalModel(model, names)
    joint = 'left_hip_pitch_joint'
    i = names.index(joint)
    exp = design_for('latency', joint, s, nominal, sp.measure(with_noise=False).position)
    rec = record(sp, exp)
    params = {'armature': truth.armature, 'viscous_damping': truth.viscous_damping,
              'coulomb_friction': truth.coulomb_friction}
    fit = estimate_latency(rec, exp, nominal, params, s.kp, s.kd, sp.dt, s.max_latency_s,
                           s.torque_limit[i])
    return fit, truth.latency_s


def test_the_hanging_hip_latency_is_not_read_late_by_a_hard_stiction_model():
    """MuJoCo resolves dry friction as a soft constraint: a sticking joint's speed decays over
    a few 0.5 ms steps. The latency fit's joint simulation does the same; with a hard
    stick/slip step it read the hip pitch's latency 0.23 ms late with the true parameters
    (now 0.12 ms with the file's sensor noise, 0.04 ms without: the tests below)."""
    fit, true = _hip_latency_fit(0.0027)
    assert abs(fit.value('latency') - true) < 0.00018, fit.value('latency')


def test_the_hip_latency_is_not_read_late_by_a_smeared_coupling_torque():
    """The other joints' accelerations (their coupling torque on the hip) are differentiated
    raw: low-passed at 40 Hz they smeared the steps the hip's own dry friction puts into them
    and, with the sensors' noise off, the latency read 0.13 ms late (seed 1000's wide-draw
    truth; 0.04 ms now, as without any friction)."""
    fit, true = _hip_latency_fit(None, seed=1000, noise=False, draw_seed=1000)
    assert abs(fit.value('latency') - true) < 0.00008, (fit.value('latency'), true)


def test_the_hip_latency_interval_counts_the_noise_of_the_coupling_torque():
    """The one-joint simulation takes the other joints' noisy motion as its input; through
    the hip's dry friction that noise moves the delay (late) beyond the output-error
    interval. The interval adds how far the delay moves with that noise added again and with
    the coupling low-passed, both measured on the recording, and the delay stays within
    0.25 ms of the truth (goal: 0.5 ms RMS). Given the true joint parameters, as here, the
    interval still misses some late reads: on seeds 1000-1005 of the wide draw, 2 of 6
    (+0.13 ms against +-0.12 ms, +0.18 against +-0.15), with or without these terms. With the
    identified parameters (the bench) their uncertainty widens it: coverage 0.98-1.0."""
    import math
    for seed in (1000, 1001, 1002):
        fit, true = _hip_latency_fit(None, seed=seed, draw_seed=seed)
        est, notes = fit.estimates['latency'], fit.notes
        assert abs(est.value - true) < 0.25e-3, (seed, est.value, true)
        assert notes['std_input_noise'] > 0 and notes['std_model'] > 0, notes
        bare = math.hypot(notes['std_noise'], notes['std_from_params'])
        assert (est.high - est.low) / 2 > 1.2 * 1.959964 * bare, (seed, est.interval, bare)


def test_the_accuracy_bench_draws_truths_a_decade_wide_and_unitree_armatures():
    """bench/sysid_accuracy.py --draw wide: friction and armature over a decade around the
    file's plant, each joint (so each leg) on its own, latency 1-15 ms off the grids, noise
    x 1-3; --draw rllab-armature: unitree's per-motor armatures on the G1 legs."""
    import importlib.util
    import numpy as np
    from simreal_ros.core.config import load_node_params
    from simreal_ros.core.plant import PlantTruth
    spec = importlib.util.spec_from_file_location(
        'sysid_accuracy_bench', os.path.join(REPO, 'bench', 'sysid_accuracy.py'))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    sim = load_node_params(G1, 'sim_robot')
    names = list(sim['joint_names'])
    plant = {k[len('plant.'):]: v for k, v in sim.items() if k.startswith('plant.')}
    base = PlantTruth.from_mapping(plant, len(names))
    draws = [bench.make_truth('wide', base, np.random.default_rng(s), names, True)
             for s in range(200)]
    for key in ('coulomb_friction', 'viscous_damping', 'armature'):
        ratio = np.array([getattr(d, key) / getattr(base, key) for d in draws])
        assert ratio.min() >= 10 ** -0.5 - 1e-9 and ratio.max() <= 10 ** 0.5 + 1e-9
        assert ratio.min() < 0.4 and ratio.max() > 2.5            # a decade, not +-30 %
        assert np.mean(np.abs(ratio[:, 0] - ratio[:, 6]) > 0.1) > 0.8   # each leg its own
    latency = np.array([d.latency_s for d in draws])
    assert latency.min() >= 0.001 and latency.max() <= 0.015
    assert np.mean(np.abs(latency / 0.0005 - np.round(latency / 0.0005)) > 0.05) > 0.8
    noise = np.array([d.noise_effort / base.noise_effort for d in draws])
    assert noise.min() >= 1.0 and noise.max() <= 3.0 and noise.max() > 2.5
    rl = bench.make_truth('rllab-armature', base, np.random.default_rng(1), names, True)
    assert dict(zip(names, rl.armature))['left_hip_pitch_joint'] == 0.010177520
    assert dict(zip(names, rl.armature))['right_knee_joint'] == 0.025101925
    assert dict(zip(names, rl.armature))['left_ankle_roll_joint'] == 0.00721945


def test_the_arm_plan_says_what_its_adapted_multisines_cost(capsys):
    """arm3's multi-sines are scaled to the PD torque of a joint with up to armature_max
    (the elbow 3 x a still joint's amplitude): the plan names the limit that set each
    amplitude and the torque it predicts, and each joint's robot time within 60 s."""
    arm = os.path.join(REPO, 'config', 'robots', 'arm3.yaml')
    assert cli.main(['sysid', 'plan', '--robot', arm, '--json']) == 0
    plan = json.loads(capsys.readouterr().out)
    rows = {(r['kind'], r['joint']): r for r in plan['experiments']}
    elbow = rows[('inertia', 'elbow_pitch')]['excitation']
    assert elbow['torque_model'] == 'link + armature_max' and elbow['gain_over_still'] > 2.5
    for r in plan['experiments']:
        if r['kind'] == 'friction':
            assert r['excitation'] is None
        else:
            e = r['excitation']
            assert e['bound'] in ('range', 'velocity', 'acceleration', 'torque')
            assert 0 < e['predicted_torque'] <= 0.5 * r['torque_limit'] + 1e-6
    for joint, seconds in plan['per_joint_s'].items():
        assert seconds == pytest.approx(sum(r['duration_s'] for (_, j), r in rows.items()
                                            if j == joint), abs=0.05)
        assert seconds <= 60.0
    assert cli.main(['sysid', 'plan', '--robot', arm]) == 0
    out = capsys.readouterr().out
    assert (f'amplitude set by the {elbow["bound"]} limit ({elbow["gain_over_still"]:.1f} x'
            in out)
    assert f'elbow_pitch: {plan["per_joint_s"]["elbow_pitch"]:.1f} s of robot time' in out


def _accuracy_bench():
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        'sysid_accuracy_bench', os.path.join(REPO, 'bench', 'sysid_accuracy.py'))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_the_accuracy_bench_tells_calibrated_intervals_from_overconfident_ones():
    """bench/sysid_accuracy.py's claims(): estimates whose intervals are as wide as their
    errors pass however many there are; intervals half as wide as the errors, or one
    estimate off by four of its standard deviations, do not."""
    import numpy as np
    bench = _accuracy_bench()
    rng = np.random.default_rng(7)
    target = 0.05
    halves = rng.uniform(0.02, 0.08, 2000)                  # relative 95 % half-widths
    errors = np.abs(rng.normal(0.0, halves / bench.Z95))    # calibrated: sigma = h / 1.96
    honest = bench.claims(list(errors), list(halves), target)
    assert honest['claimed_precise'] + honest['said_imprecise'] == 2000
    assert honest['claimed_precise_missed_goal'] > 0         # some miss, as 95 % ones do
    assert honest['claimed_precise_missed_goal'] <= honest['missed_goal_allowed']
    assert honest['precise_looking_wrong'] == 0
    # The same errors with intervals half as wide: the claimed ones miss too often.
    narrow = bench.claims(list(errors), list(halves / 2), target)
    assert narrow['claimed_precise_missed_goal'] > narrow['missed_goal_allowed']
    # One claimed estimate off by twice its half-width and more than the goal.
    one = bench.claims([0.001, 0.09], [0.01, 0.04], target)
    assert one['claimed_precise'] == 2 and one['precise_looking_wrong'] == 1
    assert bench.claims([0.001, 0.07], [0.01, 0.04], target)['precise_looking_wrong'] == 0

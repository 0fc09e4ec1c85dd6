"""sim_bridge core: parameters through MjSpec, replay, gap metric and gate, MCAP, export."""
import math
import os

import mujoco
import numpy as np
import pytest
import yaml

from simreal_ros.core.bridge import BridgeSession, JointParams, build_model
from simreal_ros.core.bridge import gap as gap_mod
from simreal_ros.core.bridge.excite import multisine_run, record_run
from simreal_ros.core.bridge.export import centre_errors
from simreal_ros.core.bridge.params import params_in_model
from simreal_ros.core.bridge.recording import read_mcap, write_mcap
from simreal_ros.core.config import ConfigError, load_node_params
from simreal_ros.core.plant import STICTION_SOLREF, PlantTruth, SimPlant
from simreal_ros.core.sysid import NominalModel

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(REPO, 'config', 'robots', 'arm3.yaml')
MODEL = os.path.join(REPO, 'models', 'arm3', 'arm3.xml')


@pytest.fixture(scope='module')
def arm3():
    sim = load_node_params(CONFIG, 'sim_robot')
    bridge = load_node_params(CONFIG, 'sim_bridge')
    names = list(sim['joint_names'])
    plant = {k[len('plant.'):]: v for k, v in sim.items() if k.startswith('plant.')}
    truth = PlantTruth.from_mapping(plant, len(names))
    session = BridgeSession.from_params(bridge, os.path.dirname(CONFIG))
    nominal = NominalModel(MODEL, names)
    sp = SimPlant(MODEL, names, 0.001, sim['kp'], sim['kd'], truth=truth, seed=5)
    rec = record_run(sp, multisine_run(names, 0.0, [0.35, 0.3, 0.35], (0.5, 3.0), 3.0,
                                       nominal=nominal, seed=3))
    params = JointParams(names, truth.viscous_damping.copy(), truth.coulomb_friction.copy(),
                         truth.armature.copy(), truth.latency_s)
    return {'names': names, 'truth': truth, 'session': session, 'rec': rec,
            'params': params, 'nominal_model': nominal, 'sim': sim}


def test_params_enter_the_model_through_mjspec(arm3):
    p = arm3['params']
    model, spec = build_model(MODEL, p)
    back = params_in_model(model, arm3['names'])
    for key in ('damping', 'frictionloss', 'armature'):
        np.testing.assert_allclose(getattr(back, key), getattr(p, key))
    assert back.latency_s == pytest.approx(p.latency_s)
    dof = model.jnt_dofadr[[model.joint(n).id for n in arm3['names']]]
    np.testing.assert_allclose(model.dof_solref[dof], [STICTION_SOLREF] * 3)
    # The nominal file is untouched: nothing identified in it.
    nominal = params_in_model(build_model(MODEL)[0], arm3['names'])
    assert np.all(nominal.damping == 0) and nominal.latency_s == 0.0


def test_bad_parameters_are_refused_with_the_key_named(arm3):
    with pytest.raises(ConfigError, match='damping has 2 values for 3 joints'):
        JointParams.from_mapping({'damping': [0.1, 0.2]}, arm3['names'])
    with pytest.raises(ConfigError, match='armature'):
        JointParams.from_mapping({'armature': [0.1, -0.2, 0.0]}, arm3['names'])
    with pytest.raises(ConfigError, match='latency_s'):
        JointParams.from_mapping({'latency_s': 5.0}, arm3['names'])


def test_replay_with_the_true_parameters_reaches_the_noise_floor(arm3):
    s, rec = arm3['session'], arm3['rec']
    matched, _ = s.gap(rec, arm3['params'], 'matched')
    nominal, _ = s.gap(rec, s.nominal, 'nominal')
    floor = matched.noise_floor['overall']
    assert matched.value <= 1.1 * floor, matched.summary()
    assert nominal.value > 10 * matched.value, nominal.summary()
    assert matched.shift_samples == 0


def test_noise_floor_is_estimated_from_the_data():
    rng = np.random.default_rng(1)
    t = np.arange(5000) / 500.0
    clean = np.column_stack([np.sin(2 * np.pi * 0.7 * t), 0.3 * np.sin(2 * np.pi * 2.1 * t)])
    sigma = np.array([1e-3, 5e-4])
    est = gap_mod.noise_std(clean + rng.normal(0, sigma, clean.shape))
    np.testing.assert_allclose(est, sigma, rtol=0.1)


def test_alignment_finds_and_reports_a_shift(arm3):
    s, rec = arm3['session'], arm3['rec']
    q, dq = s.replayer.rollout(rec, arm3['params'])
    k = 4       # the measurement happens 4 samples later than the simulation
    late_q = np.vstack([np.repeat(q[:1], k, 0), q[:-k]])
    late_dq = np.vstack([np.repeat(dq[:1], k, 0), dq[:-k]])
    # Score the simulation against a shifted copy of itself (noise-free measurement).
    shifted = type(rec)(rec.names, rec.t, late_q, late_dq, rec.effort, rec.cmd_t,
                        rec.cmd_position, rec.cmd_velocity, rec.cmd_effort)
    shifted.position = shifted.position + np.random.default_rng(0).normal(0, 1e-5, q.shape)
    shifted.velocity = shifted.velocity + np.random.default_rng(1).normal(0, 1e-4, q.shape)
    res = gap_mod.evaluate(shifted, q, dq, rec.names)
    dt = float(np.median(np.diff(rec.t)))
    assert res.shift_samples == k
    assert res.shift_s == pytest.approx(k * dt)
    unaligned = np.sqrt(np.mean((late_dq - dq)**2)) / np.std(late_dq)
    assert res.overall['velocity'] < 0.2 * unaligned


def test_gap_gate_fails_a_wrong_model_and_passes_a_matched_one(arm3):
    s, rec = arm3['session'], arm3['rec']
    wrong = arm3['params'].copy()
    wrong.armature = wrong.armature * 6.0
    wrong.frictionloss = wrong.frictionloss * 4.0
    wrong.latency_s = 0.03
    bad, _ = s.gap(rec, wrong, 'wrong')
    good, _ = s.gap(rec, arm3['params'], 'matched')
    assert bad.threshold == pytest.approx(0.15)
    assert not bad.passed and bad.value > 0.15, bad.summary()
    assert good.passed, good.summary()
    assert len(good.nrmse['position']) == 3 and len(good.nrmse['velocity']) == 3


def test_mcap_round_trip_and_subset_commands(arm3, tmp_path):
    rec = arm3['rec']
    path = write_mcap(str(tmp_path / 'run.mcap'), rec)
    back = read_mcap(path, arm3['names'])
    assert back.source['command_topic'] == 'hardware/command'
    np.testing.assert_allclose(back.t, rec.t, atol=1e-9)
    np.testing.assert_allclose(back.position, rec.position)
    np.testing.assert_allclose(back.cmd_t, rec.cmd_t, atol=1e-9)
    np.testing.assert_allclose(back.cmd_position, rec.cmd_position)
    np.testing.assert_allclose(back.cmd_effort, rec.cmd_effort)
    # Replaying what was read gives the same trajectory as the in-memory recording.
    s = arm3['session']
    q1, _ = s.replayer.rollout(rec, arm3['params'])
    q2, _ = s.replayer.rollout(back, arm3['params'])
    np.testing.assert_allclose(q1, q2, atol=1e-9)

    from mcap_ros2.writer import Writer
    from simreal_ros.core.bridge.recording import JOINT_STATE_MSGDEF
    sub = str(tmp_path / 'subset.mcap')
    names = arm3['names']
    with open(sub, 'wb') as f:
        w = Writer(f)
        schema = w.register_msgdef('sensor_msgs/msg/JointState', JOINT_STATE_MSGDEF)

        def js(ns, nm, p=(), v=(), e=()):
            return {'header': {'stamp': {'sec': ns // 10**9, 'nanosec': ns % 10**9},
                               'frame_id': ''}, 'name': nm, 'position': list(p),
                    'velocity': list(v), 'effort': list(e)}
        base = 10**18
        w.write_message('/sysid/command', schema, js(base, names, [0.1, 0.2, 0.3]), base)
        w.write_message('/sysid/command', schema, js(base + 10**7, [names[1]], [0.5]),
                        base + 10**7)
        w.write_message('/sysid/command', schema, js(base + 2 * 10**7, ['nope'], [0.5]),
                        base + 2 * 10**7)
        for k in range(20):
            ns = base + k * 2 * 10**6
            w.write_message('/joint_states', schema,
                            js(ns, names, [0.0] * 3, [0.0] * 3, [0.0] * 3), ns)
        w.finish()
    r = read_mcap(sub)
    assert r.source['command_topic'] == 'sysid/command'
    assert r.source['rejected_commands'] == 1
    np.testing.assert_allclose(r.cmd_position, [[0.1, 0.2, 0.3], [0.1, 0.5, 0.3]])
    np.testing.assert_allclose(r.cmd_velocity, 0.0)
    with pytest.raises(ConfigError, match='needs sensor_msgs/JointState'):
        read_mcap(sub, command_topics=('hardware/command',))
    with pytest.raises(ConfigError, match='does not exist'):
        read_mcap(str(tmp_path / 'missing.mcap'))


def test_randomisation_widths_follow_the_intervals_where_they_are_wider_than_the_floor(
        arm3, tmp_path):
    """The exported ranges are 2 x the 95 % half-width where that exceeds the 10 % floor:
    an export that ignored the intervals (floor only) fails here."""
    from simreal_ros.core.bridge.export import DR_FLOOR_FRACTION, DR_INTERVAL_SCALE
    s, rec = arm3['session'], arm3['rec']
    p = arm3['params'].copy()
    wide = {key: 0.3 * np.abs(getattr(p, key)) + 1e-3
            for key in ('damping', 'frictionloss', 'armature')}     # 2 x 0.3 > 0.1
    p.interval = dict(wide, latency_s=1e-4)
    paths = s.export(str(tmp_path / 'wide'), p, s.evaluate(rec, p, 'test'), rec)
    with open(paths['domain_randomization']) as f:
        dr = yaml.safe_load(f)
    checked = 0
    for i, joint in enumerate(arm3['names']):
        for key, half in wide.items():
            value = float(getattr(p, key)[i])
            expected = DR_INTERVAL_SCALE * half[i]
            if expected <= DR_FLOOR_FRACTION * abs(value) or value - expected < 0:
                continue
            lo, hi = dr['joints'][joint][key]
            assert (hi - lo) / 2 == pytest.approx(expected, rel=1e-9), (joint, key)
            checked += 1
    assert checked >= 6, checked


def test_export_loads_in_plain_mujoco_and_reproduces_the_replay(arm3, tmp_path):
    s, rec = arm3['session'], arm3['rec']
    p = arm3['params'].copy()
    p.interval = {'damping': np.array([0.01, 0.02, 0.005]),
                  'frictionloss': np.array([0.02, 0.01, np.nan]),
                  'armature': np.array([1e-3, 1e-3, 5e-4]), 'latency_s': 2e-4}
    report = s.evaluate(rec, p, 'test')
    paths = s.export(str(tmp_path / 'export'), p, report, rec)
    model = mujoco.MjModel.from_xml_path(paths['mjcf'])       # plain MuJoCo
    q_file, dq_file = s.replayer.rollout(rec, model=model)
    q_par, dq_par = s.replayer.rollout(rec, p)
    np.testing.assert_allclose(q_file, q_par, atol=1e-9)
    np.testing.assert_allclose(dq_file, dq_par, atol=1e-7)
    res = gap_mod.evaluate(rec, q_file, dq_file, rec.names)
    assert res.value <= 1.1 * res.noise_floor['overall']
    with open(paths['domain_randomization']) as f:
        dr = yaml.safe_load(f)
    assert centre_errors(dr, p) < 1e-12
    for joint in arm3['names']:
        for key, (lo, hi) in dr['joints'][joint].items():
            assert 0.0 <= lo < hi, (joint, key, lo, hi)
    i = 0
    lo, hi = dr['joints'][arm3['names'][i]]['damping']
    assert (hi - lo) / 2 == pytest.approx(max(2 * 0.01, 0.1 * p.damping[i]))
    assert 'mjlab' in dr['note'] and 'Isaac Lab' in dr['note']
    with open(paths['params']) as f:
        values = yaml.safe_load(f)
    assert values['joints'][arm3['names'][0]]['damping']['value'] == pytest.approx(p.damping[0])
    assert 'interval_95' not in values['joints'][arm3['names'][2]]['frictionloss']
    html = open(paths['report']).read()
    for png in ('position.png', 'velocity.png', 'friction.png', 'estimates.png'):
        assert png in html and os.path.getsize(tmp_path / 'export' / png) > 1000
    assert math.isfinite(report.to_dict()['reduction_x'])


def test_files_are_written_whole_or_not_at_all(tmp_path):
    from simreal_ros.core.bridge.recording import latest_recording
    from simreal_ros.core.files import atomic_path, inside, is_temporary, write_text
    path = tmp_path / 'runs' / 'a.mcap'
    write_text(path, 'first')
    with pytest.raises(RuntimeError):
        with atomic_path(path) as tmp:
            tmp.write_text('half of a new file')
            assert latest_recording(tmp_path) == str(path)   # never the one being written
            assert is_temporary(tmp)
            raise RuntimeError('the disk filled up')
    assert path.read_text() == 'first'                      # the old file is untouched
    assert [p.name for p in path.parent.iterdir()] == ['a.mcap']   # no temporary left
    assert inside(tmp_path, 'runs/a.mcap') == path.resolve()
    for outside in ('/etc/hostname', '../x.mcap', str(tmp_path / '..' / 'x')):
        with pytest.raises(ValueError, match='outside'):
            inside(tmp_path, outside)


def test_split_holds_out_the_tail_that_the_fit_never_sees(arm3):
    from simreal_ros.core.bridge.recording import split
    rec = arm3['rec']
    fit, held = split(rec, 0.3)
    t0, t1 = float(rec.t[0]), float(rec.t[-1])
    assert held.held_out and not fit.held_out
    assert held.t[0] == pytest.approx(t0 + 0.7 * (t1 - t0), abs=0.003)
    assert fit.t[-1] < held.t[0] and len(fit.t) + len(held.t) == len(rec.t)
    assert fit.cmd_t[-1] <= held.t[0]                      # no command of the held part
    assert held.cmd_t[0] <= held.t[0] < held.cmd_t[1]      # the command active at its start
    # The held part is scored like any recording, at the noise floor for the true parameters.
    result, _ = arm3['session'].gap(held, arm3['params'])
    assert result.value <= 1.3 * result.noise_floor['overall']
    for bad in (0.0, 1.0, -0.2):
        with pytest.raises(ValueError, match='holdout must be in'):
            split(rec, bad)


def test_a_floating_robot_replays_window_by_window_from_its_whole_state():
    """Replayer.windows: a humanoid on its feet replayed from the true base pose and velocity
    at each window's start reproduces the true plant with its own parameters, and separates
    a wrong actuator model; a start state of the wrong size is refused, naming the sizes."""
    from simreal_ros.core.bridge.replay import Replayer
    from simreal_ros.core.config import resolve_path
    from simreal_ros.core.sysid.estimators import Recording
    g1 = os.path.join(REPO, 'config', 'robots', 'g1_12dof.yaml')
    sim = load_node_params(g1, 'sim_robot')
    model = resolve_path(sim['model_path'], 'model_path', relative_to=os.path.dirname(g1))
    names = list(sim['joint_names'])
    plant = {k[len('plant.'):]: v for k, v in sim.items() if k.startswith('plant.')}
    truth = PlantTruth.from_mapping(plant, len(names))
    dt = 0.002
    runner = load_node_params(g1, 'policy_runner')
    assert list(runner['policy_joint_names']) == names
    default = np.asarray(runner['default_position'], float)
    sp = SimPlant(model, names, dt, sim['kp'], sim['kd'], truth=truth, seed=2,
                  initial_position=default)
    knees = [names.index('left_knee_joint'), names.index('right_knee_joint')]
    t, qpos, qvel, q = [], [], [], []
    cmd_t, cmd_q = [], []
    for k in range(400):                      # 0.8 s, a 50 Hz knee bend on its feet
        if k % 10 == 0:
            target = default.copy()
            target[knees] += 0.25 * np.sin(2 * np.pi * 2.0 * sp.time)
            sp.submit(sp.make_command(names, position=target.tolist()))
            cmd_t.append(sp.time)
            cmd_q.append(target)
        t.append(sp.time)
        qpos.append(sp.data.qpos.copy())
        qvel.append(sp.data.qvel.copy())
        q.append(sp.data.qpos[sp.qadr].copy())
        sp.step()
    q = np.array(q)
    cmd_q = np.array(cmd_q)
    rec = Recording(names, np.array(t), q, np.zeros_like(q), np.zeros_like(q),
                    np.array(cmd_t), cmd_q, np.zeros_like(cmd_q), np.zeros_like(cmd_q))
    assert np.ptp(np.array(qpos)[:, 2]) > 0.01          # the base moved: it must be replayed
    rp = Replayer(model, names, sim['kp'], sim['kd'], physics_dt=dt)
    own = JointParams(names, truth.viscous_damping.copy(), truth.coulomb_friction.copy(),
                      truth.armature.copy(), truth.latency_s)
    nominal = params_in_model(rp.model(), names)

    def error(params):
        sim_q, start = rp.windows(rec, qpos, qvel, params, window_s=0.2, skip_s=0.1)
        assert start > 0 and np.all(np.isnan(sim_q[:start])) and np.all(np.isfinite(sim_q[start:]))
        return float(np.sqrt(np.mean((sim_q[start:] - q[start:]) ** 2)))

    own_err, nominal_err = error(own), error(nominal)
    assert own_err < 2e-3, own_err
    assert nominal_err > 5 * own_err, (nominal_err, own_err)
    with pytest.raises(ConfigError, match='nq'):
        rp.rollout(rec, own, start_state=(qpos[0][:7], qvel[0]))

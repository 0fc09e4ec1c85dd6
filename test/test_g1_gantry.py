"""The G1 hanging in its gantry, identified and replayed there.

Without ROS: a SysID session of one leg joint on the G1 bolted 0.3 m up with its hidden plant
(the robot file's sim_robot.plant for that joint, the MJCF's values for the others), the
results set on the robot file's sim_bridge (gantry_lift), whose held-out gap closes; replayed
free-floating instead, the base falls and the same results leave the gap open (what
gantry_lift is for).
"""
import os

import numpy as np
import pytest

from conftest import REPO, require_asset
from simreal_ros.core.bridge import BridgeSession
from simreal_ros.core.bridge.params import bridge_parameters
from simreal_ros.core.bridge.recording import read_mcap, split
from simreal_ros.core.config import load_node_params
from simreal_ros.core.plant import PlantTruth, SimPlant
from simreal_ros.core.sysid import NominalModel
from simreal_ros.core.sysid.design import load_settings
from simreal_ros.core.sysid.records import result_text
from simreal_ros.core.sysid.session import SysidSession
from simreal_ros.deploy.graph import build_graph

CONFIG = REPO / 'config' / 'robots' / 'g1_12dof.yaml'
JOINT = 'left_knee_joint'


# The G1 MJCF's own actuator values: every joint has them (unitree's scene.xml).
MJCF = {'coulomb_friction': 0.1, 'viscous_damping': 0.001, 'armature': 0.01}


def plant_truth(sim, joints=(JOINT,)):
    """The robot file's hidden plant for `joints`, the MJCF's values for the others: only the
    joints under test differ from the model (a session identifies a few joints; the held
    ones' dry friction would otherwise set where they rest, a gap no leg's values close)."""
    names = sim['joint_names']
    out = {k[len('plant.'):]: v for k, v in sim.items() if k.startswith('plant.')}
    for key, value in MJCF.items():
        out[key] = [v if n in joints else value for n, v in zip(names, out[key])]
    return out


def drive(plant, session):
    """Run every joint of the session on the plant as the node and driver do: commands at
    the command rate, samples at 500 Hz; return once its estimates are in."""
    cmd_dt = 1.0 / session.settings.command_rate_hz
    every = max(1, int(round(0.002 / plant.dt)))
    next_cmd = plant.time
    for k in range(10_000_000):
        now = plant.time
        if k % every == 0:
            m = plant.measure()
            session.add_sample(m.time, m.position, m.velocity, m.effort)
        if now >= next_cmd - 1e-12:
            next_cmd += cmd_dt
            names, pos, vel, eff = session.command(now)
            plant.submit(plant.make_command(names, pos, vel, eff), arrival_time=now)
        if session.joint_over(now):
            session.finish_joint()()
            if session.index >= len(session.experiments):
                return
        plant.step(1)
    raise AssertionError('the session never finished')


@pytest.fixture(scope='module')
def gantry_run(tmp_path_factory):
    g1_dir = require_asset('unitree_g1_12dof')
    folder = str(tmp_path_factory.mktemp('g1_sysid'))
    sim = load_node_params(CONFIG, 'sim_robot')
    names = list(sim['joint_names'])
    truth = PlantTruth.from_mapping(plant_truth(sim), len(names))
    plant = SimPlant(str(g1_dir / 'scene.xml'), names, sim['physics_dt'], sim['kp'], sim['kd'],
                     truth=truth, seed=4, fixed_base_lift=0.3)
    nominal = NominalModel(str(g1_dir / 'scene.xml'), names)
    runs = []
    for kind in ('friction', 'inertia', 'latency'):
        settings = load_settings(str(CONFIG), kind)
        session = SysidSession(kind, settings, nominal, 'g1_12dof', [JOINT],
                               plant.measure(with_noise=False).position, folder,
                               physics_dt=sim['physics_dt'])
        drive(plant, session)
        # as the node does: the run's results file, which the next experiments read
        with open(os.path.join(folder, session.base + '.yaml'), 'w') as f:
            f.write(result_text('g1_12dof', kind, session.results, session.failures))
        runs.append({'robot': 'g1_12dof', 'experiment': kind, 'results': session.results,
                     'failures': session.failures})
    return runs, truth, names


def _bridge(gantry_lift):
    params = load_node_params(CONFIG, 'sim_bridge')
    params['gantry_lift'] = gantry_lift
    return BridgeSession.from_params(params, os.path.dirname(CONFIG))


def _identified(session, runs):
    values = bridge_parameters(runs)
    p = session.nominal.copy()
    i = session.names.index(JOINT)
    for key in ('damping', 'frictionloss', 'armature'):
        getattr(p, key)[i] = values[f'joints.{JOINT}.{key}']
    p.latency_s = values['latency_s']
    return p


def test_the_leg_is_identified_in_its_gantry(gantry_run):
    runs, truth, names = gantry_run
    i = names.index(JOINT)
    got = {r['parameter']: r for run in runs for r in run['results']}
    assert not [f for run in runs for f in run['failures']]
    for parameter, true in (('coulomb_friction', truth.coulomb_friction[i]),
                            ('viscous_damping', truth.viscous_damping[i]),
                            ('armature', truth.armature[i]), ('latency', truth.latency_s)):
        assert abs(got[parameter]['value'] - true) < 0.15 * true, (parameter, got[parameter])
    # the friction run's own result carries its plot; the inertia run's friction is the sweeps
    # combined with its multi-sine, and keeps the sweeps' value
    sweeps = {r['parameter']: r for r in runs[0]['results']}
    assert runs[0]['experiment'] == 'friction' and sweeps['coulomb_friction'].get('fit_curve')
    assert got['viscous_damping']['sweeps']['value'] == sweeps['viscous_damping']['value']
    # each result says which share of its experiment's torque it carries, and a wide one says
    # so in words (records.precision_note); the combined friction recomputes it
    link = got['effective_inertia']['value'] - got['armature']['value']
    assert got['armature']['signal_share'] == pytest.approx(
        truth.armature[i] / (truth.armature[i] + link), rel=0.15)
    top = got['viscous_damping']['top_speed_rad_s']
    fv, fc = truth.viscous_damping[i] * top, truth.coulomb_friction[i]
    assert got['viscous_damping']['signal_share'] == pytest.approx(fv / (fv + fc), rel=0.1)
    for r in got.values():
        if 'signal_share' in r:
            lo, hi = r['interval']
            wide = (hi - lo) / 2 / abs(r['value']) > 0.05
            assert ('precision' in r) == (wide and r['signal_share'] < 0.5), r


def test_sim_bridge_replays_the_gantry_and_the_gap_closes(gantry_run):
    runs, _, names = gantry_run
    session = _bridge(0.3)
    rec = read_mcap(runs[-1]['results'][0]['data_file'], names)
    _, held_out = split(rec, 0.3)
    report = session.evaluate(held_out, _identified(session, runs))
    assert report.identified.passed, report.to_dict()
    assert report.identified.value < 0.5 * report.nominal.value, report.to_dict()


def test_replayed_free_floating_the_gap_stays_open(gantry_run):
    """The same recording and results on the free-floating model (gantry_lift -1): the robot
    drops to the floor in the replay and nothing matches."""
    runs, _, names = gantry_run
    session = _bridge(-1.0)
    rec = read_mcap(runs[-1]['results'][0]['data_file'], names)
    _, held_out = split(rec, 0.3)
    report = session.evaluate(held_out, _identified(session, runs))
    assert not report.identified.passed


def test_a_sysid_graph_hangs_the_simulated_g1_in_its_gantry():
    graph = build_graph('g1_12dof', sysid=True, check_files=False)
    sim = next(n for n in graph.nodes if n.name == 'sim_robot')
    assert sim.overrides['gantry_lift'] == 0.3 and sim.overrides['plant_enabled'] is True
    assert sim.overrides['hold_until_command'] is False
    assert 'sim_bridge' in graph.names()
    plain = build_graph('g1_12dof', check_files=False)
    assert 'gantry_lift' not in next(n for n in plain.nodes if n.name == 'sim_robot').overrides
    mine = build_graph('g1_12dof', sysid=True, check_files=False,
                       overrides={'sim_robot': {'plant_enabled': False}})
    assert next(n for n in mine.nodes if n.name == 'sim_robot').overrides['plant_enabled'] \
        is False


def test_a_bad_gantry_lift_names_the_parameter():
    from simreal_ros.core.config import ConfigError
    with pytest.raises(ConfigError, match='sim_bridge.gantry_lift'):
        _bridge('high')


def test_an_arm_has_no_base_to_fix():
    from simreal_ros.core.config import ConfigError
    params = load_node_params(REPO / 'config' / 'robots' / 'arm3.yaml', 'sim_bridge')
    params['gantry_lift'] = 0.3
    with pytest.raises(ConfigError, match='no free joint'):
        BridgeSession.from_params(params, str(REPO / 'config' / 'robots'))


def test_the_bolted_base_reads_an_imu_at_rest(g1_dir):
    sim = load_node_params(CONFIG, 'sim_robot')
    plant = SimPlant(str(g1_dir / 'scene.xml'), sim['joint_names'], 0.002, sim['kp'],
                     sim['kd'], fixed_base_lift=0.3)
    assert plant.has_base_imu and not plant.floating_base
    plant.step(50)
    m = plant.measure(with_noise=False)
    assert np.allclose(m.angular_velocity, 0.0)
    assert m.linear_acceleration[2] == pytest.approx(9.81, abs=0.01)
    assert m.base_position[2] > 0.3


def test_a_knee_whose_friction_dwarfs_its_inertia_torque_is_identified(monkeypatch):
    """A knee with 8 N*m of Coulomb friction (the wide draw's heaviest is 2.84), 2.84
    N*m*s/rad viscous, armature 0.018: the multi-sine's inertia torque is a twelfth of the
    friction, and the joint sticks and slips. Where it stands still its holding torque is
    taken out of the fit (estimators.STICTION_PASSES), and the armature is read from the
    samples where it moves, inside its interval (a wide one: the effort's time offset the
    stick-slip fits says another value, and the interval counts it). Without that the fit
    fails, and its failure says why, with the ratio and what would help, instead of a number
    or a bare 'not enough excitation'. (At 5.68 N*m the fit without it now gives a number,
    with +-70 %: the effort's offset is no longer fit to the stick-slip.)"""
    from simreal_ros.core.sysid import estimators
    from simreal_ros.core.sysid.runner import identify_joint
    g1_dir = require_asset('unitree_g1_12dof')
    sim = load_node_params(CONFIG, 'sim_robot')
    names = list(sim['joint_names'])
    plant_map = plant_truth(sim)
    i = names.index(JOINT)
    for key, value in (('coulomb_friction', 8.0), ('viscous_damping', 2.84),
                       ('armature', 0.018)):
        plant_map[key][i] = value
    truth = PlantTruth.from_mapping(plant_map, len(names))
    nominal = NominalModel(str(g1_dir / 'scene.xml'), names)
    settings = load_settings(str(CONFIG), 'inertia')

    def run():
        plant = SimPlant(str(g1_dir / 'scene.xml'), names, sim['physics_dt'], sim['kp'],
                         sim['kd'], truth=truth, seed=4, fixed_base_lift=0.3)
        return identify_joint(plant, settings, nominal, JOINT, kinds=('inertia',))

    est = run().fits['inertia'].estimates['armature']
    assert est.covers(0.018), est
    assert abs(est.value - 0.018) < 0.05 * 0.018, est
    monkeypatch.setattr(estimators, 'STICTION_PASSES', 0)
    res = run()
    assert 'inertia' not in res.fits, res.fits.get('inertia')
    msg = res.errors['inertia']
    assert msg.startswith('not enough excitation'), msg
    assert 'Coulomb friction' in msg and 'x the inertia torque' in msg, msg
    assert 'acceleration_limit' in msg, msg

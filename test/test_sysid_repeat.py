"""A SysID run whose commands were held or late repeats the disturbed segment, names the cause,
and estimates from clean segments only; a joint that really did not move still fails."""
import numpy as np
import pytest

from simreal_ros.core.sysid import NominalModel
from simreal_ros.core.sysid.session import SysidSession
from test_sysid_core import CONFIG, MODEL, NAMES, make_plant, short, truth  # noqa: F401
from simreal_ros.core.config import load_node_params


@pytest.fixture(scope='module')
def nominal():
    return NominalModel(MODEL, NAMES)


@pytest.fixture(scope='module')
def sim():
    return load_node_params(CONFIG, 'sim_robot')


def drive(plant, session, hold_from=None, hold_s=0.0, tell=True, late_from=None, holds=None):
    """Run the session on the plant as the node and supervisor would: commands at the
    command rate, samples at 500 Hz; from `hold_from` (s into the joint's run) for `hold_s`
    (or each (from, s) of `holds`) the supervisor holds the position at that moment (the
    schedule's commands do not reach the plant) and, when `tell`, the node reports it as the
    safety/state would. With `late_from`, the node publishes nothing for `hold_s` (a stalled
    process)."""
    if holds is None:
        holds = [] if hold_from is None else [(hold_from, hold_s)]
    dt = plant.dt
    cmd_dt = 1.0 / session.settings.command_rate_hz
    next_cmd = 0.0
    held_at = None
    active = None
    for _ in range(200000):
        now = plant.time
        if int(round(now / dt)) % 2 == 0:
            m = plant.measure()
            session.add_sample(m.time, m.position, m.velocity, m.effort)
        if now >= next_cmd - 1e-12:
            next_cmd += cmd_dt
            rel = now - session.t0 if session.t0 is not None else 0.0
            stalled = late_from is not None and late_from <= rel < late_from + hold_s
            if not stalled:
                names, pos, vel, eff = session.command(now)
                rel = now - session.t0
                holding = next((h for h in holds if h[0] <= rel < h[0] + h[1]), None)
                if holding is not None:
                    if held_at is None:
                        held_at = plant.measure(with_noise=False).position
                        active = holding
                    plant.submit(plant.make_command(names, held_at, np.zeros(3), np.zeros(3)),
                                 arrival_time=now)
                else:
                    if active is not None and tell:
                        session.disturbed(session.t0 + active[0], 'safety_supervisor held '
                                          'the commands (sysid stale)', held=True)
                    held_at = active = None
                    plant.submit(plant.make_command(names, pos, vel, eff), arrival_time=now)
        if session.joint_over(now):
            return session.finish_joint()
        plant.step(1)
    raise AssertionError('the joint never finished')


def _sweep_start(session, speed):
    exp = session.experiment
    rows = np.nonzero(exp.target_speed == speed)[0]
    return float(exp.t[rows[0]])


def test_a_held_sweep_is_repeated_with_its_cause_and_the_estimate_stands(tmp_path, nominal,
                                                                         sim):
    tr = truth(sim)
    s = short('friction')
    plant = make_plant(sim, tr)
    session = SysidSession('friction', s, nominal, 'arm3', ['shoulder_pitch'], np.zeros(3),
                           str(tmp_path))
    start = _sweep_start(session, 1.2)
    before = session.experiment.duration
    work = drive(plant, session, hold_from=start - 0.05, hold_s=1.0)
    work()
    assert not session.failures, session.failures
    assert [r['cause'] for r in session.repeats] == [
        'safety_supervisor held the commands (sysid stale)']
    assert session.repeats[0]['repeated']
    assert session.experiments[0].duration > before + 0.5    # the segment ran once more
    fc = [d for d in session.results if d['parameter'] == 'coulomb_friction'][0]
    fv = [d for d in session.results if d['parameter'] == 'viscous_damping'][0]
    assert abs(fc['value'] - tr.coulomb_friction[1]) < 0.03 * tr.coulomb_friction[1]
    assert abs(fv['value'] - tr.viscous_damping[1]) < 0.08 * tr.viscous_damping[1]
    assert fc['repeated_segments'][0]['cause'].startswith('safety_supervisor held')


def test_a_held_sweep_not_reported_fails_as_the_joint_not_moving(tmp_path, nominal, sim):
    """The same hold, not reported: the held samples count as the sweep (what CI saw)."""
    tr = truth(sim)
    s = short('friction')
    plant = make_plant(sim, tr)
    session = SysidSession('friction', s, nominal, 'arm3', ['shoulder_pitch'], np.zeros(3),
                           str(tmp_path))
    start = _sweep_start(session, 1.2)
    drive(plant, session, hold_from=start - 0.05, hold_s=1.0, tell=False)()
    assert [f['reason'] for f in session.failures] == ['joint did not move']


def test_without_repeats_left_the_failure_names_the_disturbance(tmp_path, nominal, sim):
    tr = truth(sim)
    s = short('friction')
    plant = make_plant(sim, tr)
    session = SysidSession('friction', s, nominal, 'arm3', ['shoulder_pitch'], np.zeros(3),
                           str(tmp_path), max_repeats=0)
    start = _sweep_start(session, 1.2)
    drive(plant, session, hold_from=start - 0.05, hold_s=1.0)()
    assert len(session.failures) == 1, session.results
    detail = session.failures[0]['detail']
    assert '1 left out' in detail and 'safety_supervisor held' in detail, detail


def test_past_its_repeats_a_held_segment_is_left_out_and_the_estimate_stands(tmp_path, nominal,
                                                                          sim):
    """No repeat left (max_repeats 0): the held -1.2 rad/s sweep is not estimated from. Kept,
    its held samples passed for the sweep and read viscous friction 27 % high."""
    tr = truth(sim)
    s = short('friction')
    plant = make_plant(sim, tr)
    session = SysidSession('friction', s, nominal, 'arm3', ['shoulder_pitch'], np.zeros(3),
                           str(tmp_path), max_repeats=0)
    start = _sweep_start(session, -1.2)
    drive(plant, session, hold_from=start + 0.05, hold_s=0.3)()
    assert not session.failures, session.failures
    assert [(r['segment'], r['repeated']) for r in session.repeats] == [(3, False)]
    assert not np.any(session.experiments[0].segment == 3)   # not run again, not estimated
    fc = [d for d in session.results if d['parameter'] == 'coulomb_friction'][0]
    fv = [d for d in session.results if d['parameter'] == 'viscous_damping'][0]
    assert abs(fc['value'] - tr.coulomb_friction[1]) < 0.03 * tr.coulomb_friction[1]
    assert abs(fv['value'] - tr.viscous_damping[1]) < 0.05 * tr.viscous_damping[1]
    assert fv['repeated_segments'][0]['repeated'] is False


def test_a_hold_outside_the_excitation_spends_no_repeat(tmp_path, nominal, sim):
    """Held during the approach (no sweep lost: the target restarts from the robot, no
    repeat spent), then in a sweep: with one repeat allowed, that sweep is still run again,
    not left out."""
    tr = truth(sim)
    s = short('friction')
    plant = make_plant(sim, tr)
    session = SysidSession('friction', s, nominal, 'arm3', ['shoulder_pitch'], np.zeros(3),
                           str(tmp_path), max_repeats=1)
    first = session.experiment.excitation_start
    sweep = _sweep_start(session, 1.2)
    drive(plant, session, holds=[(first - 0.8, 0.3), (sweep + 0.05, 0.3)])()
    assert not session.failures, session.failures
    (before, _), (swept, repeated) = [(r['segment'], r['repeated']) for r in session.repeats]
    assert before == -1 and swept >= 0 and repeated
    assert np.any(session.experiments[0].segment == swept)   # run again, estimated from


def test_a_joint_that_really_does_not_move_still_fails(tmp_path, nominal, sim):
    tr = truth(sim, coulomb_friction=[0.8, 0.6, 30.0])
    s = short('friction')
    plant = make_plant(sim, tr)
    session = SysidSession('friction', s, nominal, 'arm3', ['elbow_pitch'], np.zeros(3),
                           str(tmp_path))
    drive(plant, session)()
    # Blocked by dry friction above what the torque limit lets the servo apply: no motion.
    assert [f['reason'] for f in session.failures] in (['joint did not move'], ['saturated'])
    assert session.repeats == [] and session.results == []


def test_a_plant_outside_the_model_is_reported_as_misfit_with_the_joint(nominal, sim):
    """Stribeck friction (extra torque at low speed) bends the Coulomb + viscous line: the
    fit says so, names the joint, and widens its interval to cover the truth; a plant inside
    the model is not flagged."""
    from dataclasses import replace
    from simreal_ros.core.sysid import design_for, estimate_friction
    from simreal_ros.core.sysid.records import result_documents
    from simreal_ros.core.sysid.runner import record
    tr = truth(sim)
    s = short('friction', friction_speeds=(0.2, 0.4, 0.8, 1.2))
    exp = design_for('friction', 'shoulder_pitch', s, nominal, np.zeros(3))
    rec = record(make_plant(sim, tr), exp)
    clean = estimate_friction(rec, exp, nominal, s.torque_limit[1])
    assert not clean.notes['misfit']['flagged'] and clean.notes['misfit']['ratio'] < 2
    assert not any('model_misfit' in d for d in result_documents('arm3', clean, 'x.mcap'))
    v = rec.velocity[:, 1]
    bent = replace(rec, effort=rec.effort.copy())
    bent.effort[:, 1] += 0.3 * np.exp(-(v / 0.3)**2) * np.sign(v)   # a Stribeck hump
    fit = estimate_friction(bent, exp, nominal, s.torque_limit[1])
    assert fit.notes['misfit']['flagged'] and fit.notes['misfit']['ratio'] > 4
    fc = fit.estimates['coulomb_friction']
    assert abs(fc.value - tr.coulomb_friction[1]) > 0.2 * tr.coulomb_friction[1]   # biased
    assert fc.covers(tr.coulomb_friction[1])          # ... and says how little it is worth
    docs = result_documents('arm3', fit, 'x.mcap')
    assert all('shoulder_pitch' in d['model_misfit'] for d in docs)


def test_the_node_reports_a_supervisor_hold_and_its_own_late_commands():
    """What the node passes to the session: a forwarding -> safe change or a new stale spell
    of the SysID input in safety/state (held: the repeat starts from the measured pose); a
    state that stays safe is not reported twice. (The node's adapter, without DDS.)"""
    import json
    from types import SimpleNamespace
    from std_msgs.msg import String
    from simreal_ros.nodes.sysid_experiment import SysidNode

    class Session:
        def __init__(self):
            self.calls = []

        def disturbed(self, since, cause, held=False):
            self.calls.append((since, cause, held))

    clock = {'now': 10.0}
    fake = SimpleNamespace(supervisor=None, session=Session(), _supervisor_seen=None,
                           _now=lambda: clock['now'], p={'supervisor_state_topic': 'x'},
                           get_logger=lambda: None)

    def state(output, trips, reason=''):
        return String(data=json.dumps({'output': output, 'safe_reason': reason,
                                       'inputs': {'sysid': {'watchdog_trips': trips}}}))
    for t, msg in ((10.0, state('forwarding', 0)), (10.1, state('forwarding', 0)),
                   (10.2, state('safe', 1, 'sysid stale: 80 ms')), (10.3, state('safe', 1)),
                   (10.4, state('forwarding', 1)), (10.5, state('forwarding', 2))):
        clock['now'] = t
        SysidNode._on_supervisor(fake, msg)
    calls = fake.session.calls
    assert [round(c[0], 3) for c in calls] == [10.1, 10.4], calls   # since the last good state
    assert all(c[2] for c in calls)
    assert 'sysid stale: 80 ms' in calls[0][1]


def test_disturbances_that_never_stop_cut_the_joint_short_and_name_them(tmp_path, nominal,
                                                                       sim):
    """The supervisor holds the commands for 40 ms of every 100 ms from 1 s on (a computer
    too loaded to keep them fresh): each hold re-plans the joint back to its schedule, which
    never catches up. Past its budget (the plan and max_repeats repeats of its longest
    segment, times max_duration_factor) the joint ends as a failure ('disturbed', cut short),
    naming the disturbances, with nothing estimated; without the bound the joint never ends
    (drive raises)."""
    tr = truth(sim)
    s = short('friction')
    plant = make_plant(sim, tr)
    session = SysidSession('friction', s, nominal, 'arm3', ['shoulder_pitch'], np.zeros(3),
                           str(tmp_path))
    planned, budget = session.experiment.duration, session.budget[0]
    end = session.experiment.position[-1].copy()
    assert planned * 1.5 < budget < planned * 4, (planned, budget)
    holds = [(t, 0.04) for t in np.arange(1.0, 2 * budget, 0.1)]
    work = drive(plant, session, holds=holds)
    # At the budget the rest of the schedule became a return to the end pose, from the
    # measured pose and within the SysID velocity limit (never a jump), then the joint ended.
    assert budget < plant.time < budget + 10.0, (plant.time, budget)
    exp = session.experiments[0]
    cut = np.nonzero(exp.t > budget)[0][0]
    speed = np.abs(np.diff(exp.position[cut - 1:], axis=0)) / np.diff(exp.t[cut - 1:])[:, None]
    assert speed.max() <= s.velocity_limit.max() * 1.01, speed.max()
    assert np.allclose(exp.position[-1], end)
    assert any(name.startswith('cut short') for _, name in exp.phases), exp.phases
    work()
    assert not session.results
    [failure] = session.failures
    assert failure['reason'] == 'disturbed' and failure['joint'] == 'shoulder_pitch'
    assert 'cut short after' in failure['detail'], failure
    assert 'disturbance(s) of this joint' in failure['detail'], failure
    assert 'safety_supervisor held the commands' in failure['detail'], failure
    assert failure['repeats'] and session.commanding_done


def test_a_joints_recording_is_made_by_its_estimation_not_in_the_command_loop(tmp_path,
                                                                              nominal):
    """finish_joint runs in the node's command tick: making some 20,000 samples into arrays
    there held the commands 43-55 ms at each joint's end (issue 42's trace). It hands the log
    to the estimation callable instead. Fails when finish_joint builds the recording itself."""
    session = SysidSession('friction', short('friction'), nominal, 'arm3', ['shoulder_pitch'],
                           np.zeros(3), str(tmp_path))
    session.command(0.0)
    for k in range(20):
        session.add_sample(0.002 * k, [0.0] * 3, [0.0] * 3, [0.0] * 3)
    made = []
    build = session._recording
    session._recording = lambda *a: made.append(len(a[1])) or build(*a)
    work = session.finish_joint()
    assert made == []                        # nothing built in the command loop
    assert session.samples == []             # the next joint logs afresh
    work()
    assert made == [20]                      # built by the estimation, from the handed log
    assert session.failures                  # 20 still samples estimate nothing: said so

"""An armature read less precisely than `armature_goal` gets more multi-sine (inertia_extend_s)
and is fit on both runs together, in inertia_id's session and in the core runner; one read
precisely enough gets none; with inertia_extend_budget_s the widest intervals get theirs
first and the run stays within it; the plan says what the extensions may cost."""

from dataclasses import replace

import numpy as np
import pytest

from simreal_ros.core.config import ConfigError
from simreal_ros.core.sysid import design_for
from simreal_ros.core.sysid.design import design_extension, plan
from simreal_ros.core.sysid.runner import (allot_extensions, identify_joint, identify_joints,
                                           join_runs, record)
from simreal_ros.core.sysid.session import SysidSession
# the arm3 fixtures `nominal` and `sim` too
from test_sysid_core import CONFIG, NAMES, make_plant, nominal, short, sim, truth  # noqa: F401
from test_sysid_repeat import drive


def half_width(doc):
    lo, hi = doc['interval']
    return 0.5 * (hi - lo)


def run_session(tmp_path, nominal, sim, goal):
    """inertia_id's session on arm3's shoulder pitch, driven as the node and the supervisor
    would; return (session, the joint's armature document)."""
    s = short('inertia', armature_goal=goal, inertia_extend_s=5.0)
    plant = make_plant(sim, truth(sim))
    session = SysidSession('inertia', s, nominal, 'arm3', ['shoulder_pitch'], np.zeros(3),
                           str(tmp_path))
    drive(plant, session)()
    if not session.commanding_done:       # the estimate queued an extension: run it
        ext = session.experiment
        assert ext.extension and ext.joint == 'shoulder_pitch'
        assert session.t0 is None           # it starts at its own first row
        names, pos, _, _ = session.command(plant.time)
        assert np.allclose(pos, ext.position[0])
        session.t0 = None                   # (drive sends that first command again)
        drive(plant, session)()
    assert session.commanding_done and not session.failures, session.failures
    arm = [d for d in session.results if d['parameter'] == 'armature']
    assert len(arm) == 1, session.results       # one result per joint, not one per run
    return session, arm[0]


def test_a_wide_armature_gets_its_extension_and_narrows(tmp_path, nominal, sim):
    session, arm = run_session(tmp_path / 'tight', nominal, sim, goal=0.001)
    ext = arm['extension']
    lo, hi = ext['armature_interval_before']
    before = 0.5 * (hi - lo)
    # Twice the multi-sine: the interval narrows by about 1/sqrt(2) (noise-limited here).
    assert half_width(arm) < 0.85 * before, (half_width(arm), before)
    assert ext['robot_time_s'] == pytest.approx(session.experiments[1].duration, abs=0.05)
    assert arm['robot_time_s'] > session.experiments[0].duration + ext['robot_time_s'] - 0.1
    assert len(session.experiments) == 2 and 'error' not in ext
    tr = truth(sim)
    assert abs(arm['value'] - tr.armature[1]) <= 1.2 * half_width(arm) + 1e-9
    # The report says which joint got one, what it cost and what it gave.
    from simreal_ros.client.sysid_report import write_report
    page = open(write_report(str(tmp_path / 'report'), 'arm3', [
        {'robot': 'arm3', 'experiment': 'inertia', 'results': session.results,
         'failures': []}])).read()
    listed = page.split('id="extensions"')[1].split('</ul>')[0]
    assert 'shoulder_pitch' in listed and f'+{ext["robot_time_s"]:.1f} s' in listed, listed


def test_an_armature_within_its_goal_gets_no_extension(tmp_path, nominal, sim):
    session, arm = run_session(tmp_path / 'loose', nominal, sim, goal=0.9)
    assert 'extension' not in arm and len(session.experiments) == 1


def test_the_core_runner_extends_as_the_node_does(nominal, sim):
    settings = {k: short(k, **({'armature_goal': 0.001, 'inertia_extend_s': 5.0}
                               if k == 'inertia' else {}))
                for k in ('inertia',)}
    plain = {'inertia': short('inertia')}
    res = identify_joint(make_plant(sim, truth(sim)), settings, nominal, 'shoulder_pitch',
                         kinds=('inertia',))
    ref = identify_joint(make_plant(sim, truth(sim)), plain, nominal, 'shoulder_pitch',
                         kinds=('inertia',))
    assert res.extended['inertia']['robot_time_s'] > 5.0 and not ref.extended
    assert res.robot_time['inertia'] == pytest.approx(
        ref.robot_time['inertia'] + res.extended['inertia']['robot_time_s'], abs=0.05)
    lo, hi = res.fits['inertia'].estimates['armature'].interval
    lo0, hi0 = ref.fits['inertia'].estimates['armature'].interval
    assert hi - lo < 0.85 * (hi0 - lo0)


def test_join_runs_keeps_each_runs_samples_and_segments(nominal, sim):
    s = short('inertia', inertia_extend_s=5.0)
    plant = make_plant(sim, truth(sim))
    e1 = design_for('inertia', 'elbow_pitch', s, nominal, s.hold_position)
    r1 = record(plant, e1)
    e2 = design_extension('elbow_pitch', s, nominal, e1.position[-1])
    r2 = record(plant, e2)
    exp, rec = join_runs((e1, r1), (e2, r2))
    rec.validate()                                   # times keep increasing across the join
    # ... also where a run's first samples came before its first command (a node's clock)
    early = replace(r2, t=r2.t - 0.05)
    _, joined = join_runs((e1, r1), (e2, early))
    joined.validate()
    assert joined.t[len(r1.t)] > r1.t[-1]
    assert len(rec.t) == len(r1.t) + len(r2.t) and len(exp.t) == len(e1.t) + len(e2.t)
    assert sorted(set(exp.segment[exp.segment >= 0])) == [0, 1]
    assert exp.extension and not e1.extension and e2.extension
    # another phase draw: not the first run's multi-sine again
    assert not np.allclose(e2.position[:len(e1.t)].T[2][:500], e1.position.T[2][:500])


def test_extension_settings_are_checked_and_planned(nominal):
    with pytest.raises(ConfigError, match='inertia_extend_s'):
        short('inertia', inertia_extend_s=1.0).validate('inertia_id')
    with pytest.raises(ConfigError, match='armature_goal'):
        short('inertia', armature_goal=-0.1).validate('inertia_id')
    result = plan(CONFIG, kinds=('inertia',))
    # arm3's file asks for none: the plan's maximum is its plan
    assert result['extensions_s'] == 0 and result['per_joint_max_s'] == result['per_joint_s']


def test_the_budget_goes_to_the_widest_intervals_first():
    # (joint, armature width, cost s)
    wants = [('a', 0.06, 10.0), ('b', 0.15, 10.0), ('c', 0.09, 10.0), ('d', 0.07, 4.0)]
    assert allot_extensions(wants, 25.0) == (['b', 'c', 'd'], ['a'])
    assert allot_extensions(wants, 9.0) == (['d'], ['b', 'c', 'a'])
    assert allot_extensions(wants, 0.0) == (['b', 'c', 'd', 'a'], [])     # 0: no cap
    assert allot_extensions([], 10.0) == ([], [])


def _width(interval):
    lo, hi = interval
    return (hi - lo) / (hi + lo)


def test_a_budgeted_session_extends_the_widest_armature_once_every_joint_is_fit(
        tmp_path, nominal, sim):
    """Two joints want an extension and the budget holds one: none is queued before both
    first runs are fit, the wider interval gets it, the other keeps its first run's result
    and says the budget went elsewhere; the run's robot time stays within plan + budget."""
    one = design_extension('shoulder_pitch', short('inertia', inertia_extend_s=5.0), nominal,
                           np.zeros(3)).duration
    s = short('inertia', armature_goal=0.001, inertia_extend_s=5.0,
              inertia_extend_budget_s=1.5 * one)
    plant = make_plant(sim, truth(sim))
    session = SysidSession('inertia', s, nominal, 'arm3', ['shoulder_pitch', 'elbow_pitch'],
                           np.zeros(3), str(tmp_path))
    drive(plant, session)()
    assert len(session.experiments) == 2          # the first joint's extension waits
    for _ in range(3):
        if session.commanding_done:
            break
        drive(plant, session)()
    assert session.commanding_done and not session.failures, session.failures
    assert len(session.experiments) == 3 and session.experiments[2].extension
    arm = {d['joint']: d for d in session.results if d['parameter'] == 'armature'}
    assert sorted(arm) == ['elbow_pitch', 'shoulder_pitch']
    ext = {j: d['extension'] for j, d in arm.items()}
    granted = [j for j, e in ext.items() if e['robot_time_s'] > 0]
    skipped = [j for j, e in ext.items() if e.get('skipped')]
    assert len(granted) == 1 and len(skipped) == 1, ext
    assert session.experiments[2].joint == granted[0]
    assert (_width(ext[granted[0]]['armature_interval_before'])
            > _width(ext[skipped[0]]['armature_interval_before']))
    assert 'inertia_extend_budget_s' in ext[skipped[0]]['skipped']
    assert arm[skipped[0]]['interval'] == pytest.approx(
        ext[skipped[0]]['armature_interval_before'])
    assert ext[granted[0]]['robot_time_s'] <= s.inertia_extend_budget_s
    # The report names both: the one extended and the one the budget did not reach.
    from simreal_ros.client.sysid_report import write_report
    page = open(write_report(str(tmp_path / 'report'), 'arm3', [
        {'robot': 'arm3', 'experiment': 'inertia', 'results': session.results,
         'failures': []}])).read()
    listed = page.split('id="extensions"')[1].split('</ul>')[0]
    assert granted[0] in listed and skipped[0] in listed and 'not extended' in listed, listed


def test_the_core_runner_allots_the_budget_as_the_session_does(nominal, sim):
    one = design_extension('shoulder_pitch', short('inertia', inertia_extend_s=5.0), nominal,
                           np.zeros(3)).duration
    s = {'inertia': short('inertia', armature_goal=0.001, inertia_extend_s=5.0,
                          inertia_extend_budget_s=1.5 * one)}
    out = identify_joints(make_plant(sim, truth(sim)), s, nominal,
                          NAMES, kinds=('inertia',))
    ext = {j: r.extended['inertia'] for j, r in out.items()}
    granted = [j for j, e in ext.items() if e['robot_time_s'] > 0]
    assert len(granted) == 1 and sum(bool(e.get('skipped')) for e in ext.values()) == 2
    assert _width(ext[granted[0]]['armature_interval_before']) == max(
        _width(e['armature_interval_before']) for e in ext.values())
    # the extended joint's result is the joined fit, the others' their first run's
    for j, r in out.items():
        interval = list(r.fits['inertia'].estimates['armature'].interval)
        assert (interval == ext[j]['armature_interval_before']) == (j not in granted)


def test_the_budget_is_checked_and_bounds_the_plan(nominal):
    with pytest.raises(ConfigError, match='inertia_extend_budget_s'):
        short('inertia', inertia_extend_budget_s=-1.0).validate('inertia_id')


def test_an_extension_whose_joined_fit_fails_leaves_the_first_result(tmp_path, nominal, sim,
                                                                     monkeypatch):
    """The two runs fit together raise (here forced): the joint keeps its first run's
    armature and says why, instead of failing the joint it had already identified."""
    import simreal_ros.core.sysid.session as session_module
    from simreal_ros.core.sysid.estimators import IdentificationError
    real = session_module.estimate_inertia

    def joined_fails(rec, exp, *args, **kwargs):
        if exp.extension:
            raise IdentificationError('not enough excitation', 'forced by the test')
        return real(rec, exp, *args, **kwargs)
    monkeypatch.setattr(session_module, 'estimate_inertia', joined_fails)
    session, arm = run_session(tmp_path, nominal, sim, goal=0.001)
    ext = arm['extension']
    assert 'fit together failed' in ext['error'] and 'forced by the test' in ext['error']
    assert arm['interval'] == pytest.approx(ext['armature_interval_before'])
    assert ext['robot_time_s'] > 0 and len(session.experiments) == 2


def test_the_runner_keeps_the_first_result_when_the_joined_fit_fails(nominal, sim, monkeypatch):
    """The bench's path (runner.identify_joints) does what inertia_id does, in its words."""
    import simreal_ros.core.sysid.runner as runner_module
    from simreal_ros.core.sysid.estimators import IdentificationError
    real = runner_module.estimate_inertia

    def joined_fails(rec, exp, *args, **kwargs):
        if exp.extension:
            raise IdentificationError('not enough excitation', 'forced by the test')
        return real(rec, exp, *args, **kwargs)
    monkeypatch.setattr(runner_module, 'estimate_inertia', joined_fails)
    s = {'inertia': short('inertia', armature_goal=0.001, inertia_extend_s=5.0)}
    out = identify_joints(make_plant(sim, truth(sim)), s, nominal, ['shoulder_pitch'],
                          kinds=('inertia',))
    r = out['shoulder_pitch']
    ext = r.extended['inertia']
    assert ext['error'] == 'the two runs fit together failed: forced by the test', ext
    assert ext['robot_time_s'] > 0
    assert list(r.fits['inertia'].estimates['armature'].interval) == pytest.approx(
        ext['armature_interval_before'])

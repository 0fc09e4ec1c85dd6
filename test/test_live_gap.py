"""The live reality gap without ROS: the shadow's windows and status, the supervisor's gate."""
import math

import numpy as np
import pytest

from simreal_ros.core.config import ConfigError
from simreal_ros.core.safety import SupervisorConfig
from simreal_ros.core.safety.live_gap import LiveGapGate

from test_safety_core import NAMES, Rig, config


def doc(t, status='OK', identified=True, gaps=(1.0, 1.0), **extra):
    joints = {n: {'status': status if i == 1 or status != 'ERROR' else 'OK',
                  'gap_over_floor': g} for i, (n, g) in enumerate(zip(NAMES, gaps))}
    d = {'stamp': t, 'status': status, 'identified': identified, 'joints': joints,
         'worst_joint': NAMES[int(np.argmax(gaps))], 'reason': 'test'}
    d.update(extra)
    return d


def clean(r, seconds, gap=None, every=0.5):
    """Forward the policy cleanly for `seconds`; feed a live-gap document every `every` s."""
    next_gap = r.t
    for _ in range(int(round(seconds / 0.002))):
        out = r.step()
        assert out is not None and not out.safe, r.sup.status(r.t)['safe_reason']
        if gap is not None and r.t >= next_gap:
            assert r.sup.on_live_gap(gap(r.t), r.t)[0]
            next_gap = r.t + every


def test_without_an_identified_model_the_gate_stays_off():
    r = Rig(stage_dwell_s=[0.1])
    clean(r, 0.2)
    assert r.sup.advance_stage(r.t)[0]           # nothing known about a model: not gated
    assert r.sup.status(r.t)['live_gap']['required'] is False
    r = Rig(stage_dwell_s=[0.1])
    clean(r, 0.2, gap=lambda t: doc(t, identified=False, status='unknown'))
    assert r.sup.advance_stage(r.t)[0]           # a shadow of the nominal model: not gated


def test_an_identified_model_needs_a_fresh_live_gap_to_promote():
    r = Rig(stage_dwell_s=[0.1], stages=[0.25, 0.5, 1.0])
    clean(r, 0.2, gap=lambda t: doc(t))
    assert r.sup.status(r.t)['live_gap']['required'] is True
    ok, why = r.sup.advance_stage(r.t)
    assert ok, why
    clean(r, 2.5)                                # the shadow went silent (auto stays on)
    ok, why = r.sup.advance_stage(r.t)
    assert not ok and 'live gap unknown' in why and 'old' in why, why
    assert r.sup.stage.scale == 0.5
    r.sup.on_live_gap(doc(r.t, status='unknown', reason='no hardware/command yet'), r.t)
    ok, why = r.sup.advance_stage(r.t)
    assert not ok and 'no hardware/command yet' in why, why


def test_a_stale_stamp_is_no_fresh_value_even_when_it_just_arrived():
    r = Rig(stage_dwell_s=[0.1])
    clean(r, 0.2)
    r.sup.on_live_gap(doc(r.t - 5.0), r.t)       # latched, from an earlier run
    ok, why = r.sup.advance_stage(r.t)
    assert not ok and 'old' in why, why


def test_require_true_refuses_before_any_value_and_false_never_gates():
    r = Rig(stage_dwell_s=[0.1], **{'live_gap.require': 'true'})
    clean(r, 0.2)
    ok, why = r.sup.advance_stage(r.t)
    assert not ok and 'no value from the shadow model' in why, why
    r = Rig(stage_dwell_s=[0.1], **{'live_gap.require': 'false'})
    clean(r, 0.2, gap=lambda t: doc(t, status='ERROR', gaps=(1.0, 9.0)))
    assert r.sup.advance_stage(r.t)[0]


def test_a_gap_above_threshold_refuses_naming_the_joint_also_auto_advance():
    r = Rig(stage_dwell_s=[0.1])
    clean(r, 0.3, gap=lambda t: doc(t, status='ERROR', gaps=(1.1, 7.5)))
    ok, why = r.sup.advance_stage(r.t)
    assert not ok and 'b 7.5x' in why and 'above its threshold' in why, why
    a = Rig(stage_dwell_s=[0.1], auto_advance=True)
    clean(a, 0.3, gap=lambda t: doc(t, status='ERROR', gaps=(1.1, 7.5)))
    assert a.sup.stage.scale == 0.5              # auto_advance held as well
    clean(a, 0.3, gap=lambda t: doc(t, status='WARN', gaps=(1.1, 2.5)))
    assert a.sup.stage.scale == 1.0              # WARN passes


def test_a_failed_offline_evaluation_refuses_promotion():
    r = Rig(stage_dwell_s=[0.1])
    offline = {'passed': False, 'gap': 0.31, 'threshold': 0.15, 'recording': 'x.mcap'}
    clean(r, 0.2, gap=lambda t: doc(t, offline=offline))
    ok, why = r.sup.advance_stage(r.t)
    assert not ok and 'offline reality gap failed: 31.00 %' in why, why


@pytest.mark.parametrize('action', ['hold', 'demote', 'estop'])
def test_sustained_drift_holds_demotes_or_estops(action):
    r = Rig(stage_dwell_s=[0.0], stages=[0.25, 0.5, 1.0],
            **{'live_gap.drift_action': action, 'live_gap.drift_s': 1.0})
    clean(r, 0.1, gap=lambda t: doc(t))
    assert r.sup.advance_stage(r.t)[0] and r.sup.advance_stage(r.t)[0]
    assert r.sup.stage.scale == 1.0
    for _ in range(int(0.9 / 0.002)):            # drift shorter than drift_s: nothing
        r.step()
        r.sup.on_live_gap(doc(r.t, status='ERROR', gaps=(1.0, 8.0)), r.t)
    assert r.sup.stage.scale == 1.0 and not r.sup.latched
    def drift(seconds):
        for _ in range(int(seconds / 0.002)):
            r.step()
            r.sup.on_live_gap(doc(r.t, status='ERROR', gaps=(1.0, 8.0)), r.t)
    drift(0.3)
    if action == 'hold':
        drift(2.0)
        assert r.sup.stage.scale == 1.0 and not r.sup.latched
    elif action == 'demote':
        assert r.sup.stage.scale == 0.5 and not r.sup.latched
        assert 'live gap drift: b' in r.sup.stage.transitions[-1]['cause']
        drift(1.0)                                   # still drifting: one more stage down
        assert r.sup.stage.scale == 0.25
    else:
        assert r.sup.latched and 'live gap drift: b at 8.0x' in r.sup.cause, r.sup.cause


def test_malformed_live_gap_documents_are_counted_and_ignored():
    r = Rig()
    for bad, why in ((doc(r.t, gaps=(1.0, math.nan)), 'gap_over_floor must be a number'),
                     ({**doc(r.t), 'stamp': math.nan}, 'stamp must be a finite'),
                     ({**doc(r.t), 'joints': {'x': {'status': 'OK'}}}, "'x', not a supervised"),
                     ({**doc(r.t), 'status': 'FINE'}, 'status must be'), ([1], 'JSON object')):
        ok, reason = r.sup.on_live_gap(bad, r.t)
        assert not ok and why in reason, reason
    assert r.sup.status(r.t)['live_gap']['malformed'] == 5
    assert r.sup.live_gap.doc is None


@pytest.mark.parametrize('key,value,why', [
    ('live_gap.require', 'sometimes', 'live_gap.require must be one of'),
    ('live_gap.drift_action', 'panic', 'live_gap.drift_action must be one of'),
    ('live_gap.max_age_s', 0.0, 'live_gap.max_age_s must be > 0'),
    ('live_gap.drift_s', math.nan, 'live_gap.drift_s must be > 0'),
])
def test_bad_gate_parameters_are_named(key, value, why):
    with pytest.raises(ConfigError, match=why):
        SupervisorConfig.from_params({**vars_of(config()), key: value})


def vars_of(cfg):
    """The flat parameters test_safety_core.config() builds from, recovered for an override."""
    return dict(joint_names=NAMES, kp=[100.0, 100.0], kd=[2.0, 2.0],
                position_lower=[-1.0, -1.0], position_upper=[1.0, 1.0],
                velocity_limit=[2.0, 2.0], torque_limit=[20.0, 20.0],
                max_target_rate=[10.0, 10.0], trip_velocity=[5.0, 5.0])


def test_gate_alone_reports_unknown_until_a_value_arrives():
    g = LiveGapGate('true')
    assert 'no value' in g.refusal(0.0)
    g.on_gap(doc(0.0), 0.0)
    assert g.refusal(1.0) is None and 'old' in g.refusal(3.0)


# -- the shadow (core.bridge.shadow) on a SimPlant: the same true plant as sim_robot -----------
@pytest.fixture(scope='module')
def arm3():
    import os
    from simreal_ros.core.bridge import BridgeSession, JointParams
    from simreal_ros.core.config import load_node_params
    from simreal_ros.core.plant import PlantTruth
    from simreal_ros.core.sysid import NominalModel
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cfg = os.path.join(repo, 'config', 'robots', 'arm3.yaml')
    model = os.path.join(repo, 'models', 'arm3', 'arm3.xml')
    sim = load_node_params(cfg, 'sim_robot')
    names = list(sim['joint_names'])
    truth = PlantTruth.from_mapping({k[len('plant.'):]: v for k, v in sim.items()
                                     if k.startswith('plant.')}, len(names))
    session = BridgeSession.from_params(load_node_params(cfg, 'sim_bridge'), os.path.dirname(cfg))
    params = JointParams(names, truth.viscous_damping.copy(), truth.coulomb_friction.copy(),
                         truth.armature.copy(), truth.latency_s)
    return dict(names=names, truth=truth, session=session, params=params, model=model, sim=sim,
                nominal=NominalModel(model, names))


def deploy(arm3, seed, friction=None, seconds=5.0):
    """A policy-like run of the true plant; friction: (joint index, factor) from the start."""
    from simreal_ros.core.bridge.excite import multisine_run, record_run
    from simreal_ros.core.plant import SimPlant
    sp = SimPlant(arm3['model'], arm3['names'], 0.001, arm3['sim']['kp'], arm3['sim']['kd'],
                  truth=arm3['truth'], seed=seed)
    if friction:
        sp.model.dof_frictionloss[sp.dof[friction[0]]] *= friction[1]
    return record_run(sp, multisine_run(arm3['names'], 0.0, [0.2] * 3, (0.3, 2.0), seconds,
                                        nominal=arm3['nominal'], seed=seed, rate_hz=100))


def shadow_of(arm3, rec, floor=True, **cfg):
    from simreal_ros.core.bridge.shadow import ShadowConfig, ShadowGap, noise_floor_of
    sg = ShadowGap(arm3['session'].replayer, ShadowConfig(**cfg))
    sg.set_params(arm3['params'], identified=True)
    if floor:
        sg.set_floor(*noise_floor_of(deploy(arm3, 1), arm3['names']))
    return sg


def stream(sg, rec, every_s=0.5, sent_t=None, applied=False, applied_until=math.inf,
           first_eval=0.0):
    """Feed `rec` to the shadow in time order, evaluating every `every_s` from `first_eval`;
    return the docs. The commands go in at `sent_t` (default: the recording's command
    times) and, with `applied`, at the recording's command times as applied, until
    `applied_until`."""
    sent_t = rec.cmd_t if sent_t is None else sent_t
    docs, si, ai, next_eval = [], 0, 0, first_eval
    for k, t in enumerate(rec.t):
        while si < len(sent_t) and sent_t[si] <= t:
            sg.add_command(sent_t[si], rec.names, rec.cmd_position[si],
                           rec.cmd_velocity[si], rec.cmd_effort[si])
            si += 1
        while applied and ai < len(rec.cmd_t) and rec.cmd_t[ai] <= min(t, applied_until):
            assert sg.add_applied(rec.cmd_t[ai], rec.names, rec.cmd_position[ai],
                                  rec.cmd_velocity[ai], rec.cmd_effort[ai])
            ai += 1
        sg.add_state(t, rec.names, rec.position[k], rec.velocity[k])
        if t >= next_eval:
            docs.append(sg.evaluate())
            next_eval = t + every_s
    return docs


def test_shadow_of_the_unchanged_plant_is_at_the_noise_floor(arm3):
    sg = shadow_of(arm3, None)
    docs = stream(sg, deploy(arm3, 7))
    assert docs[0]['status'] == 'unknown' and 'a window needs' in docs[0]['reason']
    scored = [d for d in docs if d['status'] != 'unknown']
    assert len(scored) >= 6
    for d in scored:
        assert d['status'] == 'OK', d
        assert d['floor_source'] == 'offline' and d['identified'] is True
        for j in d['joints'].values():
            assert 0.5 < j['gap_over_floor'] < 1.5, j
            assert math.isfinite(j['nrmse_position']) and math.isfinite(j['nrmse_velocity'])


def test_shadow_names_the_joint_whose_friction_changed_after_persist_windows(arm3):
    sg = shadow_of(arm3, None, persist_windows=2)
    scored = [d for d in stream(sg, deploy(arm3, 7, friction=(2, 3.0)))
              if d['status'] != 'unknown']
    assert scored[0]['status'] == 'WARN'            # one window over: not yet drift
    assert scored[1]['status'] == 'ERROR' and scored[1]['worst_joint'] == 'elbow_pitch'
    assert scored[1]['joints']['elbow_pitch']['status'] == 'ERROR'
    assert scored[1]['joints']['elbow_pitch']['gap_over_floor'] > 10
    sg = shadow_of(arm3, None)                      # the default: 4 windows
    scored = [d for d in stream(sg, deploy(arm3, 7, friction=(2, 3.0)))
              if d['status'] != 'unknown']
    assert [d['status'] for d in scored[:4]] == ['WARN'] * 3 + ['ERROR']


def test_a_hole_in_the_data_is_not_scored(arm3):
    sg = shadow_of(arm3, None)
    rec = deploy(arm3, 7, seconds=3.0)
    keep = (rec.t < 1.0) | (rec.t > 1.08)           # 80 ms without joint_states (a stall)
    docs, ci = [], 0
    for k, t in enumerate(rec.t):
        while ci < len(rec.cmd_t) and rec.cmd_t[ci] <= t:
            sg.add_command(rec.cmd_t[ci], rec.names, rec.cmd_position[ci],
                           rec.cmd_velocity[ci], rec.cmd_effort[ci])
            ci += 1
        if keep[k]:
            sg.add_state(t, rec.names, rec.position[k], rec.velocity[k])
        if k == len(rec.t) // 2 + 100:
            docs.append(sg.evaluate())
    assert docs[0]['status'] == 'unknown' and 'ms hole in joint_states' in docs[0]['reason']


def test_shadow_without_commands_or_model_is_unknown_never_ok(arm3):
    from simreal_ros.core.bridge.shadow import ShadowGap
    rec = deploy(arm3, 7, seconds=2.0)
    sg = ShadowGap(arm3['session'].replayer)
    for k, t in enumerate(rec.t):
        sg.add_state(t, rec.names, rec.position[k], rec.velocity[k])
    d = sg.evaluate()
    assert d['status'] == 'unknown' and 'no model parameters' in d['reason']
    sg.set_params(arm3['params'], identified=True)
    d = sg.evaluate()
    assert d['status'] == 'unknown' and 'no hardware/command' in d['reason']
    assert all(j['status'] == 'unknown' for j in d['joints'].values())


def test_shadow_rejects_bad_input_naming_it(arm3):
    from simreal_ros.core.bridge.shadow import ShadowConfig, ShadowGap
    sg = ShadowGap(arm3['session'].replayer)
    assert not sg.add_command(0.0, ['wrist'], [0.1])                     # unknown joint
    assert not sg.add_state(0.0, arm3['names'], [0.0, math.nan, 0.0], [0.0] * 3)
    assert not sg.add_state(0.0, arm3['names'][:2], [0.0, 0.0], [0.0, 0.0])   # a joint missing
    assert sg.rejected == 3 and not sg.states and not sg.commands
    # A sample stamped before (or with) the newest one is not newer: the window stays in order
    # (issue 42: a reordering driver); counted.
    assert sg.add_state(1.0, arm3['names'], [0.0] * 3, [0.0] * 3)
    assert not sg.add_state(0.97, arm3['names'], [0.1] * 3, [0.0] * 3)
    assert not sg.add_state(1.0, arm3['names'], [0.1] * 3, [0.0] * 3)
    assert sg.rejected == 5 and [s[0] for s in sg.states] == [1.0]
    with pytest.raises(ValueError, match='noise floor velocity'):
        sg.set_floor([1e-4] * 3, [1e-3, math.nan, 1e-3])
    with pytest.raises(ConfigError, match='sim_bridge.shadow.error_ratio'):
        ShadowConfig(warn_ratio=3.0, error_ratio=2.0).validate()


def test_an_error_holds_until_the_gap_is_back_below_warn_for_persist_windows(arm3):
    sg = shadow_of(arm3, None)                     # warn 3, error 5, 4 windows
    ratios = [9, 9, 9, 9, 4, 9, 2, 2, 2, 4, 2, 2, 2, 2, 4]
    got = [sg.level(2, r) for r in ratios]
    assert got == ['WARN'] * 3 + ['ERROR'] * 10 + ['OK', 'WARN']


def test_an_untrusted_live_gap_refuses_promotion_until_its_publishers_keep_their_rule():
    r = Rig(stage_dwell_s=[0.1], **{'live_gap.require': 'true'})
    clean(r, 0.3, gap=lambda t: doc(t))
    r.sup.live_gap.untrusted = '/rogue publish sim_bridge/live_gap, which only /sim_bridge may'
    ok, why = r.sup.advance_stage(r.t)
    assert not ok and why.startswith('live gap not trusted: /rogue'), why
    r.sup.live_gap.untrusted = ''
    assert r.sup.advance_stage(r.t)[0]


# -- issue 41: the shadow replays the commands as the driver applied them --------------------
def late_run(arm3, seed=7, seconds=6.0, late_every=4, transport_s=0.0003):
    """A 500 Hz run whose commands reach the plant `transport_s` after they were sent, and one
    in `late_every` (at random) a period later still: the driver's loop had computed that
    period before it arrived (sim_robot, issue 41). Return (recording at the apply times, send
    times, the latency identified from the send times: the plant's and the usual transport)."""
    from dataclasses import replace
    from simreal_ros.core.bridge.excite import multisine_run, record_run
    from simreal_ros.core.plant import SimPlant
    rng = np.random.default_rng(seed)
    run = multisine_run(arm3['names'], 0.0, [0.3] * 3, (0.5, 3.0), seconds,
                        nominal=arm3['nominal'], seed=seed, rate_hz=500)
    period = run.t[1] - run.t[0]
    late = rng.random(len(run.t)) < 1.0 / late_every
    applied = np.maximum.accumulate(run.t + transport_s + period * late)
    sp = SimPlant(arm3['model'], arm3['names'], 0.001, arm3['sim']['kp'], arm3['sim']['kd'],
                  truth=arm3['truth'], seed=seed)
    rec = record_run(sp, replace(run, t=applied))
    return rec, run.t, arm3['truth'].latency_s + transport_s


def stream_both(sg, rec, sent_t, applied=True, applied_until=math.inf, every_s=0.5):
    """Feed states, the commands at their send times and (applied) at their apply times."""
    return stream(sg, rec, every_s, sent_t, applied, applied_until, first_eval=1.6)


def test_the_applied_commands_score_near_the_floor_where_the_sent_ones_do_not(arm3):
    rec, sent_t, latency = late_run(arm3, late_every=10)
    params = arm3['params'].copy()
    params.latency_s = latency               # as identified from the commands as sent
    scores = {}
    for applied in (True, False):
        sg = shadow_of(arm3, None)
        sg.set_params(params, identified=True)
        docs = [d for d in stream_both(sg, rec, sent_t, applied=applied)
                if d['status'] != 'unknown']
        assert len(docs) >= 6
        scores[applied] = float(np.median([d['gap_over_floor'] for d in docs]))
        source = docs[-1]['command_source']
        assert source == ('driver/applied_command' if applied else 'hardware/command')
    d = docs[-1]
    assert d['command_source_reason'] == 'no driver/applied_command received'
    assert scores[True] < 1.3, scores
    assert scores[False] > 1.5 * scores[True], scores


def test_the_offset_of_the_applied_commands_is_not_counted_twice(arm3):
    rec, sent_t, latency = late_run(arm3, late_every=10 ** 9, transport_s=0.004)
    params = arm3['params'].copy()
    params.latency_s = latency
    sg = shadow_of(arm3, None)
    sg.set_params(params, identified=True)
    docs = [d for d in stream_both(sg, rec, sent_t) if d['status'] != 'unknown']
    d = docs[-1]
    assert d['command_source'] == 'driver/applied_command'
    assert d['applied_offset_s'] == pytest.approx(0.004, abs=1e-4)
    assert d['replay_delay_s'] == pytest.approx(arm3['truth'].latency_s, abs=1e-4)
    assert float(np.median([d['gap_over_floor'] for d in docs])) < 1.3
    params.latency_s = 0.001                 # less than the offset: never a negative delay
    sg.set_params(params, identified=True)
    assert sg.evaluate()['replay_delay_s'] == 0.0
    # A latency identified on the plant itself (no transport in it): replayed as it is.
    params.latency_s = arm3['truth'].latency_s
    sg = shadow_of(arm3, None)
    sg.set_params(params, identified=True)
    sg.transport_in_latency = False
    docs = [d for d in stream_both(sg, rec, sent_t) if d['status'] != 'unknown']
    assert docs[-1]['replay_delay_s'] == arm3['truth'].latency_s
    assert float(np.median([d['gap_over_floor'] for d in docs])) < 1.3


def test_the_shadow_falls_back_to_the_sent_commands_when_the_echo_stops(arm3):
    rec, sent_t, latency = late_run(arm3, seconds=5.0)
    params = arm3['params'].copy()
    params.latency_s = latency
    sg = shadow_of(arm3, None)
    sg.set_params(params, identified=True)
    docs = [d for d in stream_both(sg, rec, sent_t, applied_until=3.0)
            if d['status'] != 'unknown']
    sources = [d['command_source'] for d in docs]
    assert sources[0] == 'driver/applied_command' and sources[-1] == 'hardware/command'
    assert 'driver/applied_command stopped' in docs[-1]['command_source_reason']
    assert all(d['status'] != 'unknown' for d in docs)   # scored on, from what was sent
    sg = shadow_of(arm3, None)                       # sim_bridge shadow.use_applied false
    sg.set_params(params, identified=True)
    sg.applied_off = 'shadow.use_applied is false'
    docs = [d for d in stream_both(sg, rec, sent_t) if d['status'] != 'unknown']
    assert {d['command_source'] for d in docs} == {'hardware/command'}
    assert docs[-1]['command_source_reason'] == 'shadow.use_applied is false'


def test_applied_commands_out_of_order_or_malformed_are_counted(arm3):
    from simreal_ros.core.bridge.shadow import ShadowGap
    sg = ShadowGap(arm3['session'].replayer)
    assert sg.add_applied(1.0, arm3['names'], [0.0] * 3)
    assert not sg.add_applied(0.9, arm3['names'], [0.1] * 3)          # before the newest
    assert not sg.add_applied(1.1, ['wrist'], [0.1])                  # unknown joint
    assert not sg.add_applied(math.nan, arm3['names'], [0.1] * 3)
    assert sg.rejected == 3 and len(sg.applied) == 1
    assert sg.evaluate()['rejected'] == 3                 # published, not silently dropped


def test_an_applied_stamp_a_microsecond_early_is_replayed_in_order_and_counted(arm3):
    """Two commands a driver hands on at one instant may carry stamps a hair apart, the newer
    one first (sim_robot read its clock offset anew for each: 1 us). The driver obeys the newer;
    dropped as out of order, the replay kept the older target: on a loaded demo 7 % of the
    commands, and the live gap of an unchanged plant 8 x its noise floor."""
    sg = shadow_of(arm3, None)
    rec = deploy(arm3, 7)
    docs, ai, next_eval = [], 0, 0.0
    for k, t in enumerate(rec.t):
        while ai < len(rec.cmd_t) and rec.cmd_t[ai] <= t:
            stale = max(ai - 1, 0)     # the target before it, then the new one 1 us "earlier"
            for row, stamp in ((stale, rec.cmd_t[ai]), (ai, rec.cmd_t[ai] - 1e-6)):
                sg.add_command(rec.cmd_t[ai], rec.names, rec.cmd_position[row],
                               rec.cmd_velocity[row], rec.cmd_effort[row])
                assert sg.add_applied(stamp, rec.names, rec.cmd_position[row],
                                      rec.cmd_velocity[row], rec.cmd_effort[row])
            ai += 1
        sg.add_state(t, rec.names, rec.position[k], rec.velocity[k])
        if t >= next_eval:
            docs.append(sg.evaluate())
            next_eval = t + 0.5
    scored = [d for d in docs if d['status'] != 'unknown']
    assert len(scored) >= 6
    assert {d['command_source'] for d in scored} == {'driver/applied_command'}
    for d in scored:
        assert d['status'] == 'OK', d
        assert all(j['gap_over_floor'] < 1.5 for j in d['joints'].values()), d['joints']
    final = sg.evaluate()                  # every pair's newer command kept, and counted
    assert final['applied_clamped'] == ai == len(rec.cmd_t) and final['rejected'] == 0
    # more than APPLIED_SKEW_S back is out of order: rejected and counted, as before
    from simreal_ros.core.bridge.shadow import APPLIED_SKEW_S
    assert not sg.add_applied(rec.cmd_t[-1] - 2 * APPLIED_SKEW_S, rec.names,
                              rec.cmd_position[-1])
    assert sg.evaluate()['rejected'] == 1

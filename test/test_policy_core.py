"""Policy session and controller without ROS: state pairing, reset, metadata, bad outputs."""
import importlib.util

import numpy as np
import pytest

from conftest import REPO
from simreal_ros.core.actions import ActionProcessor
from simreal_ros.core.config import ConfigError, load_node_params
from simreal_ros.core.policy import PolicyController, PolicySession

_spec = importlib.util.spec_from_file_location('onnx_policies',
                                               REPO / 'scripts' / 'onnx_policies.py')
onnx_policies = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(onnx_policies)

ARM3 = REPO / 'config' / 'robots' / 'arm3.yaml'


def arm3_params(tmp_path, **overrides):
    params = load_node_params(ARM3, 'policy_runner')
    params['policy_path'] = onnx_policies.arm3(str(tmp_path / 'arm3.onnx'), nan_gate=9)
    params.update(overrides)
    return params


def test_recurrent_state_is_carried_and_zeroed_on_reset(tmp_path):
    path = onnx_policies.recurrent(str(tmp_path / 'rnn.onnx'), 4, 2, hidden=8)
    s = PolicySession(path)
    assert s.state_pairs == [('h_in', 'h_out')] and s.obs_size == 4
    obs = np.array([0.5, -0.2, 0.1, 0.3])
    first = s.run(obs)
    second = s.run(obs)
    assert np.abs(second - first).max() > 1e-3   # same input, different state -> different
    s.reset()
    np.testing.assert_array_equal(s.run(obs), first)


def test_the_session_runs_once_before_the_loop_and_starts_from_zero_state(tmp_path,
                                                                          monkeypatch):
    # onnxruntime's first run is slow (67 ms once, beside two busy loops, for the G1's LSTM
    # against 0.4 ms after): it happens when the session is made, not in the control loop.
    import onnxruntime
    from simreal_ros.core import policy as policy_module
    runs = []

    class Counting(onnxruntime.InferenceSession):
        def run(self, output_names, feeds, *args, **kwargs):
            runs.append({k: np.array(v) for k, v in feeds.items()})
            return super().run(output_names, feeds, *args, **kwargs)
    monkeypatch.setattr(policy_module.ort, 'InferenceSession', Counting)
    path = onnx_policies.recurrent(str(tmp_path / 'rnn.onnx'), 4, 2, hidden=8)
    s = PolicySession(path)
    assert len(runs) == 1 and s.warm_up_s > 0                 # warmed up, before any run()
    assert all(not v.any() for v in runs[0].values())          # on zeros
    obs = np.array([0.5, -0.2, 0.1, 0.3])
    first = s.run(obs)
    assert not runs[1]['h_in'].any()                  # the warm-up left no recurrent state
    s.reset()
    np.testing.assert_array_equal(s.run(obs), first)


def test_state_paired_by_shape_when_names_do_not_say(tmp_path):
    path = onnx_policies.recurrent(str(tmp_path / 'rnn.onnx'), 4, 2, hidden=5,
                                   names=('memory', 'new_memory'))
    s = PolicySession(path)
    assert s.state_pairs == [('memory', 'new_memory')] and s.output_name == 'actions'


def test_g1_lstm_pairs_h_and_c(g1_dir):
    s = PolicySession(g1_dir / 'policy.onnx')
    assert sorted(s.state_pairs) == [('c_in', 'c_out'), ('h_in', 'h_out')]
    assert (s.input_name, s.output_name, s.obs_size, s.action_size) == ('obs', 'actions', 47, 12)


def test_observation_length_mismatch_is_refused_with_the_terms(tmp_path):
    params = arm3_params(tmp_path)
    params['observation.terms'] = ['joint_pos', 'joint_vel', 'last_action']
    with pytest.raises(ConfigError) as err:
        PolicyController(params)
    text = str(err.value)
    assert 'observation length 9' in text and 'length 14' in text
    assert 'last_action (last_action): 3 = 3' in text


def test_missing_joints_are_named_at_start_up(tmp_path):
    params = arm3_params(tmp_path, policy_joint_names=['shoulder_yaw', 'wrist', 'elbow_pitch'])
    with pytest.raises(ConfigError, match=r"\['wrist'\] are not among the driver"):
        PolicyController(params)


def test_metadata_mismatch_is_refused(tmp_path):
    # The arm3 policy's metadata says action_scale 0.5 and the arm3 joint order.
    with pytest.raises(ConfigError, match='action.scale is .*metadata action_scale'):
        PolicyController(arm3_params(tmp_path, **{'action.scale': 0.25}))
    order = ['elbow_pitch', 'shoulder_pitch', 'shoulder_yaw']
    with pytest.raises(ConfigError, match='joint order: the policy was exported with'):
        PolicyController(arm3_params(tmp_path, policy_joint_names=order,
                                     default_position=[0.0, 0.0, 0.0]))
    ctl = PolicyController(arm3_params(tmp_path))
    assert 'joint_names match the metadata' in ctl.metadata_notes


def test_non_finite_output_raises_and_changes_nothing(tmp_path):
    ctl = PolicyController(arm3_params(tmp_path))
    names = ['shoulder_yaw', 'shoulder_pitch', 'elbow_pitch']
    inp = ctl.inputs(0.0, names, [0.1, 0.2, 0.3], [0.0, 0.0, 0.0])
    targets, action = ctl.step(inp)
    assert np.all(np.isfinite(targets))
    last = ctl.builder.last_action.copy()
    bad = ctl.inputs(0.0, names, [0.1, 0.2, 0.3], [0.0, 0.0, 0.0], command=[-3.0, 0, 0])
    with pytest.raises(ValueError, match='not finite'):
        ctl.step(bad)
    np.testing.assert_array_equal(ctl.builder.last_action, last)


def test_action_processing_clip_scale_offset_and_effort_mode():
    p = ActionProcessor(2, 'position', scale=[0.5, 2.0], clip=1.0, default_position=[0.1, 0.2])
    np.testing.assert_allclose(p.process([3.0, -0.5]), [0.6, -0.8])
    assert p.clipped == 1
    e = ActionProcessor(2, 'effort', scale=10.0, default_position=[0.1, 0.2])
    np.testing.assert_allclose(e.process([0.3, -0.5]), [3.0, -5.0])
    with pytest.raises(ValueError, match='not finite'):
        e.process([np.nan, 0.0])
    with pytest.raises(ConfigError, match='action.mode'):
        ActionProcessor(2, 'velocity')


def test_phase_aligner_ticks_after_the_arrivals_at_their_phase():
    from simreal_ros.core.policy import PhaseAligner
    rng = np.random.default_rng(0)
    al = PhaseAligner(margin_s=0.0002, min_samples=50)
    assert al.next_tick(0.0) is None                  # nothing measured yet
    t0 = 100.0007                                      # 500 Hz, phase 0.7 ms, jitter 0-0.3 ms
    arrivals = t0 + 0.002 * np.arange(200) + 0.0003 * rng.random(200)
    for a in arrivals:
        al.on_state(a)
    now = arrivals[-1] + 0.0001
    tick = al.next_tick(now)
    assert al.stream_period() == pytest.approx(0.002, abs=5e-5)
    # After (nearly) every arrival of its period, by the margin: not 2 ms late, not early.
    phase = (tick - t0) % 0.002
    assert 0.0003 + 0.0002 - 1e-4 <= phase <= 0.0003 + 0.0002 + 2e-4, phase
    assert now + al.min_lead < tick <= now + al.min_lead + 0.002


def test_phase_aligner_handles_arrivals_straddling_the_period_boundary():
    from simreal_ros.core.policy import PhaseAligner
    rng = np.random.default_rng(1)
    al = PhaseAligner(margin_s=0.0002, min_samples=50)
    # Phase 1.9 ms +- 0.2 ms: half the arrivals fold to ~0.1 ms (a naive mean says 1 ms).
    arrivals = 0.002 * np.arange(300) + 0.0019 + 0.0002 * (rng.random(300) - 0.5)
    for a in arrivals:
        al.on_state(a)
    tick = al.next_tick(arrivals[-1])
    phase = (tick - 0.0019) % 0.002                    # after the arrival phase
    assert 0.0001 <= phase <= 0.0005, phase


def test_phase_aligner_asks_to_realign_when_the_sampling_delay_drifts():
    from simreal_ros.core.policy import PhaseAligner
    al = PhaseAligner(min_samples=10, window=20)
    for k in range(50):
        al.on_state(k * 0.002 + 0.0004)
    al.next_tick(0.1)
    # Waits within the allowance: no re-alignment, however long it runs.
    assert not any(al.on_tick(0.0002) for _ in range(100))
    # The phase drifted: the newest message waits 1.9 ms (it arrived just after a tick).
    flags = [al.on_tick(0.0019) for _ in range(20)]
    assert flags[-1] and not any(flags[:9])            # the median decides, not one tick


def test_phase_aligner_await_places_the_tick_before_the_arrival_and_awaits_it():
    from simreal_ros.core.policy import PhaseAligner
    rng = np.random.default_rng(2)
    al = PhaseAligner(lead_s=0.0003, min_samples=50)
    t0 = 50.0011                                       # 500 Hz, phase 1.1 ms, jitter +-0.1 ms
    arrivals = t0 + 0.002 * np.arange(200) + 0.0002 * (rng.random(200) - 0.5)
    for a in arrivals:
        al.on_state(a)
    tick = al.next_tick(arrivals[-1])
    # The lead before the earliest (1 %) arrivals, ~0.1 ms before the mean.
    assert -0.0003 - 0.00012 < al.offset < -0.0003 - 0.00008, al.offset
    phase = (tick - t0 - al.offset) % 0.002
    assert min(phase, 0.002 - phase) < 2e-5, phase
    # At that tick the newest message is the previous period's: await the next one.
    assert al.should_await(tick, tick - 0.0017)
    # It came early (just before the tick): use it at once.
    assert not al.should_await(tick, tick - 0.0001)
    # Older than the lead, if younger than half a stream period: an earlier period's (a
    # late cluster of arrivals), so the tick awaits the next rather than compute with it.
    assert al.should_await(tick, tick - 0.0005)
    # A gap in the stream (nothing for 5 ms): the next one is awaited too (the node bounds
    # the wait by align_max_wait_s).
    assert al.should_await(tick, tick - 0.005)
    assert not al.should_await(tick, None)
    # The 'after' placement never awaits.
    after = PhaseAligner(min_samples=50)
    for a in arrivals:
        after.on_state(a)
    after.next_tick(arrivals[-1])
    assert not after.should_await(tick, tick - 0.0017)


def test_phase_aligner_await_does_not_realign():
    from simreal_ros.core.policy import PhaseAligner
    al = PhaseAligner(lead_s=0.0003, min_samples=10, window=20)
    for k in range(50):
        al.on_state(k * 0.002 + 0.0004)
    al.next_tick(0.1)
    # Waits as placed, longer waits, messages found waiting: the tick computes on arrival
    # or with a message at most half a stream period old; the phase is left alone.
    for delay in (-0.0003, -0.0015, 0.0008):
        assert not any(al.on_tick(delay) for _ in range(100))


def test_phase_aligner_numbers_bursty_arrivals_by_their_stamps():
    """A busy machine delivers a 500 Hz stream in bursts: one message in five 2.6 ms late,
    arriving just before the next. Numbered by the stamps, the stream's period and phase
    stand; numbered by the arrival intervals, the late ones would count twice."""
    from simreal_ros.core.policy import PhaseAligner
    rng = np.random.default_rng(3)
    stamps = 1000.0 + 0.002 * np.arange(400)
    delay = 0.0004 + 0.0001 * rng.random(400)
    delay[::5] += 0.0026
    al = PhaseAligner(margin_s=0.0002, min_samples=50)
    for a, s in zip(stamps + delay, stamps):
        al.on_state(a, s)
    tick = al.next_tick(stamps[-1] + 0.001)
    assert al.period == pytest.approx(0.002, abs=2e-6)
    # 'after': past the on-time arrivals (0.40-0.50 ms after their stamp) and past the late
    # ones' (3.00-3.10 ms, i.e. 1.00-1.10 ms into a later period), by about the margin.
    phase = (tick - 1000.0) % 0.002
    assert 0.0011 + 0.0001 < phase < 0.0011 + 0.0004, phase
    # 'await' on the same stream: before the on-time four in five (at 0.40-0.50 ms after
    # their stamp), though the late fifth pulls the mean after them.
    aw = PhaseAligner(lead_s=0.0003, min_samples=50)
    for a, s in zip(stamps + delay, stamps):
        aw.on_state(a, s)
    tick = aw.next_tick(stamps[-1] + 0.001)
    before = 0.0004 - (tick - 1000.0) % 0.002
    assert 0.0002 < before < 0.0004, before
    # Each of those on-time messages is awaited; a late one (3.0 ms after its stamp) is
    # the previous period's by then, so the tick awaits the next (on-time) one.
    assert aw.should_await(tick, tick - 0.002 + before)


def test_loop_timing_counts_deadline_misses_by_cause():
    from simreal_ros.core.policy import LoopTiming
    t = LoopTiming(0.01)
    for k in range(5):
        t.tick(k * 0.01 + (0.0002 if k % 2 else 0.0))
    assert t.deadline_misses == 0
    t.tick(0.04 + 0.03)            # two periods skipped
    t.overrun(0.012)               # a tick's work outlasted its period
    t.overrun(0.009)
    t.miss('no_command')
    s = t.summary()
    assert s['deadline_misses'] == 4
    assert (s['misses_late_tick'], s['misses_overrun'], s['misses_no_command']) == (2, 1, 1)
    assert 0.2 <= s['period_err_ms_p50'] <= 0.2 * 1.024   # a histogram bin's upper edge
    assert s['period_err_ms_max'] == pytest.approx(20.0)


def test_loop_timing_percentiles_from_histograms_are_within_a_bin_above_exact():
    from simreal_ros.core.policy import LoopTiming
    x = np.random.default_rng(4).lognormal(-1.0, 1.0, 20000)   # 0.01 .. 20
    t = LoopTiming(0.01)
    for v in x:
        t.record('e2e_latency_ms', v)
    s = t.summary()
    for q in (50, 99):
        exact = np.percentile(x, q)
        assert exact * 0.999 <= s[f'e2e_latency_ms_p{q}'] <= exact * 1.024, q
    assert s['e2e_latency_ms_max'] == x.max()
    assert 'inference_us_p50' not in s     # no samples, no figure


def test_command_limits_clip_count_and_refuse_non_finite():
    from simreal_ros.core.policy import CommandLimits
    limits = CommandLimits([-0.5, -1.0, -1.0], [1.0, 1.0, 1.0])
    assert limits.apply(0.2, 0.0, 0.0) == (0.2, 0.0, 0.0) and limits.clipped == 0
    assert limits.apply(3.0, -2.0, 0.5) == (1.0, -1.0, 0.5) and limits.clipped == 2
    assert limits.apply(-0.7, 0.0, 0.0) == (-0.5, 0.0, 0.0) and limits.clipped == 3
    with pytest.raises(ValueError, match='not finite'):
        limits.apply(float('nan'), 0.0, 0.0)
    with pytest.raises(ConfigError, match='cmd_vel_min / cmd_vel_max'):
        CommandLimits([1.0, 0.0, 0.0], [0.0, 0.0, 0.0])


def test_start_phase_commands_the_measured_pose_until_admitted_then_eases_to_default():
    from simreal_ros.core.policy import StartPhase
    start = StartPhase(2.0, [0.0, 0.0, 0.0])
    measured = np.array([0.1, -0.2, 0.5])
    # Not admitted (safe mode, e-stop, SysID): the measured pose, whatever the time.
    for t in (0.0, 1.0, 5.0):
        q, handover = start.command(t, False, measured + t)
        assert np.allclose(q, measured + t) and not handover
    # Admitted at t=10: from the pose measured then, smoothly to the default pose.
    q, _ = start.command(10.0, True, measured)
    assert np.allclose(q, measured) and start.eases == 1
    q_mid, _ = start.command(11.0, True, measured * 0.0)   # the ease ignores later samples
    assert np.allclose(q_mid, measured * 0.5)
    q_near, _ = start.command(11.99, True, measured)
    assert np.all(np.abs(q_near) < np.abs(measured) * 0.01)
    q, handover = start.command(12.0, True, measured)
    assert q is None and handover                          # the policy takes over, once
    assert start.command(12.01, True, measured) == (None, False)
    # A safe spell: back to the measured pose, and a new ease when admitted again.
    q, _ = start.command(13.0, False, measured)
    assert np.allclose(q, measured)
    start.command(14.0, True, measured)
    assert start.eases == 2 and start.phase == 'ease'
    # Off: the policy at once.
    assert StartPhase(0.0, [0.0]).command(0.0, False, [1.0]) == (None, False)


def test_driver_gains_are_compared_with_the_metadata_in_the_policy_order(tmp_path):
    """pantilt: kp/kd in the robot file are the driver's (head_pan, head_tilt); the policy's
    metadata joint_stiffness/joint_damping are in its own order (head_tilt, head_pan)."""
    from simreal_ros.core.pantilt_policy import pantilt
    params = load_node_params(REPO / 'config' / 'robots' / 'pantilt.yaml', 'policy_runner')
    params['policy_path'] = pantilt(str(tmp_path / 'pantilt.onnx'))
    assert params['kp'] == [20.0, 15.0] and params['policy_joint_names'][0] == 'head_tilt'
    ctl = PolicyController(params)
    assert 'kp (policy order) matches the metadata joint_stiffness' in ctl.metadata_notes
    assert 'kd (policy order) matches the metadata joint_damping' in ctl.metadata_notes
    with pytest.raises(ConfigError, match=r'kp \(policy order\) is \[20.0, 15.0\] but the '
                       r'policy metadata joint_stiffness is \[15.0, 20.0\]'):
        PolicyController(dict(params, kp=[15.0, 20.0]))   # gains given in the policy's order

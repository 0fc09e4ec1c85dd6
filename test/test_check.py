"""`simreal check FILE`: any robot file, with messages naming file, section and parameter;
and the benches' rule that a run which never did its job is a failure."""
import importlib.util
import os
from pathlib import Path
import re

import pytest

from conftest import REPO, require_asset, simreal
from simreal_ros.core import assets
from simreal_ros.deploy.graph import missing_files
from simreal_ros.tools.check import check

G1_29 = REPO / 'config' / 'robots' / 'g1_29dof.yaml'
PANTILT = REPO / 'config' / 'robots' / 'pantilt.yaml'


@pytest.fixture
def g1_29():
    require_asset('unitree_g1_29dof')
    return G1_29


def relocated(src, folder, **replace):
    """A copy of a robot file in `folder` whose asset:// paths are relative to `folder`."""
    text = src.read_text()
    # Relative to `folder`: the readers resolve a robot file's paths from its own folder.
    asset = os.path.relpath(str(assets.folder('unitree_g1_29dof')), folder)
    text = text.replace('asset://unitree_g1_29dof/', asset + '/')
    for old, new in replace.items():
        text = text.replace(old, new)
    out = Path(folder) / src.name
    out.write_text(text)
    return out


def test_a_wrong_observation_length_names_file_section_and_sizes(g1_29, tmp_path):
    bad = relocated(g1_29, tmp_path)
    text = bad.read_text()
    bad.write_text(text.replace('        history: 5\n', '        history: 4\n', 1))
    code, out = simreal('check', str(bad), '--no-nodes')
    assert code == 1, out
    assert str(bad) in out and 'policy_runner' in out
    assert 'observation length 477 does not match the policy input' in out and '480' in out


def test_paths_resolve_relative_to_the_robot_file(g1_29, tmp_path, monkeypatch):
    """model_path and policy_path both relative to the robot file's folder, run from
    elsewhere: found (the tools, the graph and the nodes resolve every *_path alike)."""
    good = relocated(g1_29, tmp_path)
    assert 'model_path: ../' in good.read_text()
    monkeypatch.chdir(tmp_path.parent)
    assert missing_files(good) == []
    report = check(good, nodes=False)
    assert not report.errors, report.lines()
    from simreal_ros.core.sim2sim import Setup
    assert Setup.read(str(good), None).model_path.name == 'scene_29dof.xml'


def test_missing_model_and_joint_not_in_model_are_named(g1_29, tmp_path):
    bad = relocated(g1_29, tmp_path, **{'scene_29dof.xml': 'nowhere.xml'})
    report = check(bad, nodes=False)
    assert any(s == 'sim_robot' and 'nowhere.xml' in t for _, s, t in report.errors)
    bad = relocated(g1_29, tmp_path, waist_yaw_joint='waist_yew_joint')
    report = check(bad, nodes=False)
    assert any(s == 'sim_robot' and 'waist_yew_joint' in t for _, s, t in report.errors)


def test_a_misspelt_parameter_is_named(tmp_path):
    text = PANTILT.read_text()
    assert '    torque_limit:' in text
    bad = tmp_path / 'pantilt.yaml'
    bad.write_text(text.replace('    torque_limit:', '    torque_limt:', 1))
    report = check(bad)
    texts = [t for _, s, t in report.errors if s == 'safety_supervisor']
    # named by the supervisor's own reading (torque_limit missing), or as undeclared
    assert any('torque_limit' in t for t in texts), report.lines()


def load_bench():
    spec = importlib.util.spec_from_file_location('sim2sim_bench', REPO / 'bench' /
                                                  'sim2sim.py')
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_run_that_never_forwarded_or_never_ran_is_a_failure():
    bench = load_bench()
    ok_state = '{"outputs_forwarded": 900, "estop": false, "safe_reason": ""}'
    walked = {'commands': 1000, 'fell': False, 'distance_m': 9.3}
    assert bench.realtime_failures(dict(walked), True, [ok_state]) == []
    # the run: the policy ran open loop, the supervisor never forwarded, distance 0
    never = '{"outputs_forwarded": 0, "estop": false, "safe_reason": "policy too far"}'
    reasons = bench.realtime_failures(dict(walked, distance_m=0.0), True, [never])
    assert any('never forwarded' in r and 'policy too far' in r for r in reasons)
    assert any('never ran' in r for r in bench.realtime_failures(
        dict(walked, commands=0), False, []))
    estop = '{"outputs_forwarded": 10, "estop": true, "estop_cause": "base tilt"}'
    assert any('e-stop: base tilt' in r for r in bench.realtime_failures(
        dict(walked), True, [estop]))
    assert any(r.startswith('fell') for r in bench.realtime_failures(
        dict(walked, fell=True, min_base_z=0.1, fall_z=0.5), False, []))


# -- a check that never lies (issue 39) ----------------------------------------------------------
def _ramp_trace(names, speed, steps=25, period=0.02):
    """Both joints moving at a steady `speed` (rad/s), one target per policy step."""
    import numpy as np
    from simreal_ros.core.trace import Trace
    t = np.arange(steps) * period
    q = np.stack([-1.0 + speed * t] * len(names), axis=1)
    return Trace('synthetic ramp', 'simreal', t, list(names), q, dq=np.full_like(q, speed),
                 target=q + speed * period)


def test_a_plausible_stream_replays_without_implausible_states():
    """A joint at 4 rad/s (velocity_limit 5) moves 0.08 rad per 20 ms policy step. The
    replay's state between two steps moves as a driver's 500 Hz stream does; held for a
    period then jumping 0.08 rad in one 2 ms tick it tripped the supervisor's jump check
    (15 rad/s x 4 ms = 0.06 rad): 'implausible states' on a clean run."""
    from simreal_ros.core.config import load_node_params
    from simreal_ros.core.limits_replay import replay
    params = load_node_params(PANTILT, 'safety_supervisor')
    trace = _ramp_trace(params['joint_names'], 4.0)
    result = replay(params, trace, 1.0, 0.0)
    assert result.implausible_states == 0, result.summary()
    assert result.clean, result.summary()


def test_jitter_clips_are_a_warning_and_a_stop_is_an_error():
    from simreal_ros.core.limits_replay import Replay
    from simreal_ros.tools.check import replay_level
    clipped = {'rate': {'pan': 3}}
    assert replay_level(Replay(steps=10, jitter=0.0)) == 'ok'
    assert replay_level(Replay(steps=10, changed_steps=3, clips=clipped, jitter=0.5)) == \
        'warning'
    assert replay_level(Replay(steps=10, changed_steps=3, clips=clipped, jitter=0.0)) == 'error'
    assert replay_level(Replay(steps=10, changed_steps=3, clips=clipped, jitter=0.5,
                               safe_reason='e-stop: trip velocity')) == 'error'


def test_a_jitter_replay_that_clips_warns_with_figures_and_passes(tmp_path):
    """pantilt at a rate its max_target_rate (5 rad/s) passes on a regular clock, but not with
    each other step half a period late then early (x 2): a warning naming the clips; exit 0."""
    import numpy as np
    from simreal_ros.core.config import load_node_params
    params = load_node_params(PANTILT, 'safety_supervisor')
    trace = _ramp_trace(params['joint_names'], 3.5)
    ref = tmp_path / 'ramp.npz'
    np.savez(ref, time=trace.time, joint_names=np.array(trace.names), q=trace.q, dq=trace.dq,
             target_q=trace.target)
    report = check(PANTILT, reference=str(ref), nodes=False)
    replays = [(lv, t) for lv, s, t in report.findings if 'limits replay' in t]
    assert [lv for lv, _ in replays] == ['ok', 'warning'], report.lines()
    assert 'rate clips' in replays[1][1] and 'jitter 0.5' in replays[1][1]
    assert not report.errors, report.lines()


def test_arm3_check_finds_its_stand_in_policy(tmp_path):
    """A fresh clone: arm3_policy.onnx does not exist until first use; the check makes it in
    the user data folder, where the graph finds it, and does not report it missing."""
    env_home = tmp_path / 'data'
    code, out = simreal('check', 'config/robots/arm3.yaml', '--no-nodes',
                        env=dict(os.environ, XDG_DATA_HOME=str(env_home)), timeout=300)
    assert code == 0, out
    assert 'arm3_policy.onnx' in out and 'not found' not in out
    assert (env_home / 'simreal_ros' / 'arm3_policy.onnx').is_file()

"""`simreal check FILE`: any robot file, with messages naming file, section and parameter;
and the benches' rule that a run which never did its job is a failure."""
import importlib.util
import os
from pathlib import Path

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
    # Up to / and down again: relative to `folder`, and (as '../shared/...' was) to any
    # working directory as deep (reference_rollout.resolve_policy tries the cwd, not the file).
    asset = os.path.relpath('/', folder) + str(assets.folder('unitree_g1_29dof'))
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

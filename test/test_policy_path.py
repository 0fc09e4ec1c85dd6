"""A robot file's policy_path: relative to the robot file, the same for the graph and the node.

`graph.build_graph` (launch, `simreal up`, the demo) checks the file and hands policy_runner
the absolute path it found; policy_runner started directly with the robot file
(`ros2 run ... --params-file`) resolves a relative policy_path against that file's folder
too, not against its working directory. A missing file names the parameter and the file.
"""
import os
import subprocess
import sys

import pytest

from conftest import REPO
from rosproc import wait_for
from simreal_ros.core.config import ConfigError, params_files, setting_file
from simreal_ros.deploy.graph import build_graph
from simreal_ros.core.onnx_policies import arm3

ARM3 = REPO / 'config' / 'robots' / 'arm3.yaml'


def robot_beside_policy(tmp_path, policy_value='my_policy.onnx', make=True):
    """A copy of arm3.yaml in tmp/robot/ whose policy_path is `policy_value`, the policy beside
    it (when `make`); return (robot file, policy file)."""
    folder = tmp_path / 'robot'
    folder.mkdir()
    text = ARM3.read_text().replace('policy_path: arm3_policy.onnx',
                                    f'policy_path: {policy_value}')
    assert f'policy_path: {policy_value}' in text
    robot = folder / 'my_arm.yaml'
    robot.write_text(text)
    policy = folder / policy_value
    if make:
        policy.parent.mkdir(parents=True, exist_ok=True)
        arm3(str(policy))
    return robot, policy


def test_params_files_are_read_from_the_ros_arguments(tmp_path):
    argv = ['x', 'app', '--ros-args', '-r', '__node:=p', '--params-file', 'a.yaml',
            '--params-file', 'b.yaml', '--', '--params-file', 'not_ros.yaml']
    assert params_files(argv) == ['a.yaml', 'b.yaml']
    a, b = tmp_path / 'a.yaml', tmp_path / 'b.yaml'
    a.write_text('/**/policy_runner:\n  ros__parameters:\n    policy_path: x.onnx\n')
    b.write_text('/**/policy_runner:\n  ros__parameters:\n    rate_hz: 50.0\n')
    assert setting_file([a, b], 'policy_runner', 'policy_path') == a.resolve()
    assert setting_file([a, b], 'policy_runner', 'threads') is None


def test_graph_resolves_a_relative_policy_path_against_the_robot_file(tmp_path, monkeypatch):
    robot, policy = robot_beside_policy(tmp_path, 'policies/my_policy.onnx')
    elsewhere = tmp_path / 'elsewhere'
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    graph = build_graph(str(robot))
    spec = graph.node('policy_runner')
    assert spec is not None, graph.skipped
    # The node gets the absolute path the graph checked, whatever its working directory.
    assert spec.overrides['policy_path'] == str(policy.resolve())


def test_graph_names_the_parameter_and_the_file_when_the_policy_is_missing(tmp_path,
                                                                          monkeypatch):
    robot, _ = robot_beside_policy(tmp_path, 'gone.onnx', make=False)
    monkeypatch.chdir(tmp_path)
    arm3(str(tmp_path / 'gone.onnx'))
    graph = build_graph(str(robot))
    # Found in the working directory (the fallback), but the robot file's folder comes first:
    assert graph.node('policy_runner').overrides['policy_path'] == str(
        (tmp_path / 'gone.onnx').resolve())
    (tmp_path / 'gone.onnx').unlink()
    graph = build_graph(str(robot))
    assert graph.node('policy_runner') is None
    reason = dict(graph.skipped)['policy_runner']
    assert 'parameter policy_path' in reason and str(robot) in reason, reason
    assert str(robot.parent / 'gone.onnx') in reason, reason   # where it looked first


def test_controller_error_names_parameter_and_file(tmp_path):
    from simreal_ros.core.config import load_node_params
    from simreal_ros.core.policy import PolicyController
    robot, _ = robot_beside_policy(tmp_path, 'absent.onnx', make=False)
    params = load_node_params(robot, 'policy_runner')
    with pytest.raises(ConfigError) as err:
        PolicyController(params, source='policy_runner', params_file=robot)
    text = str(err.value)
    assert 'parameter policy_path' in text and f'set in {robot}' in text, text
    assert str(robot.parent / 'absent.onnx') in text, text


def _start_policy_runner(robot, cwd):
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    log = open(cwd / 'policy_runner.log', 'w+')
    proc = subprocess.Popen([sys.executable, '-m', 'simreal_ros.nodes.policy_runner',
                             '--ros-args', '--params-file', str(robot)],
                            cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    return proc, cwd / 'policy_runner.log'


@pytest.mark.ros
def test_policy_runner_started_directly_finds_the_policy_beside_its_robot_file(tmp_path):
    robot, policy = robot_beside_policy(tmp_path, 'my_policy.onnx')
    cwd = tmp_path / 'elsewhere'   # not the repository, not the robot file's folder
    cwd.mkdir()
    proc, log = _start_policy_runner(robot, cwd)
    try:
        wait_for(lambda: 'Disabled until' in log.read_text() or proc.poll() is not None, 60,
                 what='policy_runner to load its policy')
        text = log.read_text()
        assert proc.poll() is None, text
        assert 'my_policy.onnx: 14 observations' in text, text
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.mark.ros
def test_policy_runner_exits_naming_parameter_and_file_when_the_policy_is_missing(tmp_path):
    robot, _ = robot_beside_policy(tmp_path, 'missing_policy.onnx', make=False)
    cwd = tmp_path / 'elsewhere'
    cwd.mkdir()
    proc, log = _start_policy_runner(robot, cwd)
    code = proc.wait(timeout=60)
    text = log.read_text()
    assert code == 2, text
    assert 'parameter policy_path' in text and str(robot) in text, text
    assert str(robot.parent / 'missing_policy.onnx') in text, text
    assert 'Traceback' not in text, text

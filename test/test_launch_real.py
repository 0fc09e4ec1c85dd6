"""deploy.launch.py run by launch itself (where launch_ros imports and simreal_ros is indexed).

The graph comes up (topics and services), an e-stop over the service latches, and a SIGINT to
the launch process stops every node. Skipped, with the reason, where launch_ros is absent (the
pip-only path): test_launch_static.py covers the file there.
"""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO
from rosproc import Spinner, wait_for

launch_ros = pytest.importorskip(
    'launch_ros', reason='launch_ros is not installed (pip-only path): deploy.launch.py is '
    'checked statically by test_launch_static.py')
pytestmark = pytest.mark.ros

RUNNER = textwrap.dedent('''
    import sys
    from launch import LaunchService
    from launch.actions import IncludeLaunchDescription
    from launch.launch_description_sources import PythonLaunchDescriptionSource
    service = LaunchService(argv=[])
    args = [tuple(a.split(':=', 1)) for a in sys.argv[2:]]
    service.include_launch_description(IncludeLaunchDescription(
        PythonLaunchDescriptionSource(sys.argv[1]), launch_arguments=args))
    sys.exit(service.run())
''')


@pytest.fixture
def indexed():
    try:
        from ament_index_python.packages import get_package_prefix
        get_package_prefix('simreal_ros')
    except Exception as exc:  # noqa: BLE001 - PackageNotFoundError or a missing index
        pytest.skip(f'simreal_ros is not in the ament index ({exc}): colcon build and source '
                    'the install space to run deploy.launch.py')


def start_launch(tmp_path, *args):
    log = open(tmp_path / 'launch.log', 'w+')
    proc = subprocess.Popen([sys.executable, '-c', RUNNER, str(REPO / 'launch' /
                                                               'deploy.launch.py'), *args],
                            stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                            env=dict(os.environ, PYTHONUNBUFFERED='1'))
    return proc, log


def test_deploy_launch_brings_up_the_graph(indexed, tmp_path):
    import rclpy
    from sensor_msgs.msg import JointState
    from std_srvs.srv import Trigger

    from simreal_ros.nodes.common import SENSOR_SUB_QOS
    policy = tmp_path / 'arm3_policy.onnx'
    sys.path.insert(0, str(REPO / 'scripts'))
    import onnx_policies
    onnx_policies.arm3(str(policy))
    proc, log = start_launch(tmp_path, 'robot:=arm3', f'policy:={policy}')
    rclpy.init()
    node = rclpy.create_node('launch_probe')
    states = []
    node.create_subscription(JointState, 'joint_states', states.append, SENSOR_SUB_QOS)
    estop = node.create_client(Trigger, 'safety/estop')
    spinner = Spinner(node)
    try:
        wait_for(lambda: states, 90, what='joint_states from the launched sim_robot')
        assert estop.wait_for_service(timeout_sec=60)
        wait_for(lambda: {'sim_robot', 'safety_supervisor', 'policy_runner'} <= {
            n for n, _ in node.get_node_names_and_namespaces()}, 60, what='all three nodes')
        future = estop.call_async(Trigger.Request())
        wait_for(future.done, 10, what='estop answer')
        assert future.result().success, future.result().message
    finally:
        spinner.stop()
        rclpy.try_shutdown()
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
        log.seek(0)
        text = log.read()
        log.close()
    assert code == 0, text[-3000:]
    assert 'Traceback' not in text, text[-3000:]


def test_unknown_robot_stops_the_launch_with_a_sentence(indexed, tmp_path):
    proc, log = start_launch(tmp_path, 'robot:=no_such_bot')
    code = proc.wait(timeout=60)
    log.seek(0)
    text = log.read()
    log.close()
    assert code != 0
    assert "unknown robot 'no_such_bot'" in text and 'known robots' in text

"""policy_runner takes over a displaced robot through safety_supervisor (real processes, DDS).

The supervisor refuses to start forwarding a command far from the measured pose
(`reset_tolerance`); a robot that sagged while damped, or an arm left mid-sweep by an aborted
SysID run, would be refused forever if the policy's first command were its own output. The
runner commands the measured pose until the supervisor admits it, eases to the default pose,
then runs the policy; after an e-stop the same happens again.
"""
from diagnostic_msgs.msg import DiagnosticArray
import pytest
import rclpy

from simreal_ros.client.rig import ARM3, Rig, stand_in_policy, wait_for

pytestmark = pytest.mark.ros
ELBOW = 2


@pytest.fixture(scope='module')
def ros():
    rclpy.init()
    yield
    rclpy.try_shutdown()


def runner_value(diag, key):
    for _, msg in reversed(diag.all()):
        for status in msg.status:
            if status.name == 'policy_runner: loop':
                values = {kv.key: kv.value for kv in status.values}
                if key in values:
                    return values[key]
    return None


def elbow(rig):
    msgs = rig.joint_states.all()
    return msgs[-1][1].position[ELBOW] if msgs else None


def test_a_displaced_arm_is_eased_to_the_default_pose_and_the_policy_takes_over(ros, tmp_path):
    policy = stand_in_policy(tmp_path / 'arm3.onnx')
    with Rig(ARM3, sim={'initial_position': [0.0, 0.0, 0.5]},
             policy_runner={'policy_path': policy, 'ease_in_s': 1.0}) as rig:
        diag = rig.watch(DiagnosticArray, '/diagnostics')
        wait_for(lambda: elbow(rig) is not None, 30, what='joint_states')
        # Started 0.5 rad from the default pose, damped (it sags): beyond reset_tolerance 0.1.
        assert abs(elbow(rig)) > 0.15, elbow(rig)
        assert rig.enable_policy().success
        rig.wait_forwarding(timeout=30)
        wait_for(lambda: abs(elbow(rig)) < 0.1, 30, what='the elbow at the default pose')
        wait_for(lambda: int(runner_value(diag, 'handovers') or 0) >= 1, 15,
                 what='the policy taking over')
        assert not rig.state('estop'), rig.state('estop_cause')

        # An e-stop: the runner commands the measured pose, so the operator's reset passes,
        # and the policy comes back through a second ease.
        assert rig.call('estop').success
        wait_for(lambda: runner_value(diag, 'start_phase') == 'wait', 10,
                 what='the runner waiting while e-stopped')
        wait_for(lambda: rig.call('reset').success, 15, interval=0.3, what='reset accepted')
        rig.wait_forwarding(timeout=30)
        wait_for(lambda: int(runner_value(diag, 'handovers') or 0) >= 2, 15,
                 what='the policy taking over again')
        assert int(runner_value(diag, 'eases')) >= 2

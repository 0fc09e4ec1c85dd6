"""The supervised G1 walks in real time (real processes, DDS, MuJoCo, onnxruntime).

sim_robot (500 Hz, the robot in its gantry until the first position target), safety_supervisor
(500 Hz, stage 1.00) and policy_runner (50 Hz, unitree's pre-trained policy) as in a
deployment; the test holds cmd_vel at the reference's 0.5 m/s. The lockstep parity test
compares step by step; this one is the real-time chain, where a start-up sequence or a timing
rule that makes the robot fall shows (a fixed-pose ease-in toppled it after 0.7 m).
"""

from geometry_msgs.msg import PoseStamped
import pytest
import rclpy
from rclpy.qos import QoSProfile, ReliabilityPolicy

from simreal_ros.client.rig import REPO, Rig, loopback_udp_env, wait_for

pytestmark = pytest.mark.ros
G1 = REPO / 'config' / 'robots' / 'g1_12dof.yaml'
WALK_S = 8.0
FALL_Z = 0.5       # base height below which the G1 has fallen (m)


@pytest.fixture(scope='module')
def ros():
    rclpy.init()
    yield
    rclpy.try_shutdown()


def walk_once(tmp_path):
    """Run the supervised G1 for WALK_S s at 0.5 m/s; return what the test judges."""
    tmp_path.mkdir(exist_ok=True)
    # The nodes on loopback UDP (config/fastdds/loopback_udp.xml), the transport a robot's
    # computers get: under LOCALHOST rmw_fastrtps adds shared memory, whose publishes block
    # up to ~1 s on an unhealthy peer (docs/real_robot.md, middleware). In the fresh-clone CI
    # of 2026-11-23 this walk was stopped twice by stalls of 200 ms and more (a stale imu
    # before the walk; a fall after 0.97 m) while it passed alone 8 of 8.
    with Rig(G1, sim={'hold_until_command': True},
             supervisor={'stages': [1.0], 'resume_stage': False},
             policy_runner={'observation': {'gait_phase': {'origin': 'reset'}}},
             tmp=str(tmp_path), env=loopback_udp_env()) as rig:
        poses = rig.watch(PoseStamped, 'sim/base_pose',
                          QoSProfile(depth=1000, reliability=ReliabilityPolicy.BEST_EFFORT))
        stop = rig.teleop(0.5)       # cmd_vel 0.5 m/s at 10 Hz
        try:
            wait_for(lambda: len(poses) > 20, 60, what='sim/base_pose')
            wait_for(lambda: rig.state('output') not in (None, 'waiting'), 30,
                     what='the supervisor receiving joint_states')
            assert rig.enable_policy().success
            # No reset of an e-stop in the gantry any more (CI once: a 200 ms stall of the
            # 2-core machine, 'imu header stamp is 200 ms old'): the loops run on SCHED_FIFO
            # (thread_priority), issue 42. The walk is judged with it.
            bringup_estop = rig.state('estop_cause') if rig.state('estop') else None
            start = poses.all()[-1][1].pose.position
            t0 = poses.all()[-1][0]
            wait_for(lambda: poses.all()[-1][0] - t0 > WALK_S, WALK_S + 30, interval=0.1,
                     what=f'{WALK_S:g} s of walking')
        finally:
            stop.set()
        walk = [m.pose.position for t, m in poses.all() if t >= t0]
        end = walk[-1]
        return {'distance': ((end.x - start.x) ** 2 + (end.y - start.y) ** 2) ** 0.5,
                'low': min(p.z for p in walk), 'estop': rig.state('estop'),
                'estop_cause': rig.state('estop_cause'), 'bringup_estop': bringup_estop,
                'inputs_via_rclpy': rig.state('inputs_via_rclpy'),
                'supervisor_log': rig.procs['safety_supervisor'].output(), 'logs': rig.logs()}


def test_the_supervised_g1_walks_in_real_time(ros, g1_dir, tmp_path):
    # Once (issue 42): a fall after a stale policy was run again here; the stalls were the
    # full garbage collections and the loops on the normal scheduler of a busy machine.
    run = walk_once(tmp_path)
    assert run['low'] > FALL_Z and not run['estop'], (
        f'the G1 fell: base down to {run["low"]:.2f} m after {run["distance"]:.2f} m; e-stop '
        f'{run["estop_cause"]!r} (before the walk: {run["bringup_estop"]!r})\n{run["logs"]}')
    # 0.5 m/s commanded: the reference covers ~0.49 m/s; half of it still means walking.
    assert run['distance'] > 0.25 * WALK_S, f'{run["distance"]:.2f} m in {WALK_S:g} s'
    # The supervisor read every joint_states and imu sample of real DDS itself (core/cdr),
    # none through rclpy's slower deserializer.
    assert run['inputs_via_rclpy'] == 0, run['inputs_via_rclpy']

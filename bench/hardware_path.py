#!/usr/bin/env python3
"""The real-hardware path, rehearsed: a policy walks the G1 through the Unitree low-level DDS.

    .venv/bin/python bench/hardware_path.py --interface unitree_hg --robot g1_12dof

Two runs of unitree's pre-trained G1 policy in real time, each its own processes over DDS:
- direct: policy_runner -> safety_supervisor -> hardware/command -> sim_robot (ROS topics),
- through the adapter: policy_runner -> safety_supervisor -> unitree_bridge -> rt/lowcmd
  (CycloneDDS, the vendor's IDL types, CRC) -> sim_robot playing the robot (interface
  unitree_hg: CRC checked, mode_machine checked) -> rt/lowstate -> unitree_bridge ->
  joint_states/imu -> the supervisor and the policy.
Both walk `--seconds` (20) at cmd_vel 0.5 m/s (the reference's) from the supervisor at stage
1.00. In the adapter run this process also taps rt/lowcmd (the LowCmd_ rate the robot gets),
injects corrupted commands mid-walk (every motor limp, CRC wrong: the robot must ignore them
and keep walking) and, after the walk, kills the supervisor and times how long until the
LowCmd_ on the wire is damping (kp = 0 on every driven motor).

The last line is a JSON summary: interface, seconds, distance_m, direct_distance_m, falls,
lowcmd_rate_hz, bad_crc_sent, bad_crc_rejected (the simulated robot's count),
silent_supervisor_damped_ms (kill -> damping on the wire), and bringup_max_joint_speed (the
bring-up, safety/go_default, run while the G1 hangs in sim_robot's gantry: its peak joint
speed on joint_states, against bringup.max_velocity). After the bring-up the gantry is lowered
and the policy enabled at once, in both runs.
"""
import argparse
import json
import math
import os
from pathlib import Path
import signal
import sys
import tempfile
import threading
import time

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from simreal_ros.core import assets  # noqa: E402
from simreal_ros.nodes.common import localhost_discovery  # noqa: E402
localhost_discovery(keep_choice=True)   # and ROS_LOCALHOST_ONLY=1 on Humble
WALK_VX = 0.5
FALL_Z = 0.5
BAD_CRC_SENDS = 100   # corrupted LowCmd_ over 0.2 s (every motor limp): ignored, or a fall


def cpu_seconds(pid):
    """User + system CPU seconds of a process (Linux /proc)."""
    fields = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def bringup(rig, robot):
    """safety/go_default while hanging: the peak joint speed on joint_states until it holds,
    against bringup.max_velocity."""
    from std_srvs.srv import Trigger

    from simreal_ros.client.rig import wait_for
    from simreal_ros.core.config import load_node_params
    params = load_node_params(robot, 'safety_supervisor')
    limit = max(float(v) for v in params.get('bringup.max_velocity', [math.inf]))
    t0 = time.monotonic()
    response = rig.service(Trigger, 'safety/go_default', Trigger.Request())
    if not response.success:
        return {'bringup_refused': response.message}
    wait_for(lambda: (rig.state('bringup') or {}).get('phase') == 'holding', 30,
             what='the bring-up holding the default pose')
    t1 = time.monotonic()
    speeds = [max(abs(v) for v in m.velocity) for t, m in rig.joint_states.since(t0)
              if t <= t1 and len(m.velocity)]
    state = rig.state('bringup')
    return {'bringup_seconds': round(t1 - t0, 2),
            'bringup_max_joint_speed': round(max(speeds), 3) if speeds else None,
            'bringup_speed_limit': limit,
            'bringup_max_error_rad': state.get('max_error_rad')}


def walk(robot, seconds, bridge, tmp, interface):
    """Walk the G1 for `seconds`; returns the run's figures (and, through the adapter, the
    tap, corruption and silent-supervisor measurements)."""
    from geometry_msgs.msg import PoseStamped, Twist
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    from simreal_ros.client.rig import Rig, unitree_wire, wait_for
    from simreal_ros.core import unitree
    out = {}
    from std_msgs.msg import Bool
    with Rig(robot, sim={'gantry': True},
             supervisor={'stages': [1.0], 'resume_stage': False},
             policy_runner={'observation': {'gait_phase': {'origin': 'reset'}}},
             tmp=str(tmp), bridge=({} if bridge else None)) as rig:
        tap = writer = None
        if bridge:
            from simreal_ros.drivers import unitree_dds
            wire = unitree_wire(interface)
            dds = unitree_dds.Wire(wire['unitree.domain_id'], 'lo')
            tap = dds.reader(interface, 'LowCmd_', unitree_dds.TOPIC_CMD, depth=64)
            writer = dds.writer(interface, 'LowCmd_', unitree_dds.TOPIC_CMD)
        poses = rig.watch(PoseStamped, 'sim/base_pose',
                          QoSProfile(depth=1000, reliability=ReliabilityPolicy.BEST_EFFORT))
        diag = {}

        def on_diag(msg):
            for status in msg.status:
                diag[status.name] = {kv.key: kv.value for kv in status.values}
        from diagnostic_msgs.msg import DiagnosticArray
        rig.node.create_subscription(DiagnosticArray, '/diagnostics', on_diag, 50)
        cmd_vel = rig.node.create_publisher(Twist, 'cmd_vel', 10)
        stop = threading.Event()

        def teleop():
            while not stop.is_set():
                msg = Twist()
                msg.linear.x = WALK_VX
                cmd_vel.publish(msg)
                stop.wait(0.1)
        threading.Thread(target=teleop, daemon=True).start()
        lowcmd = []     # (monotonic, driven kp) from the tap

        def tapping():
            while not stop.is_set():
                for rec in tap.take():
                    lowcmd.append((time.monotonic(),
                                   rec['motor_cmd']['kp'][:12].astype(float).copy()))
                time.sleep(0.005)   # 64 deep: 128 ms of LowCmd_ at 500 Hz
        if tap is not None:
            threading.Thread(target=tapping, daemon=True).start()
        try:
            wait_for(lambda: len(poses) > 20, 60, what='sim/base_pose')
            wait_for(lambda: rig.state('output') not in (None, 'waiting'), 30,
                     what='the supervisor receiving joint_states')
            # The bring-up, hanging in the gantry: slowly to the default pose, held there.
            out.update(bringup(rig, robot))
            # Lowered, and the policy at once (a free-standing humanoid on a fixed pose
            # topples: test_g1_walk.py).
            gantry = rig.node.create_publisher(Bool, 'sim/gantry', 10)
            wait_for(lambda: gantry.get_subscription_count() > 0, 10, what='sim/gantry')
            gantry.publish(Bool(data=False))
            assert rig.enable_policy().success, rig.logs()
            start = poses.all()[-1][1].pose.position
            t0 = poses.all()[-1][0]
            w0 = time.monotonic()
            cpu0 = cpu_seconds(rig['unitree_bridge'].pid) if bridge else 0.0
            if writer is not None:
                # Mid-walk: corrupted commands, every motor limp. Obeyed, the G1 falls.
                wait_for(lambda: time.monotonic() - w0 > seconds / 2, seconds, interval=0.05)
                bad = unitree.new(interface, 'LowCmd_')
                bad['motor_cmd']['mode'] = 1
                unitree.stamp_crc(bad)
                bad['crc'] ^= 0x1      # one bit off
                for _ in range(BAD_CRC_SENDS):
                    writer.write(bad)
                    time.sleep(0.002)
                out['bad_crc_sent'] = BAD_CRC_SENDS
            wait_for(lambda: poses.all()[-1][0] - t0 > seconds, seconds + 30, interval=0.1,
                     what=f'{seconds:g} s of walking')
            w1 = time.monotonic()
            path = [m.pose.position for t, m in poses.all() if t >= t0]
            end = path[-1]
            out.update(
                seconds=round(poses.all()[-1][0] - t0, 1),
                distance_m=round(((end.x - start.x) ** 2 + (end.y - start.y) ** 2) ** 0.5, 2),
                min_base_z=round(min(p.z for p in path), 3),
                falls=int(min(p.z for p in path) < FALL_Z),
                estop_cause=rig.state('estop_cause'))
            if tap is not None:
                during = [t for t, _ in lowcmd if w0 <= t <= w1]
                out['lowcmd_rate_hz'] = round(len(during) / (w1 - w0), 1)
                wait_for(lambda: 'bad_crc_rejected' in diag.get('sim_robot: physics', {}), 5,
                         what='sim_robot diagnostics')
                out['bad_crc_rejected'] = int(diag['sim_robot: physics']['bad_crc_rejected'])
                out['wrong_mode_machine'] = int(diag['sim_robot: physics']
                                                ['wrong_mode_machine'])
                bridge_diag = diag.get(f'unitree_bridge: {interface}', {})
                out['bridge_reported_rate_hz'] = float(bridge_diag.get('lowcmd_rate_hz', 'nan'))
                out['bridge_cpu_percent'] = round(100 * (cpu_seconds(rig['unitree_bridge'].pid)
                                                         - cpu0) / (w1 - w0), 1)
                # The supervisor dies: the wire must turn to damping (kp 0 on every driven
                # motor) within the bridge's command_timeout_s plus a tick or two.
                killed = rig.signal('safety_supervisor', signal.SIGKILL)

                def damped():
                    return next((t for t, kp in lowcmd if t > killed and not kp.any()), None)
                wait_for(lambda: damped() is not None, 5, what='damping on rt/lowcmd')
                out['silent_supervisor_damped_ms'] = round((damped() - killed) * 1e3, 1)
                out['bridge_command_timeout_ms'] = 100.0
        finally:
            stop.set()
            if out.get('falls') or 'distance_m' not in out:
                out['logs'] = {k: v[-800:] for k, v in rig.logs().items()}
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--interface', default='unitree_hg', choices=('unitree_hg',))
    parser.add_argument('--robot', default='g1_12dof', choices=('g1_12dof',))
    parser.add_argument('--seconds', type=float, default=20.0)
    args = parser.parse_args()
    robot = REPO / 'config' / 'robots' / f'{args.robot}.yaml'
    g1 = assets.folder('unitree_g1_12dof') / 'policy.onnx'
    if assets.unavailable('unitree_g1_12dof'):
        print(json.dumps({'skipped': assets.unavailable('unitree_g1_12dof')}))
        return 0
    import rclpy
    from simreal_ros.nodes.common import prefer_udp_transport
    prefer_udp_transport()
    rclpy.init()
    tmp = Path(tempfile.mkdtemp(prefix='hardware_path_'))
    try:
        direct = walk(robot, args.seconds, False, tmp, args.interface)
        print('direct:', json.dumps(direct), flush=True)
        adapter = walk(robot, args.seconds, True, tmp, args.interface)
        print('adapter:', json.dumps(adapter), flush=True)
    finally:
        rclpy.try_shutdown()
    summary = {
        'interface': args.interface, 'robot': args.robot,
        'seconds': adapter.get('seconds'),
        'distance_m': adapter.get('distance_m'),
        'direct_distance_m': direct.get('distance_m'),
        'distance_ratio': (round(adapter['distance_m'] / direct['distance_m'], 3)
                           if direct.get('distance_m') else None),
        'falls': int(adapter.get('falls', 1)) + int(direct.get('falls', 1)),
        'lowcmd_rate_hz': adapter.get('lowcmd_rate_hz'),
        'bridge_reported_rate_hz': adapter.get('bridge_reported_rate_hz'),
        'bridge_cpu_percent': adapter.get('bridge_cpu_percent'),
        'bad_crc_sent': adapter.get('bad_crc_sent'),
        'bad_crc_rejected': adapter.get('bad_crc_rejected'),
        'wrong_mode_machine': adapter.get('wrong_mode_machine'),
        'silent_supervisor_damped_ms': adapter.get('silent_supervisor_damped_ms'),
        'bridge_command_timeout_ms': adapter.get('bridge_command_timeout_ms'),
        'bringup_max_joint_speed': adapter.get('bringup_max_joint_speed'),
        'bringup_speed_limit': adapter.get('bringup_speed_limit'),
        'bringup_seconds': adapter.get('bringup_seconds'),
        'direct_bringup_max_joint_speed': direct.get('bringup_max_joint_speed'),
        'load_average_1min': round(os.getloadavg()[0], 2),
    }
    summary['passed'] = bool(
        summary['falls'] == 0 and summary['distance_ratio'] is not None
        and summary['distance_ratio'] >= 0.8
        and bool(summary['bad_crc_rejected'])
        and summary['bringup_max_joint_speed'] is not None
        and summary['bringup_max_joint_speed'] <= summary['bringup_speed_limit'])
    print(json.dumps(summary))
    return 0 if summary['passed'] else 1


if __name__ == '__main__':
    sys.exit(main())

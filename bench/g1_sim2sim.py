#!/usr/bin/env python3
"""G1 sim2sim through the full ROS path: sim_robot and policy_runner as separate processes.

    .venv/bin/python bench/g1_sim2sim.py --mode lockstep    # step-by-step parity, 1000 steps
    .venv/bin/python bench/g1_sim2sim.py --mode realtime    # 20 s in real time

lockstep: sim_robot advances one 20 ms control period at a time and waits for the command
computed from the state it just published; the policy's actions are compared with unitree's
reference loop (`reference_trace.npz`): `max_action_err` over all steps. As in the reference,
the first period holds the default pose (sent by this bench, stamped t = 0).
realtime: both nodes run on the wall clock; this bench holds the default pose until the runner
is enabled, then reports `distance_m`, `min_base_z`, `fell`, `deadline_misses` after 20 s.

The path is policy_runner -> policy/command -> safety_supervisor (stage 1.00) ->
hardware/command -> sim_robot; with `--supervisor off` sim_robot listens to policy/command
directly (remap). The base pose comes from sim_robot's ground truth
(`sim/base_pose`). The last line printed is a JSON summary.
"""
import argparse
import json
import os
from pathlib import Path
import sys
import tempfile
import threading
import time

REPO = Path(__file__).resolve().parents[1]
G1 = REPO.parent / 'shared' / 'robots' / 'unitree_g1_12dof'
CONFIG = REPO / 'config' / 'robots' / 'g1_12dof.yaml'
os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')


def write_overlay(folder, sections):
    import yaml
    path = Path(folder) / 'overlay.yaml'
    path.write_text(yaml.safe_dump({k: {'ros__parameters': v} for k, v in sections.items()
                                    if v}))
    return ['--params-file', str(path)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--mode', choices=('lockstep', 'realtime'), default='lockstep')
    parser.add_argument('--steps', type=int, default=1000, help='lockstep policy steps')
    parser.add_argument('--duration', type=float, default=20.0, help='realtime seconds')
    parser.add_argument('--supervisor', choices=('on', 'off'), default='on',
                        help='route through safety_supervisor at full stage (default), or let '
                        'sim_robot take policy/command directly')
    parser.add_argument('--rtf', type=float, default=1.0,
                        help='realtime mode: real_time_factor of sim_robot; other than 1 runs '
                        'every node on its /clock (use_sim_time), for loaded machines')
    parser.add_argument('--save', help='write the lockstep actions and stamps to this .npz')
    args = parser.parse_args()
    if not (G1 / 'policy.onnx').is_file():
        print(json.dumps({'skipped': f'shared G1 data not found at {G1}'}))
        return 0

    import numpy as np
    import rclpy
    from geometry_msgs.msg import PoseStamped
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from simreal_ros.client.rig import NodeProcess, wait_for
    from sensor_msgs.msg import JointState
    from std_srvs.srv import SetBool

    from simreal_ros.core.config import load_node_params
    from simreal_ros.nodes.common import COMMAND_QOS, SENSOR_SUB_QOS, stamp_to_sec

    runner_params = load_node_params(CONFIG, 'policy_runner')
    names = runner_params['joint_names']
    default = np.array(runner_params['default_position'])
    scale = float(runner_params['action.scale'])
    lockstep = args.mode == 'lockstep'

    supervisor = args.supervisor == 'on'
    if supervisor and not (REPO / 'simreal_ros' / 'nodes' / 'safety_supervisor.py').is_file():
        print('safety_supervisor not found: running without it', file=sys.stderr)
        supervisor = False
    tmp = tempfile.mkdtemp(prefix='g1_sim2sim_')
    sim_overlay = {'sim_robot': {}, 'policy_runner': {}, 'safety_supervisor': {}}
    if supervisor:   # full stage only, its stage record kept out of the user's ROS_HOME
        sim_overlay['safety_supervisor'].update(stages=[1.0], resume_stage=False,
                                                stage_file=str(Path(tmp) / 'stages.json'))
    if lockstep:
        sim_overlay['sim_robot'].update(lockstep=True, lockstep_period_s=0.02,
                                        lockstep_timeout_s=0.0, publish_clock=True)
        # The reference holds one command: a lockstep run on a loaded machine may not see a
        # cmd_vel for cmd_vel_timeout_s (wall), which would zero it mid-run.
        sim_overlay['policy_runner'].update(lockstep=True, use_sim_time=True,
                                            cmd_vel_timeout_s=3600.0)
        # On sim_robot's /clock, the supervisor forwards each command as it arrives (with its
        # stamp, which is what the lockstep waits for); its ticks re-send older stamps only.
        sim_overlay['safety_supervisor'].update(use_sim_time=True)
    else:
        # The phase starts at enable, as the reference's starts at t = 0.
        sim_overlay['policy_runner'].update(
            {'observation': {'gait_phase': {'origin': 'reset'}}})
        if args.rtf != 1.0:
            sim_overlay['sim_robot'].update(real_time_factor=args.rtf, publish_clock=True)
            for name in ('policy_runner', 'safety_supervisor'):
                sim_overlay[name]['use_sim_time'] = True
    # Without the supervisor sim_robot takes policy/command itself.
    sim_remap = [] if supervisor else ['-r', 'hardware/command:=policy/command']
    hold_topic = 'policy/command'   # the hold goes the policy's way (through the supervisor)

    overlay = write_overlay(tmp, sim_overlay)
    from simreal_ros.nodes.common import prefer_udp_transport
    prefer_udp_transport()   # the nodes' transport (see there)
    rclpy.init()
    node = rclpy.create_node('g1_sim2sim_bench')
    lock = threading.Lock()
    commands, poses, states = [], [], []
    # Every command is recorded: reliable and deep (COMMAND_QOS keeps only the last one).
    record_qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
    pose_qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.BEST_EFFORT)
    node.create_subscription(JointState, 'policy/command',
                             lambda m: commands.append(m), record_qos)
    node.create_subscription(PoseStamped, 'sim/base_pose', lambda m: poses.append(
        (stamp_to_sec(m.header.stamp), m.pose.position.x, m.pose.position.y,
         m.pose.position.z)), pose_qos)
    node.create_subscription(JointState, 'joint_states',
                             lambda m: states.append(stamp_to_sec(m.header.stamp)),
                             SENSOR_SUB_QOS)
    hold = node.create_publisher(JointState, hold_topic, COMMAND_QOS)
    from geometry_msgs.msg import Twist
    cmd_vel = node.create_publisher(Twist, 'cmd_vel', 10)
    diag = {}   # policy_runner's diagnostics: cmd_vel_received before the enable

    def on_diag(msg):
        for status in msg.status:
            if status.name == 'policy_runner: loop':
                diag.update({kv.key: kv.value for kv in status.values})
    from diagnostic_msgs.msg import DiagnosticArray
    node.create_subscription(DiagnosticArray, '/diagnostics', on_diag, 10)
    safety = []   # the supervisor's latched JSON state: its events explain a safe stop
    from std_msgs.msg import String
    from simreal_ros.nodes.common import LATCHED_QOS
    node.create_subscription(String, 'safety/state', lambda m: safety.append(m.data),
                             LATCHED_QOS)
    enable = node.create_client(SetBool, 'policy_runner/enable')
    from simreal_ros.client.rig import Spinner
    spinner = Spinner(node)

    procs = []
    try:
        stop_hold = threading.Event()
        stop_teleop = threading.Event()

        def teleop():
            # The reference's command, 0.5 m/s forward, re-sent at 10 Hz as a teleop does:
            # policy_runner takes a cmd_vel older than cmd_vel_timeout_s as zero.
            while not stop_teleop.is_set():
                msg = Twist()
                msg.linear.x = 0.5
                cmd_vel.publish(msg)
                stop_teleop.wait(0.1)
        threading.Thread(target=teleop, daemon=True).start()
        if not lockstep and not supervisor:
            # Hold the default pose from before the robot exists, as the reference starts.

            def hold_loop():
                while not stop_hold.is_set():
                    # Stamped: the supervisor's watchdog takes an unstamped command as stale.
                    msg = JointState(name=names, position=default.tolist())
                    msg.header.stamp = node.get_clock().now().to_msg()
                    hold.publish(msg)
                    stop_hold.wait(0.005)
            threading.Thread(target=hold_loop, daemon=True).start()
        procs.append(NodeProcess('sim_robot', params_file=CONFIG,
                                 extra_args=sim_remap + overlay))
        procs.append(NodeProcess('policy_runner', params_file=CONFIG, extra_args=overlay))
        if supervisor:
            procs.append(NodeProcess('safety_supervisor', params_file=CONFIG,
                                     extra_args=overlay))
        assert enable.wait_for_service(timeout_sec=60), procs[1].output()
        wait_for(lambda: states, 60, what='joint_states from sim_robot')
        wait_for(lambda: diag.get('cmd_vel_received', '0') != '0', 10,
                 what='policy_runner receiving cmd_vel')
        summary = {'mode': args.mode, 'supervisor': bool(supervisor)}
        if not lockstep:
            summary['real_time_factor'] = args.rtf
        if lockstep:
            # The reference's first period: hold the default pose, stamped t = 0.
            msg = JointState(name=names, position=default.tolist())

            def stepped():
                # Sent until the simulator steps: a reliable message reaches only the readers
                # matched when it is sent, and one sent before the supervisor (or sim_robot)
                # had matched this publisher was lost, the lockstep waiting for ever (seen in
                # CI). Stamped 0, a repeat after the step does not advance the simulation.
                if any(abs(t - 0.02) < 1e-6 for t in list(states)):
                    return True
                hold.publish(msg)
                return False
            try:
                wait_for(stepped, 30, interval=0.1, what='sim_robot to step to t = 0.02')
            except AssertionError:
                for p in procs:
                    print(p.output()[-1500:], file=sys.stderr)
                raise
            t0 = time.monotonic()
            future = enable.call_async(SetBool.Request(data=True))
            wait_for(future.done, 10, what='enable')
            wait_for(lambda: len(commands) > args.steps or any(
                p.proc.poll() is not None for p in procs), 60 + 0.1 * args.steps,
                what=f'{args.steps} lockstep commands')
            wall = time.monotonic() - t0
            with lock:   # without the supervisor the hold (t = 0) went out on policy/command
                cmds = [c for c in commands if stamp_to_sec(c.header.stamp) > 0][:args.steps]
            trace = np.load(G1 / 'reference_trace.npz')
            index = [list(cmds[0].name).index(n) for n in runner_params['policy_joint_names']]
            targets = np.array([np.asarray(c.position)[index] for c in cmds])
            actions = (targets - default) / scale
            ref = trace['actions'][:len(actions)]
            err = np.abs(actions - ref).max(axis=1)
            stamps = np.array([stamp_to_sec(c.header.stamp) for c in cmds])
            if args.save:
                np.savez(args.save, actions=actions, stamps=stamps, err=err)
            end = [p for p in poses if abs(p[0] - stamps[-1]) < 1e-6]
            z = [p[3] for p in poses if p[0] <= stamps[-1] + 1e-9]
            summary.update(
                steps=len(actions), max_action_err=float(err.max()),
                first_step_over_tol=int(np.argmax(err > 1e-4)) if err.max() > 1e-4 else None,
                stamps_match_reference=bool(np.allclose(stamps, trace['time'][:len(stamps)],
                                                        atol=2e-9)),
                distance_m=float(np.hypot(end[-1][1], end[-1][2])) if end else None,
                min_base_z=float(min(z)), fell=bool(min(z) < 0.5),
                ref_distance_m=float(np.hypot(*trace['qpos'][len(actions) - 1][:2])),
                wall_s=round(wall, 2), steps_per_s=round(len(actions) / wall, 1))
        else:
            wait_for(lambda: len(poses) > 100, 30, what='base pose')
            if supervisor:
                # sim_robot (hold_until_command) starts with the first forwarded command; a
                # held default pose alone topples the G1 within ~1 s, so the policy's first
                # command is the one that starts it (the supervisor slews from the measured
                # pose), as the reference starts its policy at t = 0.
                wait_for(lambda: safety and json.loads(safety[-1]).get('output') != 'waiting',
                         30, what='safety_supervisor receiving joint_states')
            future = enable.call_async(SetBool.Request(data=True))
            wait_for(future.done, 10, what='enable')
            stop_hold.set()
            wait_for(lambda: commands, 10, what='first policy command')
            start_pose = poses[-1]
            summary['base_z_at_enable'] = float(start_pose[3])
            wait_for(lambda: poses[-1][0] - start_pose[0] > args.duration or any(
                p.proc.poll() is not None for p in procs), args.duration / args.rtf + 60,
                what='realtime run')
            with lock:
                run = [p for p in poses if p[0] >= start_pose[0]]
            z = [p[3] for p in run]
            diag = read_runner_diagnostics(node, procs[1])
            summary.update(
                duration_s=args.duration,
                distance_m=float(np.hypot(run[-1][1] - start_pose[1],
                                          run[-1][2] - start_pose[2])),
                min_base_z=float(min(z)), fell=bool(min(z) < 0.5),
                commands=len(commands),
                deadline_misses=int(diag.get('deadline_misses', -1)),
                stale_ticks=int(diag.get('stale_ticks', -1)),
                period_err_ms_p99=float(diag.get('period_err_ms_p99', 'nan')),
                inference_us_p99=float(diag.get('inference_us_p99', 'nan')))
        if supervisor and safety:
            try:
                state = json.loads(safety[-1])
                summary['supervisor_state'] = {k: state.get(k) for k in (
                    'estop', 'estop_cause', 'output', 'safe_reason', 'clips')}
                summary['supervisor_state']['log'] = [
                    line[-160:] for line in procs[2].output().splitlines()
                    if 'E-STOP' in line or 'output:' in line][-6:]
            except ValueError:
                summary['supervisor_state'] = safety[-1][-500:]
        for p in procs:
            if p.proc.poll() is not None:
                summary.setdefault('exited', []).append(p.cmd[2])
    finally:
        stop_teleop.set()
        spinner.stop()
        for p in procs:
            p.stop()
        rclpy.try_shutdown()
    print(json.dumps(summary))
    return 0


def read_runner_diagnostics(node, proc, timeout=5.0):
    """Return the next policy_runner diagnostics key/values."""
    from diagnostic_msgs.msg import DiagnosticArray
    from simreal_ros.client.rig import wait_for
    got = {}

    def on_diag(msg):
        for status in msg.status:
            if status.name == 'policy_runner: loop':
                got.update({kv.key: kv.value for kv in status.values})
    sub = node.create_subscription(DiagnosticArray, '/diagnostics', on_diag, 10)
    wait_for(lambda: got, timeout, what='policy_runner diagnostics')
    node.destroy_subscription(sub)
    return got


if __name__ == '__main__':
    sys.exit(main())

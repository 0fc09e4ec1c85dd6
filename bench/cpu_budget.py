#!/usr/bin/env python3
"""CPU budget of the G1 graph in real time, against a plain rclpy relay measured in the same run.

    .venv/bin/python bench/cpu_budget.py                # 60 s walk, CPU per node and the floor
    .venv/bin/python bench/cpu_budget.py --load 1       # 20 s walk with 1 competing busy process

The graph: sim_robot (500 Hz), safety_supervisor (500 Hz, stage 1.00), policy_runner (50 Hz),
each its own process as in a deployment; the bench holds cmd_vel at the reference's 0.5 m/s
(re-sent at 10 Hz, as a teleop does). CPU time per process is read from the OS
(/proc/<pid>/stat utime + stime) over the walk only; one core = 100 %. So are the context
switches of each process's threads (`context_switches_per_s`: every wake-up and preemption).

The floor is a relay written the plain way a user would (SingleThreadedExecutor, a timer at the
supervisor's rate, a subscription to joint_states, a JointState command published each tick),
run as its own process at the supervisor's priority in the same run, half its time just
before the walk and half just after it (`relay_floor_before_after`; the relay's cost here moved
by a third between runs minutes apart), with sim_robot streaming joint_states and nothing else
of the graph (`relay_floor_hz` says whether it kept its rate): `supervisor_over_floor` is the
supervisor's CPU over the relay's mean.

--load N starts N busy processes (each ends by itself after the run's time plus a margin, and
the bench ends them) during the walk and reports `distance_m`, `falls`, `stale_ticks`,
`late_inputs_used` (policy_runner diagnostics) and `grace_holds` (the supervisor's safety/state,
null when it has no such key). The last line printed is a JSON summary.
"""
import argparse
import json
import os
from pathlib import Path
import subprocess
import sys
import tempfile
import threading
import time

REPO = Path(__file__).resolve().parents[1]
from simreal_ros.core import assets  # noqa: E402
G1 = assets.folder('unitree_g1_12dof')
CONFIG = REPO / 'config' / 'robots' / 'g1_12dof.yaml'
sys.path.insert(0, str(REPO / 'test'))
from simreal_ros.nodes.common import localhost_discovery  # noqa: E402
localhost_discovery(keep_choice=True)   # and ROS_LOCALHOST_ONLY=1 on Humble
NODES = ('sim_robot', 'safety_supervisor', 'policy_runner')
WALK_VX = 0.5    # the reference trace's command (m/s)
FALL_Z = 0.5     # base height below which the G1 has fallen (m)
FLOOR_S = 20.0   # the relay floor's measuring time (s; at most the walk's)
BUSY = ('import sys, time\nend = time.monotonic() + float(sys.argv[1])\n'
        'while time.monotonic() < end:\n    pass\n')


def relay_main(rate_hz):
    """Run the floor: the plain relay a user would write (own process)."""
    import rclpy
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import JointState

    from simreal_ros.nodes.common import prefer_udp_transport
    prefer_udp_transport()   # the nodes' transport (see there)
    rclpy.init()
    node = rclpy.create_node('relay_floor')
    # At the supervisor's priority (its process_priority): a floor starved by the measured
    # nodes would run slower than its rate and look cheap.
    from simreal_ros.nodes.common import set_process_nice
    try:
        set_process_nice(-10)
    except OSError:
        pass
    latest = {}
    node.create_subscription(JointState, 'joint_states',
                             lambda m: latest.__setitem__('msg', m), qos_profile_sensor_data)
    pub = node.create_publisher(JointState, 'relay/command', 1)

    def tick():
        msg = latest.get('msg')
        if msg is not None:
            out = JointState()
            out.header.stamp = node.get_clock().now().to_msg()
            out.name = list(msg.name)
            out.position = list(msg.position)
            pub.publish(out)
    node.create_timer(1.0 / rate_hz, tick)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        rclpy.try_shutdown()


def cpu_seconds(pid):
    """Return user + system CPU seconds of a process (Linux /proc)."""
    fields = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def context_switches(pid):
    """Return the context switches (voluntary + involuntary) of every thread of a process so
    far (Linux /proc): how often its threads were woken or preempted."""
    total = 0
    for tid in os.listdir(f'/proc/{pid}/task'):
        try:
            for line in Path(f'/proc/{pid}/task/{tid}/status').read_text().splitlines():
                if line.startswith(('voluntary_ctxt_switches', 'nonvoluntary_ctxt_switches')):
                    total += int(line.split()[1])
        except OSError:      # a thread that ended meanwhile
            pass
    return total


def machine_load():
    return [round(v, 2) for v in os.getloadavg()]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--duration', type=float, default=None,
                        help='walk seconds (default 60, or 20 with --load)')
    parser.add_argument('--load', type=int, default=0, help='competing busy processes')
    parser.add_argument('--executor', choices=('events', 'single'), default=None,
                        help='executor of the three nodes (default: their configuration)')
    parser.add_argument('--param', action='append', default=[], metavar='NODE:NAME=VALUE',
                        help='a parameter override, e.g. safety_supervisor:poll_inputs=false '
                        '(repeatable; the value is read as YAML)')
    parser.add_argument('--relay', type=float, help=argparse.SUPPRESS)   # the floor process
    args = parser.parse_args()
    if args.relay:
        return relay_main(args.relay)
    duration = args.duration or (20.0 if args.load else 60.0)
    if assets.unavailable('unitree_g1_12dof'):
        print(json.dumps({'skipped': assets.unavailable('unitree_g1_12dof')}))
        return 0

    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from geometry_msgs.msg import PoseStamped, Twist
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from rosproc import NodeProcess, Spinner, wait_for
    from sensor_msgs.msg import JointState
    from std_msgs.msg import String
    from std_srvs.srv import SetBool
    import yaml

    from simreal_ros.core.config import load_node_params
    from simreal_ros.nodes.common import LATCHED_QOS, stamp_to_sec

    rate = float(load_node_params(CONFIG, 'safety_supervisor')['rate_hz'])
    tmp = Path(tempfile.mkdtemp(prefix='cpu_budget_'))
    overlay = {n: {} for n in NODES}
    overlay['safety_supervisor'].update(stages=[1.0], resume_stage=False,
                                        stage_file=str(tmp / 'stages.json'))
    overlay['policy_runner']['observation'] = {'gait_phase': {'origin': 'reset'}}
    if args.executor:
        for name in NODES:
            overlay[name]['executor'] = args.executor
    overrides = {}
    for item in args.param:
        target, _, value = item.partition('=')
        name, _, key = target.partition(':')
        if name not in NODES or not key or not value:
            parser.error(f'--param {item!r}: use NODE:NAME=VALUE with NODE one of {NODES}')
        overlay[name][key] = overrides[target] = yaml.safe_load(value)
    (tmp / 'overlay.yaml').write_text(yaml.safe_dump(
        {k: {'ros__parameters': v} for k, v in overlay.items()}))
    extra = ['--params-file', str(tmp / 'overlay.yaml')]

    from simreal_ros.nodes.common import prefer_udp_transport
    prefer_udp_transport()   # the nodes' transport (see there)
    rclpy.init()
    node = rclpy.create_node('cpu_budget_bench')
    poses, diag, safety, relayed = [], {}, [], [0]
    node.create_subscription(PoseStamped, 'sim/base_pose', lambda m: poses.append(
        (stamp_to_sec(m.header.stamp), m.pose.position.x, m.pose.position.y,
         m.pose.position.z)), QoSProfile(depth=1000, reliability=ReliabilityPolicy.BEST_EFFORT))

    def on_diag(msg):
        for status in msg.status:
            diag[status.name] = {kv.key: kv.value for kv in status.values}
    node.create_subscription(DiagnosticArray, '/diagnostics', on_diag, 50)
    node.create_subscription(String, 'safety/state', lambda m: safety.append(m.data),
                             LATCHED_QOS)
    node.create_subscription(JointState, 'relay/command',
                             lambda m: relayed.__setitem__(0, relayed[0] + 1), 10)
    cmd_vel = node.create_publisher(Twist, 'cmd_vel', 10)
    enable = node.create_client(SetBool, 'policy_runner/enable')
    spinner = Spinner(node)
    stop = threading.Event()

    def teleop():
        while not stop.is_set():
            msg = Twist()
            msg.linear.x = WALK_VX
            cmd_vel.publish(msg)
            stop.wait(0.1)
    threading.Thread(target=teleop, daemon=True).start()

    procs, busy = {}, []
    summary = {'seconds': duration, 'load': args.load, 'overrides': overrides}
    try:
        # The floor around the walk, with sim_robot streaming joint_states (in its gantry
        # before, after the walk on its own) and nothing else of the graph: run beside the
        # walk, the relay competed with the nodes it is the
        # measure of (at their priority the G1 fell; below it, it was starved to 150 Hz).
        procs['sim_robot'] = NodeProcess('sim_robot', params_file=CONFIG, extra_args=extra)
        wait_for(lambda: len(poses) > 100, 60, what='base pose from sim_robot')
        floor_s = min(duration, FLOOR_S) / 2
        relays = []

        def measure_floor():
            """Half the floor's time in its own process; the other half after the walk: this
            machine's relay cost moved by a third between runs minutes apart (load from other
            jobs), so the floor brackets the walk it is compared with."""
            relay = subprocess.Popen([sys.executable, __file__, '--relay', str(rate)],
                                     cwd=REPO)
            relays.append(relay)
            start = relayed[0]
            wait_for(lambda: relayed[0] > start + 100, 60, what='the relay floor publishing')
            cpu0, wall0, count0 = cpu_seconds(relay.pid), time.monotonic(), relayed[0]
            switches0 = context_switches(relay.pid)
            time.sleep(floor_s)
            wall = time.monotonic() - wall0
            result = (100 * (cpu_seconds(relay.pid) - cpu0) / wall,
                      (relayed[0] - count0) / wall, wall,
                      (context_switches(relay.pid) - switches0) / wall)
            relay.send_signal(2)
            relay.wait(timeout=10)
            return result
        floors = [measure_floor()]
        for name in NODES[1:]:
            procs[name] = NodeProcess(name, params_file=CONFIG, extra_args=extra)
        assert enable.wait_for_service(timeout_sec=60), procs['policy_runner'].output()
        wait_for(lambda: safety and json.loads(safety[-1]).get('output') != 'waiting', 30,
                 what='safety_supervisor receiving joint_states')
        wait_for(lambda: diag.get('policy_runner: loop', {}).get('cmd_vel_received',
                                                                 '0') != '0',
                 10, what='policy_runner receiving cmd_vel')
        for _ in range(args.load):
            busy.append(subprocess.Popen([sys.executable, '-c', BUSY, str(duration + 30)]))
        future = enable.call_async(SetBool.Request(data=True))
        wait_for(future.done, 10, what='enable')
        start_pose = poses[-1]
        pids = {n: p.proc.pid for n, p in procs.items()}
        cpu0 = {n: cpu_seconds(pid) for n, pid in pids.items()}
        switches0 = {n: context_switches(pid) for n, pid in pids.items()}
        wall0 = time.monotonic()
        wait_for(lambda: time.monotonic() - wall0 > duration or any(
            p.proc.poll() is not None for p in procs.values()), duration + 30,
            what='the walk')
        wall = time.monotonic() - wall0
        cpu = {n: round(100 * (cpu_seconds(pid) - cpu0[n]) / wall, 1)
               for n, pid in pids.items()}
        switches = {n: round((context_switches(pid) - switches0[n]) / wall)
                    for n, pid in pids.items()}
        for p in busy:
            p.kill()
        # Whether a node ended by itself during the walk (before the bench stops two of them).
        exited_early = [n for n, p in procs.items() if p.proc.poll() is not None]
        walk_diag, walk_safety = dict(diag), list(safety)
        run = [p for p in poses if p[0] >= start_pose[0]]   # the walk's poses only
        for name in NODES[:0:-1]:       # sim_robot streams on for the second half of the floor
            procs[name].stop()
        floors.append(measure_floor())
        relay_cpu = round(sum(f[0] for f in floors) / len(floors), 1)
        relay_hz = sum(f[1] for f in floors) / len(floors)
        relay_wall = sum(f[2] for f in floors)
        loop = walk_diag.get('policy_runner: loop', {})
        state = json.loads(walk_safety[-1]) if walk_safety else {}
        z = [p[3] for p in run]
        summary.update(
            seconds=round(wall, 1), machine_load=machine_load(),
            cpu_percent={n: cpu[n] for n in NODES},
            context_switches_per_s={n: switches[n] for n in NODES},
            relay_floor_cpu_percent=relay_cpu, relay_floor_hz=round(relay_hz, 1),
            relay_floor_seconds=round(relay_wall, 1),
            relay_floor_before_after=[round(f[0], 1) for f in floors],
            relay_floor_context_switches_per_s=round(sum(f[3] for f in floors) / len(floors)),
            supervisor_over_floor=(round(cpu['safety_supervisor'] / relay_cpu, 2)
                                   if relay_cpu > 0 else None),
            executor={name.split(':')[0]: values['executor']
                      for name, values in walk_diag.items() if 'executor' in values},
            tick_loop={name.split(':')[0]: values['tick_loop']
                       for name, values in walk_diag.items() if 'tick_loop' in values},
            loop_period_err_p99_ms=float(loop.get('period_err_ms_p99', 'nan')),
            e2e_p99_ms=float(loop.get('e2e_latency_ms_p99', 'nan')),
            distance_m=round(float(((run[-1][1] - start_pose[1]) ** 2
                                    + (run[-1][2] - start_pose[2]) ** 2) ** 0.5), 2),
            min_base_z=round(min(z), 3), falls=int(min(z) < FALL_Z),
            stale_ticks=int(loop.get('stale_ticks', -1)),
            late_inputs_used=int(loop.get('late_inputs_used', -1)),
            grace_holds=state.get('grace_holds'),
            supervisor={k: state.get(k) for k in ('estop', 'estop_cause', 'output',
                                                  'safe_reason')})
        exited = [n for n in exited_early if n]
        if exited:
            summary['exited'] = exited
    finally:
        stop.set()
        for p in busy:
            p.kill()
            p.wait()
        spinner.stop()
        for p in procs.values():
            p.stop()
        for relay in relays if 'relays' in locals() else []:
            if relay.poll() is None:
                relay.send_signal(2)
                try:
                    relay.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    relay.kill()
        rclpy.try_shutdown()
    print(json.dumps(summary))
    return 0


if __name__ == '__main__':
    sys.exit(main())

#!/usr/bin/env python3
"""What the executor fallback of Humble and Jazzy costs: SingleThreadedExecutor against the
EventsExecutor (rclpy.experimental, Kilted and later), in CPU per callback.

    .venv/bin/python bench/executor_fallback.py [--seconds 6] [--rounds 3] [--rate 500]

Each round runs one child process per kind, one after the other (events, single, events, ...).
A child makes its executor with nodes/common.make_executor (the nodes' own choice and
fallback) and spins it as nodes/common.run does (spin_once, 0.1 s at most); in it, one node
publishes a 12-joint JointState from a timer at `--rate` and a second node subscribes to it (as
joint_states reach the supervisor): two callbacks per period, over the middleware (rclpy has no
intra-process path). Per kind, the median over rounds of: CPU of the process (% of a core,
utime + stime from the OS over the run), messages received per second, and the CPU per
callback (us). The machine's load average is reported: other processes slow both kinds. The
last line printed is a JSON summary.
"""
import argparse
import json
import os
from pathlib import Path
import statistics
import subprocess
import sys
import time

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from simreal_ros.nodes.common import localhost_discovery  # noqa: E402
localhost_discovery(keep_choice=True)   # and ROS_LOCALHOST_ONLY=1 on Humble
os.environ.setdefault('ROS_DOMAIN_ID', '161')


def child(kind, seconds, rate):
    import rclpy
    from rclpy.node import Node
    from sensor_msgs.msg import JointState
    from simreal_ros.nodes.common import COMMAND_QOS, make_executor, prefer_udp_transport
    prefer_udp_transport()
    rclpy.init()
    pub_node, sub_node = Node('fallback_pub'), Node('fallback_sub')
    pub = pub_node.create_publisher(JointState, 'fallback/joint_states', COMMAND_QOS)
    msg = JointState(name=[f'j{i}' for i in range(12)], position=[0.0] * 12,
                     velocity=[0.0] * 12, effort=[0.0] * 12)
    counts = {'timer': 0, 'received': 0}

    def tick():
        counts['timer'] += 1
        pub.publish(msg)

    def received(_):
        counts['received'] += 1

    sub_node.create_subscription(JointState, 'fallback/joint_states', received, COMMAND_QOS)
    pub_node.create_timer(1.0 / rate, tick)
    executor, made = make_executor(kind)
    executor.add_node(pub_node)
    executor.add_node(sub_node)
    warm = time.monotonic() + 2.0
    while time.monotonic() < warm or counts['received'] == 0:
        executor.spin_once(timeout_sec=0.1)
        if time.monotonic() > warm + 10.0:
            raise SystemExit('no message received in 12 s: the subscription never matched')
    start_counts = dict(counts)
    cpu0, t0 = time.process_time(), time.monotonic()
    end = t0 + seconds
    while time.monotonic() < end:
        executor.spin_once(timeout_sec=0.1)
    cpu, wall = time.process_time() - cpu0, time.monotonic() - t0
    timer_n = counts['timer'] - start_counts['timer']
    received_n = counts['received'] - start_counts['received']
    executor.shutdown(timeout_sec=1.0)
    rclpy.try_shutdown()
    print(json.dumps({'kind': made, 'cpu_percent': 100.0 * cpu / wall,
                      'timer_hz': timer_n / wall, 'received_hz': received_n / wall,
                      'cpu_us_per_callback': 1e6 * cpu / max(timer_n + received_n, 1)}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--seconds', type=float, default=6.0)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--rate', type=float, default=500.0)
    parser.add_argument('--child', choices=('events', 'single'), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.seconds, args.rate)
        return
    runs = {'events': [], 'single': []}
    load = [os.getloadavg()[0]]
    for _ in range(args.rounds):
        for kind in runs:
            out = subprocess.run([sys.executable, __file__, '--child', kind,
                                  '--seconds', str(args.seconds), '--rate', str(args.rate)],
                                 capture_output=True, text=True, timeout=120 + args.seconds)
            if out.returncode != 0:
                raise SystemExit(f'{kind} child failed ({out.returncode}): {out.stderr[-2000:]}')
            result = json.loads(out.stdout.strip().splitlines()[-1])
            if result['kind'] != kind:
                raise SystemExit(f'asked for {kind}, the node made {result["kind"]} '
                                 f'({out.stderr.strip()[-500:]})')
            runs[kind].append(result)
            print(kind, result, flush=True)
    load.append(os.getloadavg()[0])
    summary = {'seconds': args.seconds, 'rounds': args.rounds, 'rate_hz': args.rate,
               'machine_load_start_end': load}
    for kind, results in runs.items():
        summary[kind] = {key: round(statistics.median(r[key] for r in results), 2)
                         for key in ('cpu_percent', 'timer_hz', 'received_hz',
                                     'cpu_us_per_callback')}
    summary['single_over_events_cpu'] = round(
        summary['single']['cpu_percent'] / summary['events']['cpu_percent'], 2)
    print(json.dumps(summary))


if __name__ == '__main__':
    main()

#!/usr/bin/env python3
"""Measure sim_robot's joint_states rate and period jitter from another process.

    .venv/bin/python bench/sim_rate.py [--robot arm3] [--seconds 10] [--rate 500]

Starts `sim_robot` as its own process (real time, DDS on loopback in a private domain), records
the arrival time and header stamp of every joint_states message in this process, and prints a
JSON summary as its last line: publish_rate_hz (messages received per second of wall time),
period_p99_ms / period_max_ms (inter-arrival time), jitter_p99_ms (|period - nominal|),
realtime_factor (simulated seconds per wall second, from sim_robot's diagnostics).
"""
import argparse
import json
import os
import random
import threading
import time

from simreal_ros.nodes.common import localhost_discovery  # noqa: E402
localhost_discovery()   # and ROS_LOCALHOST_ONLY=1 on Humble
os.environ.setdefault('ROS_DOMAIN_ID', str(random.randint(101, 120)))

import numpy as np  # noqa: E402
import rclpy  # noqa: E402
from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from rclpy.qos import QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402

from simreal_ros.client.rig import NodeProcess  # noqa: E402
from simreal_ros.core.config import robot_config_path  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--robot', default='arm3', help='robot config name or path')
    parser.add_argument('--seconds', type=float, default=10.0)
    parser.add_argument('--rate', type=float, default=500.0, help='publish_rate_hz to configure')
    args = parser.parse_args()

    config = robot_config_path(args.robot)
    sim = NodeProcess('sim_robot', params_file=config, params={'publish_rate_hz': args.rate})
    proc = sim.proc
    from simreal_ros.nodes.common import prefer_udp_transport
    prefer_udp_transport()   # the nodes' transport (see there)
    rclpy.init()
    node = rclpy.create_node('sim_rate_bench')
    arrivals, stamps, diags = [], [], []
    lock = threading.Lock()

    def on_state(msg):
        now = time.perf_counter()
        with lock:
            arrivals.append(now)
            stamps.append(msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9)

    def on_diag(msg):
        for status in msg.status:
            if status.name == 'sim_robot: physics':
                values = {kv.key: kv.value for kv in status.values}
                diags.append((time.perf_counter(), float(values['sim_time_s'])))

    deep = QoSProfile(depth=1000, reliability=ReliabilityPolicy.BEST_EFFORT)
    node.create_subscription(JointState, 'joint_states', on_state, deep)
    node.create_subscription(DiagnosticArray, '/diagnostics', on_diag, 10)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        deadline = time.monotonic() + 30
        while not arrivals and time.monotonic() < deadline and proc.poll() is None:
            executor.spin_once(timeout_sec=0.1)
        if not arrivals:
            raise SystemExit(f'sim_robot published nothing: {sim.output()[-2000:]}')
        warmup_end = time.perf_counter() + 1.0
        while time.perf_counter() < warmup_end:
            executor.spin_once(timeout_sec=0.1)
        with lock:
            arrivals.clear()
            stamps.clear()
        diags.clear()
        end = time.perf_counter() + args.seconds
        while time.perf_counter() < end:
            executor.spin_once(timeout_sec=0.1)
    finally:
        sim.stop()
        node.destroy_node()
        rclpy.try_shutdown()

    arr = np.array(arrivals)
    periods = np.diff(arr) * 1e3
    nominal = 1e3 / args.rate
    rtf = None
    if len(diags) >= 2:
        (w0, s0), (w1, s1) = diags[0], diags[-1]
        rtf = (s1 - s0) / (w1 - w0)
    summary = dict(
        robot=args.robot, configured_rate_hz=args.rate, seconds=args.seconds,
        messages=int(arr.size),
        publish_rate_hz=round(float((arr.size - 1) / (arr[-1] - arr[0])), 2),
        stamp_rate_hz=round(float((len(stamps) - 1) / (stamps[-1] - stamps[0])), 2),
        period_mean_ms=round(float(periods.mean()), 4),
        period_p99_ms=round(float(np.percentile(periods, 99)), 4),
        period_max_ms=round(float(periods.max()), 4),
        jitter_p99_ms=round(float(np.percentile(np.abs(periods - nominal), 99)), 4),
        realtime_factor=None if rtf is None else round(rtf, 4),
        cpu_count=os.cpu_count(), load_avg_1min=round(os.getloadavg()[0], 2),
    )
    print(json.dumps(summary))


if __name__ == '__main__':
    main()

#!/usr/bin/env python3
"""SysID end to end through ROS: sim_robot, safety_supervisor and the three SysID nodes as
separate processes in real time, started by service calls, compared with the hidden truth.

    .venv/bin/python bench/sysid_ros.py                       # arm3, every joint
    .venv/bin/python bench/sysid_ros.py --joints elbow_pitch  # one joint (about 50 s)

Each node runs as `simreal sysid <kind>` does (policy off, select sysid, start, wait for the
result on sysid/result). Reported per parameter: the estimate, its 95 % interval, the relative
error against the plant truth of the robot config and whether the interval covers it.

Latency through ROS is more than the plant's command latency: a command also travels SysID node
-> supervisor -> sim_robot and waits for the next 2 ms physics period. The bench measures that
transport in the same run (hardware/command arrival at this process minus the SysID command's
stamp, which the supervisor keeps) and reports the estimate minus the plant latency beside it.
The last line printed is a JSON summary.
"""
import argparse
import json
import os
from pathlib import Path
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from simreal_ros.core.config import load_node_params, robot_config_path  # noqa: E402
from simreal_ros.core.plant import PlantTruth  # noqa: E402

NODES = ('friction_id', 'inertia_id', 'latency_id')
TRUTH_KEY = {'coulomb_friction': 'coulomb_friction', 'viscous_damping': 'viscous_damping',
             'armature': 'armature'}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--robot', default='arm3')
    parser.add_argument('--joints', nargs='*', default=None,
                        help='joints to identify (default: the robot file\'s `joints`)')
    parser.add_argument('--out', default='', help='results folder (default: a temp folder)')
    parser.add_argument('--thread-priority', type=int, default=None,
                        help='thread_priority of every node (default: the robot file)')
    parser.add_argument('--load', type=int, default=0,
                        help='busy loops (`while 1: pass`, nice 0) beside the run')
    args = parser.parse_args()
    from simreal_ros.nodes.common import localhost_discovery  # noqa: E402
    localhost_discovery()   # and ROS_LOCALHOST_ONLY=1 on Humble
    os.environ.setdefault('ROS_DOMAIN_ID', '73')

    from sensor_msgs.msg import JointState
    from simreal_ros.client import sysid as sysid_client
    from simreal_ros.client.processes import start_graph, stop_graph
    from simreal_ros.client.ros import Ros
    from simreal_ros.deploy.graph import build_graph
    from simreal_ros.nodes.common import stamp_to_sec

    config = robot_config_path(args.robot)
    names = list(load_node_params(config, 'sim_robot')['joint_names'])
    truth = PlantTruth.from_file(config, len(names))
    out = Path(args.out or tempfile.mkdtemp(prefix='sysid_ros_'))
    over = {n: {'results_dir': str(out / 'sysid')} for n in NODES}
    if args.joints:
        for n in NODES:
            over[n]['joints'] = list(args.joints)
    over['safety_supervisor'] = {'stage_file': str(out / 'stages.json'), 'resume_stage': False}
    if args.thread_priority is not None:
        for n in NODES + ('safety_supervisor', 'sim_robot'):
            over.setdefault(n, {})['thread_priority'] = args.thread_priority
    loads = [subprocess.Popen([sys.executable, '-c', 'while 1: pass'])
             for _ in range(args.load)]
    graph = build_graph(args.robot, sysid=True, overrides=over)
    only = ['sim_robot', 'safety_supervisor'] + list(NODES)
    procs = start_graph(graph, log_dir=out / 'logs', quiet=True, only=only)
    ros = Ros(graph.namespace)
    sent, transport = {}, []

    def key(msg):   # to the microsecond: the supervisor re-encodes the stamp it keeps
        return int(round(stamp_to_sec(msg.header.stamp) * 1e6))

    def on_sysid(msg):
        sent[key(msg)] = True

    def on_hw(msg):
        if sent.pop(key(msg), None):   # a forwarded SysID command, first time seen
            transport.append(time.time() - stamp_to_sec(msg.header.stamp))
    ros.node.create_subscription(JointState, 'sysid/command', on_sysid, 100)
    ros.node.create_subscription(JointState, 'hardware/command', on_hw, 100)
    summary = {'robot': args.robot, 'results': str(out), 'load': args.load,
               'thread_priority': args.thread_priority}
    try:
        deadline = time.monotonic() + 900   # a shared machine starts eleven processes slowly
        while not all(n in {x.split('/')[-1] for x in ros.node_names()} for n in only):
            dead = [s.name for s, p, _ in procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise SystemExit(f'nodes did not come up ({dead or "timeout"}); logs in '
                                 f'{out / "logs"}')
            time.sleep(0.2)
        rows, failures, robot_time = [], [], {}
        t0 = time.monotonic()
        for node in NODES:
            start = time.monotonic()
            result = sysid_client.run(ros, node, timeout=900)
            robot_time[node] = round(time.monotonic() - start, 1)
            for fail in result.get('failures') or []:
                failures.append(f'{node}: {fail}')
            if not result.get('results') and not result.get('ok'):
                failures.append(f'{node}: {result.get("message")}')
            for r in result.get('results') or []:
                j = names.index(r['joint'])
                lo, hi = r['interval']
                row = {'joint': r['joint'], 'parameter': r['parameter'], 'value': r['value'],
                       'interval': [lo, hi], 'units': r.get('units')}
                truth_key = TRUTH_KEY.get(r['parameter'])
                if truth_key is not None:
                    true = float(getattr(truth, truth_key)[j])
                    row.update(truth=true, rel_err=abs(r['value'] - true) / true,
                               covered=bool(lo <= true <= hi))
                elif r['parameter'] == 'latency':
                    row.update(plant_latency=truth.latency_s,
                               minus_plant_ms=(r['value'] - truth.latency_s) * 1e3)
                rows.append(row)
        summary['wall_s'] = round(time.monotonic() - t0, 1)
        summary['robot_time_s'] = robot_time
        for row in rows:
            print(f'{row["joint"]:<16} {row["parameter"]:<18} {row["value"]:.5g} '
                  f'[{row["interval"][0]:.5g}, {row["interval"][1]:.5g}]'
                  + (f'  truth {row["truth"]:.5g}, error {100 * row["rel_err"]:.1f} %'
                     if 'truth' in row else '')
                  + (f'  ({row["minus_plant_ms"]:.2f} ms above the plant latency)'
                     if 'minus_plant_ms' in row else ''))
        per = {}
        for row in rows:
            if 'rel_err' in row:
                per.setdefault(row['parameter'], []).append(row)
        summary['max_rel_err'] = {k: round(max(r['rel_err'] for r in v), 4)
                                  for k, v in per.items()}
        summary['coverage'] = {k: round(float(np.mean([r['covered'] for r in v])), 3)
                               for k, v in per.items()}
        lat = [r for r in rows if r['parameter'] == 'latency']
        if lat:
            summary['latency_s'] = {r['joint']: round(r['value'], 5) for r in lat}
            summary['plant_latency_s'] = truth.latency_s
            summary['latency_minus_plant_ms'] = {r['joint']: round(r['minus_plant_ms'], 2)
                                                 for r in lat}
        if transport:
            tr = np.array(transport) * 1e3
            summary['transport_ms'] = {'p50': round(float(np.percentile(tr, 50)), 2),
                                       'p99': round(float(np.percentile(tr, 99)), 2),
                                       'n': len(tr)}
        summary['failures'] = failures
        summary['estimates'] = rows
    finally:
        ros.close()
        stop_graph(procs)
        for p in loads:
            p.kill()
            p.wait()
    print(json.dumps(summary))
    return 1 if summary.get('failures') else 0


if __name__ == '__main__':
    sys.exit(main())

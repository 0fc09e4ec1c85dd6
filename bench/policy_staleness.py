#!/usr/bin/env python3
"""How old the G1 walk's policy commands are at the supervisor, hop by hop, from traces.

    .venv/bin/python bench/policy_staleness.py --duration 60
    .venv/bin/python bench/policy_staleness.py --duration 60 --load 2 --thread-priority 50

Runs the supervised G1 walk of test/test_g1_walk.py (sim_robot, safety_supervisor at stage
1.00, policy_runner with unitree's policy, cmd_vel 0.5 m/s) for `--duration` s with
SIMREAL_TIMING_TRACE set, so that the nodes record their timing events (nodes/common.py
TimingTrace): policy_runner every timer tick, every command's sample stamp, compute start,
inference time and publish time; the supervisor every command's receive time; every process
its garbage collector's pauses. No figure depends on an idle machine: each hop is measured on
its own (system clock, one computer):

- `sample_age_ms`: the joint_states sample's stamp -> policy_runner starts computing;
- `compute_ms`: computing start -> publish (observation, inference, message);
- `delivery_ms`: publish -> the supervisor's receive;
- `tick_interval_ms`: between two timer ticks of policy_runner (the executor's wake-ups);
- `age_before_next_ms`: what the supervisor's policy watchdog sees just before a command
  arrives: the previous command's stamp -> this receive (stale above policy_timeout_s).

Each command older than the timeout is listed with its hops and the GC pauses inside it.
`--load N` starts N busy loops (`while 1: pass`, nice 0) for the run; `--thread-priority P`
sets thread_priority (SCHED_FIFO) on the three nodes. The last line printed is JSON; `stale`
is the count of commands older than the timeout at the supervisor (the goal: 0).
"""
import argparse
import glob
import json
import os
from pathlib import Path
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
G1 = REPO / 'config' / 'robots' / 'g1_12dof.yaml'


def stats(values):
    """p50, p99, max (ms) of values in seconds."""
    v = np.asarray(values, float) * 1e3
    if not len(v):
        return None
    return {'p50': round(float(np.percentile(v, 50)), 2),
            'p99': round(float(np.percentile(v, 99)), 2), 'max': round(float(v.max()), 2),
            'n': int(len(v))}


def busy_loops(n, nice=0):
    """Start n `while 1: pass` processes at `nice`; return them."""
    return [subprocess.Popen([sys.executable, '-c', 'while 1: pass'],
                             preexec_fn=lambda: os.setpriority(os.PRIO_PROCESS, 0, nice))
            for _ in range(n)]


def walk(duration, folder, thread_priority=None, policy_timeout=0.06):
    """Run the supervised G1 walk; return what the supervisor and the probe saw."""
    import rclpy
    from geometry_msgs.msg import PoseStamped
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from simreal_ros.client.rig import Rig, loopback_udp_env, wait_for
    env = dict(loopback_udp_env(), SIMREAL_TIMING_TRACE=str(Path(folder) / 'trace'))
    extra = {} if thread_priority is None else {'thread_priority': int(thread_priority)}
    rclpy.init()
    try:
        with Rig(G1, sim=dict({'hold_until_command': True}, **extra),
                 supervisor=dict({'stages': [1.0], 'resume_stage': False}, **extra),
                 policy_runner=dict({'observation': {'gait_phase': {'origin': 'reset'}}},
                                    **extra),
                 tmp=str(folder), env=env) as rig:
            poses = rig.watch(PoseStamped, 'sim/base_pose',
                              QoSProfile(depth=1000, reliability=ReliabilityPolicy.BEST_EFFORT))
            stop = rig.teleop(0.5)       # cmd_vel 0.5 m/s at 10 Hz
            try:
                wait_for(lambda: len(poses) > 20, 900, interval=0.5, what='sim/base_pose')
                wait_for(lambda: rig.state('output') not in (None, 'waiting'), 900,
                         interval=0.5, what='the supervisor receiving joint_states')
                # A shared machine may take minutes to start a process (its imports run at
                # the normal priority): the runner says when it is up.
                wait_for(lambda: 'Disabled until' in rig.procs['policy_runner'].output(),
                         900, interval=0.5, what='policy_runner up')
                assert rig.enable_policy().success
                bringup_estop = rig.state('estop_cause') if rig.state('estop') else None
                if bringup_estop:   # as test_g1_walk: reset as an operator would
                    wait_for(lambda: rig.call('reset').success, 30, interval=0.5,
                             what=f'a reset after the bring-up e-stop ({bringup_estop})')
                start = poses.all()[-1][1].pose.position
                t0 = poses.all()[-1][0]
                wall0 = time.time()
                wait_for(lambda: poses.all()[-1][0] - t0 > duration, duration + 60,
                         interval=0.1, what=f'{duration:g} s of walking')
                wall1 = time.time()
            finally:
                stop.set()
            walked = [m.pose.position for t, m in poses.all() if t >= t0]
            end = walked[-1]
            inputs = rig.state('inputs') or {}
            out = {'distance_m': round(((end.x - start.x) ** 2 + (end.y - start.y) ** 2)
                                       ** 0.5, 2),
                   'low_m': round(min(p.z for p in walked), 3),
                   'estop': rig.state('estop_cause') if rig.state('estop') else None,
                   'supervisor_policy_trips': (inputs.get('policy') or {}).get(
                       'watchdog_trips'),
                   'bringup_estop': bringup_estop, 'window': (wall0, wall1)}
    finally:
        rclpy.try_shutdown()
    logs = {name: proc.output() for name, proc in rig.procs.items()}
    for name, text in logs.items():
        (Path(folder) / f'{name}.log').write_text(text)
    out['startup_lines'] = {name: [line.split('] ', 2)[-1] for line in text.splitlines()
                                   if 'priority' in line or 'SCHED_FIFO' in line
                                   or 'memory' in line][:4]
                            for name, text in logs.items()}
    return out


def load_traces(folder):
    traces = {}
    for path in glob.glob(os.path.join(folder, 'trace', '*.json')):
        doc = json.loads(Path(path).read_text())
        traces[doc['node']] = doc
    return traces


def analyse(traces, window, timeout):
    """The hops of every policy command inside `window` (system-clock seconds)."""
    lo, hi = window
    pol = traces.get('policy_runner', {}).get('events', [])
    sup = traces.get('safety_supervisor', {}).get('events', [])
    pubs = {round(e[1], 6): e for e in pol if e[0] == 'pub'}
    ticks = [e[1] for e in pol if e[0] == 'tick' and lo <= e[1] <= hi]
    stale_ticks = [e for e in pol if e[0] == 'stale' and lo <= e[1] <= hi]
    recv = [e for e in sup if e[0] == 'cmd' and e[1] == 'policy' and lo <= e[4] <= hi]
    gcs = {name: [e for e in doc['events'] if e[0] == 'gc']
           for name, doc in traces.items()}
    sample_age, compute, infer, delivery, before_next = [], [], [], [], []
    js_delivery, js_wait = [], []
    js = [e for e in pol if e[0] == 'js' and lo <= e[2] <= hi]
    js_arrival_gap = np.diff([e[2] for e in js]) if len(js) > 1 else []
    js_stamp_gap = np.diff([e[1] for e in js]) if len(js) > 1 else []
    spells = []
    prev = None
    for e in recv:
        _, _, stamp, _, received = e
        p = pubs.get(round(stamp, 6))
        if p is not None:
            _, _, begun, inference, published, e2e = p
            sample_age.append(begun - stamp)
            js_delivery.append(published - e2e - stamp)
            js_wait.append(begun - (published - e2e))
            compute.append(published - begun)
            infer.append(inference)
            delivery.append(received - published)
        if prev is not None:
            age = received - prev[2]
            before_next.append(age)
            if age > timeout:
                pp = pubs.get(round(prev[2], 6))
                spell = {'at': round(received - lo, 3), 'age_ms': round(age * 1e3, 1)}
                if pp is not None and p is not None:
                    spell.update(prev_sample_delivery_ms=round(
                                     (pp[4] - pp[5] - prev[2]) * 1e3, 1),
                                 prev_sample_age_ms=round((pp[2] - prev[2]) * 1e3, 1),
                                 between_computes_ms=round((p[2] - pp[2]) * 1e3, 1),
                                 compute_ms=round((p[4] - p[2]) * 1e3, 1),
                                 delivery_ms=round((received - p[4]) * 1e3, 1),
                                 ticks_between=sum(1 for t in ticks if pp[2] < t < p[2]))
                a, b = prev[4], received
                spell['gc_pauses_ms'] = {name: [round(g[2] * 1e3, 1) for g in ev
                                                if g[1] < b and g[1] + g[2] > a]
                                         for name, ev in gcs.items()}
                spells.append(spell)
        prev = e
    gc_summary = {}
    for name, ev in gcs.items():
        inside = [g for g in ev if lo <= g[1] <= hi]
        gc_summary[name] = {'pauses_over_0.1ms': len(inside),
                            'max_ms': round(max((g[2] for g in inside), default=0) * 1e3, 2),
                            'gen2': sum(1 for g in inside if g[3] == 2),
                            'collections': traces[name].get('gc_collections')}
    return {'commands_at_supervisor': len(recv),
            'stale': len(spells),
            'hops': {'sample_delivery_ms': stats(js_delivery),
                     'sample_wait_ms': stats(js_wait),
                     'sample_age_ms': stats(sample_age), 'compute_ms': stats(compute),
                     'inference_ms': stats(infer), 'delivery_ms': stats(delivery),
                     'tick_interval_ms': stats(np.diff(ticks)) if len(ticks) > 1 else None,
                     'age_before_next_ms': stats(before_next),
                     'joint_states_arrival_gap_ms': stats(js_arrival_gap),
                     'joint_states_stamp_gap_ms': stats(js_stamp_gap)},
            'policy_stale_ticks': len(stale_ticks),
            'stale_commands': spells[:20], 'gc': gc_summary}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--duration', type=float, default=60.0, help='walk (s)')
    parser.add_argument('--load', type=int, default=0, help='busy loops beside (nice 0)')
    parser.add_argument('--thread-priority', type=int, default=None,
                        help='thread_priority of the three nodes (default: the robot file)')
    parser.add_argument('--keep', default='', help='folder for the traces and logs')
    args = parser.parse_args()
    from simreal_ros.nodes.common import localhost_discovery
    localhost_discovery()
    os.environ.setdefault('ROS_DOMAIN_ID', str(121 + os.getpid() % 80))
    folder = Path(args.keep or tempfile.mkdtemp(prefix='policy_staleness_'))
    timeout = 0.06
    loads = busy_loops(args.load)
    try:
        run = walk(args.duration, folder, args.thread_priority, timeout)
    finally:
        for p in loads:
            p.kill()
            p.wait()
    window = run.pop('window')
    result = analyse(load_traces(folder), window, timeout)
    for spell in result['stale_commands']:
        print('stale:', json.dumps(spell))
    summary = dict({'duration_s': args.duration, 'load': args.load,
                    'thread_priority': args.thread_priority, 'timeout_ms': timeout * 1e3,
                    'traces': str(folder)}, **run, **result)
    print(json.dumps(summary))
    return 0


if __name__ == '__main__':
    sys.exit(main())

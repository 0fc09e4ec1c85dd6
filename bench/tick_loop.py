#!/usr/bin/env python3
"""A node's 500 Hz tick: an rclpy timer against run()'s own loop (nodes/common.HotLoop).

    .venv/bin/python bench/tick_loop.py [--seconds 8] [--rounds 3] [--rate 500] [--load 1]

Each round runs one child process per way, one after the other (timer, own, timer, own, ...):
a node with the EventsExecutor and a tick at `--rate` made by common.HotLoop, spun by
common.spin_hot ('own') or by the executor's timer ('timer', the HotLoop not taken over). The
tick does what a supervisor tick costs at least: it reads the clock and records the time.
`--load N` keeps N busy processes running meanwhile (a loaded onboard computer: a woken
thread then waits for a core, and each hand-over between threads costs more).

Per way, the median over rounds of: CPU of the process (% of a core, utime + stime from the
OS over the run), context switches per second (voluntary + involuntary, all threads, from
/proc), ticks per second, and the p50/p99 of the tick period's error (ms). The last line
printed is a JSON summary.
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
BUSY = ('import sys, time\nend = time.monotonic() + float(sys.argv[1])\n'
        'while time.monotonic() < end:\n    pass\n')


def switches():
    """Context switches of this process so far (all threads)."""
    total = 0
    for tid in os.listdir('/proc/self/task'):
        try:
            with open(f'/proc/self/task/{tid}/status') as f:
                for line in f:
                    if line.startswith(('voluntary_ctxt_switches', 'nonvoluntary_ctxt_switches')):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def child(way, seconds, rate):
    import rclpy
    from simreal_ros.nodes.common import HotLoop, make_executor, prefer_udp_transport, spin_hot
    prefer_udp_transport()
    rclpy.init()
    node = rclpy.create_node(f'tick_loop_{os.getpid()}')
    stamps = []
    hot = HotLoop(node, 1.0 / rate, lambda: stamps.append(time.monotonic()), own=way == 'own')
    executor, _ = make_executor('events')
    executor.add_node(node)
    for _ in range(5):
        executor.spin_once(timeout_sec=0.01)
    stamps.clear()
    end = time.monotonic() + seconds
    ctx0, cpu0, wall0 = switches(), time.process_time(), time.monotonic()
    if hot.take_over():
        spin_hot(executor, hot, lambda: time.monotonic() < end, node.context)
    else:
        while time.monotonic() < end:
            executor.spin_once(timeout_sec=0.1)
    wall = time.monotonic() - wall0
    cpu, ctx = time.process_time() - cpu0, switches() - ctx0
    period = 1.0 / rate
    err = sorted(abs(b - a - period) * 1e3 for a, b in zip(stamps, stamps[1:]))
    print(json.dumps(dict(
        way=hot.kind, cpu_percent=100 * cpu / wall, switches_per_s=ctx / wall,
        ticks_per_s=len(stamps) / wall, skipped=hot.skipped,
        period_err_p50_ms=err[len(err) // 2] if err else None,
        period_err_p99_ms=err[int(0.99 * (len(err) - 1))] if err else None)))
    executor.shutdown(timeout_sec=1.0)
    node.destroy_node()
    rclpy.try_shutdown()
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--seconds', type=float, default=8.0)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--rate', type=float, default=500.0)
    parser.add_argument('--load', type=int, default=0, help='competing busy processes')
    parser.add_argument('--child', choices=('timer', 'own'), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.seconds, args.rate)
    busy = [subprocess.Popen([sys.executable, '-c', BUSY,
                              str(args.rounds * 2 * (args.seconds + 10) + 30)])
            for _ in range(args.load)]
    results = {'timer': [], 'own': []}
    try:
        for _ in range(args.rounds):
            for way in ('timer', 'own'):
                out = subprocess.run(
                    [sys.executable, __file__, '--child', way, '--seconds', str(args.seconds),
                     '--rate', str(args.rate)], capture_output=True, text=True, timeout=120,
                    cwd=REPO)
                if out.returncode != 0:
                    print(out.stdout + out.stderr, file=sys.stderr)
                    raise SystemExit(f'the {way} child failed ({out.returncode})')
                doc = json.loads(out.stdout.strip().splitlines()[-1])
                if doc['way'] != way:
                    raise SystemExit(f'the {way} child ran as {doc["way"]}')
                results[way].append(doc)
                print(f'{way:5s} cpu {doc["cpu_percent"]:5.2f} %  switches '
                      f'{doc["switches_per_s"]:6.0f}/s  ticks {doc["ticks_per_s"]:6.1f}/s  '
                      f'period err p50 {doc["period_err_p50_ms"]:.3f} p99 '
                      f'{doc["period_err_p99_ms"]:.3f} ms', flush=True)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    summary = {'seconds': args.seconds, 'rounds': args.rounds, 'rate_hz': args.rate,
               'load': args.load, 'cpu_count': os.cpu_count()}
    for way, docs in results.items():
        summary[way] = {key: round(statistics.median(d[key] for d in docs), 3)
                        for key in ('cpu_percent', 'switches_per_s', 'ticks_per_s',
                                    'period_err_p50_ms', 'period_err_p99_ms')}
        summary[way]['skipped'] = sum(d['skipped'] for d in docs)
    print(json.dumps(summary))
    return 0


if __name__ == '__main__':
    sys.exit(main())

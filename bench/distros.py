#!/usr/bin/env python3
"""Kilted and Jazzy side by side in one run: the executor, the supervisor's CPU, the demo.

    .venv/bin/python bench/record.py --label kilted-jazzy -- bench/distros.py \
        [--venv .venv --venv .venv-jazzy] [--duration 20] [--no-demo]

For each venv (made by `make setup` and `make setup DISTRO=jazzy`), in turn and in the same
run, so that both see the same machine: bench/cpu_budget.py (the G1 graph for `--duration`
seconds of walk against the plain relay floor measured in the same run: the executor each
node runs, the supervisor's CPU and `supervisor_over_floor`) with that venv's Python, then the
demo as `make demo` runs it (`python -m simreal_ros.client.demo`), timed, with its steps'
outcome and exit status. The rclpy and Fast DDS each venv holds are read from its installed
packages. The last line printed is a JSON summary keyed by venv.
"""
import argparse
import json
import os
from pathlib import Path
import subprocess
import sys
import tempfile
import time

REPO = Path(__file__).resolve().parents[1]
PROBE = ('import json\nfrom importlib.metadata import version, PackageNotFoundError\n'
         'def v(name):\n'
         '    try:\n        return version(name)\n'
         '    except PackageNotFoundError:\n        return None\n'
         'print(json.dumps({"ros-rclpy": v("ros-rclpy"), "ros-fastrtps": v("ros-fastrtps"),'
         ' "ros-fastdds": v("ros-fastdds")}))\n')


def last_json(text):
    for line in reversed(text.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None
    return None


def run(cmd, timeout, env=None):
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env=env)
    return proc, round(time.monotonic() - t0, 1)


def one_venv(venv, duration, demo):
    python = str(REPO / venv / 'bin' / 'python')
    if not Path(python).is_file():
        return {'error': f'{venv}/bin/python not found: make setup'
                         f'{" DISTRO=jazzy" if "jazzy" in venv else ""}'}
    # As the PyPI wheels leave it (no ROS_DISTRO), and without what this Python's wheels put
    # in its environment at start (their library folders), which the other venv's would load.
    env = {k: v for k, v in os.environ.items() if k not in (
        'ROS_DISTRO', 'LD_LIBRARY_PATH', 'AMENT_PREFIX_PATH', '_ROS_WHEELS_BOOTSTRAP_COMPLETE')}
    out = {'packages': json.loads(run([python, '-c', PROBE], 60, env)[0].stdout)}
    proc, seconds = run([python, 'bench/cpu_budget.py', '--duration', str(duration)],
                        duration * 4 + 300, env)
    budget = last_json(proc.stdout)
    if proc.returncode != 0 or budget is None:
        out['cpu_budget'] = {'error': f'exit {proc.returncode}',
                             'stderr': proc.stderr[-1500:]}
    else:
        out['cpu_budget'] = {k: budget.get(k) for k in (
            'executor', 'tick_loop', 'cpu_percent', 'relay_floor_cpu_percent',
            'relay_floor_before_after', 'supervisor_over_floor', 'loop_period_err_p99_ms',
            'e2e_p99_ms', 'distance_m', 'falls', 'machine_load')}
        out['cpu_budget']['seconds'] = seconds
    if demo:
        with tempfile.TemporaryDirectory(prefix='simreal_distros_') as tmp:
            denv = dict(env, ROS_HOME=str(Path(tmp) / 'ros_home'))
            proc, seconds = run([python, '-m', 'simreal_ros.client.demo', '--out',
                                 str(Path(tmp) / 'demo')], 1800, denv)
            summary = Path(tmp) / 'demo' / 'summary.json'
            steps = (json.loads(summary.read_text())['steps'] if summary.is_file() else [])
            out['demo'] = {'seconds': seconds, 'exit_status': proc.returncode,
                           'steps_ok': sum(s['status'] == 'ok' for s in steps),
                           'steps': len(steps),
                           'not_ok': {s['step']: s['status'] for s in steps
                                      if s['status'] != 'ok'}}
            if proc.returncode != 0:
                out['demo']['tail'] = (proc.stdout + proc.stderr)[-1500:]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--venv', action='append', default=None,
                        help='a venv to run (repeatable; default .venv and .venv-jazzy)')
    parser.add_argument('--duration', type=float, default=20.0,
                        help='cpu_budget walk seconds per venv (default 20)')
    parser.add_argument('--no-demo', action='store_true', help='skip the timed demo')
    args = parser.parse_args()
    venvs = args.venv or ['.venv', '.venv-jazzy']
    result = {'duration_s': args.duration, 'order': venvs, 'venvs': {}}
    for venv in venvs:
        print(f'distros: {venv} ...', file=sys.stderr, flush=True)
        result['venvs'][venv] = one_venv(venv, args.duration, not args.no_demo)
    print(json.dumps(result))


if __name__ == '__main__':
    main()

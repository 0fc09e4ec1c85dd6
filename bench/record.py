#!/usr/bin/env python3
"""Run a bench and keep its JSON result, with what was run, when and on what machine.

    .venv/bin/python bench/record.py [--label NAME] -- bench/sysid_accuracy.py --seeds 3

The bench's output passes through unchanged. Its last line must be a JSON object (every bench
in bench/ prints one); it is stored in bench/results/<bench>[--<label>].json as

    {"bench": ..., "label": ..., "command": ..., "date": ..., "commit": ...,
     "machine": {...}, "seconds": ..., "result": {...}}

docs/benchmarks.md is rendered from those files, so no figure in the docs is copied by hand.
A bench that fails (non-zero exit) or ends without a JSON line stores nothing.
"""
import argparse
import datetime
import json
import os
import platform
from pathlib import Path
import subprocess
import sys
import time

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / 'results'


def machine():
    """Describe this computer: what a figure measured here is relative to."""
    cpu = ''
    try:
        for line in Path('/proc/cpuinfo').read_text().splitlines():
            if line.startswith('model name'):
                cpu = line.split(':', 1)[1].strip()
                break
    except OSError:
        pass
    return {'cpus': os.cpu_count(), 'cpu_model': cpu, 'python': platform.python_version(),
            'system': f'{platform.system()} {platform.release()}',
            'load_1min_at_start': round(os.getloadavg()[0], 2),
            'ros_distro': os.environ.get('ROS_DISTRO', '') or wheels_distro()}


def wheels_distro():
    """The distro of the ROS 2 wheels this Python has (ROS_DISTRO unset), by rclpy's version."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        rclpy = version('ros-rclpy')
    except PackageNotFoundError:
        return 'unknown (no ros-rclpy wheel, no ROS_DISTRO)'
    distro = {'3': 'humble', '7': 'jazzy', '9': 'kilted'}.get(rclpy.split('.')[0], 'unknown')
    return f'{distro} (PyPI wheels, rclpy {rclpy})'


def commit():
    try:
        out = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=BENCH, text=True,
                             capture_output=True, check=True).stdout.strip()
        # The code's changes, not the results': a stored result (bench/results/) or the page
        # rendered from them is what this records, so one bench run after another does not
        # mark the second's commit as changed.
        dirty = subprocess.run(['git', 'status', '--porcelain', '--untracked-files=no', '--',
                                '.', ':(exclude)bench/results', ':(exclude)docs/benchmarks.md'],
                               cwd=BENCH.parent, text=True, capture_output=True).stdout.strip()
        return out + ('+changes' if dirty else '')
    except (OSError, subprocess.CalledProcessError):
        return ''


def last_json(lines):
    for line in reversed(lines):
        line = line.strip()
        if not line:
            continue
        try:
            value = json.loads(line)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None
    return None


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if '--' not in argv:
        argv.append('--')
    split = argv.index('--')
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--label', default='', help='a name for this variant (file suffix)')
    args = parser.parse_args(argv[:split])
    cmd = argv[split + 1:]
    if not cmd or not cmd[0].endswith('.py'):
        parser.error('give the bench after --, e.g. -- bench/sim_rate.py --seconds 10')
    script = Path(cmd[0])
    name = script.stem + (f'--{args.label}' if args.label else '')
    started = datetime.datetime.now(datetime.timezone.utc)
    info = {'bench': script.stem, 'label': args.label,
            'command': ' '.join(['python', str(script)] + cmd[1:]),
            'date': started.strftime('%Y-%m-%d %H:%M UTC'), 'commit': commit(),
            'machine': machine()}
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable] + cmd, stdout=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        lines.append(line)
    rc = proc.wait()
    result = last_json(lines)
    if rc != 0 or result is None:
        print(f'bench/record.py: {script} exited {rc}'
              + ('' if result is not None else ' without a JSON last line') + '; nothing stored',
              file=sys.stderr)
        return rc or 1
    info['seconds'] = round(time.monotonic() - t0, 1)
    info['result'] = result
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f'{name}.json'
    out.write_text(json.dumps(info, indent=1, sort_keys=False) + '\n')
    print(f'bench/record.py: stored {out.relative_to(BENCH.parent)}', file=sys.stderr)
    return 0


if __name__ == '__main__':
    sys.exit(main())

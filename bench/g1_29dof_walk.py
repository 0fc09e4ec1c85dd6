#!/usr/bin/env python3
"""unitree_rl_lab's G1 29-dof, imported with one command, walks through the supervisor.

    .venv/bin/python bench/g1_29dof_walk.py [--runs 3] [--mode lockstep|realtime] [--rtf 0.25]

1. `simreal import` turns `asset://unitree_g1_29dof/policy/deploy.yaml` into a robot file
   in a temporary folder (no hand edit; it must equal config/robots/g1_29dof.yaml);
2. `simreal_ros.tools.rl_lab_reference` runs unitree_rl_lab's deploy semantics on the MuJoCo
   model for 20 s at cmd_vel 0.5 m/s and compares the imported file's policy path with it in
   lockstep (`reference.max_action_err`), and writes the run as a reference trace;
3. bench/sim2sim.py runs sim_robot + policy_runner + safety_supervisor (stage 1.00) with the
   imported file, `--runs` times: lockstep against that reference (`max_action_err` through
   the ROS path, distance, fall, e-stop, clips), or realtime (every node on sim_robot's clock
   at `--rtf`).

A run passes when it walked at least 8.5 m, did not fall (base above 0.5 m), had no e-stop and
no clip; the bench exits 1 unless every run passes. The last line is a JSON summary.
"""
import argparse
import json
import os
from pathlib import Path
import re
import subprocess
import sys
import tempfile

from simreal_ros.core import assets

REPO = Path(__file__).resolve().parents[1]
G1 = assets.folder('unitree_g1_29dof')
MIN_DISTANCE = 8.5
FALL_Z = 0.5


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--runs', type=int, default=3)
    parser.add_argument('--mode', choices=('lockstep', 'realtime'), default='lockstep')
    parser.add_argument('--rtf', type=float, default=0.25, help='realtime: sim_robot\'s '
                        'real_time_factor (every node on its clock)')
    args = parser.parse_args(argv)
    if assets.unavailable('unitree_g1_29dof'):
        print(json.dumps({'skipped': assets.unavailable('unitree_g1_29dof')}))
        return 0
    tmp = Path(tempfile.mkdtemp(prefix='g1_29dof_walk_'))
    robot = tmp / 'g1_29dof.yaml'
    py = sys.executable
    imp = subprocess.run([py, '-m', 'simreal_ros.client.cli', 'import',
                          'asset://unitree_g1_29dof/policy/deploy.yaml', '--model',
                          'asset://unitree_g1_29dof/scene_29dof.xml', '-o',
                          str(robot)], cwd=REPO, capture_output=True, text=True)
    # The paths are relative to each file's folder: compared from 'shared/' on.
    same = [re.sub(r'(\.\./)+shared/', 'shared/', f.read_text()) for f in (
        robot, REPO / 'config' / 'robots' / 'g1_29dof.yaml')] if robot.is_file() else [0, 1]
    summary = {'mode': args.mode, 'import_exit': imp.returncode,
               'import_equals_committed': same[0] == same[1]}
    if imp.returncode != 0:
        summary['error'] = imp.stdout + imp.stderr
        print(json.dumps(summary))
        return 1
    ref = tmp / 'reference.npz'
    out = subprocess.run([py, '-m', 'simreal_ros.tools.rl_lab_reference', '--deploy',
                          str(G1 / 'policy' / 'deploy.yaml'), '--model',
                          str(G1 / 'scene_29dof.xml'), '--robot', str(robot), '--steps', '1000',
                          '--cmd-vel', '0.5', '0', '0', '--out', str(ref)],
                         cwd=REPO, capture_output=True, text=True)
    try:
        summary['reference'] = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        summary['error'] = out.stdout[-2000:] + out.stderr[-2000:]
        print(json.dumps(summary))
        return 1
    runs = []
    for k in range(args.runs):
        cmd = [py, str(REPO / 'bench' / 'sim2sim.py'), '--robot', str(robot),
               '--fall-z', str(FALL_Z), '--mode', args.mode]
        if args.mode == 'lockstep':
            cmd += ['--reference', str(ref), '--strict']
        else:
            cmd += ['--cmd-vel', '0.5', '0', '0', '--duration', '20', '--rtf', str(args.rtf)]
        res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=os.environ)
        try:
            run = json.loads(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            run = {'error': (res.stdout + res.stderr)[-1500:]}
        state = run.get('supervisor_state') or {}
        clips = sum(sum(v.values()) for v in (state.get('clips') or {}).values())
        row = {'exit': res.returncode, 'distance_m': run.get('distance_m'),
               'min_base_z': run.get('min_base_z'), 'fell': run.get('fell'),
               'estop': state.get('estop'), 'estop_cause': state.get('estop_cause'),
               'clips': clips, 'max_action_err': run.get('max_action_err'),
               'failures': run.get('failures'), 'error': run.get('error')}
        row['passed'] = bool(res.returncode == 0 and (row['distance_m'] or 0) >= MIN_DISTANCE
                             and row['fell'] is False and not row['estop'] and clips == 0)
        runs.append(row)
        print(json.dumps({'run': k + 1, **row}), file=sys.stderr)
    summary['runs'] = runs
    summary['passed'] = sum(r['passed'] for r in runs)
    summary['min_distance_m'] = min((r['distance_m'] or 0.0) for r in runs) if runs else None
    print(json.dumps(summary))
    return 0 if runs and summary['passed'] == len(runs) else 1


if __name__ == '__main__':
    sys.exit(main())

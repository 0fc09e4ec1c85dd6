#!/usr/bin/env python3
"""A trainer's export, imported with no hand edit, checked and walked from another folder.

    .venv/bin/python bench/import_walk.py --case g1_12dof|g1_29dof [--rtf 1.0] \
        [--skip-realtime] [--initial-scale 1.0]
    .venv/bin/python bench/import_walk.py --case custom --format legged_gym \
        --export CONFIG --model SCENE --policy ONNX --reference TRACE [--start model]

Every step runs with its working directory in a third temporary folder (neither the
repository nor the robot file's), so a path that resolves only from the working directory or
the checkout fails here:

1. `simreal import` (g1_12dof: unitree_rl_gym's `unitree_deploy_config.yaml`, `--format
   legged_gym`; g1_29dof: unitree_rl_lab's `deploy.yaml`) writes the robot file into its own
   temporary folder, with the paths given relative to the working directory;
2. `simreal check FILE --reference TRACE` (g1_12dof: unitree's `reference_trace.npz`;
   g1_29dof: `tools/rl_lab_reference.py`'s run of unitree_rl_lab's deploy semantics, 20 s at
   0.5 m/s) must report no error;
3. bench/sim2sim.py in lockstep, supervisor on (stage 1.00), against that reference:
   `max_action_err` within the sim2sim tolerance, no clip, no e-stop (the 12-dof starts where
   unitree's reference starts, the MJCF's own pose: `--start model`);
4. bench/sim2sim.py in real time (`--rtf`, 1.0 = the wall clock) for 20 s at cmd_vel 0.5 m/s:
   at least 8.5 m, no fall (base above 0.5 m), no e-stop.

`--case custom` runs the same steps on any export: `--export`, `--model`, `--policy`,
`--format` as `simreal import` takes them, and `--reference`, a trace of the trainer's own
deploy loop (docs/traces.md; `--start model` when it starts from the MJCF's own pose, as
unitree's deploy_mujoco.py does). The H1 and H1-2 of unitree_rl_gym were run so
(docs/bring_your_own.md).

`--case g1_12dof --default-offset D` imports a temporary copy of the deploy config whose
default pose is moved by D rad on the knees (a general case: a default pose the policy was not
trained at, to show the import follows the config). The last line is a JSON summary.
"""
import argparse
import json
import os
from pathlib import Path
import subprocess
import sys
import tempfile

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / 'shared' / 'robots'
MIN_DISTANCE = 8.5
FALL_Z = 0.5
CASES = {
    'g1_12dof': {'export': SHARED / 'unitree_g1_12dof' / 'unitree_deploy_config.yaml',
                 'model': SHARED / 'unitree_g1_12dof' / 'scene.xml',
                 'policy': SHARED / 'unitree_g1_12dof' / 'policy.onnx',
                 'format': 'legged_gym'},
    'g1_29dof': {'export': SHARED / 'unitree_g1_29dof' / 'policy' / 'deploy.yaml',
                 'model': SHARED / 'unitree_g1_29dof' / 'scene_29dof.xml',
                 'policy': SHARED / 'unitree_g1_29dof' / 'policy' / 'policy.onnx',
                 'format': 'unitree_rl_lab'},
}


def _last_json(text):
    for line in reversed(text.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


def _run(cmd, cwd):
    res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=os.environ)
    return res.returncode, res.stdout, res.stderr


def _walk_row(code, run):
    state = (run or {}).get('supervisor_state') or {}
    clips = sum(sum(v.values()) for v in (state.get('clips') or {}).values())
    return {'exit': code, 'distance_m': (run or {}).get('distance_m'),
            'min_base_z': (run or {}).get('min_base_z'), 'fell': (run or {}).get('fell'),
            'estop': state.get('estop'), 'estop_cause': state.get('estop_cause'),
            'output': state.get('output'), 'clips': clips,
            'deadline_misses': (run or {}).get('deadline_misses'),
            'error': (run or {}).get('error')}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--case', choices=sorted(CASES) + ['custom'], required=True)
    parser.add_argument('--export', help='custom: the export (deploy config, deploy.yaml)')
    parser.add_argument('--model', help='custom: the robot\'s MJCF')
    parser.add_argument('--policy', help='custom: the ONNX policy')
    parser.add_argument('--format', choices=('legged_gym', 'unitree_rl_lab', 'mjlab'),
                        help='custom: the export\'s format')
    parser.add_argument('--reference', help='custom: a trace of the trainer\'s deploy loop')
    parser.add_argument('--start', choices=('model', 'default'), default='default',
                        help='custom: where the reference starts (model: the MJCF\'s pose)')
    parser.add_argument('--rtf', type=float, default=1.0, help='real-time run: sim_robot\'s '
                        'real_time_factor (1.0: the wall clock)')
    parser.add_argument('--skip-realtime', action='store_true')
    parser.add_argument('--default-offset', type=float, default=0.0, metavar='RAD',
                        help='g1_12dof: move the config\'s default knee angles by this much')
    args = parser.parse_args(argv)
    if args.case == 'custom':
        given = (args.export, args.model, args.policy, args.format, args.reference)
        if not all(given):
            parser.error('--case custom needs --export, --model, --policy, --format and '
                         '--reference')
        case = {'export': Path(args.export).resolve(), 'model': Path(args.model).resolve(),
                'policy': Path(args.policy).resolve(), 'format': args.format,
                'reference': Path(args.reference).resolve()}
        missing = [str(p) for k, p in case.items() if k != 'format' and not p.is_file()]
        if missing:
            parser.error(f'not found: {missing}')
    else:
        case = CASES[args.case]
    if not case['export'].is_file():
        print(json.dumps({'skipped': f'shared data not found: {case["export"]}'}))
        return 0
    py = sys.executable
    cli = [py, '-m', 'simreal_ros.client.cli']
    tmp = Path(tempfile.mkdtemp(prefix='import_walk_'))
    cwd, out_dir = tmp / 'elsewhere', tmp / 'robot'
    cwd.mkdir()
    out_dir.mkdir()
    export = case['export']
    if args.default_offset:
        import yaml
        data = yaml.safe_load(export.read_text())
        data['default_angles'] = [v + (args.default_offset if k % 6 == 3 else 0.0)
                                  for k, v in enumerate(data['default_angles'])]
        export = tmp / 'deploy_config.yaml'
        export.write_text(yaml.safe_dump(data))
    robot = out_dir / f'{(case["export"].stem if args.case == "custom" else args.case)}.yaml'
    rel = [os.path.relpath(p, cwd) for p in (export, case['model'], case['policy'])]
    summary = {'case': args.case, 'format': case['format'], 'cwd': 'a third folder',
               'default_offset': args.default_offset}
    code, out, err = _run(cli + ['import', rel[0], '--format', case['format'], '--model',
                                 rel[1], '--policy', rel[2], '-o', str(robot)], cwd)
    summary['import_exit'] = code
    summary['import_flagged'] = [line.split('it): ', 1)[-1] for line in err.splitlines()
                                 if 'FLAGGED' in line]
    if code != 0:
        summary['error'] = (out + err)[-2000:]
        print(json.dumps(summary))
        return 1
    summary['initial_position_written'] = 'initial_position:' in robot.read_text()
    if args.case == 'custom':
        ref = case['reference']
        start = ['--start', 'model'] if args.start == 'model' else []
        summary['export'], summary['model'] = str(case['export']), str(case['model'])
    elif args.case == 'g1_12dof':
        ref = SHARED / 'unitree_g1_12dof' / 'reference_trace.npz'
        start = ['--start', 'model']
    else:
        ref = tmp / 'reference.npz'
        code, out, err = _run([py, '-m', 'simreal_ros.tools.rl_lab_reference', '--deploy',
                               str(export), '--model', str(case['model']), '--robot',
                               str(robot), '--steps', '1000', '--cmd-vel', '0.5', '0', '0',
                               '--out', str(ref)], cwd)
        summary['reference'] = _last_json(out)
        start = []
        if code != 0 or summary['reference'] is None:
            summary['error'] = (out + err)[-2000:]
            print(json.dumps(summary))
            return 1
    code, out, err = _run(cli + ['check', str(robot), '--reference', str(ref), '--json'], cwd)
    report = _last_json(out) or {}
    summary['check'] = {'exit': code, 'errors': report.get('errors'),
                        'warnings': [f['text'] for f in report.get('findings', [])
                                     if f['level'] == 'warning'],
                        'error_texts': [f['text'] for f in report.get('findings', [])
                                        if f['level'] == 'error']}
    bench = [py, str(REPO / 'bench' / 'sim2sim.py'), '--robot', str(robot), '--fall-z',
             str(FALL_Z)]
    code, out, err = _run(bench + ['--mode', 'lockstep', '--reference', str(ref),
                                   '--supervisor', 'on'] + start, cwd)
    run = _last_json(out) or {'error': (out + err)[-1500:]}
    lock = _walk_row(code, run)
    lock.update(max_action_err=run.get('max_action_err'), tolerance=run.get('tolerance'),
                first_step_over_tol=run.get('first_step_over_tol'))
    lock['passed'] = bool(lock['max_action_err'] is not None and lock['tolerance'] is not None
                          and lock['max_action_err'] <= lock['tolerance'] and lock['clips'] == 0
                          and not lock['estop'])
    summary['lockstep'] = lock
    if not args.skip_realtime:
        code, out, err = _run(bench + ['--mode', 'realtime', '--cmd-vel', '0.5', '0', '0',
                                       '--duration', '20', '--rtf', str(args.rtf)], cwd)
        real = _walk_row(code, _last_json(out) or {'error': (out + err)[-1500:]})
        real['rtf'] = args.rtf
        real['passed'] = bool(code == 0 and (real['distance_m'] or 0) >= MIN_DISTANCE
                              and real['fell'] is False and not real['estop'])
        summary['realtime'] = real
    summary['passed'] = bool(summary['check']['exit'] == 0 and lock['passed'] and (
        args.skip_realtime or summary['realtime']['passed']))
    print(json.dumps(summary))
    return 0 if summary['passed'] else 1


if __name__ == '__main__':
    sys.exit(main())

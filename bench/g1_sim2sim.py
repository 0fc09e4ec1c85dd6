#!/usr/bin/env python3
"""G1 sim2sim through the full ROS path: bench/sim2sim.py with unitree's G1 and its reference.

    .venv/bin/python bench/g1_sim2sim.py --mode lockstep    # step-by-step parity, 1000 steps
    .venv/bin/python bench/g1_sim2sim.py --mode realtime    # 20 s in real time

One call of the general tool (bench/sim2sim.py, docs/traces.md "sim2sim") with the G1's files:
the robot file config/robots/g1_12dof.yaml, the policy and the reference run of unitree's
deploy_mujoco from the asset unitree_g1_12dof (`policy.onnx`, `reference_trace.npz`; see
docs/assets.md), the reference's command (cmd_vel 0.5 m/s forward) and a fall below a base
height of 0.5 m (the reference never goes below 0.76 m).

lockstep: sim_robot advances one 20 ms control period at a time and waits for the command
computed from the state it just published; the policy's actions are compared with the
reference's: `max_action_err` over all steps. As in the reference, the first period holds the
default pose (sent by the bench, stamped t = 0).
realtime: every node on the wall clock; the bench holds the default pose until the runner is
enabled, then reports `distance_m`, `min_base_z`, `fell`, `deadline_misses` after 20 s.

The path is policy_runner -> policy/command -> safety_supervisor (stage 1.00) ->
hardware/command -> sim_robot; with `--supervisor off` sim_robot listens to policy/command
directly (remap). The last line printed is a JSON summary (bench/sim2sim.py's keys).
"""
import argparse
import json
from pathlib import Path
import sys

REPO = Path(__file__).resolve().parents[1]
from simreal_ros.core import assets  # noqa: E402
G1 = assets.folder('unitree_g1_12dof')
CONFIG = REPO / 'config' / 'robots' / 'g1_12dof.yaml'
CMD_VEL = ('0.5', '0', '0')   # unitree's deploy_mujoco cmd_init (SOURCE.md)
FALL_Z = '0.5'                # m of base height: fallen (the reference walks at 0.76-0.79 m)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--mode', choices=('lockstep', 'realtime'), default='lockstep')
    parser.add_argument('--steps', type=int, default=1000, help='lockstep policy steps')
    parser.add_argument('--duration', type=float, default=20.0, help='realtime seconds')
    parser.add_argument('--supervisor', choices=('on', 'off'), default='on',
                        help='route through safety_supervisor at full stage (default), or let '
                        'sim_robot take policy/command directly')
    parser.add_argument('--rtf', type=float, default=1.0,
                        help='realtime mode: real_time_factor of sim_robot; other than 1 runs '
                        'every node on its /clock (use_sim_time), for loaded machines')
    parser.add_argument('--save', help='write the lockstep actions and stamps to this .npz')
    args = parser.parse_args(argv)
    if assets.unavailable('unitree_g1_12dof'):
        print(json.dumps({'skipped': assets.unavailable('unitree_g1_12dof')}))
        return 0
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import sim2sim
    general = ['--robot', str(CONFIG), '--policy', str(G1 / 'policy.onnx'),
               '--reference', str(G1 / 'reference_trace.npz'), '--cmd-vel', *CMD_VEL,
               '--fall-z', FALL_Z, '--mode', args.mode, '--steps', str(args.steps),
               '--duration', str(args.duration), '--supervisor', args.supervisor,
               '--rtf', str(args.rtf)]
    if args.save:
        general += ['--save', args.save]
    return sim2sim.main(general)


if __name__ == '__main__':
    sys.exit(main())

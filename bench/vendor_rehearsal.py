#!/usr/bin/env python3
"""The G1 29-dof on the vendor's own simulator, through unitree_bridge + safety_supervisor +
policy_runner: the gantry sequence, then a walk; runs repeated.

    .venv/bin/python bench/vendor_rehearsal.py                 # 3 runs, 20 s at 0.5 m/s
    .venv/bin/python bench/vendor_rehearsal.py --runs 1 --simulator-peer \
        --robot config/robots/g1_12dof.yaml     # unitree's 12-dof policy, waist and arms held

Each run is simreal_ros.client.rehearsal.rehearse(): the vendor simulator
(simreal_ros/tools/vendor_rehearsal.py, headless, /clock at a fixed real-time factor, paced by
LowCmd_), the graph on its clock, the gantry sequence (hanging on the vendor's elastic band,
go-default, lowered, the policy enabled, the band released) and cmd_vel for `--walk-s` s of
simulated time. Goal (issue 31): >= 8.5 m in 20 s at 0.5 m/s, no fall, in every run.

The last line is JSON: per run the distance, fall, real-time factor achieved, LowCmd_ rate,
the states the bridge accepted or rejected and why; and `passed` (every run met the goal).
"""
import argparse
import json
import os
from pathlib import Path
import sys

from simreal_ros.core import assets

REPO = Path(__file__).resolve().parents[1]
GOAL_M = 8.5


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--runs', type=int, default=3)
    parser.add_argument('--robot', default=str(REPO / 'config' / 'robots'
                                               / 'g1_29dof_unitree.yaml'))
    parser.add_argument('--vx', type=float, default=0.5)
    parser.add_argument('--walk-s', type=float, default=20.0)
    parser.add_argument('--rtf', type=float, default=0.1, help='target real-time factor')
    parser.add_argument('--domain', type=int, default=None,
                        help='robot-side CycloneDDS domain (default ROS_DOMAIN_ID + 100)')
    parser.add_argument('--simulator-peer', action='store_true', help='override a robot file '
                        "written for the robot (e.g. g1_12dof.yaml): unitree.peer simulator, "
                        'network_interface lo, LowCmd_ at 250 Hz')
    args = parser.parse_args(argv)
    node_params = ({'unitree_bridge': {'unitree.peer': 'simulator', 'rate_hz': 250.0,
                                       'unitree.network_interface': 'lo'}}
                   if args.simulator_peer else None)
    missing = assets.unavailable('unitree_mujoco_simulate_python') or \
        assets.unavailable('unitree_g1_29dof')
    if missing:
        print(json.dumps({'skipped': missing}))
        return 0
    import rclpy
    from simreal_ros.client.rehearsal import rehearse
    from simreal_ros.client.rig import environment, loopback_udp_env
    runs = []
    with environment(loopback_udp_env()):
        rclpy.init()
        try:
            for i in range(args.runs):
                out = rehearse(args.robot, args.vx, args.walk_s, args.rtf, domain=args.domain,
                               node_params=node_params,
                               log=lambda text: print(f'run {i + 1}: {text}', flush=True))
                print(json.dumps(out), flush=True)
                runs.append(out)
        finally:
            rclpy.try_shutdown()
    keep = ('distance_m', 'forward_m', 'sim_s', 'wall_s', 'fell', 'fell_after_sim_s',
            'rtf_achieved', 'lowcmd_rate_hz', 'error', 'bridge', 'simulator',
            'resets_before_bringup', 'go_default_refusals', 'safety')
    summary = {
        'bench': 'vendor_rehearsal', 'robot': os.path.basename(args.robot), 'vx': args.vx,
        'walk_s': args.walk_s, 'rtf_target': args.rtf, 'goal_m': GOAL_M,
        'runs': [{k: r.get(k) for k in keep if k in r} for r in runs],
        'falls': sum(1 for r in runs if r.get('fell')),
        'errors': sum(1 for r in runs if r.get('error')),
        'passed': all(not r.get('error') and not r.get('fell')
                      and (r.get('distance_m') or 0) >= GOAL_M * args.walk_s / 20.0
                      for r in runs)}
    print(json.dumps(summary))
    return 0 if summary['passed'] else 1


if __name__ == '__main__':
    sys.exit(main())

#!/usr/bin/env python3
"""CPU of the supervisor's core alone (no ROS): what one 500 Hz tick costs before rclpy and DDS.

    .venv/bin/python bench/supervisor_core.py                 # G1 limits, 20,000 ticks
    .venv/bin/python bench/supervisor_core.py --robot arm3 --ticks 50000

Drives `simreal_ros.core.safety.Supervisor` as safety_supervisor does each tick: a joint state
(and an imu sample when the robot file uses one), a policy command every `--command-every`
ticks (50 Hz at 500 Hz), `tick()`, and the hardware/command bytes (`core/cdr.py`). The robot is
held at its default pose, so every output is forwarded and nothing is clipped. CPU is the
process's (`time.process_time`) over the ticks; `core_cpu_percent_at_rate` is that cost at the
supervisor's configured rate (one core = 100). Compare it with `bench/cpu_budget.py`'s
safety_supervisor figure: the rest is rclpy, the executor and the transport. The last line
printed is a JSON summary.
"""
import argparse
import json
from pathlib import Path
import sys
import time

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main(argv=None):
    from simreal_ros.core.cdr import JointStateEncoder, split_stamp
    from simreal_ros.core.config import load_node_params, robot_config_path
    from simreal_ros.core.safety import Supervisor, SupervisorConfig
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--robot', default='g1_12dof', help='robot file (name or path)')
    parser.add_argument('--ticks', type=int, default=20000)
    parser.add_argument('--command-every', type=int, default=10,
                        help='a policy command every N ticks (10: 50 Hz at 500 Hz)')
    args = parser.parse_args(argv)
    path = robot_config_path(args.robot)
    p = load_node_params(path, 'safety_supervisor')
    rate = float(p.get('rate_hz', 500.0))
    # No stage record on disk, one stage, nothing demoted: the steady forwarding path.
    p.update(stage_file='', resume_stage=False, stages=[1.0], demote_on=[])
    cfg = SupervisorConfig.from_params(p)
    sup = Supervisor(cfg, 0.0)
    names = list(cfg.limits.names)
    pose = (np.asarray(cfg.bringup_position, float) if cfg.bringup_position is not None
            else np.zeros(len(names)))
    still = np.zeros(len(names))
    encoder = JointStateEncoder(tuple(names))
    period = 1.0 / rate
    t = 1.0

    def one_tick(k):
        sup.on_joint_state(names, pose, still, t, t)
        if cfg.use_imu:
            sup.on_imu((1.0, 0.0, 0.0, 0.0), t, t)
        if k % args.command_every == 0:
            ok, why = sup.on_command('policy', names, pose, [], [], t, t)
            if not ok:
                raise SystemExit(f'command refused: {why}')
        out = sup.tick(t)
        if out is None or out.safe:
            raise SystemExit(f'not forwarding: {sup.status(t)["safe_reason"]}')
        sec, nanosec = split_stamp(t)
        return encoder.encode(sec, nanosec, out.position, out.velocity, out.effort)

    for k in range(50):            # warm up: watchdogs fed, the command admitted
        one_tick(k)
        t += period
    start = time.process_time()
    for k in range(args.ticks):
        one_tick(k)
        t += period
    used = time.process_time() - start
    per_tick_us = used / args.ticks * 1e6
    print(json.dumps({'robot': Path(path).stem, 'joints': len(names),
                      'ticks': args.ticks, 'rate_hz': rate, 'use_imu': bool(cfg.use_imu),
                      'command_every': args.command_every,
                      'core_us_per_tick': round(per_tick_us, 1),
                      'core_cpu_percent_at_rate': round(per_tick_us * 1e-6 * rate * 100, 2)}))


if __name__ == '__main__':
    main()

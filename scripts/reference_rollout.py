#!/usr/bin/env python3
"""simreal_ros.tools.reference_rollout from the source checkout: a reference trace for
bench/sim2sim.py from the robot's MuJoCo model and ONNX policy, without ROS.

    .venv/bin/python scripts/reference_rollout.py --robot config/robots/arm3.yaml \
        --out results/tmp/arm3_reference.npz --cmd-vel 0.8 -0.5 0.6
"""
import sys

from simreal_ros.tools.reference_rollout import main

if __name__ == '__main__':
    sys.exit(main())

"""The pantilt stand-in policy: a small deterministic ONNX file for the third embedded robot.

`config/robots/pantilt.yaml` names `pantilt_policy.onnx`; like arm3's stand-in it is made on
first use in the user data folder (`simreal_ros.core.onnx_policies.stand_in_policy`), so nothing
binary is committed. By hand:

    python -m simreal_ros.core.pantilt_policy /tmp/pantilt_policy.onnx
    .venv/bin/python scripts/pantilt_policy.py /tmp/pantilt_policy.onnx     # from a checkout

Observation (8 values, policy order head_tilt, head_pan): joint_pos (relative to
default_position), joint_vel (x 0.1), last_action, gait_phase (sin, cos; the robot file's
period_s, 6 s).
Actions (2, policy order, position mode, scale 0.4): a slow scan, pan = 0.8 sin, tilt =
0.3 - 0.3 cos (at most 0.34 rad/s of target change), plus a small fixed-random tanh layer of
the whole observation (at most 0.03 rad), so a joint order mix-up anywhere (observation or
command) changes the targets. The policy's joint order (head_tilt, head_pan) is deliberately
not the driver's (head_pan, head_tilt).
"""
import argparse

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from simreal_ros.core.onnx_file import save_graph

JOINTS = ('head_tilt', 'head_pan')        # the policy's order
N_OBS, N_ACT, HIDDEN = 8, 2, 16
ACTION_SCALE = 0.4
DEFAULT_POSITION = (0.2, 0.0)             # policy order
STIFFNESS = (15.0, 20.0)                  # policy order (driver kp is [20, 15])
DAMPING = (0.4, 0.6)


def pantilt(path, seed=7):
    """Write the pantilt policy to `path`; return `path`."""
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((N_OBS, HIDDEN)) / np.sqrt(N_OBS)).astype(np.float32)
    b1 = np.zeros(HIDDEN, np.float32)
    w2 = (rng.standard_normal((HIDDEN, N_ACT)) * 0.02 / np.sqrt(HIDDEN)).astype(np.float32)
    b2 = np.array([0.3, 0.0], np.float32)           # tilt, pan
    scan = np.zeros((N_OBS, N_ACT), np.float32)     # gait_phase sin, cos -> pan, tilt
    scan[6, 1] = 0.8     # sin -> head_pan
    scan[7, 0] = -0.3    # cos -> head_tilt
    inits = [numpy_helper.from_array(w1, 'w1'), numpy_helper.from_array(b1, 'b1'),
             numpy_helper.from_array(w2, 'w2'), numpy_helper.from_array(b2, 'b2'),
             numpy_helper.from_array(scan, 'scan')]
    nodes = [helper.make_node('Gemm', ['obs', 'w1', 'b1'], ['z1']),
             helper.make_node('Tanh', ['z1'], ['h1']),
             helper.make_node('Gemm', ['h1', 'w2', 'b2'], ['residual']),
             helper.make_node('MatMul', ['obs', 'scan'], ['sweep']),
             helper.make_node('Add', ['residual', 'sweep'], ['actions'])]
    graph = helper.make_graph(
        nodes, 'pantilt',
        [helper.make_tensor_value_info('obs', TensorProto.FLOAT, [1, N_OBS])],
        [helper.make_tensor_value_info('actions', TensorProto.FLOAT, [1, N_ACT])], inits)
    csv = lambda values: ','.join(str(v) for v in values)   # noqa: E731
    return save_graph(graph, path, metadata={
        'joint_names': csv(JOINTS), 'default_joint_pos': csv(DEFAULT_POSITION),
        'action_scale': str(ACTION_SCALE), 'joint_stiffness': csv(STIFFNESS),
        'joint_damping': csv(DAMPING)})


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('path', help='the .onnx file to write')
    print(pantilt(parser.parse_args(argv).path))


if __name__ == '__main__':
    main()

"""Write small deterministic ONNX policies (onnx.helper) for tests, benches and the arm3 demo.

Nothing binary is committed: tests and benches call these functions at run time, the graph
makes the arm3 stand-in on first use (`stand_in_policy`, in the user data folder), and

    python -m simreal_ros.core.onnx_policies arm3 /tmp/arm3_policy.onnx
    python scripts/onnx_policies.py mlp /tmp/mlp48.onnx --sizes 48 512 256 128 12

write one by hand (scripts/onnx_policies.py is the same module from the source checkout).
"""
import argparse
import os
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from simreal_ros.core.files import user_data_dir  # noqa: F401 - the stand-ins' folder
from simreal_ros.core.onnx_file import save_graph
from simreal_ros.core.pantilt_policy import pantilt

def _weights(rng, n_in, n_out, gain):
    return (rng.standard_normal((n_in, n_out)) * gain / np.sqrt(n_in)).astype(np.float32)


def mlp(path, sizes, seed=0, gain=1.0, activation='Elu', nan_gate=None, metadata=None,
        output_gain=0.1):
    """An MLP obs[1,sizes[0]] -> actions[1,sizes[-1]] with fixed random weights.

    nan_gate=i: the action becomes NaN whenever obs[i] < -1 (sqrt of a negative number), so a
    test can make a finite policy produce NaN on demand through one observation element.
    """
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    x = 'obs'
    for k, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        last = k == len(sizes) - 2
        w = _weights(rng, n_in, n_out, output_gain if last else gain)
        b = np.zeros(n_out, np.float32)
        inits += [numpy_helper.from_array(w, f'w{k}'), numpy_helper.from_array(b, f'b{k}')]
        y = f'z{k}'
        nodes.append(helper.make_node('Gemm', [x, f'w{k}', f'b{k}'], [y]))
        if not last:
            nodes.append(helper.make_node(activation, [y], [f'a{k}']))
            y = f'a{k}'
        x = y
    out = x
    if nan_gate is not None:
        inits += [numpy_helper.from_array(np.array([nan_gate], np.int64), 'gate_idx'),
                  numpy_helper.from_array(np.array([1.0], np.float32), 'one'),
                  numpy_helper.from_array(np.array([0.0], np.float32), 'zero')]
        nodes += [helper.make_node('Gather', ['obs', 'gate_idx'], ['g0'], axis=1),
                  helper.make_node('Add', ['g0', 'one'], ['g1']),
                  helper.make_node('Sqrt', ['g1'], ['g2']),       # NaN when obs[i] < -1
                  helper.make_node('Mul', ['g2', 'zero'], ['g3']),  # 0 or NaN
                  helper.make_node('Add', [out, 'g3'], ['gated'])]
        out = 'gated'
    nodes.append(helper.make_node('Identity', [out], ['actions']))
    graph = helper.make_graph(
        nodes, 'mlp',
        [helper.make_tensor_value_info('obs', TensorProto.FLOAT, [1, sizes[0]])],
        [helper.make_tensor_value_info('actions', TensorProto.FLOAT, [1, sizes[-1]])], inits)
    return save_graph(graph, path, metadata)


def recurrent(path, n_obs, n_act, hidden=8, seed=0, names=('h_in', 'h_out')):
    """A one-layer RNN: h' = tanh(obs W + h U), action = h' V; state [1, hidden]."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(_weights(rng, n_obs, hidden, 1.0), 'W'),
             numpy_helper.from_array(_weights(rng, hidden, hidden, 1.5), 'U'),
             numpy_helper.from_array(_weights(rng, hidden, n_act, 1.0), 'V')]
    h_in, h_out = names
    nodes = [helper.make_node('MatMul', ['obs', 'W'], ['xw']),
             helper.make_node('MatMul', [h_in, 'U'], ['hu']),
             helper.make_node('Add', ['xw', 'hu'], ['pre']),
             helper.make_node('Tanh', ['pre'], [h_out]),
             helper.make_node('MatMul', [h_out, 'V'], ['actions'])]
    graph = helper.make_graph(
        nodes, 'rnn',
        [helper.make_tensor_value_info('obs', TensorProto.FLOAT, [1, n_obs]),
         helper.make_tensor_value_info(h_in, TensorProto.FLOAT, [1, hidden])],
        [helper.make_tensor_value_info('actions', TensorProto.FLOAT, [1, n_act]),
         helper.make_tensor_value_info(h_out, TensorProto.FLOAT, [1, hidden])], inits)
    return save_graph(graph, path)


# The arm3 policy's task: a swing of every joint around the default pose (the hanging rest
# pose), q_ref = c * ARM3_SWING_AMPLITUDE * sin(2*pi*t / ARM3_SWING_PERIOD_S), where c is the
# commanded fraction of the full swing (cmd_vel linear.x, the velocity_command term; 0 until
# an operator sends one: the policy then holds the default pose) and t the time since the
# policy started (the gait_phase term, origin reset).
ARM3_SWING_AMPLITUDE = (0.3, 0.35, 0.3)   # rad at c = 1: shoulder_yaw, shoulder_pitch, elbow
ARM3_SWING_PERIOD_S = 4.0                 # s; config/robots/arm3.yaml gait_phase period_s
ARM3_LEAD_S = 0.005                       # half a 100 Hz policy period: the hold's mean delay
ARM3_OBS = 14                             # joint_pos, joint_vel, last_action, command, phase
ARM3_COMMAND_INDEX = 9                    # velocity_command x (cmd_vel linear.x)
ARM3_PHASE_INDEX = (12, 13)               # gait_phase sin, cos
ARM3_ACTION_SCALE = 0.5                   # policy_runner action.scale


def arm3_swing_fit(robot=None, samples=200):
    """Fit the arm3 policy's weights from the simulator; return (W [2, 3], report dict).

    For each phase of the reference swing (at fractions c of the full amplitude) MuJoCo's
    inverse dynamics of the nominal model (models/arm3/arm3.xml: links only, no friction)
    give the torque the swing needs; the driver's PD (kp, kd from the robot file) produces it
    from the position target u = q + (tau + kd * dq) / kp. The reference is taken
    ARM3_LEAD_S ahead (a target computed at t is held for one policy period). Least squares
    fits u = c * [sin(phi), cos(phi)] @ W over all phases and fractions: the first harmonic
    holds all but a fraction of a milliradian (the fit error is in the report).
    """
    import mujoco
    from simreal_ros.core.config import load_node_params, resolve_path, robot_config_path
    path = robot_config_path(robot or 'arm3')
    shared = load_node_params(path, '/**')
    kp = np.asarray(shared['kp'], float)
    kd = np.asarray(shared['kd'], float)
    sim = load_node_params(path, 'sim_robot')
    model = mujoco.MjModel.from_xml_path(str(resolve_path(
        sim['model_path'], what='sim_robot model_path', relative_to=Path(path).parent)))
    data = mujoco.MjData(model)
    amp = np.asarray(ARM3_SWING_AMPLITUDE, float)
    omega = 2 * np.pi / ARM3_SWING_PERIOD_S
    rows, targets = [], []
    for c in (0.25, 0.5, 0.75, 1.0):
        for phi in 2 * np.pi * np.arange(samples) / samples:
            ahead = phi + omega * ARM3_LEAD_S
            data.qpos[:] = c * amp * np.sin(ahead)
            data.qvel[:] = c * amp * omega * np.cos(ahead)
            data.qacc[:] = -c * amp * omega ** 2 * np.sin(ahead)
            mujoco.mj_inverse(model, data)
            targets.append(data.qpos + (data.qfrc_inverse + kd * data.qvel) / kp)
            rows.append([c * np.sin(phi), c * np.cos(phi)])
    x, y = np.array(rows), np.array(targets)
    w, *_ = np.linalg.lstsq(x, y, rcond=None)
    w = np.round(w, 7)    # the same bytes from any BLAS
    report = {'fit_max_error_rad': float(np.abs(x @ w - y).max()),
              'max_target_rad': float(np.abs(y).max()), 'kp': kp.tolist(), 'kd': kd.tolist()}
    return w, report


def arm3(path, nan_gate=None):
    """The arm3 policy: a reference swing fitted in MuJoCo (`arm3_swing_fit`), 14 -> 3.

    Observations as config/robots/arm3.yaml lists them (joint_pos, joint_vel, last_action,
    velocity_command, gait_phase); the actions depend on the commanded fraction c (obs[9])
    and the phase (obs[12:14]) only: action = c * [sin, cos] @ W / action_scale. The PD loop
    of the driver closes the loop on the joints. With c = 0 (no cmd_vel yet) it is exactly
    the default pose, so it takes over a robot held there without a jump.
    """
    w, report = arm3_swing_fit()
    w = (w / ARM3_ACTION_SCALE).astype(np.float32)
    inits = [numpy_helper.from_array(w, 'W'),
             numpy_helper.from_array(np.array([ARM3_COMMAND_INDEX], np.int64), 'cmd_idx'),
             numpy_helper.from_array(np.array(ARM3_PHASE_INDEX, np.int64), 'phase_idx')]
    nodes = [helper.make_node('Gather', ['obs', 'cmd_idx'], ['fraction'], axis=1),
             helper.make_node('Gather', ['obs', 'phase_idx'], ['phase'], axis=1),
             helper.make_node('Mul', ['phase', 'fraction'], ['features']),
             helper.make_node('MatMul', ['features', 'W'], ['swing'])]
    out = 'swing'
    if nan_gate is not None:   # as mlp(): NaN whenever obs[nan_gate] < -1
        inits += [numpy_helper.from_array(np.array([nan_gate], np.int64), 'gate_idx'),
                  numpy_helper.from_array(np.array([1.0], np.float32), 'one'),
                  numpy_helper.from_array(np.array([0.0], np.float32), 'zero')]
        nodes += [helper.make_node('Gather', ['obs', 'gate_idx'], ['g0'], axis=1),
                  helper.make_node('Add', ['g0', 'one'], ['g1']),
                  helper.make_node('Sqrt', ['g1'], ['g2']),
                  helper.make_node('Mul', ['g2', 'zero'], ['g3']),
                  helper.make_node('Add', [out, 'g3'], ['gated'])]
        out = 'gated'
    nodes.append(helper.make_node('Identity', [out], ['actions']))
    graph = helper.make_graph(
        nodes, 'arm3_swing',
        [helper.make_tensor_value_info('obs', TensorProto.FLOAT, [1, ARM3_OBS])],
        [helper.make_tensor_value_info('actions', TensorProto.FLOAT, [1, 3])], inits)
    _csv = ','.join
    return save_graph(graph, path, {
        'joint_names': 'shoulder_yaw,shoulder_pitch,elbow_pitch',
        'action_scale': str(ARM3_ACTION_SCALE),
        'default_joint_pos': '0,0,0',
        'joint_stiffness': _csv(f'{v:g}' for v in report['kp']),
        'joint_damping': _csv(f'{v:g}' for v in report['kd']),
        'task': ('swing q = c * swing_amplitude * sin(2 pi t / swing_period_s) about the '
                 'default pose; c = cmd_vel linear.x (fraction of the full swing)'),
        'swing_amplitude': _csv(f'{v:g}' for v in ARM3_SWING_AMPLITUDE),
        'swing_period_s': f'{ARM3_SWING_PERIOD_S:g}',
        'observation': 'joint_pos(3),joint_vel(3),last_action(3),velocity_command(3),'
                       'gait_phase(2)',
        'fitted_by': 'simreal_ros.core.onnx_policies.arm3_swing_fit (MuJoCo inverse dynamics, '
                     'nominal arm3 model)'})


# Policies the package can make itself: the file name a robot file gives -> generator.
STAND_INS = {'arm3_policy.onnx': arm3, 'pantilt_policy.onnx': pantilt}


def stand_in_policy(name):
    """Return the path of stand-in `name` in the user data folder, made (again) if not current.

    Never relative to the working directory. The file is written to a temporary name and
    renamed, so processes starting at the same time never read half a file; it is rewritten
    only when its bytes differ from what the generator makes now.
    """
    import tempfile
    folder = user_data_dir()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    fd, tmp = tempfile.mkstemp(prefix=f'.{name}.', dir=folder)
    os.close(fd)
    try:
        STAND_INS[name](tmp)
        with open(tmp, 'rb') as f:
            fresh = f.read()
        try:
            with open(path, 'rb') as f:
                current = f.read() == fresh
        except OSError:
            current = False
        if not current:
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('kind', choices=('arm3', 'mlp'))
    parser.add_argument('path')
    parser.add_argument('--sizes', type=int, nargs='+', default=[48, 512, 256, 128, 12])
    args = parser.parse_args()
    if args.kind == 'arm3':
        print(arm3(args.path))
    else:
        print(mlp(args.path, args.sizes))


if __name__ == '__main__':
    main()

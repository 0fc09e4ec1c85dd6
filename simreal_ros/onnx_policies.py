"""Write small deterministic ONNX policies (onnx.helper) for tests, benches and the arm3 demo.

Nothing binary is committed: tests and benches call these functions at run time, the graph
makes the arm3 stand-in on first use (`stand_in_policy`, in the user data folder), and

    python -m simreal_ros.onnx_policies arm3 /tmp/arm3_policy.onnx
    python scripts/onnx_policies.py mlp /tmp/mlp48.onnx --sizes 48 512 256 128 12

write one by hand (scripts/onnx_policies.py is the same module from the source checkout).
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 9   # onnxruntime reads ir_version <= 10
OPSET = 17


def _save(graph, path, metadata=None):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', OPSET)],
                              producer_name='simreal_ros scripts/onnx_policies.py')
    model.ir_version = IR_VERSION
    for key, value in (metadata or {}).items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, str(value)
    onnx.checker.check_model(model)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    onnx.save(model, path)
    return path


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
    return _save(graph, path, metadata)


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
    return _save(graph, path)


def arm3(path, nan_gate=None):
    """The arm3 demo policy: 12 observations (joint pos, vel, last action, command) -> 3."""
    return mlp(path, [12, 32, 3], seed=3, activation='Tanh', nan_gate=nan_gate,
               metadata={'joint_names': 'shoulder_yaw,shoulder_pitch,elbow_pitch',
                         'action_scale': '0.5'})


def _pantilt(path):
    from simreal_ros.pantilt_policy import pantilt   # its own module (imports this one)
    return pantilt(path)


# Policies the package can make itself: the file name a robot file gives -> generator.
STAND_INS = {'arm3_policy.onnx': arm3, 'pantilt_policy.onnx': _pantilt}


def user_data_dir():
    """Return $XDG_DATA_HOME/simreal_ros (default ~/.local/share/simreal_ros)."""
    base = os.environ.get('XDG_DATA_HOME') or os.path.join(os.path.expanduser('~'), '.local',
                                                           'share')
    return os.path.join(base, 'simreal_ros')


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

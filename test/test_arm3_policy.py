"""arm3's policy: a reference swing fitted from MuJoCo, tracked in the simulator, reproducible."""
import hashlib

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from conftest import REPO
from simreal_ros.core.config import load_node_params
from simreal_ros.core import onnx_policies
from simreal_ros.core.onnx_policies import (ARM3_SWING_AMPLITUDE, ARM3_SWING_PERIOD_S, arm3,
                                       arm3_swing_fit)
from simreal_ros.tools.reference_rollout import rollout

ARM3 = REPO / 'config' / 'robots' / 'arm3.yaml'


def test_the_policy_is_reproducible_and_small_with_metadata_the_runner_checks(tmp_path):
    a, b = arm3(str(tmp_path / 'a.onnx')), arm3(str(tmp_path / 'b.onnx'))
    data = open(a, 'rb').read()
    assert data == open(b, 'rb').read()                  # the same bytes every time
    assert len(data) < 10_000
    model = onnx.load(a)
    assert model.ir_version <= 10
    meta = {p.key: p.value for p in model.metadata_props}
    shared = load_node_params(ARM3, '/**')
    assert meta['joint_stiffness'] == ','.join(f'{v:g}' for v in shared['kp'])
    assert meta['joint_damping'] == ','.join(f'{v:g}' for v in shared['kd'])
    assert meta['joint_names'] == 'shoulder_yaw,shoulder_pitch,elbow_pitch'
    runner = load_node_params(ARM3, 'policy_runner')
    # The robot file's phase term is the swing's clock.
    assert runner['observation.gait_phase.period_s'] == ARM3_SWING_PERIOD_S
    assert float(meta['swing_period_s']) == ARM3_SWING_PERIOD_S
    assert hashlib.sha256(data).hexdigest()     # (printed in failures when it changes)


def test_no_command_is_exactly_the_default_pose(tmp_path):
    sess = ort.InferenceSession(arm3(str(tmp_path / 'p.onnx')),
                                providers=['CPUExecutionProvider'])
    rng = np.random.default_rng(0)
    obs = rng.uniform(-1, 1, (1, 14)).astype(np.float32)
    obs[0, 9] = 0.0                                      # commanded fraction 0
    assert np.all(sess.run(None, {'obs': obs})[0] == 0.0)
    obs[0, 9] = 0.5
    assert np.abs(sess.run(None, {'obs': obs})[0]).max() > 0.01


def test_the_fit_holds_the_inverse_dynamics_to_a_milliradian():
    w, report = arm3_swing_fit()
    assert w.shape == (2, 3)
    assert report['fit_max_error_rad'] < 1e-3
    # The targets lead the reference (PD lag, gravity): not the reference itself.
    assert np.abs(w[0] - ARM3_SWING_AMPLITUDE).max() > 0.005


@pytest.mark.parametrize('fraction', [0.1, 1.0])
def test_the_swing_is_tracked_in_the_simulator(tmp_path, fraction):
    """deploy_mujoco's loop (nominal model, the robot file's PD, 100 Hz policy): the joints
    follow fraction * amplitude * sin(2 pi t / T) from the default pose."""
    policy = arm3(str(tmp_path / 'p.onnx'))
    arrays = rollout(ARM3, policy, steps=500, cmd_vel=[fraction, 0.0, 0.0], hold=True)
    t, q = arrays['time'], arrays['q']
    ref = fraction * np.outer(np.sin(2 * np.pi * t / ARM3_SWING_PERIOD_S),
                              ARM3_SWING_AMPLITUDE)
    late = t >= 1.0
    err = np.sqrt(((q[late] - ref[late]) ** 2).mean(axis=0))
    assert err.max() < 0.01 * fraction * max(ARM3_SWING_AMPLITUDE) + 1e-4, err
    amp = (q[late].max(axis=0) - q[late].min(axis=0)) / 2
    assert np.allclose(amp, fraction * np.asarray(ARM3_SWING_AMPLITUDE), rtol=0.03), amp
    assert np.abs(arrays['actions']).max() < 1.0        # inside action.clip: never clipped


def test_the_stand_in_folder_copy_is_the_same_policy(tmp_path, monkeypatch):
    monkeypatch.setenv('XDG_DATA_HOME', str(tmp_path / 'data'))
    path = onnx_policies.stand_in_policy('arm3_policy.onnx')
    assert open(path, 'rb').read() == open(arm3(str(tmp_path / 'x.onnx')), 'rb').read()

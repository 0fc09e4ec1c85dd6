"""The core observation builder + ONNX session + action processing reproduce unitree's reference
deployment loop (SOURCE.md) on the G1 model: same actions as reference_trace.npz."""
import mujoco
import numpy as np

from simreal_ros.core.config import load_node_params
from simreal_ros.core.policy import PolicyController
from conftest import REPO

G1_CONFIG = REPO / 'config' / 'robots' / 'g1_12dof.yaml'


def test_g1_reference_loop_actions_match_trace(g1_dir):
    params = load_node_params(G1_CONFIG, 'policy_runner')
    sim = load_node_params(G1_CONFIG, 'sim_robot')
    ctl = PolicyController(params)
    assert ctl.builder.size == 47 and ctl.session.recurrent
    trace = np.load(g1_dir / 'reference_trace.npz')

    model = mujoco.MjModel.from_xml_path(str(g1_dir / 'scene.xml'))
    model.opt.timestep = sim['physics_dt']
    data = mujoco.MjData(model)
    names = params['joint_names']
    qadr = [model.joint(n).qposadr[0] for n in names]
    dadr = [model.joint(n).dofadr[0] for n in names]
    kp, kd = np.array(sim['kp']), np.array(sim['kd'])
    decimation = int(round(1.0 / params['rate_hz'] / sim['physics_dt']))
    assert decimation == 10

    ctl.reset()
    target = ctl.default_position.copy()   # the reference starts by holding the default pose
    errors = []
    for k in range(len(trace['actions'])):
        for _ in range(decimation):
            data.ctrl[:] = kp * (target - data.qpos[qadr]) - kd * data.qvel[dadr]
            mujoco.mj_step(model, data)
        q = data.qpos
        quat_xyzw = [q[4], q[5], q[6], q[3]]   # as sensor_msgs/Imu carries it
        inp = ctl.inputs(data.time, names, data.qpos[qadr], data.qvel[dadr], quat_xyzw,
                         data.qvel[3:6], (0.5, 0.0, 0.0))   # the reference's command
        target, action = ctl.step(inp)
        errors.append(np.abs(action - trace['actions'][k]).max())
    errors = np.array(errors)
    print(f'max_action_err={errors.max():.3g} base={data.qpos[:3]}')
    assert errors.max() <= 1e-4, f'first step over 1e-4: {int(np.argmax(errors > 1e-4))}'
    assert np.abs(data.qpos[:3] - trace['qpos'][-1][:3]).max() < 1e-3
    assert data.qpos[0] > 8.5   # it walked

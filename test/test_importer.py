"""`simreal import`: training exports into robot files that reproduce the training deploy.

- config/robots/g1_29dof.yaml is exactly what the import makes of unitree_rl_lab's deploy.yaml
  (it never drifts from the importer);
- its policy path (observation builder, ONNX, actions) gives the actions of a reference loop
  written from unitree_rl_lab's own deploy semantics (tools/rl_lab_reference.py), in lockstep
  over 1000 steps, and the robot walks in plain MuJoCo;
- the 12-dof G1 imported from unitree_rl_gym's deploy config reproduces unitree's reference
  trace as the hand-written file does;
- an unknown observation term, a wrong size, a missing model: a clear refusal, no file.
"""
import numpy as np
import pytest
import yaml

from conftest import REPO, require_asset, SHARED, simreal
from simreal_ros.core.config import load_node_params
from simreal_ros.tools.importer import ImportRefused, import_export

G1_29 = SHARED / 'robots' / 'unitree_g1_29dof'
DEPLOY_REL = '../shared/robots/unitree_g1_29dof/policy/deploy.yaml'
MODEL_REL = '../shared/robots/unitree_g1_29dof/scene_29dof.xml'
# config/robots/g1_29dof.yaml names the asset (docs/assets.md), wherever it is on the machine.
DEPLOY_ASSET = 'asset://unitree_g1_29dof/policy/deploy.yaml'
MODEL_ASSET = 'asset://unitree_g1_29dof/scene_29dof.xml'
G1_12_CONFIG_REL = '../shared/robots/unitree_g1_12dof/unitree_deploy_config.yaml'
G1_12_MODEL_REL = '../shared/robots/unitree_g1_12dof/scene.xml'
G1_12_POLICY_REL = '../shared/robots/unitree_g1_12dof/policy.onnx'
COMMITTED = REPO / 'config' / 'robots' / 'g1_29dof.yaml'


@pytest.fixture
def g1_29():
    if not (G1_29 / 'policy' / 'deploy.yaml').is_file():
        pytest.skip(f'shared G1 29-dof data not found at {G1_29} (beside the repository)')
    return G1_29


def test_committed_g1_29dof_is_the_import_byte_for_byte(tmp_path, monkeypatch):
    require_asset('unitree_g1_29dof')
    monkeypatch.chdir(REPO)
    out = tmp_path / 'g1_29dof.yaml'
    code, text = simreal('import', DEPLOY_ASSET, '--model', MODEL_ASSET, '-o', str(out))
    assert code == 0, text
    assert out.read_text() == COMMITTED.read_text(), (
        'config/robots/g1_29dof.yaml differs from its import; regenerate it: simreal import '
        f'{DEPLOY_ASSET} --model {MODEL_ASSET} -o config/robots/g1_29dof.yaml')


def test_g1_29dof_maps_motor_and_policy_order(g1_29):
    deploy = yaml.load((g1_29 / 'policy' / 'deploy.yaml').read_text(),
                       Loader=__import__('simreal_ros.tools.importer',
                                         fromlist=['_ExportLoader'])._ExportLoader)
    shared = load_node_params(COMMITTED, 'policy_runner')
    motors = shared['joint_names']
    policy = shared['policy_joint_names']
    ids = deploy['joint_ids_map']
    assert [motors.index(n) for n in policy] == ids          # policy joint i -> motor ids[i]
    assert shared['kp'] == [float(v) for v in deploy['stiffness']]   # motor order
    assert shared['default_position'] == deploy['default_joint_pos']  # policy order
    sup = load_node_params(COMMITTED, 'safety_supervisor')
    bring = sup['bringup.default_position']
    assert [bring[motors.index(n)] for n in policy] == deploy['default_joint_pos']
    assert shared['cmd_vel_min'] == [-0.5, -0.3, -0.2]
    assert shared['observation.joint_vel_rel.history'] == 5
    # Measurement plausibility is there, and apart from the command limits.
    assert 'state_velocity_factor' in sup and 'state_position_margin' in sup


def test_g1_29dof_actions_match_unitree_rl_lab_deploy_semantics(g1_29):
    from simreal_ros.tools.rl_lab_reference import run
    out = run(g1_29 / 'policy' / 'deploy.yaml', g1_29 / 'scene_29dof.xml', steps=1000,
              cmd_vel=(0.5, 0.0, 0.0), robot=COMMITTED)
    err = out['action_err']
    print(f'max_action_err={err.max():.3g} distance={out["base_qpos"][-1, 0]:.3f} m')
    assert err.max() <= 1e-4, f'first step over 1e-4: {int(np.argmax(err > 1e-4))}'
    assert out['base_qpos'][-1, 0] > 8.5          # it walked 20 s at 0.5 m/s
    assert out['base_qpos'][:, 2].min() > 0.5     # and never fell


def test_a_wrong_joint_order_breaks_the_parity(g1_29, tmp_path):
    """The lockstep comparison can fail: policy order swapped for two joints."""
    from simreal_ros.tools.rl_lab_reference import run
    text = COMMITTED.read_text().replace(
        'policy_joint_names: [left_hip_pitch_joint, right_hip_pitch_joint,',
        'policy_joint_names: [right_hip_pitch_joint, left_hip_pitch_joint,')
    assert text != COMMITTED.read_text()
    broken = tmp_path / 'broken.yaml'
    broken.write_text(text)
    out = run(g1_29 / 'policy' / 'deploy.yaml', g1_29 / 'scene_29dof.xml', steps=30,
              robot=broken)
    assert out['action_err'].max() > 1e-3


def test_g1_12dof_from_legged_gym_reproduces_unitree_reference(g1_dir, tmp_path, monkeypatch):
    import mujoco
    from simreal_ros.core.policy import PolicyController
    monkeypatch.chdir(REPO)
    out = tmp_path / 'g1_12dof.yaml'
    code, text = simreal('import', G1_12_CONFIG_REL, '--model', G1_12_MODEL_REL,
                         '--policy', G1_12_POLICY_REL, '-o', str(out))
    assert code == 0, text
    assert 'cmd_init' in text and 'gait_phase period 0.8' in text   # named, not hidden
    params = load_node_params(out, 'policy_runner')
    sim = load_node_params(out, 'sim_robot')
    ctl = PolicyController(params, params_file=out)
    trace = np.load(g1_dir / 'reference_trace.npz')
    model = mujoco.MjModel.from_xml_path(str(g1_dir / 'scene.xml'))
    model.opt.timestep = sim['physics_dt']
    data = mujoco.MjData(model)
    names = params['joint_names']
    qadr = [model.joint(n).qposadr[0] for n in names]
    dadr = [model.joint(n).dofadr[0] for n in names]
    kp, kd = np.array(sim['kp']), np.array(sim['kd'])
    ctl.reset()
    target = ctl.default_position.copy()
    errors = []
    for k in range(len(trace['actions'])):
        for _ in range(10):
            data.ctrl[:] = kp * (target - data.qpos[qadr]) - kd * data.qvel[dadr]
            mujoco.mj_step(model, data)
        q = data.qpos
        inp = ctl.inputs(data.time, names, q[qadr], data.qvel[dadr], [q[4], q[5], q[6], q[3]],
                         data.qvel[3:6], (0.5, 0.0, 0.0))
        target, action = ctl.step(inp)
        errors.append(np.abs(action - trace['actions'][k]).max())
    print(f'max_action_err={max(errors):.3g}')
    assert max(errors) <= 1e-4
    assert data.qpos[0] > 8.5


def test_unknown_observation_term_is_refused_and_no_file(g1_29, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    text = (g1_29 / 'policy' / 'deploy.yaml').read_text().replace(
        '  last_action:\n', '  height_scan:\n    params: {}\n    clip: null\n'
        '    scale: [1.0]\n    history_length: 1\n  last_action:\n')
    export = tmp_path / 'deploy.yaml'
    export.write_text(text)
    out = tmp_path / 'robot.yaml'
    code, msg = simreal('import', str(export), '--model', MODEL_REL, '--policy',
                        str(g1_29 / 'policy' / 'policy.onnx'), '-o', str(out))
    assert code == 2, msg
    assert "'height_scan'" in msg and 'joint_pos_rel' in msg and 'supported' in msg
    assert not out.exists()


def test_sizes_and_missing_inputs_are_refused(g1_29, tmp_path):
    text = (g1_29 / 'policy' / 'deploy.yaml').read_text()
    export = tmp_path / 'deploy.yaml'
    export.write_text(text.replace('history_length: 5', 'history_length: 4', 1))
    with pytest.raises(ImportRefused, match='takes 480 observations.*make 477'):
        import_export(export, str(g1_29 / 'scene_29dof.xml'),
                      str(g1_29 / 'policy' / 'policy.onnx'))
    with pytest.raises(ImportRefused, match='--model'):
        import_export(g1_29 / 'policy' / 'deploy.yaml', None)
    export.write_text(text.replace('stiffness: [100.0, ', 'stiffness: ['))
    with pytest.raises(ImportRefused, match='stiffness .one per motor. has 28 values'):
        import_export(export, str(g1_29 / 'scene_29dof.xml'),
                      str(g1_29 / 'policy' / 'policy.onnx'))


def test_driver_unitree_adds_the_bridge(g1_29, tmp_path):
    imp = import_export(g1_29 / 'policy' / 'deploy.yaml', str(g1_29 / 'scene_29dof.xml'),
                        driver='unitree', out=tmp_path / 'x.yaml')
    bridge = imp.sections['unitree_bridge']
    assert bridge['motor_indices'] == list(range(29))
    assert yaml.safe_load(imp.text())['/**/unitree_bridge']['ros__parameters'][
        'interface'] == 'unitree_hg'

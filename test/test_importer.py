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
import os
import zipfile

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
    code, text = simreal('import', DEPLOY_ASSET, '--model', MODEL_ASSET, '-o', str(out),
                         timeout=900)
    assert code == 0, text
    # The asset's files are named as assets (asset://), wherever the robot file is written.
    assert 'model_path: asset://unitree_g1_29dof/' in COMMITTED.read_text()
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
    text = text.replace('../../../shared/', os.path.relpath(SHARED, tmp_path) + '/')
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
                         '--policy', G1_12_POLICY_REL, '-o', str(out),
                         '--reference-steps', '0')
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
                        driver='unitree', out=tmp_path / 'x.yaml', reference_steps=0)
    bridge = imp.sections['unitree_bridge']
    assert bridge['motor_indices'] == list(range(29))
    assert yaml.safe_load(imp.text())['/**/unitree_bridge']['ros__parameters'][
        'interface'] == 'unitree_hg'


# -- any trainer's export (issue 39) ----------------------------------------------------------
G1_12 = SHARED / 'robots' / 'unitree_g1_12dof'
G1_12_NAMES = ['left_hip_pitch_joint', 'left_hip_roll_joint', 'left_hip_yaw_joint',
               'left_knee_joint', 'left_ankle_pitch_joint', 'left_ankle_roll_joint',
               'right_hip_pitch_joint', 'right_hip_roll_joint', 'right_hip_yaw_joint',
               'right_knee_joint', 'right_ankle_pitch_joint', 'right_ankle_roll_joint']


@pytest.fixture
def g1_12():
    if not (G1_12 / 'unitree_deploy_config.yaml').is_file():
        pytest.skip(f'shared G1 12-dof data not found at {G1_12} (beside the repository)')
    return G1_12


def test_legged_gym_import_starts_at_the_default_pose_and_works_from_a_third_folder(
        g1_12, tmp_path, monkeypatch):
    """Import with paths relative to one folder into a second; check and roll out from a
    third: every reader resolves the file's paths from the file's folder."""
    from simreal_ros.tools.check import check
    from simreal_ros.tools.reference_rollout import rollout
    # three depths: a path relative to one folder does not resolve from another by chance
    here, there, third = tmp_path / 'here', tmp_path / 'a' / 'there', tmp_path / 'b' / 'c' / 'd'
    for d in (here, there, third):
        d.mkdir(parents=True)
    import shutil
    for name in ('unitree_deploy_config.yaml', 'policy.onnx'):   # near: no '..' up to '/'
        shutil.copy(g1_12 / name, here / name)
    monkeypatch.chdir(here)
    rel = ['unitree_deploy_config.yaml', os.path.relpath(g1_12 / 'scene.xml'), 'policy.onnx']
    imp = import_export(rel[0], rel[1], rel[2], fmt='legged_gym', out=there / 'g1.yaml',
                        reference_steps=0)
    from simreal_ros.tools.importer import write
    robot = write(imp, there / 'g1.yaml')
    sim = load_node_params(robot, 'sim_robot')
    runner = load_node_params(robot, 'policy_runner')
    assert sim['initial_position'] == [-0.1, 0.0, 0.0, 0.3, -0.2, 0.0] * 2   # default_angles
    assert not sim['model_path'].startswith('/')
    assert runner['policy_path'] == '../../here/policy.onnx'
    monkeypatch.chdir(third)
    report = check(robot, nodes=False)
    assert not report.errors, report.lines()
    out = rollout(str(robot), steps=3, cmd_vel=(0.5, 0.0, 0.0))
    assert np.allclose(out['initial_q'], runner['default_position'])


def _narrow_ankle_model(g1_12, folder, upper):
    """A copy of the 12-dof MJCF whose left ankle roll range ends at `upper`."""
    text = (g1_12 / 'g1_12dof.xml').read_text()
    mesh = os.path.relpath(g1_12 / 'meshes', folder)
    text = text.replace('meshdir="meshes', f'meshdir="{mesh}')
    start = text.index('name="left_ankle_roll_joint"')
    lo = text.index('range="', start)
    hi = text.index('"', lo + 7)
    low = text[lo + 7:hi].split()[0]
    text = text[:lo] + f'range="{low} {upper}' + text[hi:]
    (folder / 'g1_12dof.xml').write_text(text)
    scene = (g1_12 / 'scene.xml').read_text()
    (folder / 'scene.xml').write_text(scene)
    return folder / 'scene.xml'


def test_limits_from_the_policys_own_motion_flag_what_passes_the_model(g1_12, tmp_path):
    """A general case: the MJCF's ankle range narrowed below what the policy drives it to.
    The import says so (flagged, named), widens the limit from its own reference run and the
    replay of that reference through the supervisor's filter is clean."""
    model = _narrow_ankle_model(g1_12, tmp_path, 0.05)
    imp = import_export(g1_12 / 'unitree_deploy_config.yaml', str(model),
                        str(g1_12 / 'policy.onnx'), fmt='legged_gym',
                        out=tmp_path / 'g1.yaml', reference_steps=150)
    flagged = [f for f in imp.flags if f.startswith('left_ankle_roll_joint')]
    assert flagged and any('confirm the hardware' in f for f in flagged), imp.flags
    sup = imp.sections['safety_supervisor']
    k = G1_12_NAMES.index('left_ankle_roll_joint')
    assert sup['position_upper'][k] > 0.05 + 0.1 + 1e-6   # past the MJCF's range + 0.1
    assert all(r.clean for (j, _), r in imp.replays.items() if j == 0.0), imp.notes
    assert 'FLAGGED' in imp.text()


def mjlab_csv(arr, decimals=3, delimiter=','):
    """mjlab's list_to_csv_str (src/mjlab/tasks/velocity/rl/exporter.py): numbers with 3
    decimals, strings as they are, comma-separated."""
    fmt = f'{{:.{decimals}f}}'
    return delimiter.join(fmt.format(x) if isinstance(x, (int, float)) else str(x)
                          for x in arr)


def mjlab_onnx(path, observation_names=('base_ang_vel', 'projected_gravity', 'joint_pos',
                                        'joint_vel', 'actions', 'command'),
               command_names=('twist',), action_scale=0.25, n_obs=45):
    """An ONNX as mjlab's velocity exporter leaves it: obs -> actions (rsl_rl's exporter's
    names), then attach_onnx_metadata's metadata_props, each value as it formats it."""
    import onnx
    from simreal_ros.core.onnx_policies import mlp
    mlp(str(path), [n_obs, 32, 12], seed=3, output_gain=0.01)
    metadata = {
        'run_path': 'someone/mjlab/abc123',
        'joint_names': G1_12_NAMES,
        'joint_stiffness': [100.0, 100.0, 100.0, 150.0, 40.0, 40.0] * 2,
        'joint_damping': [2.0, 2.0, 2.0, 4.0, 2.0, 2.0] * 2,
        'default_joint_pos': [-0.1, 0.0, 0.0, 0.3, -0.2, 0.0] * 2,
        'command_names': list(command_names),
        'observation_names': list(observation_names),
        'action_scale': action_scale,
    }
    model = onnx.load(str(path))
    for key, value in metadata.items():
        entry = onnx.StringStringEntryProto()
        entry.key = key
        entry.value = mjlab_csv(value) if isinstance(value, list) else str(value)
        model.metadata_props.append(entry)
    onnx.save(model, str(path))
    return path


def test_an_mjlab_onnx_imports_from_its_metadata(g1_12, tmp_path):
    policy = mjlab_onnx(tmp_path / 'policy.onnx')
    out = tmp_path / 'robot' / 'mj.yaml'
    code, text = simreal('import', str(policy), '--model', str(g1_12 / 'scene.xml'), '-o',
                         str(out), '--reference-steps', '0')
    assert code == 0, text
    assert '(mjlab:' in text and 'run_path someone/mjlab/abc123' in text
    runner = load_node_params(out, 'policy_runner')
    assert runner['policy_joint_names'] == G1_12_NAMES
    assert runner['default_position'] == [-0.1, 0.0, 0.0, 0.3, -0.2, 0.0] * 2
    assert runner['action.scale'] == 0.25
    assert runner['observation.terms'] == ['base_ang_vel', 'projected_gravity', 'joint_pos',
                                           'joint_vel', 'actions', 'command']
    assert runner['observation.actions.kind'] == 'last_action'
    assert runner['observation.command.kind'] == 'velocity_command'
    assert runner['kp'] == [100.0, 100.0, 100.0, 150.0, 40.0, 40.0] * 2
    assert load_node_params(out, 'sim_robot')['initial_position'] == runner['default_position']
    from simreal_ros.core.policy import PolicyController, check_metadata
    ctl = PolicyController(runner, params_file=out)   # the ONNX takes the 45 observations
    problems, _ = check_metadata(ctl.session.metadata, out, G1_12_NAMES,
                                 runner['default_position'], runner['action.scale'],
                                 runner['kp'], runner['kd'])
    assert problems == []


def test_mjlab_terms_this_package_cannot_build_are_refused(g1_12, tmp_path):
    lin = mjlab_onnx(tmp_path / 'lin.onnx', observation_names=(
        'base_lin_vel', 'base_ang_vel', 'projected_gravity', 'joint_pos', 'joint_vel',
        'actions', 'command'), n_obs=48)
    with pytest.raises(ImportRefused, match='base_lin_vel.*state estimator'):
        import_export(lin, str(g1_12 / 'scene.xml'), reference_steps=0)
    track = mjlab_onnx(tmp_path / 'track.onnx', command_names=('motion',))
    with pytest.raises(ImportRefused, match="command_names \\['motion'\\]"):
        import_export(track, str(g1_12 / 'scene.xml'), reference_steps=0)
    plain = tmp_path / 'plain.onnx'
    from simreal_ros.core.onnx_policies import mlp
    mlp(str(plain), [45, 12])
    with pytest.raises(ImportRefused, match="without mjlab's metadata"):
        import_export(plain, str(g1_12 / 'scene.xml'), reference_steps=0)


def torchscript_zip(path):
    """A zip laid out as torch.jit.save writes a module: <name>/code/, constants.pkl,
    data.pkl, version (the contents are not read)."""
    with zipfile.ZipFile(path, 'w') as z:
        z.writestr('motion/version', '3\n')
        z.writestr('motion/data.pkl', b'\x80\x02}q\x00.')
        z.writestr('motion/constants.pkl', b'\x80\x02).')
        z.writestr('motion/code/__torch__/actor_critic.py', 'class ActorCritic: ...\n')
    return path


def test_a_torchscript_policy_is_named_with_how_to_export_it(g1_12, tmp_path):
    pt = torchscript_zip(tmp_path / 'motion.pt')
    code, text = simreal('import', str(g1_12 / 'unitree_deploy_config.yaml'), '--model',
                         str(g1_12 / 'scene.xml'), '--policy', str(pt), '-o',
                         str(tmp_path / 'x.yaml'), '--reference-steps', '0')
    assert code == 2, text
    assert 'TorchScript module' in text and 'torch.onnx.export' in text
    assert 'h_in, c_in' in text and 'INVALID_PROTOBUF' not in text
    assert not (tmp_path / 'x.yaml').exists()
    from simreal_ros.core.config import ConfigError
    from simreal_ros.core.policy import PolicySession
    with pytest.raises(ConfigError, match='TorchScript module'):
        PolicySession(pt)
    pickle_file = tmp_path / 'policy_1000.pt'      # torch.save's legacy (non-zip) pickle
    pickle_file.write_bytes(b'\x80\x02\x8a\nl\xfc\x9cF\xf9 j\xa8P\x19.')
    with pytest.raises(ConfigError, match='pickle .PyTorch.'):
        PolicySession(pickle_file)


def test_limits_let_through_the_policys_start_from_the_mjcf_pose_too(g1_12, tmp_path):
    """unitree's deploy_mujoco.py starts its policy from the MJCF's own pose (qpos0), not the
    default pose, and its first steps from there are a transient of their own (the H1's left
    ankle target: -1.48 rad in its first step, -1.33 rad at most from the default pose):
    limits from the default-pose run alone clipped the trainer's own reference. The import
    runs the policy from both starts and its limits pass both replays."""
    from simreal_ros.tools.importer import _starts
    imp = import_export(g1_12 / 'unitree_deploy_config.yaml', str(g1_12 / 'scene.xml'),
                        str(g1_12 / 'policy.onnx'), fmt='legged_gym',
                        out=tmp_path / 'g1.yaml', reference_steps=60)
    starts = _starts(imp, g1_12 / 'scene.xml')
    assert [s for s, _ in starts] == ['the default pose', 'the MJCF\'s own pose']
    assert starts[1][1] == [0.0] * 12      # the 12-dof MJCF's qpos0: every joint at 0
    runs = sorted({run for _, run in imp.replays})
    assert len(runs) == 2 and any('MJCF\'s own pose' in r for r in runs), runs
    assert all(r.clean for (j, _), r in imp.replays.items() if j == 0.0), imp.notes

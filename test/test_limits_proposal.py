"""`simreal limits`: safety limits proposed from a reference trace (core/limits_proposal.py,
core/trace.py). Pure file work: synthetic traces with known figures, a small MJCF with known
ranges, malformed files, and unitree's G1 reference walk from ../shared."""
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import yaml

from conftest import REPO
from simreal_ros.core.config import ConfigError
from simreal_ros.core.limits_proposal import propose, propose_from_files, read_robot, \
    round_out, round_up, PARAMS
from simreal_ros.core.safety.limits import Limits
from simreal_ros.core.trace import load_trace, TraceError

# Three hinges: hip (range, joint actuatorfrcrange 88), ankle (the issue's range -0.87267 and
# an actuator forcerange of 40 N*m), wrist (no range; a motor with gear 2 and ctrlrange +-10).
MJCF = """<mujoco model="limits_test">
  <compiler angle="radian"/>
  <worldbody>
    <body name="l1">
      <joint name="hip" type="hinge" axis="0 1 0" range="-1.2 1.5" actuatorfrcrange="-88 88"/>
      <geom type="capsule" size="0.03" fromto="0 0 0 0 0 -0.3" mass="1"/>
      <body name="l2" pos="0 0 -0.3">
        <joint name="ankle" type="hinge" axis="0 1 0" range="-0.87267 0.5236"/>
        <geom type="capsule" size="0.03" fromto="0 0 0 0 0 -0.2" mass="0.5"/>
        <body name="l3" pos="0 0 -0.2">
          <joint name="wrist" type="hinge" axis="1 0 0"/>
          <geom type="sphere" size="0.03" mass="0.1"/>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="hip" joint="hip"/>
    <motor name="ankle" joint="ankle" forcelimited="true" forcerange="-40 40"/>
    <motor name="wrist" joint="wrist" gear="2" ctrllimited="true" ctrlrange="-10 10"/>
  </actuator>
</mujoco>
"""

NAMES = ['hip', 'ankle', 'wrist']
KP = [100.0, 50.0, 10.0]
KD = [2.0, 1.0, 0.5]


def robot_yaml(model, policy_names=None, extra_supervisor=''):
    policy = policy_names or NAMES
    return f"""/**:
  ros__parameters:
    robot_name: limits_test
    joint_names: [{', '.join(NAMES)}]
    kp: {KP}
    kd: {KD}
/**/sim_robot:
  ros__parameters:
    model_path: {model}
/**/policy_runner:
  ros__parameters:
    policy_joint_names: [{', '.join(policy)}]
    default_position: [0.1, -0.2, 0.0]
    observation:
      terms: [joint_pos, joint_vel]
      joint_vel: {{scale: 0.05}}
    action:
      mode: position
      scale: 0.25
/**/safety_supervisor:
  ros__parameters:
    position_lower: [-1.1, -0.8, -3.0]
    position_upper: [1.4, 0.5, 3.0]
    velocity_limit: [20.0, 20.0, 20.0]
    torque_limit: [88.0, 40.0, 20.0]
    max_target_rate: [40.0, 40.0, 40.0]
    max_target_accel: [2000.0, 2000.0, 2000.0]
    trip_velocity: [30.0, 30.0, 30.0]
    policy_timeout_s: 0.06
{extra_supervisor}"""


@pytest.fixture
def robot(tmp_path):
    model = tmp_path / 'model.xml'
    model.write_text(MJCF)
    path = tmp_path / 'robot.yaml'
    path.write_text(robot_yaml(model))
    return path


def save(path, **arrays):
    np.savez(path, **arrays)
    return path


def sine_trace(tmp_path, amplitude=0.5):
    """1 Hz sines sampled at 100 Hz for 2 s: peaks at samples (t = 0.25, 0.75 s), velocity
    peak A*2*pi at t = 0, effort peak 20 N*m, all exact."""
    t = np.arange(201) * 0.01
    w = 2 * np.pi
    q = np.stack([amplitude * np.sin(w * t), 0.2 * np.sin(w * t), 0.1 * np.sin(w * t)], axis=1)
    dq = np.stack([amplitude * w * np.cos(w * t), 0.2 * w * np.cos(w * t),
                   0.1 * w * np.cos(w * t)], axis=1)
    effort = np.stack([20 * np.sin(w * t), 10 * np.sin(w * t), 2 * np.sin(w * t)], axis=1)
    return save(tmp_path / 'sine.npz', time=t, joint_names=np.array(NAMES), q=q, dq=dq,
                effort=effort)


# -- figures ------------------------------------------------------------------------------------
def test_rounding_is_outwards_and_tidy():
    assert round_up(2.0 * 1.1) == 2.2            # not 2.21 from 2.2000000000000002
    assert round_up(math.pi * 1.1) == 3.46
    assert round_up(1025.2) == 1030.0 and round_up(7.425) == 7.43
    assert round_out(-0.5, upwards=False) == -0.5 and round_out(-0.5001, upwards=False) == -0.501
    assert round_out(0.6, upwards=True) == 0.6 and round_out(0.6001, upwards=True) == 0.601


def test_sine_needs_and_proposals_are_exact(robot, tmp_path):
    p = propose_from_files(sine_trace(tmp_path), robot)
    hip = p.joints['hip']['limits']
    assert hip['position_lower']['need'] == pytest.approx(-0.5, abs=1e-12)
    assert hip['position_upper']['need'] == pytest.approx(0.5, abs=1e-12)
    assert hip['position_lower']['proposed'] == -0.6    # 0.1 rad outside
    assert hip['position_upper']['proposed'] == 0.6
    assert hip['velocity_limit']['need'] == pytest.approx(math.pi, rel=1e-12)
    assert hip['velocity_limit']['proposed'] == 3.46    # pi * 1.1 = 3.4558, rounded up
    assert hip['torque_limit']['need'] == pytest.approx(20.0, rel=1e-12)
    assert hip['torque_limit']['proposed'] == 22.0
    assert hip['torque_limit']['model'] == 88.0
    assert p.joints['hip']['need']['torque_source'] == 'effort in the trace'
    assert p.joints['hip']['need']['velocity_source'] == 'dq in the trace'
    # no targets in this trace: no rate proposal, the current value is kept in the snippet
    assert hip['max_target_rate']['need'] is None and hip['max_target_rate']['proposed'] is None
    assert 'max_target_rate: [40.0, 40.0, 40.0]' in p.yaml_snippet()
    assert p.flagged == []
    # the model's torque bounds: joint actuatorfrcrange, actuator forcerange, ctrlrange x gear
    assert p.joints['ankle']['limits']['torque_limit']['model'] == 40.0
    assert p.joints['wrist']['limits']['torque_limit']['model'] == 20.0
    assert p.joints['wrist']['limits']['position_lower']['model'] is None


def test_margins_are_applied(robot, tmp_path):
    trace = sine_trace(tmp_path)
    p = propose_from_files(trace, robot, margin=0.5, position_margin=0.25)
    hip = p.joints['hip']['limits']
    assert hip['velocity_limit']['proposed'] == 4.72     # pi * 1.5 = 4.712, rounded up
    assert hip['torque_limit']['proposed'] == 30.0
    assert hip['position_lower']['proposed'] == -0.75
    assert hip['position_upper']['proposed'] == 0.75
    p0 = propose_from_files(trace, robot, margin=0.0, position_margin=0.0)
    assert p0.joints['hip']['limits']['torque_limit']['proposed'] == 20.0
    assert p0.joints['hip']['limits']['position_upper']['proposed'] == 0.5


def staircase_trace(tmp_path):
    """Targets at a 50 Hz policy in a 500 Hz trace: the hip moves 0.04 rad every 20 ms (2 rad/s),
    then 0.08 (4 rad/s: +100 rad/s^2); the ankle holds 0.5 s, then moves 0.03 rad once (the
    supervisor's rate dt is capped at policy_timeout_s 0.06: 0.5 rad/s); q is still at 0, so
    the PD effort is kp * target; the ankle stands at its first target, -0.2 (a first target
    away from the first pose is a move of its own, from the replay's hold of that pose)."""
    t = np.arange(1001) * 0.002
    step = np.arange(1001) // 10                # policy step index
    hip = np.where(step <= 20, 0.04 * step, 0.8 + 0.08 * (step - 20))
    hip = np.minimum(hip, 2.4)
    ankle = np.where(t >= 0.5, -0.23, -0.2)
    wrist = np.zeros_like(t)
    target = np.stack([hip, ankle, wrist], axis=1)
    q = np.zeros_like(target)
    q[:, 1] = -0.2
    return save(tmp_path / 'stairs.npz', time=t, joint_names=np.array(NAMES), q=q,
                dq=np.zeros_like(q), target_q=target)


def test_target_rate_is_per_move_as_the_supervisor_measures_it(robot, tmp_path):
    p = propose_from_files(staircase_trace(tmp_path), robot, position_margin=0.1, jitter=0.0)
    hip = p.joints['hip']
    # 0.08 rad per 20 ms; a per-sample difference would read 0.08 / 0.002 = 40 rad/s
    assert hip['need']['target_rate'] == pytest.approx(4.0, rel=1e-9)
    assert hip['limits']['max_target_rate']['proposed'] == 4.4
    assert hip['need']['target_accel'] == pytest.approx(100.0, rel=1e-6)
    assert hip['limits']['max_target_accel']['proposed'] == 110.0
    ankle = p.joints['ankle']['need']
    assert ankle['target_rate'] == pytest.approx(0.03 / 0.06, rel=1e-9)
    # the targets widen the position need (q stays at 0)
    assert hip['limits']['position_upper']['need'] == pytest.approx(2.4)
    assert p.joints['ankle']['limits']['position_lower']['need'] == pytest.approx(-0.23)
    # the PD effort from the robot file's gains: kp * (target - q) - kd * 0
    assert hip['need']['torque'] == pytest.approx(100.0 * 2.4)
    assert hip['need']['torque_source'].startswith('PD effort kp*(target - q) - kd*dq')
    assert p.joints['ankle']['need']['torque'] == pytest.approx(50.0 * 0.03)


def test_pd_effort_uses_kd_and_differences_when_no_dq(robot, tmp_path):
    """q ramps at 1.5 rad/s (differences are exact), the target leads by 0.1 rad:
    tau = kp * 0.1 - kd * 1.5 on every sample."""
    t = np.arange(101) * 0.01
    q = np.stack([1.5 * t - 0.7, 0.3 * t - 0.5, 0.0 * t], axis=1)
    target = q + 0.1
    trace = save(tmp_path / 'ramp.npz', time=t, joint_names=np.array(NAMES), q=q,
                 target_q=target)
    p = propose_from_files(trace, robot)
    hip = p.joints['hip']['need']
    assert hip['velocity'] == pytest.approx(1.5, rel=1e-9)
    assert 'central differences' in hip['velocity_source']
    assert hip['torque'] == pytest.approx(100.0 * 0.1 - 2.0 * 1.5, rel=1e-9)
    assert p.joints['ankle']['need']['torque'] == pytest.approx(50.0 * 0.1 - 1.0 * 0.3,
                                                                rel=1e-9)


def test_the_issue_case_is_flagged_never_clipped_silently(robot, tmp_path):
    """An ankle to -1.48 rad against a range of -0.87, 50 N*m against a 40 N*m actuator,
    64 rad/s of target rate against the file's 40: the joint is named with the numbers, the
    proposal stops at the model's bound, the current rate limit is shown to clip it."""
    t = np.arange(51) * 0.02
    ankle = np.where(t < 0.5, -0.2, -1.48)
    q = np.stack([0 * t, ankle, 0 * t], axis=1)
    # targets that move every policy step (+-1 mrad), with the jump -0.2 -> -1.48 in one
    # 20 ms step at t = 0.5 s: 64 rad/s
    k = np.arange(51)
    target = q.copy()
    target[:, 1] += np.where(k < 25, 0.001 * (k % 2), 0.001 * ((k + 1) % 2))
    effort = np.zeros_like(q)
    effort[25, 1] = -50.0
    trace = save(tmp_path / 'issue.npz', time=t, joint_names=np.array(NAMES), q=q,
                 target_q=target, effort=effort)
    p = propose_from_files(trace, robot, jitter=0.0)
    flags = {}
    for name, text in p.flagged:
        flags.setdefault(name, []).append(text)
    assert set(flags) == {'ankle'}
    text = ' | '.join(flags['ankle'])
    assert 'position: the reference reaches -1.48 rad' in text
    assert '[-0.87267, 0.5236]' in text and '0.607 rad below' in text
    assert 'torque: the reference needs 50 N*m' in text and '+-40' in text
    lim = p.joints['ankle']['limits']
    assert lim['position_lower']['proposed'] == -0.87267      # the model's bound, not -1.58
    assert lim['position_lower']['capped_at_model']
    assert lim['torque_limit']['proposed'] == 40.0             # not 55
    assert p.joints['ankle']['need']['target_rate'] == pytest.approx(64.0, rel=1e-9)
    assert lim['max_target_rate']['proposed'] == 70.4
    assert lim['max_target_rate']['current_clips']
    assert p.clipped_by_current()['max_target_rate'] == ['ankle']
    report = '\n'.join(p.table())
    assert 'FLAGGED' in report and '!! ankle: position' in report and '!! ankle: torque' in report
    assert '# FLAGGED' in p.yaml_snippet() and 'ankle' in p.yaml_snippet().split('FLAGGED')[1]
    assert p.to_dict()['flagged'][0]['joint'] == 'ankle'


def test_yaml_snippet_is_a_valid_supervisor_section(robot, tmp_path):
    p = propose_from_files(staircase_trace(tmp_path), robot, jitter=0.0)
    data = yaml.safe_load(p.yaml_snippet())
    params = data['/**/safety_supervisor']['ros__parameters']
    plausibility = {k: params.pop(k) for k in ('state_position_margin', 'state_velocity_factor')}
    assert plausibility == {k: p.plausibility[k] for k in plausibility}
    assert set(params) == set(PARAMS)
    for key, values in params.items():
        assert len(values) == 3 and all(isinstance(v, float) for v in values), (key, values)
        for name, value in zip(NAMES, values):
            row = p.joints[name]['limits'][key]
            # nothing to propose (the joint never moved or pushed): the current value kept
            expected = row['proposed'] if row['proposed'] is not None else row['current']
            assert value == expected, (key, name)
    assert p.joints['wrist']['limits']['max_target_rate']['proposed'] is None
    assert params['max_target_rate'][2] == 40.0
    limits = Limits.from_mapping(NAMES, dict(params, kp=KP, kd=KD))   # the supervisor's check
    assert limits.max_target_rate[0] == 4.4
    doc = json.loads(p.to_json())
    assert doc['joints']['hip']['limits']['max_target_rate']['proposed'] == 4.4


def test_simreal_layout_targets_from_actions(robot, tmp_path):
    t = np.arange(11) * 0.02
    actions = np.zeros((11, 3))
    actions[:, 0] = np.linspace(0, 2.0, 11)       # hip target 0.1 + 0.25 a: 0.1 .. 0.6
    q = np.zeros((11, 3))
    q[:, :2] = [0.1, -0.2]                         # standing at the default pose
    trace = save(tmp_path / 'act.npz', time=t, joint_names=np.array(NAMES), q=q,
                 dq=np.zeros_like(q),
                 actions=actions)
    loaded = load_trace(trace, robot)
    assert loaded.target[:, 0] == pytest.approx(0.1 + 0.25 * actions[:, 0])
    assert loaded.target[:, 1] == pytest.approx(-0.2)
    assert 'default_position + 0.25 * action' in loaded.sources['target']
    p = propose(loaded, read_robot(robot))
    assert p.joints['hip']['need']['target_rate'] == pytest.approx(0.05 / 0.02)


def test_qpos_layout_names_from_the_robot_file_and_velocity_from_obs(tmp_path):
    """A MuJoCo-style trace (floating base + joints in the policy's order, which here differs
    from joint_names) with the observation joint_pos, joint_vel*0.05: velocities come from obs,
    exactly, where differences of the 50 Hz samples read less."""
    model = tmp_path / 'model.xml'
    model.write_text(MJCF)
    robot = tmp_path / 'robot.yaml'
    robot.write_text(robot_yaml(model, policy_names=['wrist', 'hip', 'ankle']))
    t = 0.02 * np.arange(1, 201)
    w = 2 * np.pi / 0.2                                         # 10 samples a period
    hip = 0.3 * np.sin(w * t)
    dhip = 0.3 * w * np.cos(w * t)
    policy_q = np.stack([0 * t, hip, 0 * t], axis=1)            # wrist, hip, ankle
    policy_dq = np.stack([0 * t, dhip, 0 * t], axis=1)
    base = np.tile([0, 0, 0.8, 1, 0, 0, 0], (t.size, 1))
    default = np.array([0.1, -0.2, 0.0])      # default_position, policy order
    obs = np.concatenate([policy_q - default, 0.05 * policy_dq], axis=1)
    actions = np.zeros((t.size, 3))
    trace = save(tmp_path / 'ref.npz', time=t, qpos=np.concatenate([base, policy_q], axis=1),
                 actions=actions, obs=obs.astype(np.float32))
    loaded = load_trace(trace, robot)
    assert loaded.layout == 'qpos' and loaded.names == ['wrist', 'hip', 'ankle']
    assert loaded.base_qpos.shape == (200, 7)
    assert loaded.sources['dq'].startswith("obs: the 'joint_vel' term")
    p = propose(loaded, read_robot(robot))
    exact = np.abs(dhip).max()
    assert p.joints['hip']['need']['velocity'] == pytest.approx(exact, rel=1e-6)
    assert np.abs(np.gradient(hip, t)).max() < 0.95 * exact     # what differences would say
    assert p.joints['hip']['limits']['position_upper']['need'] == pytest.approx(hip.max())
    assert list(p.joints) == ['hip', 'ankle', 'wrist']           # the supervisor's order
    with pytest.raises(TraceError, match='shape mismatch: qpos has 8 columns'):
        load_trace(save(tmp_path / 'bad.npz', time=t, qpos=np.zeros((200, 8))), robot)
    with pytest.raises(TraceError, match='names no joints: give the robot file'):
        load_trace(trace)


# -- malformed inputs ------------------------------------------------------------------------------
def _good():
    t = np.arange(5) * 0.1
    return dict(time=t, joint_names=np.array(NAMES), q=np.zeros((5, 3)))


@pytest.mark.parametrize('change,message', [
    (lambda d: d.pop('time'), "missing key 'time'"),
    (lambda d: d.pop('q'), "missing joint positions: key 'q'"),
    (lambda d: d.pop('joint_names'), "missing key 'joint_names'"),
    (lambda d: d.update(q=np.zeros((5, 2))), r'shape mismatch: q has shape \(5, 2\), expected '
                                             r'\(5, 3\)'),
    (lambda d: d.update(dq=np.zeros((4, 3))), r'shape mismatch: dq has shape \(4, 3\)'),
    (lambda d: d.update(joint_names=np.array(['hip', 'knee', 'wrist'])),
     r"unknown joint name\(s\) \['knee'\]"),
    (lambda d: d.update(joint_names=np.array(['hip', 'hip', 'wrist'])), "repeats \\['hip'\\]"),
    (lambda d: d['q'].__setitem__((3, 1), np.nan),
     r"q has 1 non-finite value\(s\) \(NaN or inf\), the first at row 3 \(t = 0.3 s\), "
     r"joint 'ankle'"),
    (lambda d: d.update(time=np.array([0, 0.1, 0.1, 0.2, 0.3])), 'time must increase strictly'),
    (lambda d: d.update(q=np.array([['a'] * 3] * 5)), 'q must hold numbers'),
])
def test_a_malformed_trace_names_the_file_and_the_problem(robot, tmp_path, change, message):
    data = _good()
    change(data)
    path = save(tmp_path / 'bad_trace.npz', **data)
    with pytest.raises(ConfigError, match=message) as exc:
        propose_from_files(path, robot)
    assert str(exc.value).startswith(f'{path}: ')


def test_unreadable_files_and_a_malformed_robot_file(robot, tmp_path):
    text = tmp_path / 'notes.npz'
    text.write_text('not an archive')
    with pytest.raises(TraceError, match=f'{text}: not an NPZ file: a trace is an NPZ '):
        load_trace(text, robot)
    single = tmp_path / 'q.npy'
    np.save(single, np.zeros(3))
    with pytest.raises(TraceError, match=f'{single}: a single .npy array'):
        load_trace(single, robot)
    with pytest.raises(TraceError, match='no such file'):
        load_trace(tmp_path / 'absent.npz', robot)
    trace = save(tmp_path / 'ok.npz', **_good())
    broken = tmp_path / 'broken.yaml'
    broken.write_text('/**:\n  ros__parameters: [unclosed\n')
    with pytest.raises(ConfigError, match=f'{broken} is not valid YAML'):
        propose_from_files(trace, broken)
    nameless = tmp_path / 'nameless.yaml'
    nameless.write_text(robot.read_text().replace('    joint_names: [hip, ankle, wrist]\n', ''))
    with pytest.raises(ConfigError, match=f'{nameless}: joint_names is missing'):
        propose_from_files(trace, nameless)
    short = tmp_path / 'short.yaml'
    short.write_text(robot.read_text().replace('torque_limit: [88.0, 40.0, 20.0]',
                                               'torque_limit: [88.0, 40.0]'))
    with pytest.raises(ConfigError, match=f'{short}: safety_supervisor.torque_limit has 2 '
                                          'values for 3 joints'):
        propose_from_files(trace, short)
    nomodel = tmp_path / 'nomodel.yaml'
    nomodel.write_text(robot.read_text().replace(str(tmp_path / 'model.xml'),
                                                 str(tmp_path / 'gone.xml')))
    with pytest.raises(ConfigError, match='gone.xml'):
        propose_from_files(trace, nomodel)
    p = propose_from_files(trace, nomodel, use_model=False)      # --no-model
    assert p.joints['ankle']['limits']['position_lower']['model'] is None


# -- the command line -----------------------------------------------------------------------------
def simreal(*args):
    result = subprocess.run([sys.executable, '-m', 'simreal_ros.client.cli', 'limits', *args],
                            cwd=REPO, capture_output=True, text=True, timeout=60,
                            env=dict(os.environ))
    return result.returncode, result.stdout, result.stderr


def test_cli_flags_prominently_exits_0_and_strict_exits_1(robot, tmp_path):
    t = np.arange(11) * 0.02
    q = np.zeros((11, 3))
    q[5:, 1] = -1.48
    trace = save(tmp_path / 'beyond.npz', time=t, joint_names=np.array(NAMES), q=q)
    code, out, err = simreal('--reference', str(trace), '--robot', str(robot))
    assert code == 0, out + err
    assert '!! ankle: position: the reference reaches -1.48 rad' in out
    assert '/**/safety_supervisor:' in out and 'Traceback' not in out + err
    code, out, err = simreal('--reference', str(trace), '--robot', str(robot), '--json',
                             '--strict')
    assert code == 1
    assert json.loads(out)['flagged'][0]['joint'] == 'ankle'
    assert 'FLAGGED 1 joint(s)' in err and 'ankle' in err
    bad = save(tmp_path / 'nan.npz', time=t, joint_names=np.array(NAMES), q=q * np.nan)
    code, out, err = simreal('--reference', str(bad), '--robot', str(robot), '--yaml')
    assert code == 2 and out == ''
    assert f'simreal limits: configuration error: {bad}: q has 33 non-finite' in err
    assert 'Traceback' not in err


def test_core_modules_do_not_import_rclpy():
    code = ('import sys, simreal_ros.core.limits_proposal, simreal_ros.core.trace; '
            'sys.exit(1 if "rclpy" in sys.modules else 0)')
    assert subprocess.run([sys.executable, '-c', code], cwd=REPO, timeout=60).returncode == 0


# -- unitree's G1 reference walk -------------------------------------------------------------------
def test_g1_reference_walk_is_covered_or_flagged(g1_dir):
    trace = g1_dir / 'reference_trace.npz'
    p = propose_from_files(trace, REPO / 'config' / 'robots' / 'g1_12dof.yaml')
    assert list(p.joints) == p.names and len(p.joints) == 12 and not p.untraced
    assert p.sources['dq'].startswith("obs: the 'joint_vel' term")
    assert p.sources['target'].endswith('default_position + 0.25 * action')
    assert p.sources['effort'].startswith('PD effort')
    flagged = {n for n, _ in p.flagged}
    for name, row in p.joints.items():
        lim = row['limits']
        for key in PARAMS:
            assert lim[key]['need'] is not None and lim[key]['proposed'] is not None, (name, key)
        # every proposal covers the need with its margin, or stops at the model's bound
        low, high = lim['position_lower'], lim['position_upper']
        covered = [low['proposed'] <= low['need'] - 0.1 + 1e-9 or low['capped_at_model'],
                   high['proposed'] >= high['need'] + 0.1 - 1e-9 or high['capped_at_model']]
        for key in ('velocity_limit', 'torque_limit', 'max_target_rate', 'max_target_accel'):
            covered.append(lim[key]['proposed'] >= lim[key]['need'] * 1.1 - 1e-9
                           or lim[key]['capped_at_model'])
        # a bound that stops the margin still covers the need itself, unless flagged
        reaches = [low['proposed'] <= low['need'] + 1e-9, high['proposed'] >= high['need'] - 1e-9]
        assert all(covered), (name, lim)
        assert all(reaches) or name in flagged, (name, lim)
    # the figures the robot file's comments quote from this trace
    need = {n: p.joints[n]['need'] for n in p.joints}
    assert max(v['velocity'] for v in need.values()) == pytest.approx(6.75, abs=0.01)
    assert need['right_ankle_pitch_joint']['target_rate'] == pytest.approx(25.6, abs=0.01)
    assert max(v['torque'] for v in need.values()) == pytest.approx(31.1, abs=0.1)
    # the ankle roll target reaches 0.2623 against the MJCF's 0.2618: flagged, with numbers
    assert flagged == {'left_ankle_roll_joint'}
    text = dict(p.flagged)['left_ankle_roll_joint']
    assert '0.2623 rad' in text and '[-0.2618, 0.2618]' in text
    assert p.joints['left_ankle_roll_joint']['limits']['position_upper']['proposed'] == 0.2618


def test_rate_and_accel_have_room_for_real_time_jitter(robot, tmp_path):
    """A step arriving half a period early after one half a period late: the rate it shows
    doubles, and a target moving at a steady rate shows an acceleration; the proposal covers
    both (a proposal from a perfectly regular trace clipped jitter every few steps)."""
    t = np.arange(51) * 0.02
    q = np.zeros((51, 3))
    target = q.copy()
    target[:, 0] = 0.02 * np.arange(51)            # 1 rad/s, steady: no acceleration
    trace = save(tmp_path / 'steady.npz', time=t, joint_names=np.array(NAMES), q=q,
                 target_q=target)
    regular = propose_from_files(trace, robot, jitter=0.0).joints['hip']
    assert regular['need']['target_rate'] == pytest.approx(1.0)
    assert regular['limits']['max_target_rate']['proposed'] == 1.1
    assert regular['limits']['max_target_accel']['proposed'] is None   # nothing to propose
    p = propose_from_files(trace, robot, jitter=0.5, replay=True)
    hip = p.joints['hip']
    assert hip['need']['target_rate'] == pytest.approx(1.0)            # the need: as traced
    assert hip['limits']['max_target_rate']['proposed'] == 2.2         # 1 / (1 - 0.5) x 1.1
    # 1 * 2 * 0.5 / ((1 - 0.25) * 0.5 * 0.02) = 133.3 rad/s^2, x 1.1
    assert hip['limits']['max_target_accel']['proposed'] == pytest.approx(147.0)
    assert 'arriving 0.5 of a period late or early' in '\n'.join(p.table())


def test_torque_need_is_the_pd_torque_the_supervisor_checks(robot, tmp_path):
    """A measured effort smaller than the PD torque a target implies on arrival: the need is
    the PD torque (the supervisor refuses the target otherwise, issue 30)."""
    t = np.arange(11) * 0.02
    q = np.zeros((11, 3))
    target = q.copy()
    target[5:, 0] = 0.1                             # kp 100 x 0.1 rad = 10 N*m on arrival
    effort = np.zeros((11, 3))
    effort[:, 0] = 2.0                              # what the joint ended up making
    trace = save(tmp_path / 'tau.npz', time=t, joint_names=np.array(NAMES), q=q,
                 target_q=target, effort=effort)
    p = propose_from_files(trace, robot, replay=True)
    hip = p.joints['hip']
    assert hip['need']['torque'] == pytest.approx(10.0)
    assert hip['need']['torque_effort'] == pytest.approx(2.0)
    assert hip['need']['torque_source'].startswith('PD effort')
    assert hip['limits']['torque_limit']['proposed'] == 11.0
    assert all(r.clip_count == 0 for r in p.replay.values())


def test_replay_counts_the_clips_of_a_tight_limit(robot, tmp_path):
    """The replay check can fail: the same trace against a torque limit below its need."""
    from simreal_ros.core.config import load_node_params
    from simreal_ros.core.limits_replay import replay
    from simreal_ros.core.trace import load_trace
    t = np.arange(11) * 0.02
    q = np.zeros((11, 3))
    target = q.copy()
    target[5:, 0] = 0.1
    trace = load_trace(save(tmp_path / 'tau.npz', time=t, joint_names=np.array(NAMES), q=q,
                            target_q=target), robot=robot)
    params = load_node_params(robot, 'safety_supervisor')
    assert replay(params, trace).clean
    params['torque_limit'] = [5.0, 40.0, 40.0]
    result = replay(params, trace)
    assert not result.clean and result.clips['torque']['hip'] > 0 and result.changed_steps


def test_the_first_targets_step_from_the_held_pose_is_a_move(robot, tmp_path):
    """A trace whose first target is far from its first measured pose (a policy's first step
    from the MJCF's zero pose: the H1's left ankle, -0.07 -> -1.48 rad in 20 ms). The replay
    holds that pose for a period first, as the bring-up does, so the supervisor sees the step:
    the proposal must let it through. Counting moves only from the first target on, it
    proposed a rate the replay clipped."""
    from simreal_ros.core.config import load_node_params
    from simreal_ros.core.limits_replay import replay
    t = 0.02 + np.arange(50) * 0.02
    q = np.zeros((50, 3))
    target = np.zeros((50, 3))
    target[:, 1] = -0.6 + 0.001 * np.arange(50)       # ankle: -0.6 rad at once, then slowly
    path = save(tmp_path / 'first.npz', time=t, joint_names=np.array(NAMES), q=q,
                target_q=target)
    p = propose_from_files(path, robot, position_margin=0.1, jitter=0.0)
    assert p.joints['ankle']['need']['target_rate'] == pytest.approx(0.6 / 0.02, rel=1e-6)
    params = load_node_params(robot, 'safety_supervisor')
    for param, values in p.proposed_lists().items():
        params[param] = [old if v is None else v for old, v in zip(params[param], values)]
    result = replay(params, load_trace(path, robot=robot), 1.0, 0.0)
    assert 'max_target_rate' not in str(result.clips) and not result.clips.get('rate'), \
        result.summary()

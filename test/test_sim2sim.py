"""sim2sim for any robot (bench/sim2sim.py): the pieces without ROS processes. The reference
rollout (simreal_ros/reference_rollout.py) writes traces core/trace.py reads, and reproduces
unitree's G1 reference run; the action recovery from commands is exact; the reference's
timing, velocity command, start pose and fall height are read as docs/traces.md says."""
import numpy as np
import pytest

from conftest import REPO
from simreal_ros.core.config import ConfigError
from simreal_ros.core.observation import JointMap
from simreal_ros.core.sim2sim import (Setup, action_errors, check_timing, fall_height,
                                      initial_position, reference_command, reference_distance)
from simreal_ros.core.trace import load_trace, TraceError
from simreal_ros.core.onnx_policies import arm3 as arm3_policy, mlp
from simreal_ros.tools.reference_rollout import main as rollout_main, rollout

ARM3 = REPO / 'config' / 'robots' / 'arm3.yaml'
G1 = REPO / 'config' / 'robots' / 'g1_12dof.yaml'

# Three hinges hanging from the world: a motor with gear 2, a motor, and no actuator at all
# (qfrc_applied); the policy lists them in another order than the driver.
MJCF = """<mujoco model="sim2sim_test">
  <option timestep="0.002"/>
  <default><joint armature="0.01" damping="0.05"/></default>
  <worldbody>
    <body name="l1" pos="0 0 1">
      <joint name="hip" type="hinge" axis="0 1 0" range="-1.5 1.5"/>
      <geom type="capsule" size="0.03" fromto="0 0 0 0 0 -0.3" mass="1"/>
      <body name="l2" pos="0 0 -0.3">
        <joint name="knee" type="hinge" axis="0 1 0"/>
        <geom type="capsule" size="0.03" fromto="0 0 0 0 0 -0.2" mass="0.5"/>
        <body name="l3" pos="0 0 -0.2">
          <joint name="wrist" type="hinge" axis="1 0 0"/>
          <geom type="capsule" size="0.02" fromto="0 0 0 0 0 -0.15" mass="0.3"/>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="hip" joint="hip" gear="2"/>
    <motor name="knee" joint="knee"/>
  </actuator>
</mujoco>
"""
POLICY_ORDER = ['wrist', 'hip', 'knee']


def robot_file(tmp_path, clip=0.0):
    model = tmp_path / 'model.xml'
    model.write_text(MJCF)
    policy = mlp(str(tmp_path / 'policy.onnx'), [12, 16, 3], seed=5, output_gain=1.0)
    path = tmp_path / 'robot.yaml'
    path.write_text(f"""/**:
  ros__parameters:
    joint_names: [hip, knee, wrist]
    kp: [40.0, 20.0, 5.0]
    kd: [1.0, 0.5, 0.1]
/**/sim_robot:
  ros__parameters:
    model_path: {model}
    physics_dt: 0.002
    initial_position: [0.3, -0.2, 0.1]
/**/policy_runner:
  ros__parameters:
    policy_path: {policy}
    rate_hz: 50.0
    policy_joint_names: [{', '.join(POLICY_ORDER)}]
    default_position: [0.05, 0.1, -0.2]
    observation:
      terms: [joint_pos, joint_vel, last_action, velocity_command]
      joint_vel: {{scale: 0.1}}
      velocity_command: {{scale: [2.0, 2.0, 0.5]}}
    action:
      mode: position
      scale: [0.5, 0.25, 0.4]
      clip: {clip}
""")
    return path


def test_rollout_trace_is_read_back_and_its_targets_give_back_its_actions(tmp_path):
    robot = robot_file(tmp_path)
    out = tmp_path / 'ref.npz'
    assert rollout_main(['--robot', str(robot), '--out', str(out), '--steps', '60',
                         '--cmd-vel', '0.4', '-0.2', '0.3', '--no-hold']) == 0
    trace = load_trace(out, robot)
    assert trace.layout == 'simreal' and trace.n_samples == 60
    assert trace.names == ['hip', 'knee', 'wrist']          # the driver's order
    assert trace.policy_names == POLICY_ORDER
    assert trace.time[0] == 0.0 and np.allclose(np.diff(trace.time), 0.02)
    assert trace.sources['target'] == 'target_q in the trace'
    assert trace.sources['dq'] == 'dq in the trace'
    assert trace.obs.shape == (60, 12)
    assert trace.cmd_vel.shape == (60, 3) and np.all(trace.cmd_vel == [0.4, -0.2, 0.3])
    assert np.allclose(trace.q[0], [0.3, -0.2, 0.1]) and np.allclose(trace.initial_q, trace.q[0])
    assert np.abs(np.diff(trace.q, axis=0)).max() > 0.01       # it moves
    assert np.abs(trace.actions).max() > 0.1

    setup = Setup.read(robot)
    assert (setup.decimation, setup.floating_base, setup.base0) == (10, False, None)
    recovered = np.array([setup.recover_actions(trace.names, row) for row in trace.target])
    assert np.abs(recovered - trace.actions).max() < 1e-12
    assert action_errors(recovered, trace.actions).max() < 1e-12
    # the first sample is at t = 0: no hold, sim_robot starts at the reference's first pose
    assert check_timing(trace, setup.period) == 0
    start, source, notes = initial_position(setup, trace, 0)
    assert np.allclose(start, [0.3, -0.2, 0.1]) and 'first sample' in source and not notes
    cmd, source = reference_command(trace, robot)
    assert np.all(cmd == [0.4, -0.2, 0.3]) and source == 'cmd_vel in the trace'
    assert reference_command(trace, robot, [0.1, 0, 0])[1] == '--cmd-vel'
    assert fall_height(setup, trace) == (None, 'fixed base: no fall')
    assert reference_distance(setup, trace, 60) is None


def test_command_decoded_from_obs_and_a_held_start(tmp_path):
    robot = robot_file(tmp_path)
    arrays = rollout(robot, steps=20, cmd_vel=[0.5, 0.0, -0.4])      # holds one period first
    del arrays['cmd_vel']
    np.savez(tmp_path / 'ref.npz', **arrays)
    trace = load_trace(tmp_path / 'ref.npz', robot)
    assert trace.cmd_vel is None and trace.time[0] == pytest.approx(0.02)
    cmd, source = reference_command(trace, robot)
    assert cmd == pytest.approx([0.5, 0.0, -0.4]) and source.startswith('obs: the velocity_comm')
    setup = Setup.read(robot)
    assert check_timing(trace, setup.period) == 1
    start, source, _ = initial_position(setup, trace, 1)
    assert np.allclose(start, [0.3, -0.2, 0.1]) and source == 'initial_q in the trace'
    # a trace at another rate than the policy's, or not starting on a period, is refused
    arrays['time'] = arrays['time'] * 0.5
    np.savez(tmp_path / 'fast.npz', **arrays)
    with pytest.raises(ConfigError, match='sample every 0.01 s.*runs every 0.02 s'):
        check_timing(load_trace(tmp_path / 'fast.npz', robot), setup.period)
    arrays['time'] = arrays['time'] * 2 + 0.005
    np.savez(tmp_path / 'late.npz', **arrays)
    with pytest.raises(ConfigError, match='not a whole number of control periods'):
        check_timing(load_trace(tmp_path / 'late.npz', robot), setup.period)


def test_action_recovery_is_exact_by_name_and_compares_clipped_actions(tmp_path):
    robot = robot_file(tmp_path, clip=1.0)
    setup = Setup.read(robot)
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1.5, 1.5, (200, 3))
    jmap = JointMap(POLICY_ORDER, ['hip', 'knee', 'wrist'])
    targets = np.array([jmap.to_command(setup.processor.process(a)) for a in actions])
    # a command names the joints in its own order: shuffled columns, matched by name
    names = ['knee', 'wrist', 'hip']
    cols = [jmap.command_names.index(n) for n in names]
    recovered = np.array([setup.recover_actions(names, row[cols]) for row in targets])
    inside = np.abs(actions) <= 1.0
    assert np.abs(recovered[inside] - actions[inside]).max() < 1e-12
    assert np.all(np.abs(recovered[~inside]) == pytest.approx(1.0))   # clipped: comes back +-1
    assert action_errors(recovered, actions, clip=1.0).max() < 1e-12
    assert action_errors(recovered, actions).max() > 0.4                # unclipped: differs
    with pytest.raises(ValueError, match=r"lacks the policy joint\(s\) \['hip'\]"):
        setup.recover_actions(['knee', 'wrist'], [0.0, 0.0])


def test_trace_cmd_vel_and_base_pose_keys(tmp_path):
    robot = robot_file(tmp_path)
    t = 0.02 * np.arange(1, 6)
    good = dict(time=t, joint_names=np.array(['hip']), q=np.zeros((5, 1)),
                base_qpos=np.tile([0, 0, 0.8, 1, 0, 0, 0], (5, 1)))
    np.savez(tmp_path / 'a.npz', cmd_vel=np.array([0.3, 0.0, 0.1]), **good)
    trace = load_trace(tmp_path / 'a.npz', robot)
    assert trace.cmd_vel.shape == (5, 3) and trace.base_qpos[0, 2] == 0.8
    np.savez(tmp_path / 'b.npz', cmd_vel=np.zeros((5, 2)), **good)
    with pytest.raises(TraceError, match='shape mismatch: cmd_vel'):
        load_trace(tmp_path / 'b.npz', robot)
    varying = np.zeros((5, 3))
    varying[3, 0] = 0.2
    np.savez(tmp_path / 'c.npz', cmd_vel=varying, **good)
    with pytest.raises(ConfigError, match='cmd_vel changes during the run'):
        reference_command(load_trace(tmp_path / 'c.npz', robot), robot)
    setup = Setup.read(robot)
    assert fall_height(setup, trace, 0.3) == (0.3, '--fall-z')


def test_arm3_rollout_with_its_stand_in_policy(tmp_path):
    policy = arm3_policy(str(tmp_path / 'arm3_policy.onnx'))
    arrays = rollout(ARM3, policy, steps=30, cmd_vel=[0.8, -0.5, 0.6], hold=False,
                     initial_position=[0.4, -0.5, 0.7])
    np.savez(tmp_path / 'arm3.npz', **arrays)
    trace = load_trace(tmp_path / 'arm3.npz', ARM3)
    setup = Setup.read(ARM3, policy)
    assert setup.period == pytest.approx(0.01) and setup.decimation == 10
    assert check_timing(trace, setup.period) == 0
    assert np.allclose(trace.q[0], [0.4, -0.5, 0.7])
    assert np.abs(trace.q[-1] - trace.q[0]).max() > 0.2      # swung towards the default pose


def test_rollout_reproduces_unitree_g1_reference(g1_dir):
    """The loop is unitree's deploy_mujoco for the G1: its actions are the reference's."""
    ref = np.load(g1_dir / 'reference_trace.npz')
    arrays = rollout(G1, g1_dir / 'policy.onnx', steps=100, cmd_vel=[0.5, 0.0, 0.0])
    assert np.allclose(arrays['time'], ref['time'][:100], atol=1e-12)
    assert np.abs(arrays['actions'] - ref['actions'][:100]).max() <= 1e-6
    assert np.abs(arrays['base_qpos'] - ref['qpos'][:100, :7]).max() <= 1e-9
    setup = Setup.read(G1, g1_dir / 'policy.onnx')
    assert setup.floating_base and setup.base0 == pytest.approx([0, 0, 0.793])
    trace = load_trace(g1_dir / 'reference_trace.npz', G1)
    cmd, source = reference_command(trace, G1)      # unitree's trace has no cmd_vel key
    assert cmd == pytest.approx([0.5, 0, 0]) and 'velocity_command term (columns 6-8)' in source
    z, source = fall_height(setup, trace)
    assert z == pytest.approx(0.6 * ref['qpos'][0, 2]) and 'first base height' in source
    assert reference_distance(setup, trace, 1000) == pytest.approx(
        np.hypot(*ref['qpos'][-1, :2]))


@pytest.mark.ros
def test_arm3_lockstep_through_the_ros_path_matches_its_rollout(tmp_path):
    """bench/sim2sim.py end to end on a fixed-base robot: sim_robot and policy_runner processes
    (no supervisor), a reference from the plain MuJoCo loop starting mid-swing at t = 0."""
    import json
    import os
    import subprocess
    import sys
    policy = arm3_policy(str(tmp_path / 'arm3_policy.onnx'))
    ref = tmp_path / 'swing.npz'
    np.savez(ref, **rollout(ARM3, policy, steps=200, cmd_vel=[0.8, -0.5, 0.6], hold=False,
                            initial_position=[0.4, -0.5, 0.7]))
    proc = subprocess.run([sys.executable, str(REPO / 'bench' / 'sim2sim.py'), '--robot',
                           str(ARM3), '--policy', policy, '--reference', str(ref),
                           '--supervisor', 'off', '--strict'],
                          capture_output=True, text=True, timeout=240, cwd=REPO,
                          env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary['steps'] == 200 and summary['hold_periods'] == 0
    assert summary['max_action_err'] <= 1e-6, summary
    assert summary['stamps_match_reference']
    assert summary['states_compared'] > 100 and summary['max_q_err'] <= 1e-9, summary
    assert summary['cmd_vel'] == [0.8, -0.5, 0.6]
    assert summary['cmd_vel_source'] == 'cmd_vel in the trace'
    assert summary['fell'] is None and summary['distance_m'] is None

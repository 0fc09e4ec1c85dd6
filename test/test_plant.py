"""The embedded robot's physics: the hidden truth is really in the simulation."""
import numpy as np
import pytest

from simreal_ros.core.config import ConfigError, load_node_params, resolve_path
from simreal_ros.core.plant import PlantTruth, SimPlant

ARM = 'config/robots/arm3.yaml'
NAMES = ['shoulder_yaw', 'shoulder_pitch', 'elbow_pitch']


def arm_plant(**truth_overrides):
    params = load_node_params(resolve_path(ARM), 'sim_robot')
    plant = {k[len('plant.'):]: v for k, v in params.items() if k.startswith('plant.')}
    plant.update(truth_overrides)
    truth = PlantTruth.from_mapping(plant, 3)
    return SimPlant(resolve_path(params['model_path']), params['joint_names'],
                    params['physics_dt'], params['kp'], params['kd'], truth=truth,
                    command_timeout=10.0), truth


def hold_others_and_push(plant, torque, seconds):
    """Push shoulder_yaw (no gravity load) with a constant torque, others held at 0."""
    for _ in range(int(seconds / 0.01)):
        plant.submit(plant.make_command(['shoulder_yaw'], effort=[torque]))
        plant.submit(plant.make_command(['shoulder_pitch', 'elbow_pitch'], position=[0, 0]))
        plant.step(10)


def test_torque_below_coulomb_friction_does_not_move_a_joint_at_rest():
    plant, truth = arm_plant(noise_position=0.0)
    hold_others_and_push(plant, 0.8 * truth.coulomb_friction[0], 2.0)
    assert abs(plant.measure().position[0]) < 5e-3


def test_torque_above_coulomb_friction_moves_at_the_viscous_speed():
    plant, truth = arm_plant()
    torque = truth.coulomb_friction[0] + 0.4
    hold_others_and_push(plant, torque, 3.0)
    expected = (torque - truth.coulomb_friction[0]) / truth.viscous_damping[0]
    assert plant.measure(with_noise=False).velocity[0] == pytest.approx(expected, rel=0.02)


def test_armature_adds_to_the_link_inertia_the_joint_accelerates():
    import mujoco
    plant, truth = arm_plant(coulomb_friction=[0, 0, 0], viscous_damping=[0, 0, 0],
                             latency_s=0.0)
    full = np.zeros((plant.model.nv, plant.model.nv))
    mujoco.mj_fullM(plant.model, plant.data, full)
    inertia = full[0, 0]  # includes the armature MuJoCo adds to the diagonal
    assert inertia == pytest.approx(truth.armature[0] + 0.0052, rel=0.05)
    hold_others_and_push(plant, 1.0, 0.05)
    assert plant.measure(False).velocity[0] == pytest.approx(1.0 * 0.05 / inertia, rel=0.03)


def test_latency_delays_the_command_by_a_fraction_of_a_physics_step():
    def first_motion(latency):
        plant, _ = arm_plant(latency_s=latency, coulomb_friction=[0, 0, 0])
        plant.submit(plant.make_command(NAMES, effort=[5.0, 0, 0]))
        trace = []
        for _ in range(40):
            plant.step(1)
            trace.append(plant.measure(False).velocity[0])
        return np.array(trace)
    base = first_motion(0.002)
    later = first_motion(0.0025)
    # Half a step later: the velocity trace sits between the same trace shifted by 0 and 1 step.
    assert np.all(later[5:] < base[5:]) and np.all(later[5:] > base[4:-1])


def test_applied_torque_is_clipped_to_the_true_limit_and_reported_as_effort():
    plant, truth = arm_plant(noise_effort=0.0)
    plant.submit(plant.make_command(NAMES, effort=[100.0, 0.0, -100.0]))
    plant.step(5)
    effort = plant.measure().effort
    assert effort[0] == pytest.approx(truth.torque_limit[0])
    assert effort[2] == pytest.approx(-truth.torque_limit[2])


def test_position_command_moves_the_joint_to_its_target():
    plant, _ = arm_plant()
    for _ in range(200):
        plant.submit(plant.make_command(NAMES, position=[0.5, 0.3, -0.4]))
        plant.step(10)
    np.testing.assert_allclose(plant.measure(False).position, [0.5, 0.3, -0.4], atol=0.05)


def test_stale_command_falls_back_to_damping():
    plant, _ = arm_plant()
    plant.command_timeout = 0.05
    plant.submit(plant.make_command(NAMES, effort=[3.0, 0, 0]))
    plant.step(1000)
    assert plant.timeouts == 3
    assert abs(plant.measure(False).velocity[0]) < 0.05
    assert plant.measure(False).effort[0] == pytest.approx(0.0, abs=0.5)


def test_a_joint_left_out_of_the_commands_is_damped_alone_after_the_timeout():
    # docs/real_robot.md, driver rule 1: a stale per-joint target never stays in force.
    plant, _ = arm_plant()
    plant.command_timeout = 0.05
    plant.submit(plant.make_command(NAMES, position=[0.0, 0.0, 0.6]))
    plant.step(10)
    for _ in range(100):          # the elbow is no longer named
        plant.submit(plant.make_command(NAMES[:2], position=[0.0, 0.0]))
        plant.step(10)
    assert plant.timeouts == 1 and not plant.damped
    active = plant._active
    assert np.isnan(active.position[2]) and np.isfinite(active.position[:2]).all()


@pytest.mark.parametrize('kwargs, message', [
    (dict(names=['nope']), 'unknown joint name'),
    (dict(names=['shoulder_yaw'], position=[0.1, 0.2]), 'position has 2 values for 1 names'),
    (dict(names=['shoulder_yaw'], position=[float('nan')]), 'non-finite'),
    (dict(names=['shoulder_yaw']), 'no position, velocity or effort'),
    (dict(names=['shoulder_yaw', 'shoulder_yaw'], effort=[1, 1]), 'duplicate'),
])
def test_malformed_commands_are_rejected_with_a_reason(kwargs, message):
    plant, _ = arm_plant()
    with pytest.raises(ValueError, match=message):
        plant.make_command(**kwargs)


def test_plant_section_errors_name_the_parameter():
    with pytest.raises(ConfigError, match='plant.armature has 2 values for 3 joints'):
        PlantTruth.from_mapping(dict(coulomb_friction=[1] * 3, viscous_damping=[1] * 3,
                                     armature=[1, 2], torque_limit=[1] * 3), 3)
    with pytest.raises(ConfigError, match='latency_s must be finite and >= 0'):
        PlantTruth.from_mapping(dict(coulomb_friction=1, viscous_damping=1, armature=1,
                                     torque_limit=1, latency_s=-1), 3)


def test_unknown_joint_in_config_is_named_with_the_model_joints():
    with pytest.raises(ConfigError, match=r"\['elbow_roll'\] not in .*arm3.xml.*shoulder_yaw"):
        SimPlant(resolve_path('models/arm3/arm3.xml'), ['elbow_roll'], 0.001, [1], [1])


def test_g1_model_loads_with_a_floating_base_and_imu(g1_dir):
    params = load_node_params(resolve_path('config/robots/g1_12dof.yaml'), 'sim_robot')
    plant = SimPlant(resolve_path(params['model_path']), params['joint_names'],
                     params['physics_dt'], params['kp'], params['kd'])
    assert plant.floating_base and plant.n == 12
    # Released in the air: free fall, so the accelerometer (proper acceleration) reads ~0 ...
    assert np.linalg.norm(plant.measure().linear_acceleration) < 0.1
    # ... and standing on the floor, held by the PD at the default pose, it reads ~g upwards.
    for _ in range(300):
        plant.submit(plant.make_command(plant.names, position=[-0.1, 0, 0, 0.3, -0.2, 0] * 2))
        plant.step(1)
    reading = plant.measure()
    assert 7.0 < reading.linear_acceleration[2] < 12.0
    assert reading.orientation.shape == (4,) and reading.base_position[2] > 0.6


def test_a_hung_g1_keeps_its_base_while_its_legs_move_and_drops_when_lowered(g1_dir):
    params = load_node_params(resolve_path('config/robots/g1_12dof.yaml'), 'sim_robot')
    plant = SimPlant(resolve_path(params['model_path']), params['joint_names'],
                     params['physics_dt'], params['kp'], params['kd'])
    plant.hang(True)
    base = plant.measure().base_position.copy()
    bent = [-0.4, 0, 0, 0.8, -0.4, 0] * 2
    for _ in range(500):          # 1 s: knees bent, hanging
        plant.submit(plant.make_command(plant.names, position=bent))
        plant.step(1)
    reading = plant.measure()
    assert np.allclose(reading.base_position, base)
    assert reading.position[3] == pytest.approx(0.8, abs=0.1)    # the legs did move
    plant.hang(False)
    for _ in range(250):
        plant.submit(plant.make_command(plant.names, position=bent))
        plant.step(1)
    assert plant.measure().base_position[2] < base[2] - 0.02      # lowered: it drops


def test_a_hanging_leg_swung_into_the_other_is_counted_as_self_contact(g1_dir):
    """The G1's left hip roll inside its soft limit (-0.47 rad) but past -0.37 rad puts its
    knee on the right knee (other joints at the gantry hold): counted with the body pair, and
    not counted at -0.15 rad, nor for the feet on the floor of a standing robot."""
    params = load_node_params(resolve_path('config/robots/g1_12dof.yaml'), 'sim_robot')
    model = resolve_path(params['model_path'])

    def swing(roll, lift=0.3):
        plant = SimPlant(model, params['joint_names'], 0.001, params['kp'], params['kd'],
                         fixed_base_lift=lift)
        pose = [-0.1, roll, 0, 0.6, -0.2, 0, -0.1, 0, 0, 0.6, -0.2, 0]
        for _ in range(1000):
            plant.submit(plant.make_command(plant.names, position=pose))
            plant.step(1)
        return plant

    apart = swing(-0.15)
    assert apart.self_contact_steps == 0 and not apart.self_contact_pairs
    touching = swing(-0.45)
    assert touching.self_contact_steps > 50
    assert touching.self_contact_pairs == {('left_knee_link', 'right_knee_link')}
    standing = SimPlant(model, params['joint_names'], 0.001, params['kp'], params['kd'])
    for _ in range(300):
        standing.submit(standing.make_command(standing.names,
                                              position=[-0.1, 0, 0, 0.3, -0.2, 0] * 2))
        standing.step(1)
    assert standing.data.ncon > 0 and standing.self_contact_steps == 0

"""Observation builder: term order, scale, clip, history, joint mapping by name, messages."""
import math

import numpy as np
import pytest

from simreal_ros.core.config import ConfigError
from simreal_ros.core.observation import (Inputs, JointMap, ObservationBuilder,
                                          projected_gravity)

NAMES = ['a', 'b', 'c']


def build(params, default=(0.0, 0.0, 0.0)):
    return ObservationBuilder.from_params(params, 3, np.array(default))


def inputs(t=0.0, q=(0.1, 0.2, 0.3), dq=(1.0, -2.0, 3.0), **kw):
    return Inputs(t, np.array(q), np.array(dq), **kw)


def test_terms_in_order_with_scale_and_default_pose():
    b = build({'observation.terms': ['joint_vel', 'joint_pos', 'velocity_command', 'k'],
               'observation.joint_vel.scale': [1.0, 10.0, 100.0],
               'observation.velocity_command.default': [0.5, 0.0, 0.0],
               'observation.velocity_command.scale': [2.0, 2.0, 0.25],
               'observation.k.kind': 'constant', 'observation.k.value': [7.0]},
              default=(0.1, 0.0, -0.3))
    assert b.size == 3 + 3 + 3 + 1
    obs = b.build(inputs())
    np.testing.assert_allclose(obs, [1, -20, 300, 0, 0.2, 0.6, 1.0, 0, 0, 7])
    obs = b.build(inputs(command=np.array([1.0, -1.0, 2.0])))
    np.testing.assert_allclose(obs[6:9], [2.0, -2.0, 0.5])


def test_clip_then_scale_counts_clipped_elements_and_final_clip():
    b = build({'observation.terms': ['joint_vel'], 'observation.joint_vel.clip': 2.5,
               'observation.joint_vel.scale': 2.0, 'observation.clip': 4.0})
    obs = b.build(inputs(dq=(1.0, -3.0, 3.0)))
    np.testing.assert_allclose(obs, [2.0, -4.0, 4.0])   # term clip 2.5 -> *2 = 5 -> final 4
    assert b.clipped == 2 + 2


def test_history_stacks_oldest_first_and_reset_refills():
    b = build({'observation.terms': ['joint_pos'], 'observation.joint_pos.history': 3})
    assert b.size == 9
    first = b.build(inputs(q=(1, 1, 1)))
    np.testing.assert_allclose(first, [1] * 9)   # filled with the first sample
    b.build(inputs(q=(2, 2, 2)))
    obs = b.build(inputs(q=(3, 3, 3)))
    np.testing.assert_allclose(obs, [1, 1, 1, 2, 2, 2, 3, 3, 3])
    b.reset()
    np.testing.assert_allclose(b.build(inputs(q=(5, 5, 5))), [5] * 9)


def test_gait_phase_and_last_action_and_imu_terms():
    b = build({'observation.terms': ['gait_phase', 'last_action', 'projected_gravity',
                                     'base_ang_vel'],
               'observation.gait_phase.period_s': 0.8})
    quat = np.array([math.cos(0.2), math.sin(0.2), 0.0, 0.0])   # roll 0.4 rad
    b.set_last_action([0.5, 0.6, 0.7])
    obs = b.build(inputs(t=0.2, orientation=quat, angular_velocity=np.array([1.0, 2, 3])))
    np.testing.assert_allclose(obs[:2], [1.0, 0.0], atol=1e-12)   # a quarter period
    np.testing.assert_allclose(obs[2:5], [0.5, 0.6, 0.7])
    np.testing.assert_allclose(obs[5:8], [0.0, -math.sin(0.4), -math.cos(0.4)], atol=1e-12)
    np.testing.assert_allclose(obs[8:], [1, 2, 3])
    np.testing.assert_allclose(projected_gravity([1, 0, 0, 0]), [0, 0, -1])
    with pytest.raises(ValueError, match='Imu'):
        b.build(inputs(t=0.2))


def test_unknown_kind_and_missing_constant_are_config_errors():
    with pytest.raises(ConfigError, match="kind is 'joint_position'"):
        build({'observation.terms': ['joint_position']})
    with pytest.raises(ConfigError, match='value is not set'):
        build({'observation.terms': ['k'], 'observation.k.kind': 'constant'})
    with pytest.raises(ConfigError, match='expected 1 or 3 values'):
        build({'observation.terms': ['joint_pos'], 'observation.joint_pos.scale': [1, 2]})


def test_length_mismatch_message_lists_terms_and_sizes():
    b = build({'observation.terms': ['joint_pos', 'joint_vel', 'gait_phase']})
    with pytest.raises(ConfigError) as err:
        b.check_length(47, "'obs' of policy.onnx")
    text = str(err.value)
    assert 'observation length 8' in text and 'length 47' in text
    assert 'joint_pos (joint_pos): 3 = 3' in text and 'gait_phase (gait_phase): 2 = 2' in text


def test_joint_map_by_name_and_missing_joints_named():
    m = JointMap(['c', 'a'], ['a', 'b', 'c'])
    np.testing.assert_allclose(m.to_policy(['b', 'c', 'a'], [2.0, 3.0, 1.0]), [3.0, 1.0])
    assert m.command_names == ['a', 'c']
    np.testing.assert_allclose(m.to_command([30.0, 10.0]), [10.0, 30.0])
    with pytest.raises(ConfigError, match=r"\['x', 'y'\] are not among the driver"):
        JointMap(['a', 'x', 'y'], ['a', 'b'])
    with pytest.raises(ValueError, match=r"lacks the policy joint\(s\) \['c'\]"):
        m.to_policy(['a', 'b'], [1.0, 2.0])


def test_joint_states_naming_a_joint_twice_is_refused():
    m = JointMap(['c', 'a'], ['a', 'b', 'c'])
    with pytest.raises(ValueError, match=r"names \['a'\] more than once"):
        m.to_policy(['a', 'b', 'c', 'a'], [1.0, 2.0, 3.0, 4.0])
    np.testing.assert_allclose(m.to_policy(['a', 'b', 'c'], [1.0, 2.0, 3.0]), [3.0, 1.0])


def test_builder_says_whether_it_needs_velocities():
    assert build({'observation.terms': ['joint_pos', 'joint_vel']}).needs_velocity
    assert not build({'observation.terms': ['joint_pos']}).needs_velocity

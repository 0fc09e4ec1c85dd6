"""unitree_bridge's decisions without ROS or DDS (simreal_ros/core/unitree_bridge.py): each
rule of when it sends what, with a test that fails if the rule is removed."""
import numpy as np
import pytest

from simreal_ros.core import unitree
from simreal_ros.core.config import ConfigError
from simreal_ros.core.unitree_bridge import BridgeConfig, BridgeCore

NAMES = ['hip', 'knee', 'ankle']


def config(**kw):
    base = dict(interface='unitree_hg', joint_names=list(NAMES), motor_index=[4, 5, 6],
                kp=[100.0, 150.0, 40.0], kd=[2.0, 4.0, 2.0], damping_kd=[3.0, 3.0, 3.0],
                held_index=[12, 13], held_position=[0.1, -0.2], held_kp=[300.0, 200.0],
                held_kd=[5.0, 4.0], command_timeout=0.1, state_timeout=0.05)
    base.update(kw)
    return BridgeConfig(**base)


def state(mode_machine=5, buttons=(), q=(0.1, 0.2, 0.3), tick=0):
    rec = unitree.new('unitree_hg', 'LowState_')
    rec['mode_machine'] = mode_machine
    rec['tick'] = tick
    rec['motor_state']['q'][[4, 5, 6]] = q
    rec['imu_state']['quaternion'] = (1.0, 0.0, 0.0, 0.0)
    rec['wireless_remote'] = unitree.remote_bytes(buttons)
    unitree.stamp_crc(rec)
    return rec


def live(core, now=1.0):
    """A bridge with fresh state, heartbeat and a position command."""
    core.take_state(state(), now)
    core.beat(now)
    core.command(NAMES, [0.5, -0.5, 0.25], (), (), now)
    return core


def motors(out, idx, field):
    return out['motor_cmd'][field][idx].astype(float)


def test_nothing_is_sent_before_the_first_lowstate():
    core = BridgeCore(config())
    core.beat(0.0)
    core.command(NAMES, [0.5, 0.5, 0.5], (), (), 0.0)
    out, cause = core.compose(0.0)
    assert out is None and 'LowState_' in cause
    assert core.damping() is None


def test_a_fresh_position_command_goes_out_with_the_robot_files_gains_and_a_good_crc():
    core = live(BridgeCore(config()))
    out, cause = core.compose(1.001)
    assert cause == 'commanded'
    assert motors(out, [4, 5, 6], 'q') == pytest.approx([0.5, -0.5, 0.25])
    assert motors(out, [4, 5, 6], 'kp') == pytest.approx([100.0, 150.0, 40.0])
    assert motors(out, [4, 5, 6], 'kd') == pytest.approx([2.0, 4.0, 2.0])
    assert motors(out, [4, 5, 6], 'dq') == pytest.approx([0.0] * 3)
    assert list(out['motor_cmd']['mode'][[4, 5, 6, 12, 13]]) == [1] * 5
    assert out['motor_cmd']['mode'][0] == 0          # not ours: left disabled
    assert unitree.crc_ok(out)


def test_mode_machine_is_copied_from_the_latest_lowstate():
    core = live(BridgeCore(config()))
    core.take_state(state(mode_machine=6), 1.002)
    out, _ = core.compose(1.003)
    assert out['mode_machine'] == 6 and unitree.crc_ok(out)


def test_velocity_without_position_is_damping_and_effort_is_feed_forward():
    core = live(BridgeCore(config()))
    core.command(NAMES, (), [0.0, 0.0, 0.0], [1.0, 2.0, 3.0], 1.001)
    out, _ = core.compose(1.002)
    assert motors(out, [4, 5, 6], 'kp') == pytest.approx([0.0] * 3)
    assert motors(out, [4, 5, 6], 'kd') == pytest.approx([2.0, 4.0, 2.0])
    assert motors(out, [4, 5, 6], 'tau') == pytest.approx([1.0, 2.0, 3.0])


def test_held_motors_hold_their_pose_and_are_damped_with_the_rest():
    core = live(BridgeCore(config()))
    out, _ = core.compose(1.001)
    assert motors(out, [12, 13], 'q') == pytest.approx([0.1, -0.2])
    assert motors(out, [12, 13], 'kp') == pytest.approx([300.0, 200.0])
    assert motors(out, [12, 13], 'kd') == pytest.approx([5.0, 4.0])
    out, cause = core.compose(1.2)          # everything silent
    assert cause != 'commanded'
    assert motors(out, [12, 13], 'kp') == pytest.approx([0.0, 0.0])
    assert motors(out, [12, 13], 'kd') == pytest.approx([5.0, 4.0])


def assert_damping(out):
    assert motors(out, [4, 5, 6], 'kp') == pytest.approx([0.0] * 3)
    assert motors(out, [4, 5, 6], 'kd') == pytest.approx([3.0] * 3)   # damping_kd
    assert motors(out, [4, 5, 6], 'q') == pytest.approx([0.0] * 3)
    assert motors(out, [4, 5, 6], 'tau') == pytest.approx([0.0] * 3)
    assert unitree.crc_ok(out)


def test_a_stale_lowstate_gives_damping_not_the_last_target():
    core = live(BridgeCore(config()))
    core.beat(1.06)
    core.command(NAMES, [0.5, -0.5, 0.25], (), (), 1.06)
    out, cause = core.compose(1.06)          # state 60 ms old, timeout 50 ms
    assert 'LowState_' in cause
    assert_damping(out)
    core.take_state(state(), 1.061)          # the robot is back: the command goes out again
    out, cause = core.compose(1.062)
    assert cause == 'commanded'


def test_a_lowstate_with_a_bad_crc_is_not_used():
    core = live(BridgeCore(config()))
    bad = state(q=(9.0, 9.0, 9.0))
    bad['crc'] ^= 1
    assert core.take_state(bad, 1.01) is None
    assert core.counters['lowstate_bad_crc'] == 1
    assert core.joint_state()[0] == pytest.approx([0.1, 0.2, 0.3])
    out, cause = core.compose(1.07)          # the bad one did not refresh the state
    assert 'LowState_' in cause


def test_a_silent_heartbeat_gives_damping_even_with_fresh_commands():
    core = live(BridgeCore(config()))
    core.take_state(state(), 1.15)
    core.command(NAMES, [0.5, -0.5, 0.25], (), (), 1.15)
    out, cause = core.compose(1.15)          # heartbeat 150 ms old, timeout 100 ms
    assert 'heartbeat' in cause
    assert_damping(out)


def test_commands_are_not_obeyed_before_a_heartbeat_unless_configured():
    core = BridgeCore(config())
    core.take_state(state(), 1.0)
    core.command(NAMES, [0.5, -0.5, 0.25], (), (), 1.0)
    out, cause = core.compose(1.0)
    assert 'heartbeat' in cause
    assert_damping(out)
    core = BridgeCore(config(require_heartbeat=False))
    core.take_state(state(), 1.0)
    core.command(NAMES, [0.5, -0.5, 0.25], (), (), 1.0)
    assert core.compose(1.0)[1] == 'commanded'


def test_a_joint_whose_command_stopped_is_damped_alone():
    core = live(BridgeCore(config()))
    core.take_state(state(), 1.15)
    core.beat(1.15)
    core.command(['hip', 'knee'], [0.5, -0.5], (), (), 1.15)   # ankle's is 150 ms old
    out, cause = core.compose(1.15)
    assert cause == 'commanded'
    assert motors(out, [4, 5], 'kp') == pytest.approx([100.0, 150.0])
    assert motors(out, [6], 'kp') == pytest.approx([0.0])
    assert motors(out, [6], 'kd') == pytest.approx([3.0])
    core.take_state(state(), 1.30)
    core.beat(1.30)
    out, cause = core.compose(1.30)          # every joint's command stale
    assert 'hardware/command' in cause
    assert_damping(out)


@pytest.mark.parametrize('names,position,match', [
    (['hip', 'wrist', 'knee'], [0, 0, 0], 'unknown joint name'),
    (['hip', 'hip', 'knee'], [0, 0, 0], 'duplicate joint names'),
    (['hip', 'knee', 'ankle'], [0, np.nan, 0], 'non-finite'),
    (['hip', 'knee', 'ankle'], [0, 0], '2 values for 3'),
    ([], [], 'no joints'),
])
def test_a_malformed_command_is_refused_and_changes_nothing(names, position, match):
    core = live(BridgeCore(config()))
    before = core.q.copy()
    with pytest.raises(ValueError, match=match):
        core.command(names, position, (), (), 1.01)
    assert np.array_equal(core.q, before)


def test_the_remote_estop_latches_damping_until_a_reset_is_accepted():
    core = live(BridgeCore(config()))          # defaults: select e-stops, start resets
    assert core.take_state(state(buttons=['select']), 1.01) == 'estop'
    assert core.take_state(state(buttons=['select']), 1.012) is None   # held: one event
    core.beat(1.013)
    core.command(NAMES, [0.5, -0.5, 0.25], (), (), 1.013)
    out, cause = core.compose(1.013)
    assert cause == 'remote e-stop'
    assert_damping(out)
    core.take_state(state(), 1.014)          # released: still latched
    assert core.compose(1.015)[1] == 'remote e-stop'
    assert core.take_state(state(buttons=['start']), 1.016) == 'reset'
    assert core.compose(1.017)[1] == 'remote e-stop'    # until the supervisor accepts
    core.clear_remote()
    assert core.compose(1.018)[1] == 'commanded'
    assert core.counters['remote_estops'] == 1 and core.counters['remote_resets'] == 1


def test_a_combination_needs_all_its_buttons_and_both_at_once_is_an_estop():
    core = live(BridgeCore(config(estop_buttons=('L2', 'R2'), reset_buttons=('L2', 'A'))))
    assert core.take_state(state(buttons=['R2']), 1.005) is None
    assert not core.remote_latched
    assert core.take_state(state(buttons=['L2', 'R2', 'A']), 1.01) == 'estop'


@pytest.mark.parametrize('change,match', [
    (dict(motor_index=[4, 5]), 'motor_indices has 2 values'),
    (dict(held_index=[12, 6], held_position=[0, 0], held_kp=[1, 1], held_kd=[1, 1]),
     'distinct'),
    (dict(motor_index=[4, 5, 40]), r'0\.\.34'),
    (dict(damping_kd=[3.0, 0.0, 3.0]), 'damping_kd must be > 0'),
    (dict(held_kp=[1.0]), 'held_kp has 1 values for 2'),
    (dict(estop_buttons=('L2', 'Z9')), 'unknown button'),
    (dict(estop_buttons=('A', 'L2'), reset_buttons=('L2', 'A')), 'same buttons'),
    (dict(interface='unitree_xx'), 'interface'),
    (dict(kd=[2.0, -1.0, 2.0]), 'negative'),
])
def test_an_inconsistent_configuration_is_refused_by_name(change, match):
    with pytest.raises(ConfigError, match=match):
        BridgeCore(config(**change))


def test_unitree_go_commands_keep_the_vendors_stop_markers_on_unused_motors():
    core = BridgeCore(config(interface='unitree_go'))
    rec = unitree.new('unitree_go', 'LowState_')
    rec['motor_state']['q'][[4, 5, 6]] = (0.1, 0.2, 0.3)
    unitree.stamp_crc(rec)
    core.take_state(rec, 1.0)
    core.beat(1.0)
    core.command(NAMES, [0.5, -0.5, 0.25], (), (), 1.0)
    out, cause = core.compose(1.0)
    assert cause == 'commanded' and unitree.crc_ok(out)
    assert out['motor_cmd']['q'][0] == pytest.approx(unitree.GO_POS_STOP)
    assert tuple(out['head']) == unitree.GO_HEAD


# -- who is on the other side (unitree.peer) and where to find it (issue 31) ---------------
def vendor_state():
    """A LowState_ as the vendor's simulator publishes it: crc, mode_machine and tick 0."""
    rec = state(mode_machine=0)
    rec['crc'] = 0
    return rec


def test_a_robots_lowstate_without_a_crc_is_rejected_and_the_cause_names_the_peer_setting():
    core = BridgeCore(config())
    assert core.take_state(vendor_state(), 1.0) is None
    assert core.state is None and core.counters['lowstate_bad_crc'] == 1
    out, cause = core.compose(1.0)
    assert out is None and 'unitree.peer' in cause and '1 rejected' in cause


def test_a_simulator_peers_zero_crc_is_accepted_and_counted():
    core = BridgeCore(config(peer='simulator'))
    core.take_state(vendor_state(), 1.0)
    core.take_state(vendor_state(), 1.001)
    assert core.state is not None and core.counters['lowstate'] == 2
    assert core.counters['lowstate_crc_unset'] == 2
    assert core.counters['lowstate_mode_machine_unset'] == 2
    assert core.counters['lowstate_tick_unset'] == 1      # the second did not advance
    core.beat(1.001)
    core.command(NAMES, [0.5, -0.5, 0.25], (), (), 1.001)
    out, cause = core.compose(1.002)
    assert cause == 'commanded' and unitree.crc_ok(out)


def test_a_simulator_that_fills_crcs_is_checked_as_a_robot():
    core = BridgeCore(config(peer='simulator'))
    bad = state()
    bad['crc'] ^= 1
    core.take_state(bad, 1.0)
    assert core.state is None and core.counters['lowstate_bad_crc'] == 1
    assert core.counters['lowstate_crc_unset'] == 0
    assert 'non-zero crc' in core.compose(1.0)[1]


def test_an_unknown_peer_is_refused():
    with pytest.raises(ConfigError, match='unitree.peer'):
        BridgeCore(config(peer='sim'))


def test_wire_settings_name_what_to_check():
    from simreal_ros.core.unitree_bridge import WireSettings
    with pytest.raises(ConfigError, match='unitree.peers'):
        WireSettings(network_interface='eth0', multicast=False).validate()
    with pytest.raises(ConfigError, match='unitree.network_interface'):
        WireSettings(network_interface='eth0"/><x').validate()
    lo = WireSettings(domain_id=182, network_interface='lo').validate()
    assert lo.effective_peers() == ['127.0.0.1']
    assert lo.describe() == 'DDS domain 182 on lo, multicast on, peers 127.0.0.1'
    advice = lo.no_writer_advice(3.0)
    for setting in ('unitree.domain_id', 'unitree.network_interface', 'unitree.multicast',
                    'unitree.peers'):
        assert setting in advice
    robot = WireSettings(network_interface='enp3s0', peers=['192.168.123.161']).validate()
    assert robot.effective_peers() == ['192.168.123.161']


def test_multicast_on_loopback_is_switched_on_explicitly():
    pytest.importorskip('cyclonedds')
    from simreal_ros.drivers.unitree_dds import cyclone_config
    on = cyclone_config('lo', True, ['127.0.0.1'])
    assert 'multicast="true"' in on and '<AllowMulticast>true' in on
    assert '<Peer address="127.0.0.1"/>' in on
    off = cyclone_config('lo', False, ['127.0.0.1'])
    assert 'multicast="false"' in off and '<AllowMulticast>false' in off


def test_a_lowstate_behind_the_one_in_use_is_not_used():
    # The bridge stamps joint_states as it publishes: an older LowState_ (a second writer, a
    # reordering link) would reach the supervisor as a fresh sample. Its tick tells.
    core = live(BridgeCore(config()))
    core.take_state(state(q=(0.1, 0.2, 0.3), tick=1000), 1.001)
    core.take_state(state(q=(0.9, 0.9, 0.9), tick=970), 1.002)      # 30 ms behind
    assert core.joint_state()[0] == pytest.approx([0.1, 0.2, 0.3])
    assert core.counters['lowstate_out_of_order'] == 1
    core.take_state(state(q=(0.1, 0.2, 0.3), tick=1000), 1.003)     # the same tick: used
    core.take_state(state(q=(0.2, 0.2, 0.3), tick=5), 1.024)         # 995 ms behind
    assert core.counters['lowstate_out_of_order'] == 2
    wrapped = BridgeCore(config())
    wrapped.take_state(state(tick=2**32 - 2), 1.0)
    wrapped.take_state(state(q=(0.3, 0.2, 0.3), tick=3), 1.001)     # the counter wrapped
    assert wrapped.joint_state()[0][0] == pytest.approx(0.3)
    # A restarted counter: once the one in use is past state_timeout_s (damping), the new
    # order starts.
    core.take_state(state(q=(0.4, 0.2, 0.3), tick=1), 1.003 + 0.06)
    assert core.joint_state()[0][0] == pytest.approx(0.4)

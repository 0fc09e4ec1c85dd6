"""The vendor's own simulator (unitree_mujoco's simulate_python, an asset) behind
unitree_bridge: the G1 29-dof goes through the gantry sequence and walks (issue 31).

Real parts: the vendor's bridge and MuJoCo in their own process (simreal_ros/tools/
vendor_rehearsal.py: headless, /clock), the unitree SDK's CycloneDDS on loopback, unitree_bridge,
safety_supervisor and policy_runner (unitree_rl_lab's ONNX policy) as processes on the
simulator's clock. Behaviour, not timing: the bridge accepts the simulator's crc-less states only
as a simulator peer (counted), the bring-up runs on the band, and the policy moves the robot
forward without a fall. The full 20 s walk, three times, is bench/vendor_rehearsal.py.
"""
from pathlib import Path

import pytest

from conftest import require_asset
from simreal_ros.client.rig import REPO, environment, loopback_udp_env

pytestmark = pytest.mark.ros
ROBOT = REPO / 'config' / 'robots' / 'g1_29dof_unitree.yaml'


@pytest.fixture(scope='module')
def ros():
    require_asset('unitree_mujoco_simulate_python')
    require_asset('unitree_g1_29dof')
    for module in ('unitree_sdk2py', 'pygame', 'cyclonedds', 'mujoco'):
        pytest.importorskip(module, reason=f'{module}: make setup installs it')
    import rclpy
    with environment(loopback_udp_env()):
        rclpy.init()
        yield
        rclpy.try_shutdown()


@pytest.mark.timeout(600)
def test_the_g1_29dof_walks_on_the_vendor_simulator_after_the_gantry_sequence(ros):
    from simreal_ros.client.rehearsal import rehearse
    out = rehearse(ROBOT, vx=0.5, walk_s=2.0, rtf=0.25,
                   sim_args=['--lower-speed', '0.5'],
                   node_params={'safety_supervisor': {'bringup.min_duration_s': 1.0}},
                   log=print)
    print(out)
    assert 'error' not in out, out.get('error')
    bridge = out['bridge']
    # The vendor simulator fills no CRC: accepted only because the robot file names it a
    # simulator peer, and counted; nothing was rejected.
    assert bridge['peer'] == 'simulator'
    assert int(bridge['lowstate']) > 0 and int(bridge['lowstate_bad_crc']) == 0
    assert int(bridge['lowstate_crc_unset']) == int(bridge['lowstate'])
    assert int(bridge['lowcmd_sent']) > 0 and int(bridge['lowstate_writers_matched']) == 1
    # The sequence of docs/real_robot.md, in order, on the simulator's clock.
    g = out['gantry']
    assert g['hanging'] <= g['go_default'] <= g['lowered'] <= g['enabled'] <= g['released']
    # Walking: forward, upright, for the whole span of simulated time.
    assert not out['fell'], out
    assert out['sim_s'] >= 2.0
    assert out['forward_m'] > 0.3, out

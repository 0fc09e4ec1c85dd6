"""Only the supervisor commands the hardware, one driver describes it (issue 16).

sim_robot and safety_supervisor run as processes (the Rig); this process plays the policy and,
in each test, a node that should not publish: a second commander on `hardware/command`, a
second driver on `joint_states`. The graph API names them; each test fails when its check is
removed from the supervisor or the driver.
"""
import json
import time

from diagnostic_msgs.msg import DiagnosticArray
import pytest
import rclpy
from sensor_msgs.msg import JointState
from std_msgs.msg import String

from rosproc import wait_for
from simreal_ros.client.rig import Intruder, Rig
from simreal_ros.nodes.common import COMMAND_QOS, LATCHED_QOS, SENSOR_PUB_QOS

pytestmark = pytest.mark.ros


def driver_state(rig):
    """A recorder of sim_robot's latched driver/state (JSON)."""
    got = []
    rig.node.create_subscription(String, 'driver/state', lambda m: got.append(json.loads(m.data)),
                                 LATCHED_QOS)
    return got


def sim_diagnostics(rig):
    """The latest values of sim_robot's /diagnostics status, as a dict kept up to date."""
    values = {}

    def on(msg):
        for st in msg.status:
            if st.name == 'sim_robot: physics':
                values.update({kv.key: kv.value for kv in st.values})
    rig.node.create_subscription(DiagnosticArray, '/diagnostics', on, 10)
    return values


@pytest.fixture(scope='module')
def ros():
    rclpy.init()
    yield
    rclpy.try_shutdown()


@pytest.fixture
def rig(ros):
    with Rig(sim={'command_publishers': ['safety_supervisor']}) as r:
        r.wait_forwarding()
        yield r


def test_the_legitimate_graph_raises_no_alarm(rig):
    """With the policy, a driver and observers (subscribers) only: no rogue, for 2 s."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < 2.0:
        assert not rig.state("estop"), (rig.state("estop_cause"), rig.logs(3000))
        assert not rig.state('rogue_publishers')
        time.sleep(0.05)
    assert rig.state('output') == 'forwarding'


def test_a_second_commander_on_hardware_command_estops_naming_it(rig):
    states = driver_state(rig)
    diags = sim_diagnostics(rig)
    start = list(rig.probe.joint_states.position)
    target = [q + 0.5 for q in start]   # far from where the supervisor holds the arm
    names = list(rig.probe.joint_states.name)
    rogue = Intruder('rogue_commander', 'hardware/command', COMMAND_QOS,
                     lambda: JointState(name=names, position=target))
    try:
        wait_for(lambda: rig.state('estop'), 5, what='e-stop for the rogue commander')
        cause = rig.state('estop_cause')
        assert 'rogue publisher' in cause and '/rogue_commander' in cause, cause
        assert '/rogue_commander' in rig.state('rogue_publishers')['hardware/command']['nodes']
        # The driver refuses the rogue's commands and damps, naming it.
        wait_for(lambda: states and states[-1]['damped']
                 and '/rogue_commander' in states[-1]['cause'], 5,
                 what='driver/state damped for the rogue commander')
        # Refused while it is there, named on /diagnostics.
        wait_for(lambda: int(diags.get('commands_while_rogue', 0)) > 0
                 and '/rogue_commander' in diags.get('rogue_publishers', ''), 5,
                 what="sim_robot's commands_while_rogue and rogue_publishers in /diagnostics")
        # No reset while it is there.
        rig.probe.hold_current()
        reply = rig.call('reset')
        assert not reply.success and 'rogue' in reply.message, reply.message
    finally:
        rogue.close()
    wait_for(lambda: not rig.state('rogue_publishers'), 10, what='the rogue gone from the graph')
    assert rig.state('estop')   # latched: the operator resets


def test_a_second_driver_on_joint_states_estops_naming_it(rig):
    names = list(rig.probe.joint_states.name)
    frozen = list(rig.probe.joint_states.position)
    spoofer = Intruder('spoofed_driver', 'joint_states', SENSOR_PUB_QOS,
                       lambda: JointState(name=names, position=frozen,
                                          velocity=[0.0] * len(names)))
    try:
        wait_for(lambda: rig.state('estop'), 5, what='e-stop for the second driver')
        cause = rig.state('estop_cause')
        assert 'rogue publisher' in cause and '/spoofed_driver' in cause, cause
        assert 'joint_states' in cause
    finally:
        spoofer.close()


def test_the_unitree_bridge_refuses_hardware_command_while_a_rogue_publishes(ros):
    with Rig(bridge={'command_publishers': ['safety_supervisor']}) as rig:
        rig.wait_forwarding()
        states = driver_state(rig)
        names = list(rig.probe.joint_states.name)
        target = [q + 0.5 for q in rig.probe.joint_states.position]
        rogue = Intruder('rogue_commander', 'hardware/command', COMMAND_QOS,
                         lambda: JointState(name=names, position=target))
        try:
            wait_for(lambda: any(s['damped'] and '/rogue_commander' in s['cause']
                                 for s in states), 10,
                     what="unitree_bridge's driver/state damped, naming the rogue")
            # The supervisor's own graph check (every 0.2 s) may name it just after the bridge.
            # It is e-stopped and names the rogue in its state; the latch keeps its first
            # cause, which is the rogue unless something else (the robot damped by the bridge,
            # on a loaded machine) tripped it first: ci8 timed out here once, state unknown.
            def named():
                rogues = rig.state('rogue_publishers') or {}
                return rig.state('estop') and any(
                    '/rogue_commander' in ' '.join(map(str, r.get('nodes', [])))
                    for r in rogues.values())
            try:
                wait_for(named, 10, what='the supervisor e-stopped, naming the rogue')
            except AssertionError as exc:
                raise AssertionError(f"{exc}: estop {rig.state('estop')} "
                                     f"({rig.state('estop_cause')}), rogue_publishers "
                                     f"{rig.state('rogue_publishers')}\n{rig.logs()}") from None
            if '/rogue_commander' not in rig.state('estop_cause'):
                print(f"e-stopped first for: {rig.state('estop_cause')}")
        finally:
            rogue.close()

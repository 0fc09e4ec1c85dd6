"""The live reality gap through real processes over DDS: sim_robot's true plant changes, sim_bridge's
shadow names the joint, safety_supervisor refuses promotion; no live value, no promotion."""
import json
import math
import signal
import threading
import time

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
import pytest
from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
from rcl_interfaces.srv import SetParameters
import rclpy
from std_msgs.msg import String

from simreal_ros.client.rig import ARM3, NodeProcess, Rig, wait_for
from simreal_ros.core.config import load_node_params
from simreal_ros.nodes.common import LATCHED_QOS

pytestmark = pytest.mark.ros


@pytest.fixture(scope='module')
def ros():
    rclpy.init()
    yield
    rclpy.try_shutdown()


def identified():
    """sim_bridge parameters as SysID would push them: the plant's truth, the ROS path latency."""
    sim = load_node_params(ARM3, 'sim_robot')
    out = {}
    for i, j in enumerate(sim['joint_names']):
        out[f'joints.{j}.damping'] = sim['plant.viscous_damping'][i]
        out[f'joints.{j}.frictionloss'] = sim['plant.coulomb_friction'][i]
        out[f'joints.{j}.armature'] = sim['plant.armature'][i]
    out['latency_s'] = 0.0075
    return out


def change(text):
    return SetParameters.Request(parameters=[Parameter(
        name='test.plant_change', value=ParameterValue(type=ParameterType.PARAMETER_STRING,
                                                       string_value=text))])


class Moving:
    """The probe plays a policy that moves every joint (a multi-sine around the held pose)."""

    def __init__(self, rig, amplitude=0.06):   # within stage 0.10 (0.3 rad/s): no clip
        self.rig, self.amplitude = rig, amplitude
        self.centre = list(rig.probe.target)
        self.t0 = time.monotonic()
        self.paused = False
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self._stop.is_set():
            if self.paused:
                self._stop.wait(0.01)
                continue
            t = time.monotonic() - self.t0
            ramp = min(1.0, t / 2.0)
            self.rig.probe.target = [
                c + ramp * self.amplitude * 0.5 * (math.sin(2 * math.pi * (0.3 + 0.1 * j) * t)
                                                   + math.sin(2 * math.pi * 0.71 * t + j))
                for j, c in enumerate(self.centre)]
            self._stop.wait(0.01)

    def recover(self):
        """A load e-stop (a stalled process on a busy machine): hold, reset, move again."""
        self.paused = True
        time.sleep(0.05)   # let the motion thread see the pause before the target is set
        self.rig.wait_forwarding(hold=True)
        self.centre = list(self.rig.probe.target)
        self.t0 = time.monotonic()
        self.paused = False

    def stop(self):
        self._stop.set()
        self.thread.join(2)


def test_live_gap_gates_promotion_names_the_changed_joint_and_needs_a_fresh_value(ros):
    with Rig(ARM3, supervisor={'stage_dwell_s': [1.0], 'live_gap.max_age_s': 3.0},
             sim={'test.plant_change_enabled': True}) as rig:
        live = rig.watch(String, 'sim_bridge/live_gap', LATCHED_QOS)
        diag = rig.watch(DiagnosticArray, '/diagnostics')
        rig.wait_forwarding()
        moving = Moving(rig)
        try:
            # Before sim_bridge runs nothing says the model is identified: the gate is off.
            assert rig.state('live_gap')['required'] is False
            rig.start('sim_bridge', identified())

            def fresh_ok():
                msgs = live.all()
                doc = json.loads(msgs[-1][1].data) if msgs else {}
                return doc if doc.get('status') == 'OK' and doc.get('identified') else None
            doc = wait_for(fresh_ok, 90, interval=0.2, what='a live gap OK of the identified '
                           'model')
            assert set(doc['joints']) == {'shoulder_yaw', 'shoulder_pitch', 'elbow_pitch'}

            def applied_ok():
                # issue 41: it replays what sim_robot applied, once that covers a window
                for _, msg in reversed(live.all()):
                    d = json.loads(msg.data)
                    if d.get('command_source') == 'driver/applied_command':
                        return d if d.get('status') == 'OK' else None
                return None
            try:
                wait_for(applied_ok, 30, interval=0.2, what='a live gap OK replaying '
                         'driver/applied_command')
            except AssertionError:
                d = json.loads(live.all()[-1][1].data)
                raise AssertionError((d.get('command_source'), d.get('command_source_reason'),
                                      d.get('status'), d.get('reason'))) from None
            wait_for(lambda: rig.state('live_gap')['required'], 10, what='the gate on')

            # Promotion with a fresh live gap below its threshold (retried while the dwell
            # or the load makes it refuse for another reason).
            answers = []

            def promoted():
                if rig.state('estop'):
                    moving.recover()
                resp = rig.call('advance_stage')
                answers.append(resp.message)
                return resp.success or None
            try:
                wait_for(promoted, 120, interval=0.5, what='a promotion with the live gap OK')
            except AssertionError:
                raise AssertionError(f'{answers[-3:]}; {rig.state("live_gap")}; '
                                     f'{live.all()[-1][1].data[:600]}') from None

            # The true plant changes: the elbow's friction triples (a heating motor).
            resp = rig.service(SetParameters, 'sim_robot/set_parameters',
                               change('{"elbow_pitch": {"coulomb_friction": 3.0}}'))
            assert resp.results[0].successful, resp.results[0].reason

            def elbow_error():
                for _, msg in diag.all():
                    for st in msg.status:
                        if st.name.endswith('live gap elbow_pitch') and \
                                st.level == DiagnosticStatus.ERROR:
                            return st.message
                return None
            try:
                message = wait_for(elbow_error, 30, interval=0.2,
                                   what='live gap ERROR elbow_pitch')
            except AssertionError:
                docs = [json.loads(m.data) for _, m in live.all()[-10:]]
                raise AssertionError([(d['status'], d.get('reason'), {
                    n: round(j.get('gap_over_floor') or -1, 2) for n, j in d['joints'].items()})
                    for d in docs]) from None
            assert 'x the noise floor' in message

            def refused_for(reason):
                """Ask for a promotion until refused for `reason` (never granted meanwhile):
                a refusal for another reason first (the dwell, restarted by a load stall) says
                nothing about the gate."""
                def ask():
                    if rig.state('estop'):    # a load e-stop (busy machine)
                        moving.recover()
                    resp = rig.call('advance_stage')
                    answers.append(('promoted: ' if resp.success else '') + resp.message)
                    assert not resp.success, resp.message
                    return resp.message if reason in resp.message else None
                try:
                    return wait_for(ask, 30, interval=0.5, what=f'a refusal for {reason}')
                except AssertionError:
                    raise AssertionError(answers[-3:]) from None
            message = refused_for('live gap above its threshold')
            assert 'elbow_pitch' in message, message

            # sim_bridge gone: no fresh value, no promotion (the gate stays on).
            resp = rig.service(SetParameters, 'sim_robot/set_parameters', change('{}'))
            assert resp.results[0].successful
            rig['sim_bridge'].signal(signal.SIGKILL)
            wait_for(lambda: 'live gap unknown' in (rig.state('live_gap')['refusal'] or ''),
                     30, interval=0.2, what='the live gap going stale')
            message = refused_for('live gap unknown')
            assert 'old' in message, message
        finally:
            moving.stop()


def test_plant_change_is_refused_unless_enabled_and_names_bad_input(ros):
    node = rclpy.create_node('plant_change_client')

    def call(text):
        client = node.create_client(SetParameters, 'sim_robot/set_parameters')
        try:
            assert client.wait_for_service(timeout_sec=60), 'sim_robot/set_parameters'
            future = client.call_async(change(text))
            rclpy.spin_until_future_complete(node, future, timeout_sec=30)
            return future.result().results[0]
        finally:
            node.destroy_client(client)
    try:
        with NodeProcess('sim_robot', ARM3):
            r = call('{"elbow_pitch": {"coulomb_friction": 3.0}}')
            assert not r.successful and 'test.plant_change_enabled is false' in r.reason
        with NodeProcess('sim_robot', ARM3, params={'test.plant_change_enabled': True}):
            for text, why in (('{"wrist": {"armature": 2}}', "unknown joint 'wrist'"),
                              ('{"elbow_pitch": {"mass": 2}}', 'not a changeable parameter'),
                              ('{"elbow_pitch": {"armature": -1}}', 'finite number >= 0'),
                              ('not json', 'not JSON')):
                r = call(text)
                assert not r.successful and why in r.reason, r.reason
            assert call('{"elbow_pitch": {"armature": 2.0}}').successful
    finally:
        node.destroy_node()


def test_no_hardware_driver_has_the_plant_change():
    """The rehearsal parameter is sim_robot's alone (its node file and that file's parts,
    sim_robot_<role>.py): no driver node declares or reads it."""
    from pathlib import Path
    import simreal_ros.nodes as nodes
    folder = Path(nodes.__file__).parent
    users = sorted(p.name for p in folder.glob('*.py') if 'plant_change' in p.read_text())
    assert users and all(u == 'sim_robot.py' or u.startswith('sim_robot_') for u in users), \
        users


def test_a_node_that_should_not_publish_the_live_gap_refuses_promotion_not_the_robot(ros):
    """A fake OK from a node outside live_gap.publishers: named, no promotion while it
    publishes, but no e-stop and no refused reset (the live gap moves nothing); once it is
    gone the publishers are trusted again."""
    names = load_node_params(ARM3, 'sim_robot')['joint_names']
    with Rig(ARM3, supervisor={'live_gap.require': 'true',
                               'live_gap.publishers': ['sim_bridge']}) as rig:
        rig.wait_forwarding()
        pub = rig.node.create_publisher(String, 'sim_bridge/live_gap', LATCHED_QOS)
        stop = threading.Event()

        def fake_ok():
            while not stop.is_set():
                doc = {'stamp': time.time(), 'status': 'OK', 'identified': True,
                       'joints': {n: {'status': 'OK', 'gap_over_floor': 1.0} for n in names},
                       'worst_joint': names[0], 'reason': 'a rogue says OK'}
                pub.publish(String(data=json.dumps(doc)))
                stop.wait(0.2)
        thread = threading.Thread(target=fake_ok, daemon=True)
        thread.start()
        try:
            wait_for(lambda: 'not trusted' in (rig.state('live_gap')['refusal'] or ''), 15,
                     interval=0.2, what='the live gap distrusted')
            assert rig.node.get_name() in rig.state('live_gap')['untrusted']
            resp = rig.call('advance_stage')
            assert not resp.success and 'live gap not trusted' in resp.message, resp.message
            assert not rig.state('estop'), rig.state('estop_cause')
            assert rig.call('reset').success      # nothing latched, nothing refused
        finally:
            stop.set()
            thread.join(2)
        rig.node.destroy_publisher(pub)
        wait_for(lambda: not rig.state('live_gap')['untrusted'], 15, interval=0.2,
                 what='the live gap publishers trusted again')
        assert 'not trusted' not in (rig.state('live_gap')['refusal'] or '')

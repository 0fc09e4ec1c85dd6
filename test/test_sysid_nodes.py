"""SysID nodes as real processes against sim_robot (sim time): a run publishes a result and
keeps the raw data; an abort mid-run publishes nothing; without the supervisor's consent the
node refuses to start and commands nothing.

Without a supervisor, the test's sim_robot listens on sysid/command (a remap of the test's far
side): no configuration of a SysID node reaches the hardware topic itself."""
import json
import os

import pytest
import yaml
from datetime import datetime, timezone

from rosproc import NodeProcess, Spinner, wait_for

pytestmark = pytest.mark.ros
DIRECT = ('-r', 'hardware/command:=sysid/command')   # sim_robot obeys the SysID node directly

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(REPO, 'config', 'robots', 'arm3.yaml')


class NoAliasDumper(yaml.SafeDumper):
    def ignore_aliases(self, data):
        return True


def sim_section(data):
    return next(v for k, v in data.items() if k.lstrip('/').split('/')[-1] == 'sim_robot')


@pytest.fixture(scope='module')
def setup(tmp_path_factory):
    """A params file: arm3 with short friction sweeps on the elbow, direct to sim_robot."""
    tmp = tmp_path_factory.mktemp('sysid')
    with open(CONFIG) as f:
        data = yaml.safe_load(f)
    sim_section(data)['ros__parameters'].update(publish_clock=True)
    section = data['/**/friction_id']['ros__parameters']
    section.update(require_supervisor=False,
                   results_dir=str(tmp / 'results'), joints=['elbow_pitch'],
                   sweep_half_range=0.3, friction_speeds=[0.3, 0.8],
                   joint_states_timeout_s=5.0, use_sim_time=True)   # loaded CI machines
    strict = dict(section, require_supervisor=True, results_dir=str(tmp / 'strict'))
    data['friction_id_strict'] = {'ros__parameters': strict}
    path = tmp / 'arm3_sysid_test.yaml'
    path.write_text(yaml.dump(data, Dumper=NoAliasDumper))   # rcl does not read anchors
    truth = sim_section(data)['ros__parameters']['plant']
    return path, tmp, truth


class Client:
    """Test-side node: services of one SysID node, its progress, sysid/result, commands."""

    def _on_result(self, msg):
        # sysid/result is latched: a node of an earlier test that is still shutting down may
        # deliver its result to this test's client. Only results finished after it count.
        finished = yaml.safe_load(msg.data).get('finished')
        if finished is None or datetime.fromisoformat(str(finished)) >= self.started:
            self.results.append(msg.data)

    def __init__(self, node_name):
        import rclpy
        from sensor_msgs.msg import JointState
        from std_msgs.msg import String
        from std_srvs.srv import Trigger
        from simreal_ros.nodes.common import LATCHED_QOS
        self.owns_context = not rclpy.ok()
        if self.owns_context:
            rclpy.init()
        self.node = rclpy.create_node(f'sysid_test_client_{os.getpid()}')
        self.results, self.progress, self.commands = [], [], []
        self.started = datetime.now(timezone.utc)
        self.node.create_subscription(String, 'sysid/result', self._on_result, LATCHED_QOS)
        self.node.create_subscription(String, f'/{node_name}/progress',
                                      lambda m: self.progress.append(json.loads(m.data)), 50)
        self.node.create_subscription(JointState, 'sysid/command',
                                      lambda m: self.commands.append(m), 10)
        self.start = self.node.create_client(Trigger, f'/{node_name}/start')
        self.abort = self.node.create_client(Trigger, f'/{node_name}/abort')
        self.Trigger = Trigger
        self.spinner = Spinner(self.node)

    def call(self, client, timeout=60.0):
        wait_for(lambda: client.service_is_ready(), timeout, what=f'{client.srv_name}')
        future = client.call_async(self.Trigger.Request())
        wait_for(future.done, timeout, what=f'{client.srv_name} response')
        return future.result()

    def set_joints(self, node_name, joints, timeout=30.0):
        """Set the node's `joints` parameter; return (successful, reason)."""
        from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
        from rcl_interfaces.srv import SetParameters
        client = self.node.create_client(SetParameters, f'/{node_name}/set_parameters')
        try:
            wait_for(client.service_is_ready, timeout, what=f'{node_name}/set_parameters')
            value = ParameterValue(type=ParameterType.PARAMETER_STRING_ARRAY,
                                   string_array_value=list(joints))
            future = client.call_async(SetParameters.Request(
                parameters=[Parameter(name='joints', value=value)]))
            wait_for(future.done, timeout, what='set_parameters response')
            result = future.result().results[0]
            return result.successful, result.reason
        finally:
            self.node.destroy_client(client)

    def get_parameters(self, node_name, names, timeout=30.0):
        """Return the double values of `names` on node_name."""
        from rcl_interfaces.srv import GetParameters
        client = self.node.create_client(GetParameters, f'/{node_name}/get_parameters')
        try:
            wait_for(client.service_is_ready, timeout, what=f'{node_name}/get_parameters')
            future = client.call_async(GetParameters.Request(names=list(names)))
            wait_for(future.done, timeout, what='get_parameters response')
            return [v.double_value for v in future.result().values]
        finally:
            self.node.destroy_client(client)

    def close(self):
        import rclpy
        self.spinner.stop()
        self.node.destroy_node()
        if self.owns_context:   # the next module's fixture initialises its own
            rclpy.try_shutdown()


@pytest.fixture(scope='class')
def running(setup):
    path, tmp, truth = setup
    with NodeProcess('sim_robot', path, extra_args=DIRECT) as sim, NodeProcess('friction_id', path) as node, \
            NodeProcess('sim_bridge', path):
        client = Client('friction_id')
        try:
            yield client, tmp, truth, sim, node
        finally:
            client.close()


class TestOneRunningNode:
    """Tests sharing one sim_robot + friction_id + sim_bridge. Class scope: those
    processes (and sim_robot's /clock) end before the next test starts its own; a second
    /clock publisher would mix two timelines."""

    def test_abort_mid_run_publishes_no_result(self, running):
        client, tmp, _, _, node = running
        # `joints` (simreal sysid --joints) is settable while idle, by known names only.
        ok, why = client.set_joints('friction_id', ['elbow_pitch', 'wrist'])
        assert not ok and "['wrist'] not in joint_names" in why, why
        ok, why = client.set_joints('friction_id', ['shoulder_pitch', 'elbow_pitch'])
        assert ok, why
        reply = wait_for(lambda: (lambda r: r if r.success else None)(client.call(client.start)),
                         120.0, interval=1.0, what='friction_id to accept ~/start (joint_states)')
        assert "['shoulder_pitch', 'elbow_pitch']" in reply.message, reply.message
        ok, why = client.set_joints('friction_id', ['elbow_pitch'])
        assert not ok and 'running' in why, why     # not while an experiment runs
        wait_for(lambda: any((p.get('percent') or 0) > 15 for p in client.progress), 120.0,
                 what='progress beyond 15 %')
        assert all({'phase', 'percent', 'time_left_s'} <= set(p) for p in client.progress)
        reply = client.call(client.abort)
        assert reply.success and 'no result' in reply.message
        wait_for(lambda: any(p.get('phase') == 'aborted' for p in client.progress), 30.0,
                 what='aborted progress')
        # The experiment would have ended ~7 s (sim) later; commands stop with the abort.
        sent = len(client.commands)
        wait_for(lambda: 'no result published' in node.output(), 30.0, what='abort log line')
        assert client.results == []
        assert not list((tmp / 'results').glob('*.yaml'))
        assert len(client.commands) - sent < 5
        ok, why = client.set_joints('friction_id', ['elbow_pitch'])   # idle again: accepted
        assert ok, why


    def test_run_publishes_result_with_interval_and_raw_data(self, running):
        from simreal_ros.core.sysid.records import read_mcap
        client, tmp, truth, _, node = running
        client.progress.clear()
        reply = client.call(client.start)
        assert reply.success, reply.message
        text = wait_for(lambda: client.results[-1] if client.results else None, 240.0,
                        what='sysid/result')
        doc = yaml.safe_load(text)
        assert doc['robot'] == 'arm3' and doc['experiment'] == 'friction'
        # Through ROS on a loaded machine late commands jolt the joint: the node must then either
        # give an estimate whose interval says how uncertain it is, or a clear failure; never a
        # confident wrong number. Either way the raw data are kept.
        got = {r['parameter']: r for r in doc['results']}
        if got:
            assert set(got) == {'coulomb_friction', 'viscous_damping'}
            fc = got['coulomb_friction']
            assert fc['joint'] == 'elbow_pitch' and fc['units'] == 'N*m'
            assert fc['interval'][0] < fc['value'] < fc['interval'][1], fc
            # Within 10 % of the hidden truth, or an interval wider than that which holds the
            # truth (a loaded machine: 0.262 [0.062, 0.461] against 0.30 with three busy
            # processes on the 2 cores). Not "inside its 95 % interval" alone: a single run
            # misses a 95 % interval by design now and then, and through ROS (command jitter)
            # the interval is known to under-cover (0.310 [0.300, 0.320] against 0.30 in CI).
            # Coverage is measured over seeds by bench/sysid_accuracy.py.
            true_fc = truth['coulomb_friction'][2]
            lo, hi = fc['interval']
            assert fc['value'] == pytest.approx(true_fc, rel=0.10) or (
                hi - lo > 0.2 * true_fc and lo <= true_fc <= hi), fc
            data_file = fc['data_file']
            # The node pushed the values and their 95 % half-widths into sim_bridge, which
            # refuses (and the node logs) a non-physical negative damping, possible only with
            # an interval reaching below zero.
            vd = got['viscous_damping']
            expect = {'joints.elbow_pitch.frictionloss': fc['value'],
                      'joints.elbow_pitch.frictionloss_half_width': (hi - lo) / 2}
            if vd['value'] >= 0:
                expect.update({'joints.elbow_pitch.damping': vd['value'],
                               'joints.elbow_pitch.damping_half_width':
                               (vd['interval'][1] - vd['interval'][0]) / 2})
                wait_for(lambda: 'to sim_bridge' in node.output(), 30.0,
                         what='push to sim_bridge')
            else:
                assert vd['interval'][0] < 0, vd
                wait_for(lambda: "sim_bridge refused ['joints.elbow_pitch.damping:"
                         in node.output(), 30.0, what='damping refused by sim_bridge')
            bridge = client.get_parameters('sim_bridge', list(expect))
            assert bridge == pytest.approx(list(expect.values()), rel=1e-9), bridge
        else:
            (fail,) = doc['failures']
            assert fail['joint'] == 'elbow_pitch'
            assert fail['reason'] in ('not enough excitation', 'saturated'), fail
            data_file = fail['data_file']
        rec = read_mcap(data_file)
        assert rec.names == ['shoulder_yaw', 'shoulder_pitch', 'elbow_pitch']
        assert len(rec.t) > 100 and len(rec.cmd_t) > 100
        assert list((tmp / 'results').glob('*.yaml'))
        assert any(p.get('phase') == 'done' for p in client.progress) or 'results in' in \
            node.output()


def test_start_refused_without_supervisor(setup):
    path, tmp, _ = setup
    with NodeProcess('sim_robot', path, extra_args=DIRECT) as sim, \
            NodeProcess('friction_id', path, name='friction_id_strict') as node:
        client = Client('friction_id_strict')
        try:
            # joint_states flow first, so the refusal is about the supervisor.
            wait_for(lambda: 'ready' in node.output(), 120.0, what='node ready')
            reply = wait_for(
                lambda: (lambda r: r if 'joint_states' not in r.message else None)(
                    client.call(client.start)), 120.0, interval=1.0, what='fresh joint_states')
            assert not reply.success
            assert 'safety_supervisor' in reply.message
            assert client.commands == []
        finally:
            client.close()
        del sim


def test_start_refused_when_joint_states_carry_no_effort(setup):
    """A driver that publishes positions and velocities only: friction identification fits
    torque, so it refuses, naming the topic, instead of fitting zeros; nothing is commanded."""
    import threading
    from sensor_msgs.msg import JointState
    from simreal_ros.nodes.common import SENSOR_PUB_QOS
    path, tmp, _ = setup
    with NodeProcess('friction_id', path) as node:
        client = Client('friction_id')
        pub = client.node.create_publisher(JointState, 'joint_states', SENSOR_PUB_QOS)
        stop = threading.Event()

        def driver():     # the far side: a driver without effort, at 100 Hz
            while not stop.is_set():
                msg = JointState(name=['shoulder_yaw', 'shoulder_pitch', 'elbow_pitch'],
                                 position=[0.0, 0.1, 0.2], velocity=[0.0, 0.0, 0.0])
                msg.header.stamp = client.node.get_clock().now().to_msg()
                pub.publish(msg)
                stop.wait(0.01)
        thread = threading.Thread(target=driver, daemon=True)
        thread.start()
        try:
            wait_for(lambda: 'ready' in node.output(), 120.0, what='node ready')
            reply = wait_for(
                lambda: (lambda r: r if 'no joint_states with every joint' not in r.message
                         else None)(client.call(client.start)), 60.0, interval=1.0,
                what='joint_states seen by friction_id')
            assert not reply.success, reply.message
            assert 'no effort' in reply.message and '/joint_states' in reply.message
            assert client.commands == []
        finally:
            stop.set()
            thread.join(timeout=2)
            client.close()


def test_estop_mid_run_stops_and_publishes_nothing(setup, tmp_path):
    """Through safety_supervisor: a start while e-stopped is refused; select sysid, start, a
    second experiment refused with the holder's name, e-stop mid-run: no result."""
    from std_srvs.srv import SetBool
    path, _, _ = setup
    with open(path) as f:
        data = yaml.safe_load(f)
    sup = data['/**/safety_supervisor']['ros__parameters']
    sup.update(use_sim_time=True, stages=[1.0], joint_states_timeout_s=1.0,
               sysid_timeout_s=1.0)
    section = dict(data['friction_id_strict']['ros__parameters'],
                   results_dir=str(tmp_path / 'results'),
                   friction_speeds=[0.1, 0.2])   # ~20 s: the e-stop lands mid-run
    data['friction_id_strict'] = {'ros__parameters': section}
    data['friction_id_second'] = {'ros__parameters': dict(section)}
    strict_path = tmp_path / 'with_supervisor.yaml'
    strict_path.write_text(yaml.dump(data, Dumper=NoAliasDumper))
    with NodeProcess('sim_robot', strict_path), NodeProcess('safety_supervisor', strict_path), \
            NodeProcess('friction_id', strict_path, name='friction_id_strict') as node, \
            NodeProcess('friction_id', strict_path, name='friction_id_second'):
        client = Client('friction_id_strict')
        second = client.node.create_client(client.Trigger, '/friction_id_second/start')
        estop = client.node.create_client(client.Trigger, '/safety/estop')
        reset = client.node.create_client(client.Trigger, '/safety/reset')
        select = client.node.create_client(SetBool, '/safety/select_sysid')
        try:
            wait_for(lambda: select.service_is_ready(), 60.0, what='select_sysid')
            future = select.call_async(SetBool.Request(data=True))   # nothing is forwarded
            wait_for(future.done, 60.0, what='select_sysid response')
            assert future.result().success, future.result().message
            assert client.call(estop, 120.0).success
            reply = wait_for(
                lambda: (lambda r: r if 'e-stop' in r.message else None)(
                    client.call(client.start)), 120.0, interval=1.0, what='start refused')
            assert not reply.success and 'never releases an e-stop' in reply.message
            reply = wait_for(lambda: (lambda r: r if r.success else None)(client.call(reset)),
                             60.0, interval=0.5, what='safety/reset accepted')
            reply = wait_for(
                lambda: (lambda r: r if r.success else None)(client.call(client.start)),
                120.0, interval=1.0, what='start accepted')
            assert 'designing' in reply.message, reply.message
            # Running (or already stopped by the supervisor's own e-stop on a loaded machine).
            wait_for(lambda: any((p.get('percent') or 0) > 5 or p.get('phase') == 'aborted'
                                 for p in client.progress), 120.0, what='the run to start')
            # The second node may not have heard the supervisor's state yet (discovery on a
            # loaded machine): that refusal is asked again; any other answer is the one tested.
            reply = wait_for(
                lambda: (lambda r: None if not r.success and 'no safety_supervisor state'
                         in r.message else r)(client.call(second)),
                30.0, interval=0.5, what='the second node hearing the supervisor')
            assert not reply.success and 'friction_id_strict' in reply.message, reply.message
            assert client.call(estop).success
            wait_for(lambda: any(p.get('phase') == 'aborted' for p in client.progress), 30.0,
                     what='aborted after the e-stop')
            reason = [p for p in client.progress if p.get('phase') == 'aborted'][-1]['reason']
            assert 'e-stop' in reason
            wait_for(lambda: 'no result published' in node.output(), 30.0, what='log line')
            assert client.results == []
            assert not list((tmp_path / 'results').glob('*.yaml'))
        finally:
            client.close()


def test_no_remap_reaches_the_hardware_topic(setup):
    path, _, _ = setup
    node = NodeProcess('friction_id', path, extra_args=('-r', 'sysid/command:=hardware/command'))
    try:
        assert node.wait_exit(60) == 2
        assert 'hardware topic' in node.output()
    finally:
        node.stop()


def test_time_going_back_stops_the_run(setup):
    """A second /clock publisher (here: the test, at t = 0) mid-run stops the experiment."""
    from rosgraph_msgs.msg import Clock
    path, tmp, _ = setup
    with NodeProcess('sim_robot', path, extra_args=DIRECT), NodeProcess('friction_id', path) as node:
        client = Client('friction_id')
        clock = client.node.create_publisher(Clock, '/clock', 10)
        try:
            reply = wait_for(lambda: (lambda r: r if r.success else None)(client.call(client.start)),
                             120.0, interval=1.0, what='friction_id to accept ~/start')
            assert reply.success, reply.message
            wait_for(lambda: any((p.get('percent') or 0) > 5 for p in client.progress), 120.0,
                     what='progress beyond 5 %')
            wait_for(lambda: clock.get_subscription_count() > 0, 30.0, what='/clock matched')

            def went_back():    # a second publisher's clock, at t = 0: sim_robot's is ahead
                clock.publish(Clock())
                return any(p.get('phase') == 'aborted' for p in client.progress)
            wait_for(went_back, 30.0, interval=0.05, what='aborted after the clock went back')
            reason = [p for p in client.progress if p.get('phase') == 'aborted'][-1]['reason']
            assert 'ROS time went back' in reason, reason
            wait_for(lambda: 'no result published' in node.output(), 30.0, what='log line')
            assert client.results == []
        finally:
            client.close()


def test_a_joint_state_rate_that_folds_the_command_ripple_to_0_hz_stops_the_run(setup,
                                                                                 tmp_path):
    """A robot whose joint_states come at 200 Hz under 240 Hz commands: the 5th harmonic of
    the held targets' ripple is sampled at 0 Hz and reads as friction (bench, arm3: viscous
    -4.6 to +5.7 % with intervals of +-1 to 2 %). The node measures the rate during the
    approach and stops, naming command_rate_hz and a rate that works; no result."""
    path, _, _ = setup
    with open(path) as f:
        data = yaml.safe_load(f)
    sim_section(data)['ros__parameters']['publish_rate_hz'] = 200.0
    data['/**/friction_id']['ros__parameters']['results_dir'] = str(tmp_path / 'results')
    run_path = tmp_path / 'arm3_200hz.yaml'
    run_path.write_text(yaml.dump(data, Dumper=NoAliasDumper))
    with NodeProcess('sim_robot', run_path, extra_args=DIRECT), \
            NodeProcess('friction_id', run_path) as node:
        client = Client('friction_id')
        try:
            reply = wait_for(
                lambda: (lambda r: r if r.success else None)(client.call(client.start)),
                120.0, interval=1.0, what='friction_id to accept ~/start')
            assert reply.success, reply.message
            wait_for(lambda: any(p.get('phase') == 'aborted' for p in client.progress), 60.0,
                     what=f'aborted at 200 Hz\n{node.output()[-2000:]}')
            reason = [p for p in client.progress if p.get('phase') == 'aborted'][-1]['reason']
            assert ('joint_states come at 200.0 Hz' in reason and '5th harmonic' in reason
                    and 'set friction_id.command_rate_hz to 239' in reason), reason
            wait_for(lambda: 'no result published' in node.output(), 30.0, what='log line')
            assert client.results == []
            assert not list((tmp_path / 'results').glob('*.yaml'))
        finally:
            client.close()


@pytest.mark.parametrize('kind,parameter', [('inertia', 'armature'), ('latency', 'latency')])
def test_inertia_and_latency_nodes_run_end_to_end_through_the_supervisor(setup, tmp_path,
                                                                          kind, parameter):
    """inertia_id and latency_id as processes, their commands forwarded by safety_supervisor
    to sim_robot (no remap): select sysid, start, a result with an interval (or a named
    failure) on sysid/result, the raw data kept."""
    from std_srvs.srv import SetBool
    from simreal_ros.core.sysid.records import read_mcap
    path, _, truth = setup
    with open(path) as f:
        data = yaml.safe_load(f)
    sup = data['/**/safety_supervisor']['ros__parameters']
    sup.update(use_sim_time=True, stages=[1.0], joint_states_timeout_s=1.0,
               sysid_timeout_s=1.0, stage_file=str(tmp_path / 'stages.json'))
    node_name = f'{kind}_id'
    section = data[f'/**/{node_name}']['ros__parameters']
    section.update(joints=['elbow_pitch'], results_dir=str(tmp_path / 'results'),
                   joint_states_timeout_s=5.0, use_sim_time=True,
                   **({'inertia_duration_s': 4.0} if kind == 'inertia'
                      else {'latency_duration_s': 3.0}))
    run_path = tmp_path / f'{kind}.yaml'
    run_path.write_text(yaml.dump(data, Dumper=NoAliasDumper))
    with NodeProcess('sim_robot', run_path), NodeProcess('safety_supervisor', run_path), \
            NodeProcess(node_name, run_path) as node:
        client = Client(node_name)
        select = client.node.create_client(SetBool, '/safety/select_sysid')
        try:
            wait_for(lambda: select.service_is_ready(), 60.0, what='select_sysid')
            future = select.call_async(SetBool.Request(data=True))
            wait_for(future.done, 60.0, what='select_sysid response')
            assert future.result().success, future.result().message
            reply = wait_for(
                lambda: (lambda r: r if r.success else None)(client.call(client.start)),
                120.0, interval=1.0, what=f'{node_name} to accept ~/start')
            assert 'designing' in reply.message, reply.message
            text = wait_for(lambda: client.results[-1] if client.results else None, 240.0,
                            what=f'sysid/result of {node_name}\n{node.output()[-2000:]}')
        finally:
            client.close()
    doc = yaml.safe_load(text)
    assert doc['experiment'] == kind and doc['robot'] == 'arm3'
    got = {r['parameter']: r for r in doc['results']}
    if parameter in got:
        est = got[parameter]
        lo, hi = est['interval']
        assert lo < est['value'] < hi, est
        if kind == 'latency':
            # the plant's hidden latency plus the ROS path (SysID command -> supervisor ->
            # hardware/command: 3.5-4.3 ms in bench/sysid_ros.py on an idle machine, 26 ms
            # here once beside a benchmark), never less than the plant's; its accuracy is
            # test_sysid_core's and bench/sysid_ros.py's
            true = truth['latency_s']
            assert true - 0.001 <= est['value'] <= section['max_latency_s'], (est, true)
        else:
            true = truth['armature'][2]
            assert est['value'] == pytest.approx(true, rel=0.3) or lo <= true <= hi, (est, true)
        data_file = est['data_file']
    else:
        (fail,) = doc['failures']
        assert fail['joint'] == 'elbow_pitch' and fail['reason'], fail
        data_file = fail['data_file']
    rec = read_mcap(data_file)
    assert len(rec.t) > 100 and len(rec.cmd_t) > 100

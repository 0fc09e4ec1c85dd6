"""What every node does before ROS starts: the executor kind and the middleware transport."""
import os

import pytest

from simreal_ros.core.config import ConfigError
from simreal_ros.nodes.common import (dds_transport, installed_fastdds_major, make_executor,
                                      off_loopback, prefer_udp_transport, profiles_variables,
                                      transport_lines, udp_sockets)


def test_udp_transport_unless_the_user_chose_one():
    env = {}
    assert prefer_udp_transport(env) == 'UDPv4' and env['FASTDDS_BUILTIN_TRANSPORTS'] == 'UDPv4'
    env = {'FASTDDS_BUILTIN_TRANSPORTS': 'SHM'}
    assert prefer_udp_transport(env) == 'SHM'
    env = {'FASTDDS_DEFAULT_PROFILES_FILE': '/etc/robot/fastdds.xml'}
    assert prefer_udp_transport(env) is None and 'FASTDDS_BUILTIN_TRANSPORTS' not in env
    env = {'RMW_IMPLEMENTATION': 'rmw_cyclonedds_cpp', 'ROS_AUTOMATIC_DISCOVERY_RANGE': 'LOCALHOST'}
    assert prefer_udp_transport(env) is None
    assert env == {'RMW_IMPLEMENTATION': 'rmw_cyclonedds_cpp',
                   'ROS_AUTOMATIC_DISCOVERY_RANGE': 'LOCALHOST'}


def test_localhost_is_served_by_the_loopback_profile_not_shared_memory():
    env = {'ROS_AUTOMATIC_DISCOVERY_RANGE': 'LOCALHOST'}
    assert prefer_udp_transport(env) == 'loopback UDP'
    assert env['ROS_AUTOMATIC_DISCOVERY_RANGE'] == 'SYSTEM_DEFAULT'
    # The installed Fast DDS's variable only: 2 (Jazzy) reads only the FASTRTPS_ one, 3 reads
    # the FASTDDS_ one and warns in every process that the other is deprecated.
    wanted = {3: 'FASTDDS_DEFAULT_PROFILES_FILE', 2: 'FASTRTPS_DEFAULT_PROFILES_FILE'}[
        installed_fastdds_major()]
    profiles = {k: v for k, v in env.items() if k.endswith('_DEFAULT_PROFILES_FILE')}
    assert list(profiles) == [wanted], env
    assert profiles[wanted].endswith('config/fastdds/loopback_udp.xml')
    assert 'FASTDDS_BUILTIN_TRANSPORTS' not in env
    for chosen in ('FASTDDS_DEFAULT_PROFILES_FILE', 'FASTRTPS_DEFAULT_PROFILES_FILE'):
        env = {'ROS_AUTOMATIC_DISCOVERY_RANGE': 'LOCALHOST', chosen: '/etc/robot/fastdds.xml'}
        assert prefer_udp_transport(env) is None                  # a user's profile stands
        assert env == {'ROS_AUTOMATIC_DISCOVERY_RANGE': 'LOCALHOST',
                       chosen: '/etc/robot/fastdds.xml'}
    env = {'ROS_AUTOMATIC_DISCOVERY_RANGE': 'LOCALHOST', 'FASTDDS_BUILTIN_TRANSPORTS': 'SHM'}
    assert prefer_udp_transport(env) == 'SHM'                  # the user's choice stands
    assert env['ROS_AUTOMATIC_DISCOVERY_RANGE'] == 'LOCALHOST'


def test_the_profiles_variable_follows_the_fast_dds_library_installed(tmp_path, monkeypatch):
    # Read from the library folders before rclpy loads the library: ROS_DISTRO is unset by
    # the PyPI wheels of every distro. This venv's own first (Kilted's rclpy 9: Fast DDS 3,
    # Jazzy's 7: Fast DDS 2).
    import sys
    from importlib.metadata import PackageNotFoundError, version
    try:
        rclpy_major = int(version('ros-rclpy').split('.')[0])
    except PackageNotFoundError:       # a sourced ROS 2: its folders are in the environment
        rclpy_major = None
    if rclpy_major is not None:
        assert installed_fastdds_major({}) == (3 if rclpy_major >= 9 else 2)
    monkeypatch.setattr(sys, 'prefix', str(tmp_path / 'no_venv'))
    jazzy, kilted = tmp_path / 'jazzy', tmp_path / 'kilted'
    (jazzy / 'lib').mkdir(parents=True)
    (kilted / 'lib').mkdir(parents=True)
    (jazzy / 'lib' / 'libfastrtps.so.2.14.5').write_bytes(b'')
    (kilted / 'lib' / 'libfastdds.so.3.2.2').write_bytes(b'')
    assert installed_fastdds_major({'AMENT_PREFIX_PATH': str(jazzy)}) == 2
    assert profiles_variables({'AMENT_PREFIX_PATH': str(jazzy)}) == (
        'FASTRTPS_DEFAULT_PROFILES_FILE',)
    assert installed_fastdds_major({'LD_LIBRARY_PATH': str(kilted / 'lib')}) == 3
    assert profiles_variables({'LD_LIBRARY_PATH': str(kilted / 'lib')}) == (
        'FASTDDS_DEFAULT_PROFILES_FILE',)
    for env in ({}, {'AMENT_PREFIX_PATH': os.pathsep.join([str(jazzy), str(kilted)])}):
        assert installed_fastdds_major(env) is None        # none or both: both variables
        assert profiles_variables(env) == ('FASTDDS_DEFAULT_PROFILES_FILE',
                                           'FASTRTPS_DEFAULT_PROFILES_FILE')


def test_transport_is_read_from_the_process_maps(tmp_path, monkeypatch):
    maps = tmp_path / 'maps'
    maps.write_text('7f59 rw-s 00000000 00:1b 388730 /dev/shm/fastdds_75c3aaf97c5e90ef\n'
                    '7f5a r-xp 00000000 08:01 12 /usr/lib/libc.so.6\n')
    monkeypatch.delenv('RMW_IMPLEMENTATION', raising=False)
    assert dds_transport(maps) == 'shared memory + UDP'
    # Fast DDS 2 (Humble, Jazzy) names its segments fastrtps_.
    maps.write_text('7f59 rw-s 00000000 00:1b 388731 /dev/shm/fastrtps_3f1a0c2b9d8e7f60\n')
    assert dds_transport(maps) == 'shared memory + UDP'
    maps.write_text('7f5a r-xp 00000000 08:01 12 /work/.venv/lib/libfastdds.so.3.2\n'
                    '7f5b r--p 00000000 08:01 13 /dev/shm/sem.other_fastrtps_port7400\n')
    assert dds_transport(maps) == 'UDP'
    assert dds_transport(tmp_path / 'missing') == 'unknown'
    monkeypatch.setenv('RMW_IMPLEMENTATION', 'rmw_cyclonedds_cpp')
    assert dds_transport(maps) == 'unknown'


def test_loopback_profile_is_a_fast_dds_profile_without_shared_memory():
    # The file the docs and the transport test point to: UDPv4 only, bound to 127.0.0.1.
    import xml.etree.ElementTree as ET
    from simreal_ros.client.rig import loopback_udp_env
    # Named in the installed Fast DDS's variable (FASTDDS_ for 3, FASTRTPS_ for 2).
    path, = [v for k, v in loopback_udp_env().items()
             if k.endswith('_DEFAULT_PROFILES_FILE') and v]
    ns = {'d': 'http://www.eprosima.com'}
    root = ET.parse(path).getroot()
    kinds = [e.text for e in root.iterfind('.//d:transport_descriptor/d:type', ns)]
    assert kinds == ['UDPv4'], kinds
    assert [e.text for e in root.iterfind('.//d:interfaceWhiteList/d:address', ns)] == \
        ['127.0.0.1']
    assert root.find('.//d:participant/d:rtps/d:useBuiltinTransports', ns).text == 'false'


def test_executor_kind_is_checked():
    with pytest.raises(ConfigError, match='executor'):
        make_executor('multi')


@pytest.mark.ros
def test_polled_subscription_takes_every_message_in_order():
    import time
    import rclpy
    from sensor_msgs.msg import JointState
    from simreal_ros.nodes.common import PolledSubscription, SENSOR_PUB_QOS, SENSOR_SUB_QOS
    rclpy.init()
    try:
        node = rclpy.create_node(f'polled_{time.time_ns()}')
        sub = PolledSubscription(node, JointState, 'polled_test', SENSOR_SUB_QOS)
        pub = node.create_publisher(JointState, 'polled_test', SENSOR_PUB_QOS)
        deadline = time.monotonic() + 10
        while pub.get_subscription_count() < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sub.take_all() == []
        for k in range(3):
            pub.publish(JointState(name=[f'm{k}']))
        got = []
        while len(got) < 3 and time.monotonic() < deadline:
            got += sub.take_all()
            time.sleep(0.005)
        assert [m.name[0] for m in got] == ['m0', 'm1', 'm2']
        # The executor never sees it: rclpy's node lists only its own subscriptions.
        assert not list(node.subscriptions)
        sub.destroy()
        node.destroy_node()
    finally:
        rclpy.try_shutdown()


def _spin_events_until(node, done, seconds=5.0):
    """Spin `node` with the EventsExecutor until `done()` or `seconds`; return the kind made."""
    import time
    executor, kind = make_executor('events')
    executor.add_node(node)
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        executor.spin_once(timeout_sec=0.05)
    executor.shutdown()
    return kind


@pytest.mark.ros
def test_hot_timer_callbacks_are_called_by_the_events_executor_with_a_known_signature():
    import inspect
    import time
    import rclpy
    from simreal_ros.nodes.common import hot_timer_callback
    calls = []

    class Owner:
        def tick(self):
            calls.append(time.monotonic())
    callback = hot_timer_callback(Owner().tick)
    assert inspect.signature(callback) == inspect.Signature()   # no TimerInfo asked for
    rclpy.init()
    try:
        node = rclpy.create_node(f'hot_timer_{time.time_ns()}')
        node.create_timer(0.002, callback)
        assert _spin_events_until(node, lambda: len(calls) >= 20) == 'events'
        assert len(calls) >= 20
        node.destroy_node()
    finally:
        rclpy.try_shutdown()


@pytest.mark.ros
def test_own_tick_loop_ticks_on_time_serves_events_between_and_skips_missed_slots():
    """spin_hot: the tick at its period without the timer, a subscription served between
    ticks, a tick that overran counted as skipped slots (not run again in a burst), and the
    loop ending when asked."""
    import time
    import rclpy
    from std_msgs.msg import String
    from simreal_ros.nodes.common import HotLoop, spin_hot
    rclpy.init()
    try:
        node = rclpy.create_node(f'hot_loop_{time.time_ns()}')
        ticks, heard = [], []
        stall = {'at': 30}

        def tick():
            ticks.append(time.monotonic())
            if len(ticks) == stall['at']:
                time.sleep(0.0105)        # an overrun of five periods and a quarter
        hot = HotLoop(node, 0.002, tick, own=True)
        node.create_subscription(String, 'hot_loop_test', lambda m: heard.append(m.data), 10)
        pub = node.create_publisher(String, 'hot_loop_test', 10)
        executor, _ = make_executor('events')
        executor.add_node(node)
        assert hot.kind == 'timer' and hot.take_over() and hot.kind == 'own'
        assert not hot.timer.is_ready() and hot.timer.is_canceled()
        sent = []

        def running():
            if len(ticks) % 20 == 10 and len(sent) < len(ticks) // 20 + 1:
                sent.append(len(ticks))
                pub.publish(String(data=str(len(ticks))))
            return len(ticks) < 150
        t0 = time.monotonic()
        spin_hot(executor, hot, running, node.context)
        wall = time.monotonic() - t0
        assert len(ticks) == 150
        # 150 ticks and 4 skipped slots at 2 ms: about 0.31 s.
        assert 0.29 < wall < 0.6, wall
        # The overrun passed five slots: the first runs late, once, the other four are skipped
        # and the tick after it comes at the next slot of the grid (12 ms after the stalled).
        # (More are skipped when this machine also delays another tick.)
        assert 4 <= hot.skipped <= 20, hot.skipped
        late = ticks[stall['at']] - ticks[stall['at'] - 1]
        assert late >= 0.0105, late
        regrid = ticks[stall['at'] + 1] - ticks[stall['at'] - 1]
        assert regrid > 0.0115, regrid     # no burst of catch-up ticks
        assert len(heard) >= len(sent) - 1 >= 5, (heard, sent)   # events served meanwhile
        executor.shutdown()
        node.destroy_node()
    finally:
        rclpy.try_shutdown()


@pytest.mark.ros
def test_hot_loop_not_taken_over_keeps_its_timer(tmp_path):
    """Refused (own_tick_loop false, or simulated time for the supervisor): the rclpy timer
    ticks, as it does for a node spun by anything other than run()."""
    import time
    import rclpy
    from simreal_ros.core.config import source_root
    from simreal_ros.nodes.common import HotLoop
    from simreal_ros.nodes.safety_supervisor import SafetySupervisor
    rclpy.init()
    try:
        node = rclpy.create_node(f'hot_timer_kept_{time.time_ns()}')
        ticks = []
        hot = HotLoop(node, 0.002, lambda: ticks.append(1), own=False)
        assert not hot.take_over() and hot.kind == 'timer' and not hot.timer.is_canceled()
        _spin_events_until(node, lambda: len(ticks) >= 20)
        assert len(ticks) >= 20
        node.destroy_node()
    finally:
        rclpy.try_shutdown()
    arm3 = str(source_root() / 'config' / 'robots' / 'arm3.yaml')
    for extra, own in (([], True), (['-p', 'own_tick_loop:=false'], False),
                       (['-p', 'use_sim_time:=true'], False)):
        rclpy.init(args=['--ros-args', '--params-file', arm3,
                         '-p', f'stage_file:={tmp_path / "stages.json"}', *extra])
        try:
            node = SafetySupervisor()
            assert node.hot_loop.own is own, extra
            assert node.hot_loop.period == pytest.approx(node.core.cfg.period_s)
            node.destroy_node()
        finally:
            rclpy.try_shutdown()


@pytest.mark.ros
def test_supervisor_falls_back_to_callbacks_when_polling_is_unavailable(monkeypatch, tmp_path):
    # An rclpy whose internals differ (the system rclpy of an older ROS 2): the supervisor
    # must still start, with a callback per message, and say so.
    import rclpy
    from simreal_ros.core.config import source_root
    import simreal_ros.nodes.safety_supervisor as sup_mod

    def unavailable(*args, **kwargs):
        raise TypeError('Subscription() takes 4 arguments')
    monkeypatch.setattr(sup_mod, 'PolledSubscription', unavailable)
    arm3 = str(source_root() / 'config' / 'robots' / 'arm3.yaml')
    rclpy.init(args=['--ros-args', '--params-file', arm3,
                     '-p', f'stage_file:={tmp_path / "stages.json"}'])
    try:
        node = sup_mod.SafetySupervisor()
        topics = [s.topic_name for s in node.subscriptions]
        assert any(t.endswith('joint_states') for t in topics) and node._polled == []
        node.destroy_node()
    finally:
        rclpy.try_shutdown()


def test_results_recordings_and_exports_are_per_robot_under_a_namespace(tmp_path):
    """Two robots from one robot file never share SysID results, recordings or exports: each
    node built under /left writes into the `left` subfolder of its configured folder."""
    import rclpy
    from simreal_ros.deploy.graph import build_graph, write_overlay
    from simreal_ros.tools.params_doc import _node_class, isolated
    from simreal_ros.nodes.common import per_robot_dir

    class Named:
        def __init__(self, ns):
            self.ns = ns

        def get_namespace(self):
            return self.ns
    assert per_robot_dir(Named('/'), '/data/sysid') == '/data/sysid'
    assert per_robot_dir(Named('/lab/left'), '/data/sysid') == '/data/sysid/lab/left'
    from simreal_ros.core.onnx_policies import arm3
    policy = arm3(str(tmp_path / 'arm3_policy.onnx'))
    with isolated():
        for ns, expect in (('left', '/left'), ('', '')):
            graph = build_graph('arm3', sysid=True, policy=policy, namespace=ns)
            write_overlay(graph, tmp_path / f'overlay{ns}')
            for name in ('friction_id', 'sim_bridge'):
                spec = graph.node(name)
                args = ['--ros-args', '-r', f'__ns:=/{ns}']
                for path in spec.params_files:
                    args += ['--params-file', str(path)]
                rclpy.init(args=args)
                try:
                    node = _node_class(name)()
                    try:
                        if name == 'friction_id':
                            got = node.p['results_dir']
                            configured = node.get_parameter('results_dir').value
                            assert got == os.path.expanduser(configured) + expect, got
                        else:
                            for attr in ('recordings_dir', 'export_dir'):
                                configured = node.get_parameter(attr).value
                                assert getattr(node, attr) == \
                                    os.path.expanduser(configured) + expect, attr
                    finally:
                        node.destroy_node()
                finally:
                    rclpy.try_shutdown()


@pytest.mark.ros
def test_an_integer_for_a_floating_point_parameter_is_a_configuration_error_naming_it():
    """`rate_hz: 250` in a robot file (or `--param safety_supervisor:rate_hz=250`): the node
    says which parameter and how to write it, and exits 2, instead of a traceback."""
    import rclpy
    from rclpy.parameter import Parameter
    from simreal_ros.nodes.common import declare
    rclpy.init()
    try:
        node = rclpy.create_node('typed', parameter_overrides=[
            Parameter('rate_hz', Parameter.Type.INTEGER, 250)])
        with pytest.raises(ConfigError) as err:
            declare(node, 'rate_hz', 500.0, 'tick rate (Hz)', low=1.0)
        assert 'typed parameter rate_hz' in str(err.value) and '250.0 rather than 250' in \
            str(err.value)
        assert declare(node, 'other_hz', 500.0, 'a rate') == 500.0
        node.destroy_node()
    finally:
        rclpy.try_shutdown()


@pytest.mark.ros
def test_a_teardown_that_hangs_after_a_signal_is_cut_short_with_every_stack_printed():
    """A node whose destroy_node never returns (CI saw inertia_id hang past launch's 5 s):
    run() still exits after SIGINT, 0 as a signalled stop does, after before_shutdown, with a
    line naming the hang and the stacks of its threads (the blocked destroy_node among them).
    Without the bound the process never exits and the wait below fails."""
    import signal
    import subprocess
    import sys
    import time
    from simreal_ros.core.config import source_root
    code = '\n'.join([
        'import threading',
        'from rclpy.node import Node',
        'from simreal_ros.nodes.common import run',
        'class Stuck(Node):',
        '    NODE_NAME = "stuck_teardown"',
        '    def __init__(self):',
        '        super().__init__(self.NODE_NAME)',
        '        self.create_timer(0.05, lambda: print("spinning", flush=True))',
        '    def before_shutdown(self):',
        '        print("safe output sent", flush=True)',
        '    def destroy_node(self):',
        '        threading.Event().wait()',
        'raise SystemExit(run(Stuck))'])
    proc = subprocess.Popen([sys.executable, '-c', code], cwd=source_root(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = ''
        while 'spinning' not in line:
            line = proc.stdout.readline()
            assert line, 'the node never spun'
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=20)
        took = time.monotonic() - t0
        out = proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 0, out[-3000:]
    assert 'safe output sent' in out
    assert '[stuck_teardown] ERROR: the ROS teardown' in out and 'hung 3 s' in out, out[-3000:]
    assert 'destroy_node' in out, out[-3000:]      # where it hung, from the stack dump
    assert 'finished cleanly' not in out
    assert took >= 3.0, took                        # not before the bound


def test_udp_sockets_are_read_from_proc():
    # The measurement the start-up line rests on: this process's own sockets, as bound.
    import socket
    lo = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    anywhere = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    lo6 = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        lo.bind(('127.0.0.1', 0))
        anywhere.bind(('0.0.0.0', 0))       # bound only: nothing is sent
        lo6.bind(('::1', 0))
        found = udp_sockets()
        assert ('127.0.0.1', lo.getsockname()[1]) in found, found
        assert ('0.0.0.0', anywhere.getsockname()[1]) in found, found
        assert ('::1', lo6.getsockname()[1]) in found, found
        assert off_loopback(found) == [f'0.0.0.0:{anywhere.getsockname()[1]}']
    finally:
        for s in (lo, anywhere, lo6):
            s.close()
    assert udp_sockets(pid=2 ** 22 + 1) is None                 # no such process


def test_the_start_up_line_says_what_was_bound():
    # All on loopback: the note, with the count. One socket off loopback under LOCALHOST (the
    # Jazzy wheels with only FASTDDS_DEFAULT_PROFILES_FILE set: 0.0.0.0 and the external
    # address): a warning naming it, and no claim of loopback, whatever was set.
    on_lo = [('127.0.0.1', 7410), ('239.255.0.1', 7400), ('127.0.0.1', 7411)]
    [(level, text)] = transport_lines(False, True, 'loopback UDP', on_lo, 2)
    assert level == 'info' and 'served by loopback UDP' in text and 'Fast DDS 2' in text
    assert '3 UDP sockets, all on loopback' in text
    leaked = on_lo + [('0.0.0.0', 7400), ('192.0.2.2', 7412)]
    [(level, text)] = transport_lines(False, True, 'loopback UDP', leaked, 2)
    assert level == 'warning' and '0.0.0.0:7400, 192.0.2.2:7412' in text
    assert 'served by loopback' not in text
    assert transport_lines(False, True, 'loopback UDP', None, None) == []   # unknown: silent
    lines = transport_lines(True, True, 'SHM', on_lo, 3)
    assert [level for level, _ in lines] == ['warning']
    assert 'shared memory' in lines[0][1]
    # A wider discovery the user asked for is theirs: no warning about it.
    assert transport_lines(False, False, 'UDPv4', leaked, 3) == []


REALTIME_NODE = '\n'.join([
    'import gc, os, sys, threading',
    'from rclpy.node import Node',
    'from simreal_ros.nodes.common import declare_priority, run',
    'class Loop(Node):',
    '    NODE_NAME = "realtime_loop"',
    '    def __init__(self):',
    '        super().__init__(self.NODE_NAME)',
    '        declare_priority(self, 0, 10)',
    '        self.create_timer(0.05, self.tick)',
    '    def tick(self):',
    '        policy = os.sched_getscheduler(threading.get_native_id())',
    '        print(f"spinning policy {policy} frozen {gc.get_freeze_count()} "',
    '              f"switch {sys.getswitchinterval()}", flush=True)',
    'raise SystemExit(run(Loop))'])


def _run_realtime_node(prefix=(), preexec=None, params=()):
    """Start REALTIME_NODE; return (process, the lines up to its first tick)."""
    import subprocess
    import sys
    from simreal_ros.core.config import source_root
    cmd = list(prefix) + [sys.executable, '-c', REALTIME_NODE, '--ros-args'] + list(params)
    proc = subprocess.Popen(cmd, cwd=source_root(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, preexec_fn=preexec)
    lines = []
    while not lines or 'spinning' not in lines[-1]:
        line = proc.stdout.readline()
        assert line, 'the node never spun:\n' + ''.join(lines)
        lines.append(line)
    return proc, ''.join(lines)


def _stop(proc):
    import signal
    proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_thread_priority_puts_the_loop_thread_on_sched_fifo_and_says_so():
    """thread_priority 10 with lock_memory: the spinning thread (and the middleware's) on
    SCHED_FIFO 10, memory locked, said at start; read from outside in /proc/<pid>/task/<tid>/sched. Fails without
    set_thread_priority in run() (policy 0, SCHED_OTHER)."""
    try:   # the privilege to test with (root, or an rtprio limit of 10)
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    except OSError:
        pytest.skip('no privilege for SCHED_FIFO here (not root, no rtprio limit)')
    proc, out = _run_realtime_node(params=['-p', 'lock_memory:=true'])
    try:
        assert f'spinning policy {os.SCHED_FIFO}' in out, out
        assert 'on SCHED_FIFO priority 10, memory locked (mlockall)' in out, out
        tasks = os.listdir(f'/proc/{proc.pid}/task')
        policies = {}
        for tid in tasks:
            with open(f'/proc/{proc.pid}/task/{tid}/sched') as f:
                fields = {k.strip(): v.strip() for k, v in
                          (line.split(':', 1) for line in f if ':' in line)}
            policies[tid] = (int(fields['policy']), int(fields['prio']))
        # /proc's prio for SCHED_FIFO p is 99 - p
        assert policies[str(proc.pid)] == (os.SCHED_FIFO, 99 - 10), policies
        assert all(p == (os.SCHED_FIFO, 89) for p in policies.values()), policies
        with open(f'/proc/{proc.pid}/status') as f:
            locked = [line for line in f if line.startswith('VmLck')]
        assert locked and int(locked[0].split()[1]) > 0, locked
    finally:
        assert _stop(proc) == 0


def test_thread_priority_without_the_privilege_says_what_to_grant_and_runs():
    """Without CAP_SYS_NICE and with an rtprio limit of 0 (a normal user's default), the node
    says at start that thread_priority was not applied and what to grant (ulimit -r,
    limits.conf), then runs on the normal scheduler. Fails when the refusal raises (the node
    would not spin) or is silent."""
    import resource
    import shutil
    if shutil.which('setpriv') is None:
        pytest.skip('setpriv (util-linux) is needed to drop CAP_SYS_NICE')

    def no_rtprio():
        resource.setrlimit(resource.RLIMIT_RTPRIO, (0, 0))
    proc, out = _run_realtime_node(
        prefix=['setpriv', '--bounding-set', '-sys_nice', '--inh-caps', '-sys_nice'],
        preexec=no_rtprio)
    try:
        assert f'spinning policy {os.SCHED_OTHER}' in out, out
        assert 'thread_priority 10 not applied (Operation not permitted; rtprio limit 0)' \
            in out, out
        assert 'ulimit -r' in out and '/etc/security/limits.conf' in out, out
    finally:
        assert _stop(proc) == 0


def test_thread_priority_zero_leaves_the_scheduler_alone():
    """thread_priority:=0 (off): nothing changes and nothing is said about it. Whatever the
    priority, run() freezes the start-up objects out of the garbage collector (a full
    collection of them stalled policy_runner 17-31 ms) and makes a computing thread give the
    GIL back within 0.5 ms: fails without either (freeze count 0, switch interval 0.005)."""
    import re
    proc, out = _run_realtime_node(params=['-p', 'thread_priority:=0'])
    try:
        assert f'spinning policy {os.SCHED_OTHER}' in out, out
        assert 'SCHED_FIFO' not in out and 'thread_priority' not in out, out
        frozen = re.search(r'frozen (\d+) switch ([0-9.e-]+)', out)
        assert frozen and int(frozen.group(1)) > 1000, out
        assert float(frozen.group(2)) == 0.0005, out
    finally:
        assert _stop(proc) == 0

"""Real node processes and an observer over DDS, for the integration tests and the benches.

    from simreal_ros.client.rig import ARM3, Rig, wait_for
    with Rig(ARM3, supervisor={'stage_dwell_s': [1.0]}) as rig:   # sim_robot, then supervisor
        rig.wait_forwarding()                 # the probe plays the policy, holding the pose
        t = rig.signal('sim_robot', signal.SIGSTOP)    # SIGTERM, SIGKILL, SIGSTOP, SIGCONT
        t_safe = rig.first_safe_after(t)      # first safe hardware/command after t
        assert 'joint_states stale' in rig.state('estop_cause')
        assert rig.call('reset').success is False

Parts, each usable alone:
- `NodeProcess`: one simreal_ros node as its own process (`python -m simreal_ros.nodes.<node>`),
  parameter files plus overrides, its log, signals.
- `wait_for`: wait on a condition with a timeout (never a sleep as synchronisation).
- `Spinner`: spin a node of this process in a background thread.
- `SafetyProbe`: the policy side on `policy/command`, every `hardware/command` with its arrival
  time, the latched `safety/state` and the supervisor's services.
- `Recorder`: every message on a topic with its arrival time (`Rig.watch`).
- `stand_in_policy`: the generated arm3 ONNX policy (nothing binary is committed).
- `Rig`: sim_robot + safety_supervisor (+ policy_runner) processes with a probe and recorders
  of `joint_states` and `imu`; `with Rig(...)` tears it all down.

The caller calls `rclpy.init()` once (the tests' modules and the benches' main do).
"""
import math
import os
from pathlib import Path
import signal as signals
import subprocess
import sys
import threading
import time

from simreal_ros.core.config import source_root

REPO = source_root()   # None when installed: node processes then start in the cwd
ARM3 = (REPO or Path('.')) / 'config' / 'robots' / 'arm3.yaml'
ARM3_NAMES = ['shoulder_yaw', 'shoulder_pitch', 'elbow_pitch']


def loopback_udp_env():
    """Environment changes for node processes on one computer over loopback UDP without
    shared memory: config/fastdds/loopback_udp.xml with the default discovery range (the
    transport a robot's computers get from the nodes' FASTDDS_BUILTIN_TRANSPORTS=UDPv4;
    LOCALHOST would add shared memory). Traffic stays on 127.0.0.1."""
    from simreal_ros.core.config import share_dir
    from simreal_ros.nodes.common import PROFILES_VARIABLES, profiles_variables
    profile = str(share_dir() / 'config' / 'fastdds' / 'loopback_udp.xml')
    # The installed Fast DDS's variable: 2 (Humble, Jazzy) reads FASTRTPS_DEFAULT_PROFILES_FILE
    # only, 3 the FASTDDS_ one (and warns about the other); the other one is removed. Humble's
    # ROS_LOCALHOST_ONLY=1 would bring shared memory back (nodes/common.prefer_udp_transport).
    chosen = profiles_variables()
    return {'ROS_AUTOMATIC_DISCOVERY_RANGE': 'SYSTEM_DEFAULT',
            **{key: profile if key in chosen else None for key in PROFILES_VARIABLES},
            'ROS_LOCALHOST_ONLY': None, 'FASTDDS_BUILTIN_TRANSPORTS': None}


class environment:
    """Apply environment `changes` (a value None removes the variable) to this process for the
    duration of a `with` block: rclpy.init() inside it and node processes started inside it
    (they inherit os.environ) get them. `with environment(loopback_udp_env()): rclpy.init()`
    puts the test process itself on loopback UDP: a test that SIGSTOPs a node must not talk to
    it over shared memory, where a publish to the stopped process blocks for 1-2 s holding the
    GIL (rclpy's publish does not release it), and the whole test process stops with it."""

    def __init__(self, changes):
        self.changes = dict(changes)
        self.saved = {}

    def __enter__(self):
        self.saved = {key: os.environ.get(key) for key in self.changes}
        for key, value in self.changes.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = str(value)
        return self

    def __exit__(self, *exc):
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def stall(pid, seconds):
    """SIGSTOP `pid` for `seconds`, timed by a separate process (a shell), so that the stall's
    length does not depend on this process getting the CPU or the GIL; return the Popen."""
    return subprocess.Popen(['sh', '-c', f'kill -STOP {int(pid)} && sleep {float(seconds):.3f}; '
                             f'kill -CONT {int(pid)}'])


def unitree_wire(interface='unitree_hg'):
    """Parameters putting sim_robot (as a Unitree robot) and unitree_bridge on one private
    CycloneDDS domain on loopback (simreal_ros.deploy.graph.rehearsal_wire)."""
    from simreal_ros.deploy.graph import rehearsal_wire
    return rehearsal_wire(interface)


def process_env(changes=None):
    """This process's environment with `changes` (a value None removes the variable)."""
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    for key, value in (changes or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    return env


class NodeProcess:
    """A simreal_ros node started as its own process (python -m simreal_ros.nodes.<node>)."""

    def __init__(self, node, params_file=None, params=None, extra_args=(), name=None, env=None):
        cmd = [sys.executable, '-m', f'simreal_ros.nodes.{node}', '--ros-args']
        if name:
            cmd += ['-r', f'__node:={name}']
        if params_file:
            cmd += ['--params-file', str(params_file)]
        if params:
            # A later params file overrides an earlier one for the same node; `-p` would not
            # (it is a wildcard override, weaker than the file's node section).
            import yaml
            override = os.path.join(
                '/tmp', f'simreal-test-params-{os.getpid()}-{time.time_ns()}.yaml')
            with open(override, 'w') as f:
                yaml.safe_dump({name or node: {'ros__parameters': dict(params)}}, f)
            cmd += ['--params-file', override]
        cmd += list(extra_args)
        self.cmd = cmd
        self.node = name or node
        self.log_path = os.path.join(
            '/tmp', f'simreal-test-{node}-{os.getpid()}-{time.time_ns()}.log')
        self._log = open(self.log_path, 'w+')
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, cwd=REPO,
                                     env=process_env(env))

    @property
    def pid(self):
        return self.proc.pid

    def output(self):
        if not self._log.closed:
            self._log.flush()
        with open(self.log_path) as f:
            return f.read()

    def signal(self, sig):
        """Send `sig` (SIGTERM, SIGKILL, SIGSTOP, SIGCONT, ...); return the monotonic time."""
        os.kill(self.proc.pid, sig)
        return time.monotonic()

    def wait_exit(self, timeout):
        return self.proc.wait(timeout=timeout)

    def stop(self, timeout=10.0):
        """Stop with SIGINT (as Ctrl-C; SIGCONT first, in case it was SIGSTOPped), then kill."""
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signals.SIGCONT)
            except OSError:
                pass
            self.proc.send_signal(signals.SIGINT)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        self.stop()
        if exc_type is not None:   # shown under "Captured stdout" of the failing test
            lines = self.output().splitlines()
            print(f'--- last {min(len(lines), 60)} lines of {" ".join(self.cmd[2:3])} '
                  f'({self.log_path}) ---')
            print('\n'.join(lines[-60:]))


def wait_for(predicate, timeout, interval=0.01, what='condition'):
    """Wait until predicate() is truthy; return its value or raise AssertionError on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f'timed out after {timeout} s waiting for {what}')
        time.sleep(interval)


class Spinner:
    """Spin a node of the test process in a background thread."""

    def __init__(self, node):
        from rclpy.executors import SingleThreadedExecutor
        self.node = node
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(node)
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self._stop = False
        self.thread.start()

    def _spin(self):
        while not self._stop:
            self.executor.spin_once(timeout_sec=0.05)

    def stop(self):
        self._stop = True
        self.thread.join(timeout=2)
        self.executor.remove_node(self.node)
        self.node.destroy_node()


def stand_in_policy(path, nan_gate=None):
    """Write the generated arm3 stand-in policy (scripts/onnx_policies.py) to `path`."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        'onnx_policies', (REPO or Path('.')) / 'scripts' / 'onnx_policies.py')
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.arm3(str(path), nan_gate=nan_gate)


def record_qos():
    """Return the QoS of an observer that must not miss an output (reliable, keep 1000)."""
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1000,
                      reliability=ReliabilityPolicy.RELIABLE)


def is_safe(msg):
    """A safe-mode hardware/command: damping (no positions, zero velocities) or zero torque."""
    return (len(msg.position) == 0 and all(v == 0.0 for v in msg.velocity)
            and all(v == 0.0 for v in msg.effort))


class SafetyProbe:
    """A test node: the policy side, the hardware/command recorder, the operator's services."""

    def __init__(self, names=ARM3_NAMES, name='safety_probe'):
        import json
        import rclpy
        from sensor_msgs.msg import JointState
        from std_msgs.msg import String
        from std_srvs.srv import SetBool, Trigger
        from simreal_ros.nodes.common import COMMAND_QOS, LATCHED_QOS, SENSOR_SUB_QOS
        self._json, self._JointState, self._Trigger = json, JointState, Trigger
        self.names = list(names)
        self.node = rclpy.create_node(name)
        self.lock = threading.Lock()
        self.outputs = []   # (monotonic arrival, msg)
        self.output_sent = []   # the supervisor's publish time of each (s, system clock)
        self.state = {}
        self.joint_states = None
        # Made when the probe first plays the policy: a second publisher of policy/command
        # beside a policy_runner is a rogue to the supervisor.
        self.policy = None
        self._command_qos = COMMAND_QOS
        from rclpy.subscription import Subscription
        # Jazzy's rclpy and later pass the message info to a callback that takes two
        # arguments (one with a default is called with the message only); Humble's has none.
        on_output = (self._on_output_info if hasattr(Subscription, 'CallbackType')
                     else self._on_output)
        self.node.create_subscription(JointState, 'hardware/command', on_output, record_qos())
        self.node.create_subscription(String, 'safety/state', self._on_state, LATCHED_QOS)
        self.node.create_subscription(JointState, 'joint_states', self._on_joint_states,
                                      SENSOR_SUB_QOS)
        self.clients = {k: self.node.create_client(Trigger, f'safety/{k}')
                        for k in ('estop', 'reset', 'advance_stage')}
        self.select = self.node.create_client(SetBool, 'safety/select_sysid')
        self.target = None          # what the policy thread publishes (None = silent)
        self.sent = 0
        self._stop = threading.Event()
        self.spinner = Spinner(self.node)
        self.thread = threading.Thread(target=self._policy_loop, daemon=True)
        self.thread.start()

    def _on_output_info(self, msg, info):
        # The writer's source timestamp is when the supervisor published, free of this
        # process's scheduling delays.
        self._on_output(msg, info['source_timestamp'] * 1e-9)

    def _on_output(self, msg, sent=math.nan):
        with self.lock:
            self.outputs.append((time.monotonic(), msg))
            self.output_sent.append(sent)

    def _on_state(self, msg):
        with self.lock:
            self.state = self._json.loads(msg.data)

    def _on_joint_states(self, msg):
        with self.lock:
            self.joint_states = msg

    def _policy_loop(self):
        while not self._stop.is_set():
            target = self.target
            if target is not None:
                self.publish(target)
            self._stop.wait(0.01)   # a 100 Hz policy

    def publish(self, position):
        msg = self._JointState(name=self.names, position=[float(v) for v in position])
        msg.header.stamp = self.node.get_clock().now().to_msg()
        if self.policy is None:
            self.policy = self.node.create_publisher(self._JointState, 'policy/command',
                                                     self._command_qos)
        self.policy.publish(msg)
        self.sent += 1

    def hold_current(self):
        """Make the policy command the measured position (what a reset needs)."""
        with self.lock:
            js = self.joint_states
        lookup = dict(zip(js.name, js.position))
        self.target = [lookup[n] for n in self.names]

    def get(self, key):
        with self.lock:
            return self.state.get(key)

    def count(self):
        with self.lock:
            return len(self.outputs)

    def since(self, t):
        with self.lock:
            return [(ta, m) for ta, m in self.outputs if ta >= t]

    def since_sent(self, t):
        """(arrival, supervisor's publish time, msg) of the outputs that arrived since t."""
        with self.lock:
            return [(ta, sent, m) for (ta, m), sent in zip(self.outputs, self.output_sent)
                    if ta >= t]

    def call(self, client, request=None):
        assert client.wait_for_service(timeout_sec=30), 'safety_supervisor services not found'
        future = client.call_async(request if request is not None else self._Trigger.Request())
        wait_for(future.done, 15, what='service response')
        return future.result()

    def close(self):
        self._stop.set()
        self.thread.join(timeout=2)
        self.spinner.stop()


class Intruder:
    """A node that should not publish, publishing `topic` (JointState) at 100 Hz until closed.

    `make()` returns each message (the header stamp is set here). `first_sent` is the
    monotonic time of its first message. For the rogue-publisher tests and benches.
    """

    def __init__(self, name, topic, qos, make):
        import rclpy
        from sensor_msgs.msg import JointState
        self.node = rclpy.create_node(name)
        self.pub = self.node.create_publisher(JointState, topic, qos)
        self.make = make
        self.sent = 0
        self.first_sent = None
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while not self._stop.is_set():
            msg = self.make()
            msg.header.stamp = self.node.get_clock().now().to_msg()
            self.pub.publish(msg)
            if self.first_sent is None:
                self.first_sent = time.monotonic()
            self.sent += 1
            self._stop.wait(0.01)

    def close(self):
        self._stop.set()
        self.thread.join(timeout=2)
        self.node.destroy_node()


class Recorder:
    """Every message on one topic as (monotonic arrival, msg), under a lock."""

    def __init__(self, node, msg_type, topic, qos):
        self.lock = threading.Lock()
        self.items = []
        self.sub = node.create_subscription(msg_type, topic, self._on, qos)

    def _on(self, msg):
        with self.lock:
            self.items.append((time.monotonic(), msg))

    def all(self):
        with self.lock:
            return list(self.items)

    def since(self, t):
        with self.lock:
            return [(ta, m) for ta, m in self.items if ta >= t]

    def times(self):
        with self.lock:
            return [t for t, _ in self.items]

    def last_before(self, t):
        """Return the arrival time of the last message at or before `t` (None if none)."""
        return max((ta for ta in self.times() if ta <= t), default=None)

    def __len__(self):
        with self.lock:
            return len(self.items)


class Rig:
    """sim_robot + safety_supervisor (+ policy_runner) processes and an observer for a scenario.

    `robot`: the robot file (every node's parameters). `supervisor`, `sim`, `policy_runner`:
    parameter overrides per node (`policy_runner=None`: not started; the probe then plays the
    policy on `policy/command`). The supervisor's stage file goes to a fresh temporary path
    unless overridden. Bring-up order of a real robot: the driver streams steadily, then the
    supervisor starts (a driver's start-up stall would otherwise be a true stale-input e-stop);
    `supervisor_first` starts the supervisor first and waits for it (a robot that falls
    without commands, the G1). The robot stands from the start (`hold_until_command` false).
    `env`: environment changes for the node processes (None as a value removes a variable),
    e.g. `loopback_udp_env()`. `bridge`: parameter overrides for unitree_bridge (a dict, {}
    for none): sim_robot then plays a Unitree robot (`interface` from the dict, default
    unitree_hg) and unitree_bridge between them is the driver, as on the real robot.
    """

    setup_resets = 0   # bring-up e-stops (load) reset by wait_forwarding, over all rigs
    observer_nice = None   # the nice value this (observing) process runs at, once set

    def __init__(self, robot=ARM3, names=None, supervisor=None, sim=None, policy_runner=None,
                 supervisor_first=False, tmp=None, env=None, bridge=None, probe_name=None):
        import tempfile
        from sensor_msgs.msg import Imu, JointState
        from simreal_ros.core.config import load_node_params
        from simreal_ros.nodes.common import COMMAND_QOS, SENSOR_SUB_QOS
        self.robot = robot
        self.env = env
        self.procs = {}
        Rig.observe_at_node_priority()
        self.params = load_node_params(robot, 'safety_supervisor')
        names = names or list(self.params['joint_names'])
        tmp = tmp or tempfile.mkdtemp(prefix='simreal_rig_')
        over = {'stage_file': str(Path(tmp) / f'stages-{time.time_ns()}.json')}
        over.update(supervisor or {})
        self.params.update(over)
        self.period = 1.0 / float(self.params.get('rate_hz', 500.0))
        self.probe = SafetyProbe(names, name=probe_name or Rig.probe_name())
        node = self.node = self.probe.node
        self.joint_states = Recorder(node, JointState, 'joint_states', SENSOR_SUB_QOS)
        self.policy_commands = Recorder(node, JointState, 'policy/command', COMMAND_QOS)
        self.imu = Recorder(node, Imu, 'imu', SENSOR_SUB_QOS)
        sim = dict({'hold_until_command': False}, **(sim or {}))
        if bridge is not None:
            wire = unitree_wire(bridge.get('interface', 'unitree_hg'))
            sim = dict(wire, **sim)
            bridge = dict(wire, **bridge)
        try:
            if supervisor_first:
                self.start('safety_supervisor', over)
                wait_for(lambda: self.probe.get('output') == 'waiting', 60, what='supervisor up')
            self.start('sim_robot', sim)
            if bridge is not None:
                self.start('unitree_bridge', bridge)
            if not supervisor_first:
                self.wait_steady()
                self.start('safety_supervisor', over)
            if policy_runner is not None:
                self.start('policy_runner', policy_runner)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def probe_name():
        """A fresh name for the observing node (known before the rig starts, for a scenario
        that lets it publish a driver's or policy's topic: driver_publishers)."""
        return f'rig_probe_{os.getpid()}_{time.time_ns()}'

    @classmethod
    def observe_at_node_priority(cls, nice=-10):
        """Run this process at the time-critical nodes' priority (`process_priority`), when
        allowed: an observer below them saw their outputs arrive in bunches and measured
        rate-limit 'violations' that the supervisor's own clock did not have."""
        if cls.observer_nice is None:
            from simreal_ros.nodes.common import set_process_nice
            try:
                set_process_nice(nice)
                cls.observer_nice = nice
            except OSError:
                cls.observer_nice = os.getpriority(os.PRIO_PROCESS, 0)

    # -- processes ------------------------------------------------------------------------
    def start(self, node, params=None, extra_args=()):
        """Start `node` with the robot file and `params` overrides; return its NodeProcess."""
        proc = NodeProcess(node, params_file=self.robot, params=params, extra_args=extra_args,
                           env=self.env)
        self.procs[node] = proc
        return proc

    def __getitem__(self, node):
        return self.procs[node]

    @property
    def sup(self):
        return self.procs['safety_supervisor']

    @property
    def sim(self):
        return self.procs['sim_robot']

    def signal(self, node, sig):
        """Send `sig` to `node`'s process; return the monotonic time it was sent."""
        return self.procs[node].signal(sig)

    def logs(self, chars=1500):
        """Return the last `chars` of every process's log, by node."""
        return {name: proc.output()[-chars:] for name, proc in self.procs.items()}

    # -- observing ------------------------------------------------------------------------
    def teleop(self, vx, period=0.1):
        """Publish cmd_vel with linear.x = `vx` every `period` s from a thread, as a joystick
        held forward does; return the Event that stops it."""
        from geometry_msgs.msg import Twist
        pub = self.node.create_publisher(Twist, 'cmd_vel', 10)
        stop = threading.Event()

        def run():
            while not stop.is_set():
                msg = Twist()
                msg.linear.x = float(vx)
                pub.publish(msg)
                stop.wait(period)
        threading.Thread(target=run, daemon=True).start()
        return stop

    def watch(self, msg_type, topic, qos=None):
        """Record every message on `topic` from now on; return the Recorder."""
        return Recorder(self.node, msg_type, topic, qos if qos is not None else record_qos())

    def state(self, key):
        """Return `key` of the latest safety/state."""
        return self.probe.get(key)

    def call(self, service):
        """Call the supervisor's Trigger service safety/<service> (estop, reset, advance_stage)."""
        return self.probe.call(self.probe.clients[service])

    def service(self, srv_type, name, request, timeout=15.0):
        """Call any service `name` with `request`; return the response."""
        client = self.node.create_client(srv_type, name)
        try:
            assert client.wait_for_service(timeout_sec=30), f'service {name} not found'
            future = client.call_async(request)
            wait_for(future.done, timeout, what=f'{name} response')
            return future.result()
        finally:
            self.node.destroy_client(client)

    def enable_policy(self, value=True):
        """Call policy_runner/enable (SetBool); return the response."""
        from std_srvs.srv import SetBool
        return self.service(SetBool, 'policy_runner/enable', SetBool.Request(data=bool(value)))

    def wait_steady(self, window=1.0, max_gap=0.05, timeout=60.0):
        """Wait until joint_states arrive steadily (no gap over `max_gap` in `window` s)."""
        def steady():
            now = time.monotonic()
            recent = [t for t in self.joint_states.times() if t > now - window]
            if len(recent) < 10 or recent[0] > now - window + max_gap:
                return False
            gaps = [b - a for a, b in zip(recent, recent[1:])] + [now - recent[-1]]
            return max(gaps) < max_gap
        wait_for(steady, timeout, interval=0.05, what='steady joint_states from sim_robot')

    def wait_forwarding(self, timeout=60, hold=None):
        """Bring the rig to forwarding; a bring-up e-stop (load) is reset and counted.

        `hold`: the probe plays the policy, holding the measured pose (default: unless a
        policy_runner runs; False when another process is the policy).
        """
        hold = 'policy_runner' not in self.procs if hold is None else hold
        wait_for(lambda: self.probe.joint_states is not None, timeout, what='joint_states')
        if hold:
            self.probe.hold_current()

        def forwarding():
            if self.probe.get('output') == 'forwarding':
                return True
            if self.probe.get('estop'):
                if hold:
                    self.probe.hold_current()
                if self.call('reset').success:
                    Rig.setup_resets += 1
            return False
        wait_for(forwarding, timeout, interval=0.2, what='supervisor forwarding')

    def first_safe_after(self, t, timeout=5.0):
        """Return the arrival time of the first safe hardware/command at or after `t`."""
        wait_for(lambda: any(is_safe(m) for _, m in self.probe.since(t)), timeout,
                 what='a safe hardware/command')
        return next(ta for ta, m in self.probe.since(t) if is_safe(m))

    def close(self):
        """Stop the probe and every process (in reverse start order)."""
        self.probe.close()
        for proc in reversed(list(self.procs.values())):
            proc.stop()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            # A test that failed inside the rig: what each process said, and the last
            # safety/state, on stderr (pytest shows it with the failure). A flake that
            # cannot be reproduced is then read from the run that had it.
            try:
                sys.stderr.write(f'--- rig: {exc_type.__name__} inside the rig; last '
                                 f'safety/state: {self.probe.state}\n')
                for name, text in self.logs(4000).items():
                    sys.stderr.write(f'--- {name} (last 4000 characters)\n{text}\n')
            except Exception as err:  # noqa: BLE001 - never hide the test's own failure
                sys.stderr.write(f'--- rig: could not collect the logs: {err!r}\n')
        self.close()

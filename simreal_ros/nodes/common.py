"""What every simreal_ros node shares: QoS profiles, parameter declaration, main()."""
import inspect
import math
import os
import sys
import time

import rclpy
from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.serialization import deserialize_message
from rclpy.qos import (DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy)

from simreal_ros.core.config import ConfigError

# rcl_interfaces ParameterType values by name, for the tables people read.
PARAM_TYPES = {1: 'bool', 2: 'int', 3: 'double', 4: 'string', 5: 'bytes', 6: 'bool[]',
               7: 'int[]', 8: 'double[]', 9: 'string[]'}

# Sensor streams are best-effort keep-last both ways: a slow reliable reader must never be able
# to stall a publisher (a reliable joint_states writer blocked sim_robot's physics loop in a
# test). Tools with default QoS (rviz displays) must be set to best-effort for these topics.
SENSOR_SUB_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=5,
                            reliability=ReliabilityPolicy.BEST_EFFORT)
SENSOR_PUB_QOS = SENSOR_SUB_QOS
COMMAND_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1,
                         reliability=ReliabilityPolicy.RELIABLE)
LATCHED_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1,
                         reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)


def declare(node, name, default, description, *, low=None, high=None, read_only=False,
            dynamic_typing=False):
    """Declare a parameter with a descriptor (description and range) and return its value."""
    desc = ParameterDescriptor(description=description, read_only=read_only,
                               dynamic_typing=dynamic_typing)
    if low is not None or high is not None:
        if isinstance(default, bool):
            pass
        elif isinstance(default, int):
            desc.integer_range = [IntegerRange(
                from_value=int(low if low is not None else -2**31),
                to_value=int(high if high is not None else 2**31 - 1), step=0)]
        else:
            desc.floating_point_range = [FloatingPointRange(
                from_value=float(low if low is not None else -math.inf),
                to_value=float(high if high is not None else math.inf), step=0.0)]
    from rclpy.exceptions import InvalidParameterTypeException
    try:
        return node.declare_parameter(name, default, desc).value
    except InvalidParameterTypeException as exc:
        hint = (' (a floating-point parameter: write the value with a decimal point, '
                '250.0 rather than 250)' if isinstance(default, float) else '')
        raise ConfigError(f'{node.get_name()} parameter {name}: {exc}{hint}') from None


def set_process_nice(nice):
    """Set the nice value of every thread of this process; raise OSError when not allowed.

    On Linux the nice value is per thread: the middleware's threads (which receive the
    messages) exist already and get it too; threads started later inherit it.
    """
    import os
    tasks = ([int(t) for t in os.listdir('/proc/self/task')]
             if os.path.isdir('/proc/self/task') else [0])
    for tid in tasks:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
        except ProcessLookupError:
            pass   # a thread that ended meanwhile


def declare_priority(node, default, thread_priority=0):
    """Declare `process_priority` (a nice value) and apply it; return (applied, message).

    Also declares `thread_priority` (default `thread_priority`), kept in
    `node.thread_priority`: the real-time priority run() gives the node's loop thread
    (set_thread_priority).

    The time-critical nodes ask for more CPU priority than everything else on the computer,
    as ros2_control_node asks for its real-time thread: on a 2-core machine a `ros2` command
    line starting up starved the 500 Hz chain for 200 ms (an e-stop on stale joint_states).
    Raising priority needs root or CAP_SYS_NICE (`setcap cap_sys_nice+ep` on the interpreter,
    or `ulimit -e`/limits.conf `nice`); without it the node says so once and runs as it is.
    """
    import os
    nice = declare(node, 'process_priority', default, 'nice value this process asks for at '
                   'start (lower = more CPU priority; 0 = leave as started). Needs root or '
                   'CAP_SYS_NICE to go below 0; without it a warning, and the node runs on',
                   low=-20, high=19, read_only=True)
    node.thread_priority = declare(node, 'thread_priority', int(thread_priority),
                                   THREAD_PRIORITY_DOC, low=0, high=99, read_only=True)
    node.lock_memory = declare(node, 'lock_memory', False, LOCK_MEMORY_DOC, read_only=True)
    if nice == 0:
        return False, 'process_priority 0: left as started'
    try:
        set_process_nice(nice)
        return True, f'process priority nice {os.getpriority(os.PRIO_PROCESS, 0)}'
    except OSError as exc:
        text = (f'process_priority {nice} not applied ({exc.strerror}): this node competes '
                'for the CPU at the default priority; grant CAP_SYS_NICE or run as root, see '
                'docs/real_robot.md')
        node.get_logger().warning(text)
        return False, text


GIL_SWITCH_S = 0.0005   # see run()
TRACE_ENV = 'SIMREAL_TIMING_TRACE'


class TimingTrace:
    """This process's timing events for bench/policy_staleness.py, kept only when the
    environment variable SIMREAL_TIMING_TRACE names a folder (`timing_trace()` is None
    otherwise, and the nodes record nothing).

    Nodes add events with `add(kind, *values)` (times on the system clock, time.time(), which
    is ROS time off simulation, so the processes' events compare); the garbage collector's
    pauses of 0.1 ms and more are recorded as ('gc', start, seconds, generation). run() writes
    <folder>/<node name>-<pid>.json at exit.
    """

    def __init__(self, folder, keep=200000):
        import gc
        self.folder = folder
        self.keep = keep
        self.events = []
        self.gc_total = [0, 0, 0]   # collections per generation
        self._gc_start = None
        gc.callbacks.append(self._on_gc)

    def add(self, kind, *values):
        if len(self.events) < self.keep:
            self.events.append((kind,) + values)

    def _on_gc(self, phase, info):
        if phase == 'start':
            self._gc_start = time.perf_counter()
            return
        if self._gc_start is None:
            return
        seconds = time.perf_counter() - self._gc_start
        self._gc_start = None
        generation = info.get('generation', 0)
        self.gc_total[generation] += 1
        if seconds >= 1e-4:
            self.add('gc', time.time() - seconds, seconds, generation)

    def write(self, name):
        import json
        os.makedirs(self.folder, exist_ok=True)
        path = os.path.join(self.folder, f'{name}-{os.getpid()}.json')
        with open(path + '.part', 'w') as f:
            json.dump({'node': name, 'pid': os.getpid(), 'gc_collections': self.gc_total,
                       'events': self.events}, f)
        os.replace(path + '.part', path)
        return path


_TRACE = []


def timing_trace():
    """The process's TimingTrace when SIMREAL_TIMING_TRACE is set, else None."""
    if not _TRACE:
        folder = os.environ.get(TRACE_ENV)
        _TRACE.append(TimingTrace(folder) if folder else None)
    return _TRACE[0]


THREAD_PRIORITY_DOC = (
    "real-time priority (SCHED_FIFO, 1-99) of the node's loop thread, as controller_manager's "
    "thread_priority, and of the process's other threads (they share Python's lock); 0 = off "
    '(process_priority only); lock_memory adds mlockall. Needs root or an rtprio limit '
    '(`ulimit -r`, /etc/security/limits.conf); without it the node says so at start and runs '
    'on')
LOCK_MEMORY_DOC = (
    'with thread_priority: lock the process in memory (mlockall, current and future pages), '
    'so no page is swapped out or faulted in late. Off by default: a Python node maps 0.9-1.5 '
    'GB (every library, every thread stack) and locking faults all of it in, a whole graph '
    'more than a small robot computer has; turn it on where the computer swaps and has room')
RTPRIO_HINT = ("grant an rtprio limit (`ulimit -r 99` in the shell that starts it, or a line "
               "'<user> - rtprio 99' in /etc/security/limits.conf, then log in again) or run "
               'as root; see docs/real_robot.md, real-time scheduling')
MCL_CURRENT, MCL_FUTURE = 1, 2


def lock_memory():
    """mlockall(MCL_CURRENT | MCL_FUTURE); return '' or why it failed."""
    import ctypes
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.mlockall(MCL_CURRENT | MCL_FUTURE) == 0:
            return ''
        return os.strerror(ctypes.get_errno())
    except (OSError, AttributeError) as exc:
        return str(exc)


def set_thread_priority(priority, lock=True):
    """Put this process's threads on SCHED_FIFO at `priority` and, with `lock`, lock its
    memory; return (applied, the start-up line). Call it from the loop thread.

    As ros2_control's controller_manager does for its update loop: the thread that must keep
    its period preempts every normal thread (other processes' busy loops too), and no page of
    the process is swapped out or faulted in late. In Python every thread of the process
    takes Python's lock (the GIL) in turn: a middleware or worker thread holding it while
    preempted by ordinary work stops the loop thread as surely as its own preemption, so
    every thread of the process gets the priority (threads started later inherit it). Needs
    root or an rtprio limit of at least `priority`; without it nothing changes and the line
    says what to grant.
    """
    import threading
    tid = threading.get_native_id()
    if priority <= 0:
        return False, 'thread_priority 0: the loop thread keeps the normal scheduler'
    param = os.sched_param(int(priority))
    try:
        os.sched_setscheduler(tid, os.SCHED_FIFO, param)
    except (OSError, AttributeError) as exc:
        why = getattr(exc, 'strerror', None) or str(exc)
        try:
            import resource
            limit = resource.getrlimit(resource.RLIMIT_RTPRIO)[0]
            why += f'; rtprio limit {"unlimited" if limit < 0 else limit}'
        except (ImportError, AttributeError, ValueError, OSError):
            pass
        return False, (f'thread_priority {priority} not applied ({why}): the loop thread runs '
                       f'on the normal scheduler at its nice value; {RTPRIO_HINT}')
    others = 0
    for task in _tasks():
        if task != tid:
            try:
                os.sched_setscheduler(task, os.SCHED_FIFO, param)
                others += 1
            except OSError:
                pass   # a thread that ended meanwhile
    text = (f'loop thread {tid} and {others} other thread(s) on SCHED_FIFO priority '
            f'{priority}')
    if lock:
        failed = lock_memory()
        text += (', memory locked (mlockall)' if not failed else
                 f'; memory not locked ({failed}: raise `ulimit -l` / limits.conf memlock)')
    return True, text


def _tasks():
    """This process's thread ids (just this one where /proc is missing)."""
    try:
        return [int(t) for t in os.listdir('/proc/self/task')]
    except OSError:
        return [0]


def freeze_start_up_objects():
    """Collect once, then leave every object made so far out of later garbage collections
    (gc.freeze), before the node's loop starts.

    A node's start-up leaves a large heap of long-lived objects (rclpy, numpy, onnxruntime,
    MuJoCo, the robot file) that the loop never frees; a full (generation 2) collection went
    through all of them while the loop waited: 17-47 ms in policy_runner and 47-192 ms in
    sim_robot (bench/policy_staleness.py traces), a policy command three periods old at the
    supervisor. Frozen, a collection only visits what the loop itself made.
    """
    import gc
    gc.collect()
    gc.freeze()


def stamp_to_sec(stamp):
    """Return a builtin_interfaces/Time as float seconds."""
    return stamp.sec + stamp.nanosec * 1e-9


class _Stop:
    """SIGINT/SIGTERM handling that leaves the ROS context up until the node has shut down.

    rclpy's own handlers shut the context down inside the signal, after which a node can no
    longer publish (the supervisor's last, safe output would be lost) and a second signal
    interrupts destroy_node with a traceback. Here the first signal only asks the spin loop to
    stop; later ones (launch sends SIGINT twice when it has no terminal) are noted and ignored.
    """

    def __init__(self):
        import signal
        self.signal = None
        self.previous = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        if self.signal is None:
            self.signal = signum

    def restore(self):
        """Ignore further signals: the node is gone, a late one must not kill the exit (-15)."""
        import signal
        for sig in self.previous:
            signal.signal(sig, signal.SIG_IGN)


# The variables naming a Fast DDS XML profiles file: Fast DDS 3 (Kilted and later) reads the
# first only, Fast DDS 2 (Humble 2.6, Jazzy 2.14) the second only (test/data/distro_api.json).
PROFILES_VARIABLES = ('FASTDDS_DEFAULT_PROFILES_FILE', 'FASTRTPS_DEFAULT_PROFILES_FILE')
TRANSPORT_CHOICES = ('FASTDDS_BUILTIN_TRANSPORTS',) + PROFILES_VARIABLES
# The shared-memory segments each Fast DDS maps (/dev/shm/<prefix><id>): 3 fastdds_, 2 fastrtps_.
SHM_PREFIXES = ('/dev/shm/fastdds_', '/dev/shm/fastrtps_')


def loopback_profile_path():
    """config/fastdds/loopback_udp.xml in this installation's share folder, or None."""
    try:
        from simreal_ros.core.config import share_dir
        path = share_dir() / 'config' / 'fastdds' / 'loopback_udp.xml'
    except Exception:  # noqa: BLE001 - no share folder: the caller keeps the environment
        return None
    return path if path.is_file() else None


# Distros whose rcl reads ROS_LOCALHOST_ONLY but not ROS_AUTOMATIC_DISCOVERY_RANGE (Iron and
# later read the range; Jazzy still honours ROS_LOCALHOST_ONLY, deprecated, and lets it prevail
# with a warning in every process; Kilted's rcl no longer reads it: test/data/distro_api.json).
LOCALHOST_ONLY_DISTROS = ('humble',)


def _distro(env):
    return env.get('ROS_DISTRO', '').strip().lower()


def fastdds_major(maps='/proc/self/maps'):
    """The major version of the Fast DDS library this process has loaded (2 or 3), or None.

    Read from the library mapped (libfastrtps.so.2.x: Fast DDS 2 of Humble and Jazzy;
    libfastdds.so.3.x: Fast DDS 3 of Kilted and later), not from ROS_DISTRO, which the PyPI
    wheels leave unset. None before rmw_fastrtps is loaded, for another middleware, or where
    /proc is missing.
    """
    try:
        with open(maps) as f:
            text = f.read()
    except OSError:
        return None
    if '/libfastdds.so.3' in text:
        return 3
    if '/libfastrtps.so.2' in text:
        return 2
    return None


def installed_fastdds_major(environ=None):
    """The major version of the Fast DDS library installed for this process (2 or 3), or None
    when none or both are found: read before rclpy loads it, from the library folders the
    loader and ROS use (LD_LIBRARY_PATH, each AMENT_PREFIX_PATH's lib, this Python's prefix).
    """
    import glob
    import sys
    env = os.environ if environ is None else environ
    dirs = [d for d in env.get('LD_LIBRARY_PATH', '').split(os.pathsep) if d]
    dirs += [os.path.join(p, 'lib') for p in env.get('AMENT_PREFIX_PATH', '').split(os.pathsep)
             if p]
    dirs.append(os.path.join(sys.prefix, 'lib'))
    found = set()
    for d in dict.fromkeys(dirs):
        if glob.glob(os.path.join(d, 'libfastdds.so.3*')):
            found.add(3)
        if glob.glob(os.path.join(d, 'libfastrtps.so.2*')):
            found.add(2)
    return found.pop() if len(found) == 1 else None


def profiles_variables(environ=None):
    """The profiles-file variables to set for the Fast DDS installed: FASTDDS_ for 3,
    FASTRTPS_ for 2 (each reads only its own; Fast DDS 3 also reads FASTRTPS_ but warns that it
    is deprecated, in every process), both when that cannot be told."""
    major = installed_fastdds_major(environ)
    if major == 3:
        return PROFILES_VARIABLES[:1]
    if major == 2:
        return PROFILES_VARIABLES[1:]
    return PROFILES_VARIABLES


def localhost_discovery(environ=None, keep_choice=False):
    """Keep DDS discovery on this computer on every distro; call before rclpy.init.

    Sets ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST, and on Humble (ROS_DISTRO=humble), whose rcl
    knows only that one, ROS_LOCALHOST_ONLY=1. Elsewhere ROS_LOCALHOST_ONLY is left alone: on
    Jazzy it would override the range and warn in every process. With `keep_choice`, a wider
    discovery the user chose (another range, ROS_LOCALHOST_ONLY other than 1) is kept.
    Returns `environ`.
    """
    env = os.environ if environ is None else environ
    if keep_choice:
        chosen = env.get('ROS_AUTOMATIC_DISCOVERY_RANGE', '').strip().upper()
        only = env.get('ROS_LOCALHOST_ONLY')
        if (chosen and chosen != 'LOCALHOST' and only != '1') or only not in (None, '1'):
            return env
    env['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    if _distro(env) in LOCALHOST_ONLY_DISTROS:
        env['ROS_LOCALHOST_ONLY'] = '1'
    return env


def localhost_requested(env):
    """True when `env` asks for localhost discovery (either distro's variable)."""
    return (env.get('ROS_AUTOMATIC_DISCOVERY_RANGE', '').strip().upper() == 'LOCALHOST'
            or env.get('ROS_LOCALHOST_ONLY', '').strip() == '1')


def prefer_udp_transport(environ=None):
    """Fast DDS between processes: UDP, not shared memory, unless the user chose.

    Call before rclpy.init (the participant reads it then). Over Fast DDS's shared-memory
    transport a stopped subscriber blocks every publisher writing to it: with sim_robot
    SIGSTOPped, safety_supervisor's `hardware/command` publish itself blocked for the port
    health check (`healthy_check_timeout_ms`, 1000 by default, tried twice per send; the bench
    saw "supervisor stalled for 1003 ms" in bench/safety_faults.py joint_states_stopped), an
    e-stop for the wrong reason and a robot without supervision meanwhile. rclpy's publish
    holds the GIL while it waits, so every thread of the process stops with it (a test's
    SIGSTOP of 60 ms became 3 s in CI). Over UDP a reader that cannot take a message loses it
    and nothing waits.

    Unless the user chose a transport (FASTDDS_BUILTIN_TRANSPORTS or a profiles file) or
    another middleware:
    - with the default discovery range (SUBNET, a robot's computers) this sets
      FASTDDS_BUILTIN_TRANSPORTS=UDPv4 (read by Fast DDS 2.6 (Humble) and later);
    - under localhost discovery (ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST, or Humble's
      ROS_LOCALHOST_ONLY=1), where rmw_fastrtps installs its own shared-memory + UDP pair and
      ignores that variable (Humble's rmw_fastrtps 6.2 as Kilted's 9.3), it puts this process
      on config/fastdds/loopback_udp.xml (UDP bound to 127.0.0.1, discovery on loopback),
      named in the variable of the Fast DDS installed (profiles_variables: Fast DDS 2 of
      Humble and Jazzy reads only FASTRTPS_DEFAULT_PROFILES_FILE, Fast DDS 3 the FASTDDS_ one
      and warns about the other; both when the library is not found. ROS_DISTRO, unset by
      the PyPI wheels, cannot tell: with only the FASTDDS_ one, Jazzy's nodes bound UDP to
      0.0.0.0 and the external address), with the range SYSTEM_DEFAULT
      and ROS_LOCALHOST_ONLY unset, so that the profile is used: what LOCALHOST promises,
      nothing leaves the computer, without shared memory.
      Processes left on LOCALHOST (the `ros2` command line, its daemon) still find these
      ones, over UDP.
    Returns what was put in place: 'UDPv4', 'loopback UDP', the user's
    FASTDDS_BUILTIN_TRANSPORTS, or None. `dds_transport` tells what a process really got.
    """
    env = os.environ if environ is None else environ
    if 'fastrtps' not in env.get('RMW_IMPLEMENTATION', 'rmw_fastrtps_cpp'):
        return None
    if any(env.get(k) for k in TRANSPORT_CHOICES):
        return env.get('FASTDDS_BUILTIN_TRANSPORTS')
    if localhost_requested(env):
        profile = loopback_profile_path()
        if profile is not None:
            for key in profiles_variables(env):
                env[key] = str(profile)
            env['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'SYSTEM_DEFAULT'
            env.pop('ROS_LOCALHOST_ONLY', None)
            return 'loopback UDP'
    env['FASTDDS_BUILTIN_TRANSPORTS'] = 'UDPv4'
    return env.get('FASTDDS_BUILTIN_TRANSPORTS')


class PolledSubscription:
    """A subscription no executor calls back: its owner takes the messages when it wants them.

    The supervisor takes joint_states and imu at the start of its tick instead of a callback
    per message: at 500 Hz each input costs an executor callback (the dispatch, not the
    message, is most of it: a plain rclpy relay's two 500 Hz callbacks took 62 % of a core in
    bench/cpu_budget.py). It is a real subscription of `node` (remapping, QoS and the graph
    as for create_subscription) that rclpy's Node does not list, so no executor sees it.
    """

    def __init__(self, node, msg_type, topic, qos):
        from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
        from rclpy.type_support import check_is_valid_msg_type
        check_is_valid_msg_type(msg_type)
        self.msg_type = msg_type
        self.topic = topic
        with node.handle:
            try:     # Kilted's rclpy (9): a content-filter argument
                self.handle = _rclpy.Subscription(node.handle, msg_type, topic,
                                                  qos.get_c_qos_profile(), None)
            except TypeError:   # Humble's and Jazzy's rclpy have none (distro_api.json)
                self.handle = _rclpy.Subscription(node.handle, msg_type, topic,
                                                  qos.get_c_qos_profile())

    def _taken(self, raw):
        """Yield (message or bytes, message info) for every message waiting, oldest first."""
        while True:
            taken = self.handle.take_message(self.msg_type, raw)
            if taken is None:
                return
            yield taken[0], taken[1]

    def take_all(self):
        """Return every message waiting, oldest first (at most the QoS depth)."""
        return [msg for msg, _ in self._taken(False)]

    def take_all_raw(self):
        """Return the serialized bytes of every message waiting, oldest first (no message
        objects: the caller decodes what it needs, core/cdr.py)."""
        return [data for data, _ in self._taken(True)]

    def take_all_with_info(self):
        """Return [(message, message info)] waiting, oldest first; the info holds the
        middleware's `source_timestamp` (ns, when the publisher sent it, system clock)."""
        return list(self._taken(False))

    def take_newest(self):
        """Return the newest message waiting, or None; older ones are taken and dropped.

        Only the newest is made into a message object: the others are taken as bytes.
        Returns (message, number taken).
        """
        data, taken = None, 0
        while True:
            got = self.handle.take_message(self.msg_type, True)
            if got is None:
                break
            data, taken = got[0], taken + 1
        if data is None:
            return None, 0
        return deserialize_message(data, self.msg_type), taken

    def destroy(self):
        if self.handle is not None:
            self.handle.destroy_when_not_in_use()
            self.handle = None


SHARED_MEMORY_WARNING = (
    'DDS uses shared memory between processes: a stopped or frozen subscriber (any process, '
    'also a suspended `ros2 topic echo`) can block this node\'s publishing for 1-2 s. '
    'The transport was chosen in this environment (FASTDDS_BUILTIN_TRANSPORTS or a Fast DDS '
    'profiles file); unset them and this package\'s nodes use UDP (under '
    'ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST, <share>/simreal_ros/config/fastdds/'
    'loopback_udp.xml) (docs/real_robot.md, middleware)')
LOOPBACK_NOTE = (
    'DDS: ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST served by loopback UDP '
    '(config/fastdds/loopback_udp.xml, Fast DDS {major}: {sockets} UDP sockets, all on '
    'loopback), not shared memory, where a stopped subscriber blocks publishing for 1-2 s; '
    'set FASTDDS_BUILTIN_TRANSPORTS or a profiles file to choose yourself '
    '(docs/real_robot.md, middleware)')
OFF_LOOPBACK_WARNING = (
    'DDS: ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST was asked, but this process has UDP sockets '
    'bound off loopback ({off}; Fast DDS {major}): its traffic can leave this computer. Was '
    'the profiles file ignored? Fast DDS 2 (Humble, Jazzy) reads FASTRTPS_DEFAULT_PROFILES_FILE, '
    'Fast DDS 3 FASTDDS_DEFAULT_PROFILES_FILE (docs/distros.md)')


def dds_transport(maps='/proc/self/maps'):
    """What this process's middleware uses between processes, once its node exists.

    'shared memory + UDP' when Fast DDS has mapped its shared-memory segments
    (/dev/shm/fastdds_* for Fast DDS 3, /dev/shm/fastrtps_* for Fast DDS 2), 'UDP' when it has
    not, 'unknown' for another middleware or where /proc is missing. Measured, not inferred
    from the environment: rmw_fastrtps overrides FASTDDS_BUILTIN_TRANSPORTS under LOCALHOST.
    """
    if 'fastrtps' not in os.environ.get('RMW_IMPLEMENTATION', 'rmw_fastrtps_cpp'):
        return 'unknown'
    try:
        with open(maps) as f:
            shm = any(prefix in line for line in f for prefix in SHM_PREFIXES)
    except OSError:
        return 'unknown'
    return 'shared memory + UDP' if shm else 'UDP'


def udp_sockets(pid='self'):
    """The local (address, port) of every UDP socket process `pid` holds, IPv4 and IPv6.

    Read from /proc/<pid>/fd (the socket inodes the process holds) and /proc/<pid>/net/udp,
    udp6 (every socket of its network namespace, with its inode). None where /proc is missing.
    """
    import ipaddress
    try:
        inodes = set()
        for fd in os.listdir(f'/proc/{pid}/fd'):
            try:
                link = os.readlink(f'/proc/{pid}/fd/{fd}')
            except OSError:
                continue        # closed meanwhile
            if link.startswith('socket:['):
                inodes.add(link[8:-1])
        found = []
        for table, width in (('udp', 4), ('udp6', 16)):
            try:
                with open(f'/proc/{pid}/net/{table}') as f:
                    rows = f.read().splitlines()[1:]
            except FileNotFoundError:
                continue        # no IPv6 in this kernel
            for row in rows:
                cols = row.split()
                if len(cols) < 10 or cols[9] not in inodes:
                    continue
                addr, port = cols[1].split(':')
                raw = bytes.fromhex(addr)
                # The kernel prints each 32-bit word in host (little-endian) order.
                raw = b''.join(raw[i:i + 4][::-1] for i in range(0, width, 4))
                found.append((str(ipaddress.ip_address(raw)), int(port, 16)))
        return found
    except OSError:
        return None


def off_loopback(sockets):
    """The sockets of `sockets` bound where traffic can come from or leave for another
    computer: any address but loopback and multicast groups (0.0.0.0 included)."""
    import ipaddress
    out = []
    for ip, port in sockets or ():
        a = ipaddress.ip_address(ip)
        if getattr(a, 'ipv4_mapped', None):
            a = a.ipv4_mapped
        if not (a.is_loopback or a.is_multicast):
            out.append(f'{ip}:{port}')
    return out


EXECUTOR_KINDS = ('events', 'single')
EXECUTOR_DOC = ("'events' (rclpy.experimental.EventsExecutor, the default: callbacks from the "
                "middleware's events, no wait set rebuilt per callback; bench/cpu_budget.py: "
                "supervisor 72.6 % of a core instead of 86.9 %) or 'single' "
                "(SingleThreadedExecutor); 'events' falls back to single where rclpy lacks it")


_NO_ARGUMENTS = inspect.Signature()


def deserialize_or_none(data, msg_type):
    """rclpy's message from bytes core/cdr.py could not read, or None when rclpy cannot
    either (malformed data from a DDS writer: the caller counts it, and its watchdog sees a
    missing sample rather than the node dying mid-tick)."""
    try:
        return deserialize_message(data, msg_type)
    except Exception:  # noqa: BLE001 - rclpy raises several kinds for bad data
        return None


def hot_timer_callback(method):
    """`method` as a timer callback whose signature is known in advance.

    rclpy's executors (the EventsExecutor too) call inspect.signature on a timer's callback at
    every firing, to see whether it takes a TimerInfo: 7.5 us for a bound method here, 1.1 us
    for a function that carries its __signature__ (bench/publish_cost.py). At 500 Hz that is
    0.3 % of a core for nothing; the 500 Hz timers use this.
    """
    def callback():
        return method()
    callback.__signature__ = _NO_ARGUMENTS
    return callback


OWN_TICK_LOOP_DOC = (
    "run the node's high-rate tick in the spin loop's own thread, waiting for the executor's "
    'events until the tick is due (one thread woken per tick), instead of an rclpy timer '
    "(the EventsExecutor's timer thread wakes, then wakes the executor's thread; "
    'bench/tick_loop.py counts the wake-ups and CPU of both). Either way missed slots are '
    'skipped, not run in a burst. The rclpy timer ticks instead when this is false, when '
    "something other than this package's run() spins the node, and for safety_supervisor on "
    'simulated time (use_sim_time), where its tick follows /clock')


class HotLoop:
    """A node's high-rate periodic tick: an rclpy timer, which `run()` may take over.

    The timer is made at once, so the node ticks under any executor (a test's, a user's
    composition). `run()` calls `take_over()`; when the node allowed it (`own`: its
    own_tick_loop parameter, and not on simulated time) the timer is cancelled and run()'s
    loop calls `callback` every `period_s` on the monotonic clock, between executor waits
    (`spin_hot`).
    """

    def __init__(self, node, period_s, callback, own, **timer_kwargs):
        self.period = float(period_s)
        self.callback = callback
        self.own = bool(own)
        self.owned = False
        self.skipped = 0      # slots missed because a tick (or an executor event) overran
        self.timer = node.create_timer(self.period, hot_timer_callback(callback),
                                       **timer_kwargs)

    @property
    def kind(self):
        """'own' while run()'s loop ticks, else 'timer' (diagnostics)."""
        return 'own' if self.owned else 'timer'

    def take_over(self):
        """Cancel the timer and return True when the node allows its own loop."""
        if not self.own:
            return False
        self.timer.cancel()
        self.owned = True
        return True


def spin_hot(executor, hot, running, context):
    """Spin `executor` and call `hot.callback` every `hot.period` s until `running()` is false
    or `context` shuts down.

    The executor waits at most until the next tick is due (and at most 0.1 s: a Python signal
    handler runs only when the wait returns); events (commands, services, slow timers) are
    served in between as they arrive. A tick that comes late is run once, and the slots it
    missed are skipped and counted (hot.skipped), as an rclpy timer skips them.
    """
    clock = time.monotonic
    period, callback = hot.period, hot.callback
    due = clock() + period
    while running() and context.ok():
        now = clock()
        wait = due - now
        if wait > 0.0:
            executor.spin_once(timeout_sec=wait if wait < 0.1 else 0.1)
            continue
        callback()
        due += period
        if due <= now:
            missed = int((now - due) / period) + 1
            hot.skipped += missed
            due += missed * period


def make_executor(kind='events'):
    """Return an executor of `kind` ('events' or 'single') and the kind actually made.

    'events' is rclpy.experimental.EventsExecutor (callbacks from the middleware's events, no
    wait-set rebuilt per spin: the cheaper one); where this rclpy lacks it (or it fails to
    start) the node falls back to a SingleThreadedExecutor, said on stderr.
    """
    if kind not in EXECUTOR_KINDS:
        raise ConfigError(f'parameter executor: {kind!r} is neither of {EXECUTOR_KINDS}')
    if kind == 'events':
        try:
            from rclpy.experimental import EventsExecutor
            return EventsExecutor(), 'events'
        except (ImportError, AttributeError, RuntimeError) as exc:
            print(f'EventsExecutor unavailable ({exc}): using SingleThreadedExecutor',
                  file=sys.stderr, flush=True)
    return SingleThreadedExecutor(), 'single'


def run(node_class, args=None):
    """Spin one node; configuration errors exit 2 with a clear line; signals stop it cleanly.

    One thread (the node's `executor` parameter: EventsExecutor by default, else a
    SingleThreadedExecutor): with rclpy 9 (Kilted) a MultiThreadedExecutor starved a 500 Hz
    timer and the subscriptions sharing its callback group as soon as messages arrived
    (sim_robot fell from 500 to ~5 ticks/s, commands were lost). No node makes blocking calls
    inside callbacks (services answer at once, SysID maths runs in a worker thread), so one
    thread serves them all, in arrival order. A node with a `hot_loop` (HotLoop: the 500 Hz
    ticks of safety_supervisor and sim_robot) has its tick called by this loop between the
    executor's waits, when the node allows it (spin_hot).

    On SIGINT or SIGTERM (once or more), and when a callback raises, the spin ends and, while
    the context is still valid, the node's `before_shutdown()` runs (safety_supervisor
    publishes its safe output there); then the node is destroyed and the process exits 0 on a
    signal, 1 on an error.
    """
    from rclpy.signals import SignalHandlerOptions
    stop = _Stop()
    _stacks_on_sigusr1()
    localhost = localhost_requested(os.environ)
    trace = timing_trace()
    transport = prefer_udp_transport()
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    node = None
    executor = None
    code = 0
    name = getattr(node_class, 'NODE_NAME', node_class.__name__)
    try:
        node = node_class()
        executor, node.executor_kind = make_executor(getattr(node, 'executor_kind', 'events'))
        _say_transport(node, localhost, transport)
        executor.add_node(node)
        freeze_start_up_objects()
        # A thread that computes (SysID's estimation) keeps Python's lock (GIL) for up to
        # this long before the loop thread may have it: 5 ms by default, which the loop pays
        # at every wake-up (SysID commands 35-66 ms apart while estimating, traced).
        sys.setswitchinterval(GIL_SWITCH_S)
        priority = getattr(node, 'thread_priority', 0)
        if priority:   # this thread spins the node: its loop thread
            applied, text = set_thread_priority(priority,
                                                lock=getattr(node, 'lock_memory', False))
            node.realtime = text
            if applied:
                node.get_logger().info(text)
            else:
                node.get_logger().warning(text)
        hot = getattr(node, 'hot_loop', None)
        if hot is not None and hot.take_over():
            spin_hot(executor, hot, lambda: stop.signal is None, node.context)
        else:
            # Short waits: a Python signal handler runs only when the wait returns.
            while stop.signal is None and rclpy.ok():
                executor.spin_once(timeout_sec=0.1)
    except ConfigError as exc:
        print(f'[{name}] configuration error: {exc}', file=sys.stderr, flush=True)
        code = 2
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:  # noqa: BLE001 - a callback failed: safe output, then report and exit
        if rclpy.ok():
            import traceback
            traceback.print_exc()
            code = 1
    finally:
        _before_shutdown(node, name)
        with _TeardownBound(name, TEARDOWN_S, code):
            if executor is not None:
                executor.shutdown(timeout_sec=1.0)
            if node is not None:
                node.destroy_node()
            rclpy.try_shutdown()
        stop.restore()
        if trace is not None:
            trace.write(name)
    if stop.signal is not None and code == 0:
        print(f'[{name}] finished cleanly', file=sys.stderr, flush=True)
    return code


def transport_lines(shm, localhost, transport, sockets, major):
    """What a node says at start about its DDS transport: [(severity, text)].

    `shm`: its shared-memory segments are mapped (dds_transport); `localhost`: localhost
    discovery was asked; `transport`: what prefer_udp_transport put in place; `sockets`: its
    UDP sockets as bound (udp_sockets, None when unknown); `major`: the Fast DDS version. The
    loopback note is said only when every socket is measured on loopback; any socket off it
    under localhost discovery is a warning naming it, whatever was set.
    """
    lines = []
    if shm:
        lines.append(('warning', SHARED_MEMORY_WARNING))
    off = off_loopback(sockets)
    if localhost and off:
        lines.append(('warning', OFF_LOOPBACK_WARNING.format(off=', '.join(off),
                                                             major=major or '?')))
    elif transport == 'loopback UDP' and not shm and sockets is not None:
        lines.append(('info', LOOPBACK_NOTE.format(major=major or '?', sockets=len(sockets))))
    return lines


def _say_transport(node, localhost, transport):
    """Log the transport this process really got, measured once its node exists (the
    participant, its sockets and its shared-memory segments come with the first node)."""
    node.dds_transport = dds_transport()
    for severity, text in transport_lines(node.dds_transport == 'shared memory + UDP',
                                          localhost, transport, udp_sockets(),
                                          fastdds_major()):
        if severity == 'warning':       # one call site per severity (rclpy's rule)
            node.get_logger().warning(text)
        else:
            node.get_logger().info(text)


TEARDOWN_S = 3.0   # within launch's 5 s from SIGINT to SIGTERM, after before_shutdown


class _TeardownBound:
    """The library teardown after a node's work is done (executor shutdown, destroy_node,
    rclpy shutdown), bounded: past `seconds` every thread's stack goes to stderr with a line
    naming the hang, and the process exits with `code` (the node's own: its safe output went
    out in before_shutdown, and the operating system frees what the teardown would have).
    CI saw an idle inertia_id not exit 5 s after launch's SIGINT (ros2 launch escalated to
    SIGTERM, which the node notes and ignores), and a friction_id hung in rclpy's
    destroy_node (destroy_when_not_in_use) under load: a Ctrl-C must still stop the graph."""

    def __init__(self, name, seconds, code):
        import threading
        self.name, self.seconds, self.code = name, seconds, code
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True,
                                       name='teardown-bound')

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        return False

    def _watch(self):
        if self.done.wait(self.seconds):
            return
        import faulthandler
        print(f'[{self.name}] ERROR: the ROS teardown (executor shutdown, destroy_node, '
              f'rclpy shutdown) hung {self.seconds:g} s after the node stopped; exiting '
              f'{self.code} without it. Every thread\'s stack:', file=sys.stderr, flush=True)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(self.code)


def _stacks_on_sigusr1():
    """SIGUSR1 prints every thread's Python stack to stderr (the node's log): what a process
    that does not stop on SIGTERM is doing (stop_graph sends it before SIGKILL)."""
    import faulthandler
    import signal
    try:
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    except (AttributeError, ValueError, RuntimeError):   # no SIGUSR1 here, or not main thread
        pass


def _before_shutdown(node, name):
    hook = getattr(node, 'before_shutdown', None)
    if hook is None or not rclpy.ok():
        return
    try:
        hook()
    except Exception as exc:  # noqa: BLE001 - shutting down regardless, but say so
        print(f'[{name}] before_shutdown failed: {exc}', file=sys.stderr, flush=True)


def per_robot_dir(node, path):
    """`path` with `~` expanded, and the node's namespace appended when it has one: two robots
    started from one robot file (`namespace:=left`, `namespace:=right`) never write SysID
    results, recordings or exports into the same folder. At the root the folder is `path`."""
    ns = node.get_namespace().strip('/')
    path = os.path.expanduser(path)
    return os.path.join(path, *ns.split('/')) if ns else path


def diag_name(node, part=''):
    """The /diagnostics name of `node`: its name with its namespace (several robots on one
    domain stay apart), then `part`: 'sim_robot: physics' at the root, 'left/sim_robot:
    physics' under /left."""
    name = node.get_fully_qualified_name().lstrip('/')
    return f'{name}: {part}' if part else name


ROGUE_ACTIONS = ('estop', 'alarm')
ROGUE_ACTION_DOC = ("what a publisher that breaks the rule of who may publish does: 'estop' "
                    "(the default: the robot stops, the node named; a robot must not obey or "
                    "believe an unknown node) or 'alarm' (an ERROR on /diagnostics naming it, "
                    "its messages still refused where the node can tell them apart)")


def declare_rogue_parameters(node, topics, estop_here):
    """Declare rogue_publisher_action and publisher_check_period_s; return (action, period).

    `topics`: what is checked (for the description); `estop_here`: what 'estop' does in this
    node.
    """
    action = declare(node, 'rogue_publisher_action', 'estop',
                     f"{ROGUE_ACTION_DOC} ('estop' here: {estop_here})", read_only=True)
    if action not in ROGUE_ACTIONS:
        raise ConfigError(f'{node.get_name()} parameter rogue_publisher_action: {action!r} is '
                          f'not one of {ROGUE_ACTIONS}')
    period = declare(node, 'publisher_check_period_s', 0.2,
                     f'how often the publishers of {topics} are checked against who may publish '
                     'them (one graph query each, steady clock) (s)', low=0.01, high=10.0,
                     read_only=True)
    return action, period


def declare_names(node, name, description):
    """Declare a read-only string-array parameter (empty by default); return its value."""
    from rclpy.parameter import Parameter
    value = node.declare_parameter(
        name, Parameter.Type.STRING_ARRAY,
        ParameterDescriptor(description=description, read_only=True)).value
    return [str(v) for v in value] if value is not None else []


class PublisherWatch:
    """The publishers of one topic, checked against a PublisherRule on a low-rate timer.

    The graph query (`get_publishers_info_by_topic`) is a few tens of microseconds: it runs
    every `period_s` (steady clock). `on_change(rogues, why)` is called when the set of rogue
    nodes changes (empty: the rule holds again).

    The graph can list an endpoint before its node's name is known
    (`_NODE_NAME_UNKNOWN_`, for a moment after discovery). Such an endpoint is given
    `unknown_grace_s` to get its name; one that never does is a DDS writer outside ROS and a
    rogue, named by its GID.

    Messages are not checked one by one: rclpy's EventsExecutor cannot pass a message's
    publisher to its callback (SystemError in rclpy 9), so a rogue's messages can be taken
    between its discovery and the next check. SROS2 closes that window (docs/security.md).
    """

    UNKNOWN = '_NODE_NAME_UNKNOWN_'

    def __init__(self, node, topic, rule, on_change, period_s=0.2, unknown_grace_s=2.0,
                 callback_group=None):
        from rclpy.clock import Clock, ClockType
        self.node = node
        self.topic = node.resolve_topic_name(topic)
        self.rule = rule
        self.on_change = on_change
        self.rogues = []
        self.why = ''
        self.checks = 0
        self.rogue_spells = 0       # times the rule went from holding to broken
        self.unknown_grace_s = unknown_grace_s
        self._unknown_since = {}    # gid -> monotonic time first seen without a node name
        self.timer = node.create_timer(period_s, self.check, callback_group=callback_group,
                                       clock=Clock(clock_type=ClockType.STEADY_TIME))

    def check(self):
        """Query the graph and apply the rule; return the rogue node names."""
        from simreal_ros.core.publishers import node_fqn
        now = time.monotonic()
        self.checks += 1
        endpoints, unknown = [], {}
        for info in self.node.get_publishers_info_by_topic(self.topic):
            gid = bytes(info.endpoint_gid)
            if self.UNKNOWN in info.node_name:
                first = self._unknown_since.get(gid, now)
                unknown[gid] = first
                if now - first >= self.unknown_grace_s:
                    endpoints.append((f'<DDS writer {gid.hex()} without a ROS node>', gid))
                continue
            endpoints.append((node_fqn(info.node_name, info.node_namespace), gid))
        self._unknown_since = unknown
        _, rogues, why = self.rule.review(endpoints)
        if rogues != self.rogues:
            if rogues and not self.rogues:
                self.rogue_spells += 1
            self.rogues, self.why = rogues, why
            self.on_change(rogues, why)
        return rogues

"""sim_robot: the embedded default hardware, a MuJoCo robot behind the topics a real driver uses.

    ros2 run simreal_ros sim_robot --ros-args --params-file config/robots/arm3.yaml
    ros2 topic echo /joint_states
    ros2 topic pub --once /sim/gantry std_msgs/msg/Bool "{data: false}"
    ros2 param set /sim_robot test.plant_change '{"elbow_pitch": {"coulomb_friction": 3.0}}'

Subscribes:
    hardware/command (sensor_msgs/JointState, by name), safety/heartbeat
    (diagnostic_msgs/DiagnosticStatus), sim/gantry (std_msgs/Bool), sim/remote_buttons
    (std_msgs/String, with a Unitree interface)
Publishes:
    joint_states (sensor_msgs/JointState), imu (sensor_msgs/Imu, floating base), /clock (when
    publish_clock), driver/state (std_msgs/String, latched JSON), sim/base_pose
    (geometry_msgs/PoseStamped, floating base), /diagnostics; with `interface: unitree_hg` or
    `unitree_go`: LowState_ on rt/lowstate and LowCmd_ from rt/lowcmd instead of the topics
Parameters:
    the robot file's `sim_robot` section (model_path, plant.*, gantry, interface, unitree.*,
    test.plant_change*, ...): docs/configuration.md lists every one.

The hidden true plant, the driver rules it obeys, the Unitree emulation, the gantry and the
plant change at run time: docs/nodes.md.
"""
import json
import math
import sys
import threading
import time

from builtin_interfaces.msg import Time as TimeMsg
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
import numpy as np
import rclpy
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.parameter import Parameter
from rosgraph_msgs.msg import Clock as ClockMsg
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import String

from simreal_ros.core import unitree
from simreal_ros.core.cdr import ImuEncoder, JointStateDecoder, JointStateEncoder, split_stamp
from simreal_ros.core.config import ConfigError, resolve_path, setting_dir
from simreal_ros.core.plant import JointCommand, PlantTruth, SimPlant
from simreal_ros.core.publishers import PublisherRule
from simreal_ros.nodes.common import (COMMAND_QOS, EXECUTOR_DOC, LATCHED_QOS,
                                      OWN_TICK_LOOP_DOC, SENSOR_PUB_QOS, HotLoop,
                                      PublisherWatch, declare, declare_names, declare_priority,
                                      declare_rogue_parameters, deserialize_or_none,
                                      diag_name, run)

MAX_CATCH_UP = 25  # periods a late tick may simulate at once before it resynchronises
PLANT_ARRAYS = ('coulomb_friction', 'viscous_damping', 'armature', 'torque_limit')
PLANT_SCALARS = ('latency_s', 'noise_position', 'noise_velocity', 'noise_effort')


class SimRobot(Node):
    """Step a SimPlant in real time (or faster) and expose it as a robot driver."""

    NODE_NAME = 'sim_robot'

    def __init__(self):
        super().__init__(self.NODE_NAME)
        self.priority = declare_priority(self, -10, 50)   # before the work starts
        p = self._declare_parameters()
        # Relative to the robot file that sets it first, as every *_path (core/config.py).
        model_path = resolve_path(p['model_path'], what='sim_robot parameter model_path',
                                  relative_to=setting_dir(sys.argv, self.get_name(),
                                                          'model_path'))
        truth = None
        if p['plant_enabled']:
            missing = [k for k in PLANT_ARRAYS if not p['plant.' + k]]
            if missing:
                raise ConfigError('plant_enabled is true but plant.' + ', plant.'.join(missing)
                                  + ' not set (give the hidden truth, or plant_enabled: false)')
            truth = PlantTruth.from_mapping(
                {k: p['plant.' + k] for k in PLANT_ARRAYS + PLANT_SCALARS},
                len(p['joint_names']), source='sim_robot parameter plant')
        self.physics_dt = p['physics_dt']
        self.period = 1.0 / p['publish_rate_hz']
        self.steps_per_tick = int(round(self.period / self.physics_dt))
        if self.steps_per_tick < 1 or abs(self.steps_per_tick * self.physics_dt - self.period) > 1e-9:
            raise ConfigError(f'publish_rate_hz {p["publish_rate_hz"]} needs a period that is a '
                              f'whole multiple of physics_dt {self.physics_dt}')
        self.interface = p['interface']
        if self.interface not in ('ros',) + unitree.INTERFACES:
            raise ConfigError(f"sim_robot parameter interface: {self.interface!r} is not one of "
                              f"{('ros',) + unitree.INTERFACES}")
        if self.interface != 'ros' and p['lockstep']:
            raise ConfigError('sim_robot: lockstep needs interface ros')
        # A Unitree robot obeys its last command however old (docs/real_robot.md): no timeout.
        timeout = p['command_timeout_s'] if self.interface == 'ros' else 1e9
        self.plant = SimPlant(model_path, p['joint_names'], self.physics_dt, p['kp'], p['kd'],
                              truth=truth, command_mode=p['command_mode'],
                              command_timeout=timeout, seed=p['seed'],
                              initial_position=p['initial_position'] or None)
        self.rtf = p['real_time_factor']
        self.executor_kind = p['executor']
        # sim/base_pose (ground truth for benches) every this many published states
        self._pose_every = max(1, int(round(p['publish_rate_hz'] / p['base_pose_rate_hz'])))
        self._pose_count = 0
        self.hold_until_command = p['hold_until_command']
        self._commanded = False
        self.publish_clock = p['publish_clock']
        self._lockstep_init(p)   # lockstep mode (issue 6): implies publish_clock
        if p['gantry']:
            self.plant.hang(True)
        self.model_path = model_path

        self.counters = dict(commands_received=0, commands_rejected=0, ticks=0, overruns=0,
                             commands_without_heartbeat=0, heartbeat_losses=0,
                             commands_while_rogue=0, rogue_spells=0, commands_via_rclpy=0)
        self.rogues, self.rogue_why = [], ''
        self.command_timeout = p['command_timeout_s']
        self._heartbeat = None      # steady time of the supervisor's last heartbeat
        self._driver_state = None   # (damped, cause) last published on driver/state
        self.last_reject = ''
        self._lock = threading.Lock()
        self._wall_last = None
        self._received_ns = None   # the middleware's receive time of the command being taken
        self._last_arrival = -math.inf   # sim time of the last command queued
        self._wall_start = None
        self._pending = None      # (reading, perf_counter time it stands for), published next tick
        self._offset = None       # ROS time minus perf_counter (s), see _clock_offset
        self._periods_done = 0
        self._joint_enc = self._imu_enc = None   # made once (see _publish)
        # /clock = plant time + the time held before the first command (hold_until_command)
        self._clock_shift, self._hold_wall = 0.0, None
        self._sim_last = self.plant.time

        group = MutuallyExclusiveCallbackGroup()
        self.pub_clock = (self.create_publisher(ClockMsg, '/clock', SENSOR_PUB_QOS)
                          if self.publish_clock else None)
        self.pub_diag = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        self.pub_joint = self.pub_imu = None
        if self.interface == 'ros':
            self.pub_joint = self.create_publisher(JointState, 'joint_states', SENSOR_PUB_QOS)
            self.pub_imu = (self.create_publisher(Imu, 'imu', SENSOR_PUB_QOS)
                            if self.plant.floating_base else None)
            # Taken as bytes and read directly (core/cdr.py), as the supervisor reads its
            # inputs: no message object per command at 500 Hz.
            self._command_decoder = JointStateDecoder()
            self._command_sub = self.create_subscription(
                JointState, 'hardware/command', self._on_command_raw, COMMAND_QOS,
                callback_group=group, raw=True)
            self.rogue_action = p['rogue_publisher_action']
            self.command_watch = PublisherWatch(
                self, 'hardware/command',
                PublisherRule('hardware/command', p['command_publishers'],
                              self.get_fully_qualified_name(), self.get_namespace()),
                self._on_rogues, period_s=p['publisher_check_period_s'], callback_group=group)
            # A silent supervisor is an e-stop (docs/real_robot.md): once its heartbeat has
            # been heard, losing it for command_timeout_s damps every joint until it is back.
            self.create_subscription(DiagnosticStatus, 'safety/heartbeat', self._on_heartbeat,
                                     COMMAND_QOS, callback_group=group)
        else:
            self._unitree_init(p, group)
        self.pub_driver = self.create_publisher(String, 'driver/state', LATCHED_QOS)
        if self.plant.floating_base:
            from std_msgs.msg import Bool
            self.create_subscription(Bool, 'sim/gantry', self._on_gantry, 10,
                                     callback_group=group)
        self.plant_change_enabled = p['test.plant_change_enabled']
        self.plant_changes = 0
        if p['test.plant_change']:
            ok, why = self._change_plant(p['test.plant_change'])
            if not ok:
                raise ConfigError(why)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self._steady = Clock(clock_type=ClockType.STEADY_TIME)
        self._running = True
        self.hot_loop = None     # the real-time tick (below), when there is one
        if self.lockstep:
            self._lockstep_start(group)
        elif self.rtf > 0:
            # run()'s own loop where allowed (common.HotLoop), else the timer.
            self.hot_loop = HotLoop(self, self.period / self.rtf, self._tick,
                                    p['own_tick_loop'], callback_group=group,
                                    clock=self._steady)
        else:
            self._thread = threading.Thread(target=self._free_run, daemon=True)
            self._thread.start()
        self.create_timer(1.0, self._publish_diagnostics, clock=self._steady)
        self.create_timer(0.02, self._watch_supervisor, callback_group=group, clock=self._steady)
        self._diag_last = (time.monotonic(), 0, self.plant.time)
        self.get_logger().info(
            f'{model_path.name}: {self.plant.n} joints {self.plant.names}, physics '
            f'{1 / self.physics_dt:.0f} Hz, joint_states {p["publish_rate_hz"]:.0f} Hz, '
            f'{"real time" if self.rtf == 1.0 else f"real_time_factor {self.rtf:g}"}, '
            f'{"hidden plant truth applied" if truth else "nominal model (no hidden plant)"}, '
            f'command_mode {self.plant.command_mode}')

    def _change_plant(self, text):
        """Apply test.plant_change (JSON); return (ok, message naming what was wrong)."""
        if not self.plant_change_enabled:
            return False, ('test.plant_change refused: test.plant_change_enabled is false (set '
                           'it in the parameter file of a rehearsal; never on a real robot)')
        try:
            factors = json.loads(text) if text.strip() else {}
        except ValueError as exc:
            return False, f'test.plant_change is not JSON: {exc}'
        try:
            with self._lock:
                values = self.plant.change_truth(factors)
        except ValueError as exc:
            return False, f'test.plant_change: {exc}'
        self.plant_changes += 1
        self.get_logger().warning(f'true plant changed (rehearsal): {factors or "restored"} '
                                  f'-> {values}')
        return True, ''

    def _on_set_parameters(self, params):
        from rcl_interfaces.msg import SetParametersResult
        for param in params:
            if param.name == 'test.plant_change':
                ok, why = self._change_plant(param.value)
                if not ok:
                    return SetParametersResult(successful=False, reason=why)
        return SetParametersResult(successful=True)

    def _declare_parameters(self):
        p = {}
        p['model_path'] = declare(self, 'model_path', '', 'MJCF file: absolute, '
                                  'package://simreal_ros/..., or relative to the robot file '
                                  'that sets it, then the current directory, then the source '
                                  'checkout', read_only=True)
        p['joint_names'] = self._declare_array('joint_names', Parameter.Type.STRING_ARRAY,
                                               'actuated joints exposed, by MJCF name')
        p['physics_dt'] = declare(self, 'physics_dt', 0.001, 'physics step (s)', low=1e-5,
                                  high=0.02, read_only=True)
        p['publish_rate_hz'] = declare(self, 'publish_rate_hz', 500.0, 'joint_states rate (Hz)',
                                       low=1.0, high=5000.0, read_only=True)
        p['command_mode'] = declare(self, 'command_mode', 'position', "'position': PD at the "
                                    "physics rate, as motor drivers do; 'effort': torque only",
                                    read_only=True)
        p['kp'] = self._declare_array('kp', Parameter.Type.DOUBLE_ARRAY,
                                      'position gain per joint (N*m/rad)')
        p['kd'] = self._declare_array('kd', Parameter.Type.DOUBLE_ARRAY,
                                      'velocity gain per joint (N*m*s/rad)')
        p['command_publishers'] = declare_names(
            self, 'command_publishers', 'nodes whose hardware/command this driver obeys (names '
            'relative to its namespace, or /ns/name): on a robot, the supervisor; `simreal up` '
            'and the launch file set it to safety_supervisor when they start one. Empty (the '
            'default, for benches that command it directly): any one node, and a second one '
            'makes both rogues')
        p['rogue_publisher_action'], p['publisher_check_period_s'] = declare_rogue_parameters(
            self, 'hardware/command', 'every joint damped and every command refused while a '
            'rogue publishes')
        p['command_timeout_s'] = declare(self, 'command_timeout_s', 0.1, 'a joint without a new '
                                         'command for this long gets damping (s)', low=0.001,
                                         high=10.0, read_only=True)
        p['real_time_factor'] = declare(self, 'real_time_factor', 1.0, 'simulated s per wall s; '
                                        '0 = as fast as possible', low=0.0, high=100.0,
                                        read_only=True)
        p['publish_clock'] = declare(self, 'publish_clock', False, 'own /clock and stamp in '
                                     'simulated time', read_only=True)
        p['initial_position'] = self._declare_array('initial_position',
                                                    Parameter.Type.DOUBLE_ARRAY,
                                                    'initial joint positions (rad); empty = model')
        p['seed'] = declare(self, 'seed', 0, 'sensor noise seed', low=0, read_only=True)
        p['hold_until_command'] = declare(self, 'hold_until_command', False, 'do not advance '
                                          'the physics until the first valid command with '
                                          'position targets (any command in effort mode): a '
                                          'robot in its gantry, which a safe-mode damping '
                                          'command does not lower; state is still published',
                                          read_only=True)
        p['plant_enabled'] = declare(self, 'plant_enabled', True, 'apply the hidden plant truth',
                                     read_only=True)
        for key in PLANT_ARRAYS:
            p['plant.' + key] = self._declare_array('plant.' + key, Parameter.Type.DOUBLE_ARRAY,
                                                    f'hidden true {key} per joint')
        for key in PLANT_SCALARS:
            p['plant.' + key] = declare(self, 'plant.' + key, 0.0, f'hidden true {key}', low=0.0,
                                        read_only=True)
        p['executor'] = declare(self, 'executor', 'events', EXECUTOR_DOC, read_only=True)
        p['own_tick_loop'] = declare(self, 'own_tick_loop', True, OWN_TICK_LOOP_DOC,
                                     read_only=True)
        p['test.plant_change_enabled'] = declare(
            self, 'test.plant_change_enabled', False, 'rehearsal only: allow '
            'test.plant_change at run time (a simulated robot only; no hardware driver has it)',
            read_only=True)
        p['test.plant_change'] = declare(
            self, 'test.plant_change', '', 'rehearsal only (needs test.plant_change_enabled): '
            'JSON {joint: {coulomb_friction|viscous_damping|armature: factor}} scaling the '
            "true plant now, as a motor heats; '{}' or '' restores it")
        p['base_pose_rate_hz'] = declare(self, 'base_pose_rate_hz', 50.0, 'rate of the '
                                         'ground-truth sim/base_pose (floating base), for '
                                         "benches' distance and fall checks: a third of the "
                                         "node's publishing at the joint_states rate, not needed "
                                         'at it (Hz)', low=0.1, high=5000.0, read_only=True)
        p.update(self._lockstep_declare())
        p['gantry'] = declare(self, 'gantry', False, 'floating base: start hanging in a gantry '
                              '(the base held where it is, the legs free) until sim/gantry '
                              '(std_msgs/Bool) false lowers it; true hangs it again',
                              read_only=True)
        p['interface'] = declare(self, 'interface', 'ros', "'ros': hardware/command in, "
                                 "joint_states/imu out; 'unitree_hg' (G1, H1_2) or 'unitree_go' "
                                 '(Go2, H1): rt/lowcmd in, rt/lowstate out over CycloneDDS, as '
                                 'the robot', read_only=True)
        p['motor_indices'] = self._declare_array('motor_indices', Parameter.Type.INTEGER_ARRAY,
                                                 'Unitree interface: motor index of each of '
                                                 'joint_names in LowCmd_/LowState_ (empty = '
                                                 '0, 1, ...)')
        p['unitree.domain_id'] = declare(self, 'unitree.domain_id', 0, 'Unitree interface: DDS '
                                         'domain of rt/lowcmd and rt/lowstate', low=0, high=232,
                                         read_only=True)
        p['unitree.network_interface'] = declare(self, 'unitree.network_interface', 'lo',
                                                 'Unitree interface: network interface '
                                                 "(default lo: a simulator must not publish "
                                                 "the robot's topics on its network)",
                                                 read_only=True)
        p['unitree.mode_machine'] = declare(self, 'unitree.mode_machine', 7, 'Unitree '
                                            'interface: the mode_machine this robot reports; '
                                            'commands carrying another are dropped (7 is '
                                            'arbitrary: a host that does not copy it from '
                                            'LowState_ is caught)', low=0, high=255,
                                            read_only=True)
        if not p['joint_names']:
            raise ConfigError('parameter joint_names is empty: list the actuated joints to expose')
        return p

    def _declare_array(self, name, ptype, description):
        from rcl_interfaces.msg import ParameterDescriptor
        value = self.declare_parameter(
            name, ptype, ParameterDescriptor(description=description, read_only=True)).value
        return list(value) if value is not None else []

    # -- commands -------------------------------------------------------------------------
    def _on_heartbeat(self, msg):
        self._heartbeat = time.monotonic()

    def _heartbeat_lost(self):
        return (self._heartbeat is not None
                and time.monotonic() - self._heartbeat > self.command_timeout)

    def _watch_supervisor(self):
        """Damp everything while the supervisor's heartbeat is lost; report driver/state."""
        lost = self._heartbeat_lost()
        with self._lock:
            if lost and not self.plant.damped:
                self.plant.expire_all()
                self.counters['heartbeat_losses'] += 1
            damped = self.plant.damped
        self._report_driver_state(damped, lost)

    def _report_driver_state(self, damped, lost=None):
        lost = self._heartbeat_lost() if lost is None else lost
        rogue = self.rogues and self.rogue_action == 'estop'
        cause = (f'rogue publisher: {self.rogue_why}' if rogue else
                 'safety/heartbeat lost' if lost else
                 f'no command for {self.command_timeout:g} s' if damped else 'commanded')
        if self._driver_state == (damped, cause):
            return
        self._driver_state = (damped, cause)
        self.pub_driver.publish(String(data=json.dumps({'damped': damped, 'cause': cause})))

    def _on_rogues(self, rogues, why):
        """hardware/command has publishers it may not have (or, rogues empty, no longer)."""
        self.rogues, self.rogue_why = rogues, why
        if rogues:
            self.counters['rogue_spells'] += 1
            self.get_logger().error(f'rogue publisher: {why}')
            if self.rogue_action == 'estop':
                with self._lock:
                    self.plant.expire_all()
        else:
            self.get_logger().warning('hardware/command: publishers as allowed again')
        self._report_driver_state(self.plant.damped)

    def _on_command_raw(self, data):
        try:
            sec, nanosec, _, names, position, velocity, effort = \
                self._command_decoder.decode(data)
        except ValueError:   # bytes core/cdr does not read (another representation)
            self.counters['commands_via_rclpy'] += 1
            msg = deserialize_or_none(data, JointState)
            if msg is None:   # malformed: refused as any bad command is
                self.counters['commands_rejected'] += 1
                self.last_reject = 'hardware/command: malformed CDR'
                return
            sec, nanosec = msg.header.stamp.sec, msg.header.stamp.nanosec
            names, position, velocity, effort = msg.name, msg.position, msg.velocity, msg.effort
        self._on_command(names, position, velocity, effort, sec * 1_000_000_000 + nanosec)

    def _on_command(self, names, position, velocity, effort, stamp_ns):
        self.counters['commands_received'] += 1
        if self.rogues and self.rogue_action == 'estop':
            self.counters['commands_while_rogue'] += 1
            return
        if self._heartbeat_lost():
            # A supervisor that stopped beating does not command; whoever sends this is not it.
            self.counters['commands_without_heartbeat'] += 1
            return
        try:
            cmd = self.plant.make_command(names, position, velocity, effort)
        except ValueError as exc:
            self.counters['commands_rejected'] += 1
            self.last_reject = str(exc)
            self.get_logger().warn(f'hardware/command rejected: {exc}',
                                   throttle_duration_sec=2.0)
            return
        if self.lockstep:
            self._lockstep_command(cmd, stamp_ns)
            return
        with self._lock:
            self.plant.submit(cmd, self._arrival_time())
            # A damping or zero-torque command (a supervisor's safe mode) leaves the robot in
            # its gantry; a controller holding or moving it (position targets) lowers it.
            self._commanded |= cmd.position is not None or self.plant.command_mode == 'effort'

    def _arrival_time(self):
        """Map the wall-clock arrival to simulated time (the physics is computed lazily).

        A command taken by `_take_waiting_commands` arrives when the middleware received it
        (its `received_timestamp`), however late this process takes it; one from the
        executor's callback, now, at most one period ahead of the physics."""
        if self._wall_last is None or self.rtf <= 0:
            return self._sim_last
        received = self._received_ns
        if received is not None:
            ago = max(time.time_ns() - received, 0) * 1e-9
            t = self._sim_last + max((time.perf_counter() - ago - self._wall_last)
                                     * self.rtf, 0.0)
        else:
            elapsed = (time.perf_counter() - self._wall_last) * self.rtf
            t = self._sim_last + min(max(elapsed, 0.0), self.period)
        # never before the command taken before it: the plant applies its queue in order
        self._last_arrival = t = max(t, self._last_arrival)
        return t

    def _take_waiting_commands(self):
        """Take the commands that arrived since the last tick before simulating it, each at
        the time the middleware received it. Left to the executor, a late tick (a starved or
        busy process) simulated its missed periods before them: the robot went on with an
        old target, stopped short, then chased the new one faster than it was ever commanded
        (test_bringup_node: 0.31-0.43 rad/s measured against a plan of 0.24 under load)."""
        sub = self._command_sub
        while True:
            with sub.handle:
                taken = sub.handle.take_message(sub.msg_type, True)
            if taken is None:
                return
            data, info = taken
            self._received_ns = info.get('received_timestamp') or None
            try:
                self._on_command_raw(data)
            finally:
                self._received_ns = None

    # -- physics loop ---------------------------------------------------------------------
    def _tick(self):
        """Advance the physics to the wall clock, publishing the state of every period.

        The timer fires once per period; when the process was starved and a tick comes late,
        the periods it missed are simulated and published now (as a driver's buffered
        messages arrive in a burst, each stamped with its own time), so simulated time keeps
        pace with the wall clock.
        """
        if self.interface != 'ros':
            self._unitree_take_commands()
        elif not self.lockstep:
            self._take_waiting_commands()
        if self.hold_until_command and not self._commanded:
            # As a robot hanging in its gantry: the physics stands still until the controller
            # is up. Time does not: on /clock (publish_clock) it runs on at the real-time
            # factor, as the wall-clock stamps do without it; a frozen /clock froze every node
            # on sim time with it (the supervisor's timer never fired, so it never forwarded
            # the command that would start the physics: bench/g1_sim2sim.py --rtf 0.5).
            if self.publish_clock:
                now = time.perf_counter()
                if self._hold_wall is not None:
                    self._clock_shift += (now - self._hold_wall) * (self.rtf if self.rtf > 0
                                                                    else 1.0)
                self._hold_wall = now
            with self._lock:
                reading = self.plant.measure()
            self._publish(reading)
            return
        now = time.perf_counter()
        if self._wall_start is None or self.rtf <= 0:
            self._wall_start = now - self._periods_done * self.period / max(self.rtf, 1e-9)
            due = 1
        else:
            due = int((now - self._wall_start) * self.rtf / self.period) + 1 - self._periods_done
            if due > MAX_CATCH_UP:
                # Too far behind to catch up (suspended process): resynchronise, say so.
                self.counters['overruns'] += 1
                self._wall_start += (due - 1) * self.period / self.rtf
                due = 1
        for _ in range(max(due, 0)):
            # The reading of the period that ended is published when the next one starts,
            # stamped with the time it stands for (a driver samples, then sends): never a
            # state from the future, and a late tick's burst keeps its true timeline.
            pending, self._pending = self._pending, None
            if pending is not None and not self._publish_safely(*pending):
                return
            with self._lock:
                self.plant.step(self.steps_per_tick)
                self._periods_done += 1
                self._sim_last = self.plant.time
                self._wall_last = (self._wall_start
                                   + self._periods_done * self.period / max(self.rtf, 1e-9))
                self._pending = (self.plant.measure(),
                                 self._wall_last if self.rtf > 0 else None)
                damped = self.plant.damped
            self.counters['ticks'] += 1
            if self._driver_state is None or damped != self._driver_state[0]:
                self._report_driver_state(damped)

    def _publish_safely(self, reading, wall=None):
        try:
            self._publish(reading, wall)
        except Exception:  # noqa: BLE001 - SIGTERM may invalidate the context mid-tick
            if rclpy.ok():
                raise
            return False
        return True

    def _free_run(self):
        while self._running and rclpy.ok():
            self._tick()

    def _clock_offset(self):
        """ROS time minus perf_counter (s), for stamping a period by its perf_counter time.

        One pair of reads can be split by a preemption, which makes the offset look smaller;
        the largest recent value is the tightest pair. It decays by 1 us per period so a clock
        stepped back is followed within seconds.
        """
        now = self.get_clock().now().nanoseconds * 1e-9
        offset = now - time.perf_counter()
        last = self._offset
        if last is None or offset > last - 1e-6 or abs(offset - last) > 0.05:
            self._offset = offset
        else:
            self._offset = last - 1e-6
        return self._offset

    def _publish(self, reading, wall=None):
        """Publish a reading; `wall` is the perf_counter time its period ended (stamp)."""
        if self.interface != 'ros':
            self._unitree_publish(reading)
            return
        if self.publish_clock:
            stamp = rclpy.time.Time(seconds=reading.time + self._clock_shift).to_msg()
            self.pub_clock.publish(ClockMsg(clock=stamp))
            sec, nanosec = stamp.sec, stamp.nanosec
        elif wall is None:
            sec, nanosec = divmod(self.get_clock().now().nanoseconds, 1_000_000_000)
        else:
            sec, nanosec = split_stamp(wall + self._clock_offset())
        # The messages' bytes, made directly (core/cdr.py): at 500 Hz each, building the
        # message objects and rclpy's conversion of them were most of this node's publishing.
        # imu first: a node woken by joint_states (policy_runner's tick) then finds the same
        # sample's imu already there.
        if self.pub_imu is not None:
            imu = self._imu_enc
            if imu is None:
                imu = self._imu_enc = ImuEncoder(
                    self.plant.model.body(self.plant.base_body).name)
            self.pub_imu.publish(imu.encode(sec, nanosec, reading.orientation,
                                            reading.angular_velocity,
                                            reading.linear_acceleration))
        enc = self._joint_enc
        if enc is None:
            enc = self._joint_enc = JointStateEncoder(self.plant.names)
        self.pub_joint.publish(enc.encode(sec, nanosec, reading.position, reading.velocity,
                                          reading.effort))
        if self.pub_imu is not None:
            self._pose_count += 1
            if self._pose_count >= self._pose_every or self.lockstep:
                self._pose_count = 0
                self._publish_base_pose(reading, TimeMsg(sec=sec, nanosec=nanosec))

    def _publish_diagnostics(self):
        now = time.monotonic()
        t0, ticks0, sim0 = self._diag_last
        ticks, sim = self.counters['ticks'], self.plant.time
        self._diag_last = (now, ticks, sim)
        dt = max(now - t0, 1e-9)
        rate = (ticks - ticks0) / dt
        status = DiagnosticStatus(name=diag_name(self, 'physics'),
                                  hardware_id=str(self.model_path))
        rejected = self.counters['commands_rejected']
        if self.rogues:
            status.level = DiagnosticStatus.ERROR
            status.message = f'rogue publisher: {self.rogue_why}'
        elif rejected:
            status.level = DiagnosticStatus.WARN
            status.message = f'{rejected} commands rejected (last: {self.last_reject})'
        else:
            status.level = DiagnosticStatus.OK
            status.message = f'running, {rate:.0f} Hz'
        values = dict(self.counters, command_timeouts=self.plant.timeouts,
                      executor=self.executor_kind,
                      tick_loop=(self.hot_loop.kind if self.hot_loop is not None
                                 else 'lockstep' if self.lockstep else 'free run'),
                      skipped_tick_slots=(self.hot_loop.skipped if self.hot_loop is not None
                                          else 0),
                      publish_rate_hz=f'{rate:.1f}', real_time_factor=f'{(sim - sim0) / dt:.3f}',
                      sim_time_s=f'{sim:.3f}', last_reject=self.last_reject,
                      rogue_publishers=' '.join(self.rogues))
        status.values = [KeyValue(key=k, value=str(v)) for k, v in values.items()]
        out = DiagnosticArray(status=[status])
        out.header.stamp = self.get_clock().now().to_msg()
        self.pub_diag.publish(out)

    # -- lockstep mode (issue 6: policy_runner parity) -----------------------------------
    # Simulated time advances one control period at a time: sim_robot publishes /clock,
    # joint_states and imu stamped t, then waits for the command computed from them (header
    # stamp >= t), applies it at t and steps one period. Without a command for
    # lockstep_timeout_s (wall time; 0 = wait for ever) it steps anyway and counts it. So a ROS
    # deployment can be compared step by step with a reference loop.
    def _lockstep_declare(self):
        p = {}
        p['lockstep'] = declare(self, 'lockstep', False, 'advance one lockstep_period_s at a '
                                'time, waiting for the command stamped with the current time',
                                read_only=True)
        p['lockstep_period_s'] = declare(self, 'lockstep_period_s', 0.02, 'control period in '
                                         'lockstep mode (a multiple of physics_dt) (s)',
                                         low=1e-5, high=1.0, read_only=True)
        p['lockstep_timeout_s'] = declare(self, 'lockstep_timeout_s', 0.0, 'wall time to wait '
                                          'for the command of a tick before stepping anyway '
                                          '(s); 0 = wait for ever', low=0.0, high=3600.0,
                                          read_only=True)
        return p

    def _lockstep_init(self, p):
        self.lockstep = p['lockstep']
        if not self.lockstep:
            return
        self.publish_clock = True
        self.lockstep_steps = int(round(p['lockstep_period_s'] / self.physics_dt))
        if self.lockstep_steps < 1 or abs(self.lockstep_steps * self.physics_dt
                                          - p['lockstep_period_s']) > 1e-9:
            raise ConfigError(f'lockstep_period_s {p["lockstep_period_s"]} must be a whole '
                              f'multiple of physics_dt {self.physics_dt}')
        self.lockstep_timeout = p['lockstep_timeout_s']
        self._lockstep_reading = None
        self._lockstep_since = None

    def _lockstep_start(self, group):
        from rclpy.clock import Clock, ClockType
        self.counters.update(lockstep_steps=0, lockstep_timeouts=0)
        with self._lock:
            self._lockstep_publish()
        # Republishes the current state while waiting (late subscribers), handles timeouts.
        self.create_timer(0.05, self._lockstep_poll, callback_group=group,
                          clock=Clock(clock_type=ClockType.STEADY_TIME))

    def _lockstep_stamp_ns(self):
        return rclpy.time.Time(seconds=self.plant.time).nanoseconds

    def _lockstep_publish(self):
        self._lockstep_reading = self.plant.measure()
        self._lockstep_since = time.monotonic()
        self._publish(self._lockstep_reading)

    def _lockstep_command(self, cmd, stamp_ns):
        with self._lock:
            self.plant.submit(cmd, self.plant.time)
            if stamp_ns >= self._lockstep_stamp_ns():
                self._lockstep_advance()

    def _lockstep_advance(self):
        self.plant.step(self.lockstep_steps)
        self._sim_last = self.plant.time
        self.counters['ticks'] += 1
        self.counters['lockstep_steps'] += 1
        self._lockstep_publish()

    def _lockstep_poll(self):
        with self._lock:
            waited = time.monotonic() - self._lockstep_since
            if self.lockstep_timeout > 0 and waited > self.lockstep_timeout:
                self.counters['lockstep_timeouts'] += 1
                self._lockstep_advance()
            elif waited > 0.05:
                self._publish(self._lockstep_reading)

    def _publish_base_pose(self, reading, stamp):
        """Publish the simulator's ground-truth base pose (floating base; benches use it)."""
        if getattr(self, '_pub_base_pose', None) is None:
            from geometry_msgs.msg import PoseStamped
            self._pub_base_pose = self.create_publisher(PoseStamped, 'sim/base_pose',
                                                        SENSOR_PUB_QOS)
        from geometry_msgs.msg import PoseStamped
        pose = PoseStamped()
        pose.header.stamp = stamp
        pose.header.frame_id = 'world'
        x, y, z = (float(v) for v in reading.base_position)
        pose.pose.position.x, pose.pose.position.y, pose.pose.position.z = x, y, z
        w, qx, qy, qz = (float(v) for v in reading.orientation)
        o = pose.pose.orientation
        o.w, o.x, o.y, o.z = w, qx, qy, qz
        self._pub_base_pose.publish(pose)

    # -- Unitree low-level interface (issue 14) -------------------------------------------
    def _unitree_init(self, p, group):
        from simreal_ros.drivers import unitree_dds
        n = self.plant.n
        idx = list(p['motor_indices']) or list(range(n))
        motors = unitree.HG_MOTORS if self.interface == 'unitree_hg' else unitree.GO_MOTORS
        if len(idx) != n or len(set(idx)) != n or not all(0 <= i < motors for i in idx):
            raise ConfigError(f'sim_robot parameter motor_indices: {idx} must give {n} distinct '
                              f'motor indices in 0..{motors - 1}, one per joint_names entry')
        self.motor_index = np.asarray(idx, dtype=np.intp)
        self.mode_machine = int(p['unitree.mode_machine'])
        self.counters.update(lowcmd_received=0, bad_crc_rejected=0, wrong_mode_machine=0,
                             lowcmd_nonfinite=0, lowstate_sent=0)
        self.wire = unitree_dds.Wire(p['unitree.domain_id'], p['unitree.network_interface'])
        self.lowcmd_reader = self.wire.reader(self.interface, 'LowCmd_', unitree_dds.TOPIC_CMD,
                                              depth=16)
        self.lowstate_writer = self.wire.writer(self.interface, 'LowState_',
                                                unitree_dds.TOPIC_STATE)
        self._lowstate = unitree.new(self.interface, 'LowState_')
        self._lowstate['mode_machine'] = self.mode_machine
        self._lowstate['motor_state']['mode'][self.motor_index] = 1
        self._remote = unitree.remote_bytes()
        self.create_subscription(String, 'sim/remote_buttons', self._on_remote, 10,
                                 callback_group=group)

    def _on_gantry(self, msg):
        with self._lock:
            self.plant.hang(bool(msg.data))
        self.get_logger().info('gantry: ' + ('hanging' if msg.data else 'lowered'))

    def _on_remote(self, msg):
        names = [b.strip() for b in msg.data.split(',') if b.strip()]
        try:
            self._remote = unitree.remote_bytes(names)
        except ValueError as exc:
            self.get_logger().warn(f'sim/remote_buttons: {exc}')

    def _unitree_take_commands(self):
        """Apply the LowCmd_ samples received since the last tick, as the robot would."""
        for rec in self.lowcmd_reader.take():
            self.counters['lowcmd_received'] += 1
            if not unitree.crc_ok(rec):
                self.counters['bad_crc_rejected'] += 1
                continue
            if int(rec['mode_machine']) != self.mode_machine:
                self.counters['wrong_mode_machine'] += 1
                continue
            mc = rec['motor_cmd'][self.motor_index]
            q, dq, tau = (mc[k].astype(float) for k in ('q', 'dq', 'tau'))
            kp, kd = mc['kp'].astype(float), mc['kd'].astype(float)
            if self.interface == 'unitree_go':   # the vendor's "no position/velocity" markers
                kp[q >= unitree.GO_POS_STOP * 0.999] = 0.0
                stop = dq >= unitree.GO_VEL_STOP * 0.999
                kd[stop], dq[stop] = 0.0, 0.0
                q[q >= unitree.GO_POS_STOP * 0.999] = 0.0
            off = mc['mode'] == 0
            kp[off] = kd[off] = tau[off] = 0.0
            if not all(np.all(np.isfinite(a)) for a in (q, dq, tau, kp, kd)):
                self.counters['lowcmd_nonfinite'] += 1
                continue
            cmd = JointCommand(np.arange(self.plant.n), position=q, velocity=dq, effort=tau,
                               kp=kp, kd=kd)
            with self._lock:
                self.plant.submit(cmd, self._arrival_time())
                self._commanded |= bool(np.any(kp > 0))

    def _unitree_publish(self, reading):
        st = self._lowstate
        st['tick'] = int(round(reading.time * 1000)) & 0xFFFFFFFF
        ms = st['motor_state']
        ms['q'][self.motor_index] = reading.position
        ms['dq'][self.motor_index] = reading.velocity
        ms['tau_est'][self.motor_index] = reading.effort
        if reading.orientation is not None:
            imu = st['imu_state']
            imu['quaternion'] = reading.orientation            # w, x, y, z, as the robot
            imu['gyroscope'] = reading.angular_velocity
            imu['accelerometer'] = reading.linear_acceleration
            w, x, y, z = reading.orientation
            imu['rpy'] = (np.arctan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y)),
                          np.arcsin(np.clip(2 * (w * y - z * x), -1.0, 1.0)),
                          np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)))
            self._pose_count += 1
            if self._pose_count >= self._pose_every:
                self._pose_count = 0
                self._publish_base_pose(reading, self.get_clock().now().to_msg())
        st['wireless_remote'] = self._remote
        unitree.stamp_crc(st)
        self.lowstate_writer.write(st)
        self.counters['lowstate_sent'] += 1
        if self.publish_clock:
            stamp = rclpy.time.Time(seconds=reading.time + self._clock_shift).to_msg()
            self.pub_clock.publish(ClockMsg(clock=stamp))

    def destroy_node(self):
        self._running = False
        return super().destroy_node()


def main(args=None):
    """Run the sim_robot node."""
    raise SystemExit(run(SimRobot, args))


if __name__ == '__main__':
    main()

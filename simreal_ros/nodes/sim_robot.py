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
    publish_clock), driver/applied_command (sensor_msgs/JointState: each command as it entered
    the plant, and the damping of a joint the driver took off its command, stamped then on
    the robot's clock), driver/state (std_msgs/String, latched JSON), sim/base_pose
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
import rclpy
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rosgraph_msgs.msg import Clock as ClockMsg
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import String

from simreal_ros.core import unitree
from simreal_ros.core.cdr import ImuEncoder, JointStateDecoder, JointStateEncoder, split_stamp
from simreal_ros.core.config import ConfigError, resolve_path, setting_dir
from simreal_ros.core.plant import PlantTruth, SimPlant
from simreal_ros.core.publishers import PublisherRule
from simreal_ros.nodes.common import (COMMAND_QOS, LATCHED_QOS, SENSOR_PUB_QOS, HotLoop,
                                      PublisherWatch, declare_priority, deserialize_or_none,
                                      diag_name, run)
from simreal_ros.nodes.sim_robot_lockstep import Lockstep
from simreal_ros.nodes.sim_robot_params import PLANT_ARRAYS, PLANT_SCALARS, Parameters
from simreal_ros.nodes.sim_robot_unitree import UnitreeInterface

MAX_CATCH_UP = 25  # periods a late tick may simulate at once before it resynchronises


class SimRobot(Parameters, Lockstep, UnitreeInterface, Node):
    """Step a SimPlant in real time (or faster) and expose it as a robot driver.

    The parameters, the lockstep mode and the Unitree interface are in sim_robot_params,
    _lockstep and _unitree; the commands, the plant stepping and the gantry are here."""

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
                              initial_position=p['initial_position'] or None,
                              fixed_base_lift=(p['gantry_lift'] if p['gantry_lift'] >= 0
                                               else None))
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
        self._applied_ns = 0      # stamp (ns) of the last driver/applied_command
        self._periods_done = 0
        self._joint_enc = self._imu_enc = None   # made once (see _publish)
        # /clock = plant time + the time held before the first command (hold_until_command)
        self._clock_shift, self._hold_wall = 0.0, None
        self._sim_last = self.plant.time

        group = MutuallyExclusiveCallbackGroup()
        self.pub_clock = (self.create_publisher(ClockMsg, '/clock', SENSOR_PUB_QOS)
                          if self.publish_clock else None)
        self.pub_diag = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        self.pub_joint = self.pub_imu = self.pub_applied = None
        self._expired = self.plant.timed_out
        if self.interface == 'ros':
            self.pub_joint = self.create_publisher(JointState, 'joint_states', SENSOR_PUB_QOS)
            self.pub_imu = (self.create_publisher(Imu, 'imu', SENSOR_PUB_QOS)
                            if self.plant.has_base_imu else None)
            # Taken as bytes and read directly (core/cdr.py), as the supervisor reads its
            # inputs: no message object per command at 500 Hz.
            self._command_decoder = JointStateDecoder()
            # What this driver handed to the plant, when (issue 41: the live gap replays it).
            self.pub_applied = self.create_publisher(JointState, 'driver/applied_command',
                                                     COMMAND_QOS)
            self._applied_enc = JointStateEncoder(self.plant.names)
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
            self._lockstep_command(cmd, stamp_ns, names, position, velocity, effort)
            return
        with self._lock:
            t = self._arrival_time()
            self.plant.submit(cmd, t)
            self._applied(t, names, position, velocity, effort)
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

    def _robot_stamp(self, t):
        """(sec, nanosec) of plant time t on the clock joint_states is stamped with."""
        if self.publish_clock:
            return split_stamp(t + self._clock_shift)
        if self.rtf > 0 and self._wall_last is not None:
            return split_stamp(self._wall_last + (t - self._sim_last) / self.rtf
                               + self._clock_offset())
        return divmod(self.get_clock().now().nanoseconds, 1_000_000_000)

    def _applied(self, t, names, position, velocity, effort):
        """Publish a command as handed to the plant at plant time t (driver/applied_command):
        when it entered the delay line, not when it takes effect (the hidden latency)."""
        if self.pub_applied is None:
            return
        sec, nanosec = self._robot_stamp(t)
        # Never before the previous one: commands queued at one plant time (several taken in
        # one period) each read the clock offset anew, which moves by a microsecond, and a
        # reader that keeps its stream in order (sim_bridge's shadow) dropped the newer one:
        # 7 % of a loaded demo's commands, the live gap 8 x its floor on a plant that matched.
        # A clock stepped back (more than a millisecond) is followed, not held.
        ns = sec * 1_000_000_000 + nanosec
        if self._applied_ns - 1_000_000 < ns < self._applied_ns:
            ns = self._applied_ns
        self._applied_ns = ns
        sec, nanosec = divmod(ns, 1_000_000_000)
        if list(names) == self.plant.names:
            self.pub_applied.publish(self._applied_enc.encode(
                sec, nanosec, list(position) or None, list(velocity) or None,
                list(effort) or None))
            return
        msg = JointState(name=list(names), position=list(position), velocity=list(velocity),
                         effort=list(effort))
        msg.header.stamp = TimeMsg(sec=sec, nanosec=nanosec)
        self.pub_applied.publish(msg)

    def _applied_damping(self):
        """After a step: the joints the plant took off their command (command_timeout_s, a
        lost heartbeat, a rogue) are damped by this driver: published as applied commands."""
        expired = self.plant.timed_out
        newly = expired & ~self._expired
        self._expired = expired
        if newly.any():
            names = [n for n, k in zip(self.plant.names, newly) if k]
            self._applied(self.plant.time, names, (), [0.0] * len(names), ())

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
                self._applied_damping()
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
                base = (self.plant.base_body if self.plant.base_body is not None
                        else self.plant.gantry_body)
                imu = self._imu_enc = ImuEncoder(self.plant.model.body(base).name)
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

    # -- gantry -----------------------------------------------------------------------------
    def _on_gantry(self, msg):
        with self._lock:
            self.plant.hang(bool(msg.data))
        self.get_logger().info('gantry: ' + ('hanging' if msg.data else 'lowered'))

    def destroy_node(self):
        self._running = False
        return super().destroy_node()


def main(args=None):
    """Run the sim_robot node."""
    raise SystemExit(run(SimRobot, args))


if __name__ == '__main__':
    main()

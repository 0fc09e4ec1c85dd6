"""safety_supervisor: the only path to the hardware (limits, stages, latched e-stop, watchdogs).

    ros2 run simreal_ros safety_supervisor --ros-args --params-file config/robots/arm3.yaml
    ros2 service call /safety/estop std_srvs/srv/Trigger
    ros2 service call /safety/reset std_srvs/srv/Trigger
    ros2 service call /safety/advance_stage std_srvs/srv/Trigger
    ros2 service call /safety/select_sysid std_srvs/srv/SetBool "{data: true}"
    ros2 service call /safety/go_default std_srvs/srv/Trigger
    ros2 topic echo /safety/state --qos-durability transient_local

Subscribes:
    policy/command, sysid/command (sensor_msgs/JointState, every joint by name; one output per
    tick whatever their rate), joint_states (sensor_msgs/JointState), imu (sensor_msgs/Imu,
    when use_imu), sim_bridge/live_gap (std_msgs/String, latched)
Publishes:
    hardware/command (sensor_msgs/JointState, reliable keep-last 1; optionally
    std_msgs/Float64MultiArray on array_topic), safety/state (std_msgs/String, latched JSON),
    safety/heartbeat (diagnostic_msgs/DiagnosticStatus), /diagnostics
Services:
    safety/estop, safety/reset, safety/advance_stage, safety/go_default (std_srvs/Trigger),
    safety/select_sysid (std_srvs/SetBool)
Parameters:
    the robot file's `safety_supervisor` section (limits, stages, watchdogs, sysid.*,
    bringup.*, live_gap.*): docs/configuration.md lists every one; all read-only.

The rules (simreal_ros.core.safety, no ROS) and what a driver must do in turn: docs/nodes.md
and docs/real_robot.md.
"""
import json
import threading
import time

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType, JumpThreshold
from rclpy.duration import Duration
from rclpy.node import Node
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import Float64MultiArray, String
from std_srvs.srv import SetBool, Trigger

from simreal_ros.core.cdr import (JointStateDecoder, JointStateEncoder, decode_imu_orientation,
                                  split_stamp)
from simreal_ros.core.config import ConfigError
from simreal_ros.core.safety import SOURCES, Supervisor, SupervisorConfig
from simreal_ros.core.safety.stages import RecordWriter
from simreal_ros.core.publishers import PublisherRule
from simreal_ros.nodes.common import (COMMAND_QOS, LATCHED_QOS, SENSOR_SUB_QOS, HotLoop,
                                      PolledSubscription, PublisherWatch, declare_priority,
                                      deserialize_or_none, run,
                                      stamp_to_sec, timing_trace)
from simreal_ros.nodes.safety_supervisor_params import Parameters
from simreal_ros.nodes.safety_supervisor_report import Reporting
from simreal_ros.nodes.safety_supervisor_services import Services


class SafetySupervisor(Parameters, Services, Reporting, Node):
    """Forward one command source to the hardware through limits, stages, watchdogs, e-stop.

    The parameters, the service callbacks and the reporting are in safety_supervisor_params,
    _services and _report; the subscriptions, the tick and the output are here."""

    NODE_NAME = 'safety_supervisor'

    def __init__(self):
        super().__init__(self.NODE_NAME)
        self.priority = declare_priority(self, -10, 50)   # before the work starts
        p = self._declare_parameters()
        cfg = SupervisorConfig.from_params(p, source=self.NODE_NAME)
        self.core = Supervisor(cfg, self._now())
        self.stage_file = cfg.stage_file
        # Stalls are wall-clock events; on simulated time the simulator sets the pace.
        self._wall = None if self.get_parameter('use_sim_time').value else time.monotonic
        self.executor_kind = p['executor']
        self.forward_on_input = p['forward_on_input']
        self.forward_on_tick = p['forward_on_tick']
        if not (self.forward_on_input or self.forward_on_tick):
            raise ConfigError('forward_on_input and forward_on_tick are both false: nothing '
                              'would ever be forwarded; set at least one')
        self.array_order = list(p['array_joint_order'] or cfg.limits.names)
        unknown = [n for n in self.array_order if n not in cfg.limits.names]
        if unknown:
            raise ConfigError(f'array_joint_order names {unknown} that are not in joint_names')
        self.array_field = p['array_field']
        if self.array_field not in ('position', 'velocity', 'effort'):
            raise ConfigError("array_field must be 'position', 'velocity' or 'effort', got "
                              f'{self.array_field!r}')
        self._array_hold = None
        self._lock = threading.Lock()
        self._last_output_kind = None
        self._encoders = {}        # names -> JointStateEncoder of hardware/command
        self._state_decoder = JointStateDecoder()
        self._raw_fallbacks = 0
        self.undecodable_inputs = 0   # samples nobody could read, dropped (the watchdog sees it)
        self._sent_any = False
        self.writer = RecordWriter(self.core.stage.pending, self.core.stage.written, self._lock)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self._jump_handler = self.get_clock().create_jump_callback(
            JumpThreshold(min_forward=Duration(seconds=cfg.timeouts['joint_states']),
                          min_backward=Duration(nanoseconds=-1), on_clock_change=True),
            post_callback=self._on_time_jump)

        control = MutuallyExclusiveCallbackGroup()
        services = MutuallyExclusiveCallbackGroup()
        self.pub_cmd = self.create_publisher(JointState, 'hardware/command', COMMAND_QOS)
        self.pub_array = (self.create_publisher(Float64MultiArray, p['array_topic'], COMMAND_QOS)
                          if p['array_topic'] else None)
        self.pub_state = self.create_publisher(String, 'safety/state', LATCHED_QOS)
        self.pub_heartbeat = self.create_publisher(DiagnosticStatus, 'safety/heartbeat',
                                                   COMMAND_QOS)
        self.pub_diag = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        self._polled = []
        poll = p['poll_inputs']
        if poll:
            # Taken at the start of each tick (and of each forwarded command): one executor
            # callback per period instead of one per input message and one per tick.
            try:
                # Taken as bytes and read directly (core/cdr.py; bench/publish_cost.py: 4.1 us
                # for the G1's joint_states against 12.6 us for rclpy's message object, imu 1.3
                # against 19.6).
                self._polled.append((PolledSubscription(self, JointState, 'joint_states',
                                                        SENSOR_SUB_QOS),
                                     self._on_joint_states_raw))
                if cfg.use_imu:
                    self._polled.append((PolledSubscription(self, Imu, 'imu', SENSOR_SUB_QOS),
                                         self._on_imu_raw))
            except (AttributeError, ImportError, TypeError) as exc:
                # An rclpy whose internals differ (PolledSubscription uses rclpy's own
                # subscription object): the same checks through callbacks.
                for sub, _ in self._polled:
                    sub.destroy()
                self._polled, poll = [], False
                self.get_logger().warning(f'poll_inputs unavailable with this rclpy ({exc}): '
                                          'a callback per joint_states/imu message instead')
        if not poll:
            self.create_subscription(JointState, 'joint_states',
                                     self._locked(self._on_joint_states), SENSOR_SUB_QOS,
                                     callback_group=control)
            if cfg.use_imu:
                self.create_subscription(Imu, 'imu', self._locked(self._on_imu), SENSOR_SUB_QOS,
                                         callback_group=control)
        for source in SOURCES:
            self.create_subscription(
                JointState, f'{source}/command',
                lambda msg, s=source: self._on_command(s, msg), COMMAND_QOS,
                callback_group=control)
        if p['live_gap.topic']:
            self.create_subscription(String, p['live_gap.topic'], self._on_live_gap,
                                     LATCHED_QOS, callback_group=services)
        self.rogue_action = p['rogue_publisher_action']
        self._rogues = {}    # topic -> (rogue node names, why) while its rule is broken
        own = self.get_fully_qualified_name()
        ns = self.get_namespace()
        rules = [('hardware/command', [own]), ('joint_states', p['driver_publishers'])]
        if cfg.use_imu:
            rules.append(('imu', p['driver_publishers']))
        rules.append(('policy/command', p['policy_publishers']))
        self._live_gap_topic = p['live_gap.topic']
        if self._live_gap_topic:
            rules.append((self._live_gap_topic, p['live_gap.publishers']))
        self.watches = [
            PublisherWatch(self, topic, PublisherRule(topic, allowed, own, ns),
                           lambda rogues, why, t=topic: self._on_rogues(t, rogues, why),
                           period_s=p['publisher_check_period_s'], callback_group=services)
            for topic, allowed in rules]
        self.create_service(Trigger, 'safety/estop', self._srv_estop, callback_group=services)
        self.create_service(Trigger, 'safety/reset', self._srv_reset, callback_group=services)
        self.create_service(Trigger, 'safety/advance_stage', self._srv_advance,
                            callback_group=services)
        self.create_service(SetBool, 'safety/select_sysid', self._srv_select,
                            callback_group=services)
        self.create_service(Trigger, 'safety/go_default', self._srv_go_default,
                            callback_group=services)
        # The 500 Hz tick: run()'s own loop where allowed (common.HotLoop), else the timer.
        self.hot_loop = HotLoop(self, cfg.period_s, self._tick,
                                p['own_tick_loop'] and self._wall is not None,
                                callback_group=control)
        self.create_timer(1.0 / p['state_rate_hz'], self._publish_state, callback_group=services)
        self.create_timer(1.0, self._publish_diagnostics, callback_group=services)
        # A liveness signal of this process: on the steady clock, whatever ROS time does (a
        # lockstep simulation freezes simulated time while it waits for a command).
        self.create_timer(1.0 / p['heartbeat_rate_hz'], self._publish_heartbeat,
                          callback_group=control, clock=Clock(clock_type=ClockType.STEADY_TIME))
        for text in self.core.stage.warnings:
            self.get_logger().warning(text)
        self.get_logger().info(
            f'supervising {len(cfg.limits.names)} joints at {1 / cfg.period_s:.0f} Hz, mode '
            f'{cfg.mode}, stage {self.core.stage.scale:.2f} (highest reached '
            f'{self.core.stage.scales[self.core.stage.highest]:.2f}), safe mode '
            f'{cfg.safe_mode}; waiting for joint_states: nothing is published on '
            'hardware/command until it arrives')
        self._publish_state()

    def _now(self):
        return self.get_clock().now().nanoseconds * 1e-9

    # -- inputs -----------------------------------------------------------------------------
    def _locked(self, handler):
        """`handler(msg, now)` as a subscription callback that takes the lock."""
        def callback(msg):
            now = self._now()
            with self._lock:
                handler(msg, now)
        return callback

    def _take_inputs(self, now):
        """Run every polled input message waiting, oldest first (caller holds the lock):
        each sample meets the plausibility checks, as it would in a callback."""
        for sub, handler in self._polled:
            for data in sub.take_all_raw():
                handler(data, now)

    def _on_joint_states(self, msg, now):
        """One joint_states sample (caller holds the lock)."""
        self._take_joint_state(msg.name, msg.position, msg.velocity,
                               stamp_to_sec(msg.header.stamp), now)

    def _take_joint_state(self, names, position, velocity, stamp, now):
        first = self.core.q is None
        ok, reason = self.core.on_joint_state(names, position, velocity, stamp, now)
        if not ok:
            self.get_logger().warning(f'joint_states ignored: {reason}', throttle_duration_sec=2.0)
        elif first:
            self.get_logger().info('joint_states arrived: supervising')

    def _on_joint_states_raw(self, data, now):
        """One joint_states sample as bytes (caller holds the lock); bytes this module does
        not read (another representation) go through rclpy's deserializer."""
        try:
            sec, nanosec, _, names, position, velocity, _ = self._state_decoder.decode(data)
        except ValueError:
            self._raw_fallbacks += 1
            msg = deserialize_or_none(data, JointState)
            if msg is None:
                self._undecodable('joint_states')
            else:
                self._on_joint_states(msg, now)
            return
        self._take_joint_state(names, position, velocity, sec + nanosec * 1e-9, now)

    def _on_imu_raw(self, data, now):
        """One imu sample as bytes (caller holds the lock), as _on_joint_states_raw."""
        try:
            sec, nanosec, orientation = decode_imu_orientation(data)
        except ValueError:
            self._raw_fallbacks += 1
            msg = deserialize_or_none(data, Imu)
            if msg is None:
                self._undecodable('imu')
            else:
                self._on_imu(msg, now)
            return
        self._take_imu(orientation, sec + nanosec * 1e-9, now)

    def _undecodable(self, topic):
        self.undecodable_inputs += 1
        self.get_logger().warning(f'{topic}: a sample neither core/cdr nor rclpy can read '
                                  '(malformed CDR) was dropped', throttle_duration_sec=2.0)

    def _on_imu(self, msg, now):
        """One imu sample (caller holds the lock)."""
        o = msg.orientation
        self._take_imu((o.w, o.x, o.y, o.z), stamp_to_sec(msg.header.stamp), now)

    def _take_imu(self, orientation, stamp, now):
        ok, reason = self.core.on_imu(orientation, stamp, now)
        if not ok:
            self.get_logger().warning(f'imu ignored: {reason}', throttle_duration_sec=2.0)

    def _on_command(self, source, msg):
        now = self._now()
        trace = timing_trace()   # bench/policy_staleness.py's events, else None
        if trace is not None:
            trace.add('cmd', source, stamp_to_sec(msg.header.stamp), now, time.time())
        with self._lock:
            self._take_inputs(now)   # the newest state for a command forwarded at once
            ok, reason = self.core.on_command(source, msg.name, msg.position, msg.velocity,
                                              msg.effort, stamp_to_sec(msg.header.stamp), now,
                                              sender=msg.header.frame_id)
            if ok and self.forward_on_input and source == self.core.mode:
                # At most one output per tick slot: a faster source waits for the tick.
                out = self.core.forward_input(now, wall=self._wall() if self._wall else None)
                if out is not None:
                    self._send(out, now)
        if not ok:
            self.get_logger().warning(f'{source}/command rejected (not forwarded): {reason}',
                                   throttle_duration_sec=1.0)
        self._log_events()

    def _on_live_gap(self, msg):
        now = self._now()
        try:
            doc = json.loads(msg.data)
        except ValueError as exc:
            doc = f'not JSON ({exc})'
        with self._lock:
            ok, reason = self.core.on_live_gap(doc, now)
        if not ok:
            self.get_logger().warning(f'live gap ignored: {reason}', throttle_duration_sec=5.0)
        self._log_events()

    # -- control tick -----------------------------------------------------------------------
    def _tick(self):
        with self._lock:
            # The time read after the lock: a tick that waited for it (or a process stopped
            # while it did) decides, and stamps its safe output, at the time it runs.
            now = self._now()
            self._take_inputs(now)
            out = self.core.tick_output(now, self._wall() if self._wall else None,
                                        self.forward_on_tick)
            if out is not None:
                self._send(out, now)
        self._log_events()

    def _send(self, out, now):
        """Publish one Output (caller holds the lock)."""
        kind = None if out is None else out.reason.split(':')[0] if out.safe else 'forwarding'
        if kind != self._last_output_kind:  # log changes of kind, not of the ages in the text
            self._last_output_kind = kind
            text = 'nothing (waiting)' if out is None else (
                f'safe mode ({out.reason})' if out.safe else 'forwarding')
            self.core.events.append((now, f'output: {text}'))
        if out is None:
            return
        # Forwarded commands keep the source's stamp (the state they were computed from), also
        # an unstamped source's 0: re-stamping it with now would make a lockstep simulator
        # (which steps on a command stamped >= its time) step on a re-sent old command.
        # Safe-mode outputs are the supervisor's own, stamped now.
        stamp = out.stamp if out.stamp is not None and not out.safe else now
        sec, nanosec = split_stamp(stamp)
        self._sent_any = True
        # The JointState's bytes, made directly (core/cdr.py: no message object, no per-field
        # conversion; one encoder per set of names, made once).
        key = tuple(out.names)
        encoder = self._encoders.get(key)
        if encoder is None:
            if len(self._encoders) >= 16:      # subset commands of many shapes: start over
                self._encoders.clear()
            encoder = self._encoders[key] = JointStateEncoder(key)
        try:
            data = encoder.encode(sec, nanosec, out.position, out.velocity, out.effort)
        except ValueError:   # arrays not one value per name: the message path takes them
            data = JointState(name=list(out.names))
            data.header.stamp.sec, data.header.stamp.nanosec = sec, nanosec
            for field in ('position', 'velocity', 'effort'):
                values = getattr(out, field)
                if values is not None:
                    setattr(data, field, [float(v) for v in values])
        self.pub_cmd.publish(data)
        if self.pub_array is not None:
            self._send_array(out)

    def _send_array(self, out):
        """Publish the Float64MultiArray (caller holds the lock).

        A forward controller cannot take kp=0: in safe mode the array damps as well as it can.
        position: the measured position, anew every tick (a zero position error leaves the
        driver's -kd*dq); velocity: zeros (kd*(0 - dq)); effort: -kd*dq (zeros for safe_mode
        zero_torque). With safe_mode hold, the position at the trip.
        """
        values = getattr(out, self.array_field)
        if out.safe and not out.bringup:   # the bring-up's targets go out as they are
            q, dq = self.core.q, self.core.dq
            if q is None:
                return
            if self.array_field == 'position':
                if self.core.cfg.safe_mode == 'hold' and self.core.latched:
                    if self._array_hold is None:
                        self._array_hold = dict(zip(self.core.names, q.tolist()))
                    lookup = self._array_hold
                else:
                    lookup = dict(zip(self.core.names, q.tolist()))
            elif self.array_field == 'velocity':
                lookup = {n: 0.0 for n in self.core.names}
            elif self.core.cfg.safe_mode == 'zero_torque':
                lookup = {n: 0.0 for n in self.core.names}
            else:
                lookup = dict(zip(self.core.names, (-self.core.cfg.limits.kd * dq).tolist()))
        else:
            self._array_hold = None
            lookup = dict(zip(out.names, values.tolist())) if values is not None else {}
        if lookup is None or any(n not in lookup for n in self.array_order):
            return  # a subset command cannot drive a whole forward controller: not sent
        self.pub_array.publish(Float64MultiArray(data=[float(lookup[n])
                                                       for n in self.array_order]))

    def _log_events(self):
        if not self.core.events:    # the common case, every tick: no lock, nothing to do
            return
        with self._lock:
            events, self.core.events = self.core.events, []
        if events:
            self.writer.poke()
        for _, text in events:
            if text.startswith('E-STOP'):
                self.get_logger().error(text)
            else:
                self.get_logger().info(text)
        if events:
            self._publish_state()

    def before_shutdown(self, repeats=3):
        """Latch the e-stop and publish the safe output a few times before the process ends.

        Called by run() on SIGINT/SIGTERM and when a callback raised, while the context is
        still valid: the driver's last command from this supervisor is then its safe output
        (a driver must still damp on silence: SIGKILL or a power cut skip this).
        """
        if not self._sent_any:
            return      # the driver never heard from this supervisor: nothing to take back
        now = self._now()
        with self._lock:
            out = self.core.estop('supervisor shutting down', now)
        for k in range(repeats):
            with self._lock:
                self._send(out if out is not None else self.core.tick(now, count=False), now)
            if k < repeats - 1:
                time.sleep(0.002)
        # Reliable readers (the driver) get them before the publisher is destroyed.
        for pub in (self.pub_cmd, self.pub_array):
            if pub is not None:
                pub.wait_for_all_acked(Duration(seconds=0.5))
        self._log_events()
        self._publish_heartbeat()

    def destroy_node(self):
        writer = getattr(self, 'writer', None)   # none when a parameter was refused
        if writer is not None:
            writer.stop()      # one last write of the stage record
        for sub, _ in getattr(self, '_polled', ()):
            sub.destroy()
        return super().destroy_node()


def main(args=None):
    """Run the safety_supervisor node."""
    raise SystemExit(run(SafetySupervisor, args))


if __name__ == '__main__':
    main()

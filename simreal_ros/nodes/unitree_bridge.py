"""unitree_bridge: the safety supervisor's output to a Unitree robot's low-level DDS interface.

    ros2 run simreal_ros unitree_bridge --ros-args --params-file config/robots/g1_12dof.yaml \
        -p unitree.network_interface:=eth0

Subscribes:
    hardware/command (sensor_msgs/JointState), safety/heartbeat
    (diagnostic_msgs/DiagnosticStatus); LowState_ on rt/lowstate (CycloneDDS)
Publishes:
    joint_states (sensor_msgs/JointState), imu (sensor_msgs/Imu), driver/applied_command
    (sensor_msgs/JointState: each LowCmd_ written, its joint targets, stamped when written),
    driver/state (std_msgs/String, latched JSON), /diagnostics; LowCmd_ on rt/lowcmd
    (CycloneDDS) at rate_hz
Parameters:
    the robot file's `unitree_bridge` section (rate_hz, unitree.*, kp/kd, ...):
    docs/configuration.md lists every one.

What it sends and when it damps (core/unitree_bridge.py), and the two middlewares in one
process: docs/nodes.md and docs/real_robot.md.
"""
import json
import re
import time

import numpy as np

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import String
from std_srvs.srv import Trigger

from simreal_ros.core import unitree
from simreal_ros.core.cdr import ImuEncoder, JointStateDecoder, JointStateEncoder
from simreal_ros.core.unitree_bridge import BridgeConfig, BridgeCore, WireSettings
from simreal_ros.core.publishers import PublisherRule
from simreal_ros.nodes.common import (COMMAND_QOS, EXECUTOR_DOC, LATCHED_QOS, SENSOR_PUB_QOS,
                                      PolledSubscription, PublisherWatch, declare, declare_names,
                                      declare_priority, declare_rogue_parameters,
                                      deserialize_or_none, diag_name, run)

SHUTDOWN_DAMPING_SENDS = 10


class UnitreeBridge(Node):
    """hardware/command -> rt/lowcmd; rt/lowstate -> joint_states, imu."""

    NODE_NAME = 'unitree_bridge'

    def __init__(self):
        super().__init__(self.NODE_NAME)
        self.priority = declare_priority(self, -10, 50)
        p = self._declare_parameters()
        cfg = BridgeConfig(
            interface=p['interface'], joint_names=p['joint_names'],
            motor_index=p['motor_indices'], kp=p['kp'], kd=p['kd'],
            damping_kd=p['damping_kd'], held_index=p['held_motor_indices'],
            held_position=p['held_positions'], held_kp=p['held_kp'], held_kd=p['held_kd'],
            command_timeout=p['command_timeout_s'], state_timeout=p['state_timeout_s'],
            require_heartbeat=p['require_heartbeat'], mode_pr=p['mode_pr'],
            motor_mode=p['motor_mode'], estop_buttons=p['remote.estop_buttons'],
            reset_buttons=p['remote.reset_buttons'], peer=p['unitree.peer'])
        self.core = BridgeCore(cfg)
        self.wire_settings = WireSettings(
            domain_id=p['unitree.domain_id'], network_interface=p['unitree.network_interface'],
            multicast=p['unitree.multicast'], peers=p['unitree.peers']).validate()
        self.no_writer_warning_s = p['unitree.no_writer_warning_s']
        self.executor_kind = p['executor']
        self.rate_hz = p['rate_hz']
        from simreal_ros.drivers import unitree_dds
        ws = self.wire_settings
        self.wire = unitree_dds.Wire(ws.domain_id, ws.network_interface, ws.multicast,
                                     ws.effective_peers())
        self.lowcmd = self.wire.writer(cfg.interface, 'LowCmd_', unitree_dds.TOPIC_CMD)
        self.lowstate = self.wire.reader(cfg.interface, 'LowState_', unitree_dds.TOPIC_STATE,
                                         depth=8)
        self.counters = dict(write_errors=0, remote_service_calls=0,
                             remote_service_unavailable=0, commands_while_rogue=0,
                             rogue_spells=0, commands_via_rclpy=0)
        self.last_reject = ''
        self.last_error = ''
        self._pending_remote = None      # 'estop' / 'reset' not yet delivered to the supervisor
        self._pending_since = None
        self._pending_reported = False
        self._driver_state = None
        self._joint_enc = JointStateEncoder(list(cfg.joint_names))
        self._imu_enc = ImuEncoder(p['imu_frame_id'])
        self._steady = Clock(clock_type=ClockType.STEADY_TIME)

        group = MutuallyExclusiveCallbackGroup()
        self.pub_joint = self.create_publisher(JointState, 'joint_states', SENSOR_PUB_QOS)
        self.pub_imu = self.create_publisher(Imu, 'imu', SENSOR_PUB_QOS)
        self.pub_driver = self.create_publisher(String, 'driver/state', LATCHED_QOS)
        # Each LowCmd_ written, echoed (issue 41: the live gap replays what was applied).
        self.pub_applied = self.create_publisher(JointState, 'driver/applied_command',
                                                 COMMAND_QOS)
        self._applied_enc = JointStateEncoder(list(cfg.joint_names))
        self.pub_diag = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        self._polled = []
        self._command_decoder = JointStateDecoder()
        poll = p['poll_inputs']
        if poll:
            # Taken at the start of each tick: one executor callback per period instead of
            # one per command (500 Hz) and heartbeat as well (as the supervisor's poll_inputs).
            try:
                # As bytes: the commands read directly (core/cdr.py), the heartbeat's content
                # not read at all (its arrival is the beat).
                self._polled = [
                    (PolledSubscription(self, JointState, 'hardware/command', COMMAND_QOS),
                     self._on_command_raw),
                    (PolledSubscription(self, DiagnosticStatus, 'safety/heartbeat',
                                        COMMAND_QOS), self._on_heartbeat)]
            except (AttributeError, ImportError, TypeError) as exc:
                for sub, _ in self._polled:
                    sub.destroy()
                self._polled, poll = [], False
                self.get_logger().warning(f'poll_inputs unavailable with this rclpy ({exc}): '
                                          'a callback per message instead')
        if not poll:
            self.create_subscription(JointState, 'hardware/command', self._on_command,
                                     COMMAND_QOS, callback_group=group)
            self.create_subscription(DiagnosticStatus, 'safety/heartbeat', self._on_heartbeat,
                                     COMMAND_QOS, callback_group=group)
        self.rogue_action = p['rogue_publisher_action']
        self.rogues, self.rogue_why = [], ''
        self.command_watch = PublisherWatch(
            self, 'hardware/command',
            PublisherRule('hardware/command', p['command_publishers'],
                          self.get_fully_qualified_name(), self.get_namespace()),
            self._on_rogues, period_s=p['publisher_check_period_s'], callback_group=group)
        self.cli_estop = self.create_client(Trigger, 'safety/estop')
        self.cli_reset = self.create_client(Trigger, 'safety/reset')
        self.create_timer(1.0 / self.rate_hz, self._tick, callback_group=group,
                          clock=self._steady)
        self.create_timer(1.0, self._publish_diagnostics, clock=self._steady)
        self._diag_last = (time.monotonic(), 0)
        self._started = time.monotonic()
        self._wire_problem = ''
        self.get_logger().info(
            f'{cfg.interface}: {self.core.n} joints on motors {list(cfg.motor_index)}, '
            f'{len(cfg.held_index)} held, LowCmd_ at {self.rate_hz:g} Hz, listening on '
            f'{ws.describe()}; nothing is sent before the first LowState_')
        if cfg.peer == 'simulator':
            self.get_logger().warning(
                'unitree.peer: simulator - a LowState_ with crc 0 (the vendor\'s simulator '
                'fills no CRC, mode_machine or tick) is ACCEPTED and counted; a non-zero crc '
                'is still checked. Never use this setting on a robot.')

    def _declare_array(self, name, ptype, description):
        from rcl_interfaces.msg import ParameterDescriptor
        value = self.declare_parameter(
            name, ptype, ParameterDescriptor(description=description, read_only=True)).value
        return list(value) if value is not None else []

    def _declare_parameters(self):
        p = {}
        S, D, I_ = (Parameter.Type.STRING_ARRAY, Parameter.Type.DOUBLE_ARRAY,
                    Parameter.Type.INTEGER_ARRAY)
        p['interface'] = declare(self, 'interface', 'unitree_hg', "'unitree_hg' (G1, H1_2) or "
                                 "'unitree_go' (Go2, H1): the robot's IDL types",
                                 read_only=True)
        p['joint_names'] = self._declare_array('joint_names', S, 'joints the supervisor '
                                               'commands (hardware/command names)')
        p['motor_indices'] = self._declare_array('motor_indices', I_, 'motor index of each '
                                                 'of joint_names (empty = 0, 1, ...)')
        p['kp'] = self._declare_array('kp', D, 'position gain per joint sent with a position '
                                      'target (N*m/rad): the robot file\'s, as sim_robot')
        p['kd'] = self._declare_array('kd', D, 'velocity gain per joint (N*m*s/rad)')
        p['damping_kd'] = self._declare_array('damping_kd', D, 'kd of the damping this bridge '
                                              'sends on its own (empty = kd)')
        p['held_motor_indices'] = self._declare_array('held_motor_indices', I_, 'motors the '
                                                      'policy does not drive, held at '
                                                      'held_positions (e.g. a G1\'s waist and '
                                                      'arms under a 12-dof leg policy)')
        p['held_positions'] = self._declare_array('held_positions', D, 'held motors\' '
                                                  'targets (rad)')
        p['held_kp'] = self._declare_array('held_kp', D, 'held motors\' kp')
        p['held_kd'] = self._declare_array('held_kd', D, 'held motors\' kd (also their '
                                           'damping)')
        p['rate_hz'] = declare(self, 'rate_hz', 500.0, 'LowCmd_ rate (Hz)', low=10.0,
                               high=2000.0, read_only=True)
        p['command_timeout_s'] = declare(self, 'command_timeout_s', 0.1, 'damp a joint whose '
                                         'hardware/command is older, and everything when '
                                         'safety/heartbeat is silent this long (s)',
                                         low=0.002, high=5.0, read_only=True)
        p['state_timeout_s'] = declare(self, 'state_timeout_s', 0.05, 'damp everything when '
                                       'the newest LowState_ is older (s)', low=0.002,
                                       high=5.0, read_only=True)
        p['require_heartbeat'] = declare(self, 'require_heartbeat', True, 'obey '
                                         'hardware/command only once safety/heartbeat has '
                                         'been heard', read_only=True)
        p['mode_pr'] = declare(self, 'mode_pr', 0, 'unitree_hg ankle mode: 0 PR, 1 AB', low=0,
                               high=1, read_only=True)
        p['motor_mode'] = declare(self, 'motor_mode', 1, 'motor mode byte of driven and held '
                                  'motors (hg: 1 = enable; H1 strong motors: 10)', low=0,
                                  high=255, read_only=True)
        p['remote.estop_buttons'] = declare(self, 'remote.estop_buttons', ['select'],
                                            'wireless remote buttons that together e-stop '
                                            "(empty = none; default select, the vendor's "
                                            'deploy scripts\' stop button); names: '
                                            + ', '.join(unitree.REMOTE_BUTTONS),
                                            read_only=True)
        p['remote.reset_buttons'] = declare(self, 'remote.reset_buttons', ['start'],
                                            'remote buttons that together ask safety/reset '
                                            '(empty = none)', read_only=True)
        p['unitree.domain_id'] = declare(self, 'unitree.domain_id', 0, "the robot's DDS domain",
                                         low=0, high=232, read_only=True)
        p['unitree.network_interface'] = declare(self, 'unitree.network_interface', '',
                                                 "network interface to the robot (e.g. eth0; "
                                                 "'' = CycloneDDS chooses; lo = loopback only)",
                                                 read_only=True)
        p['unitree.multicast'] = declare(self, 'unitree.multicast', True, 'discover the robot '
                                         'by multicast (as the robot and the vendor\'s SDK '
                                         'do); on lo it is switched on explicitly. false: '
                                         'unicast to unitree.peers only', read_only=True)
        p['unitree.peers'] = declare_names(
            self, 'unitree.peers', 'unicast addresses to discover the robot at as well (e.g. '
            "['192.168.123.161'] where the network drops multicast); on lo 127.0.0.1 is always "
            'one')
        p['unitree.peer'] = declare(self, 'unitree.peer', 'robot', "who is on the other side: "
                                    "'robot' (every LowState_ CRC-checked) or 'simulator' (the "
                                    "vendor's unitree_mujoco: crc 0 accepted and counted; "
                                    'docs/real_robot.md)', read_only=True)
        p['unitree.no_writer_warning_s'] = declare(
            self, 'unitree.no_writer_warning_s', 3.0, 'say (error log, diagnostics) which '
            'settings to check when no LowState_ writer is matched, or none accepted, after '
            'this long (s)', low=0.5, high=60.0, read_only=True)
        p['imu_frame_id'] = declare(self, 'imu_frame_id', 'imu_link', 'imu header frame_id',
                                    read_only=True)
        p['executor'] = declare(self, 'executor', 'events', EXECUTOR_DOC, read_only=True)
        p['command_publishers'] = declare_names(
            self, 'command_publishers', 'nodes whose hardware/command this bridge obeys (names '
            'relative to its namespace, or /ns/name): `simreal up` and the launch file set it '
            'to safety_supervisor. Empty (the default): any one node, a second makes both rogues')
        p['rogue_publisher_action'], p['publisher_check_period_s'] = declare_rogue_parameters(
            self, 'hardware/command', 'every command refused while a rogue publishes, so the '
            'robot is damped after command_timeout_s')
        p['poll_inputs'] = declare(self, 'poll_inputs', True, 'take hardware/command and '
                                   'safety/heartbeat at the start of each tick instead of an '
                                   'executor callback per message (false = callbacks)',
                                   read_only=True)
        return p

    # -- inputs ---------------------------------------------------------------------------
    def _on_rogues(self, rogues, why):
        """hardware/command has publishers it may not have (or, rogues empty, no longer)."""
        self.rogues, self.rogue_why = rogues, why
        if rogues:
            self.counters['rogue_spells'] += 1
            self.get_logger().error(f'rogue publisher: {why}')
        else:
            self.get_logger().warning('hardware/command: publishers as allowed again')

    def _on_command_raw(self, data):
        try:
            _, _, _, names, position, velocity, effort = self._command_decoder.decode(data)
        except ValueError:   # bytes core/cdr does not read (another representation)
            self.counters['commands_via_rclpy'] += 1
            msg = deserialize_or_none(data, JointState)
            if msg is None:   # malformed: refused as any bad command is
                self.core.counters['commands_rejected'] += 1
                self.last_reject = 'hardware/command: malformed CDR'
                return
            self._on_command(msg)
            return
        self._command(names, position, velocity, effort)

    def _on_command(self, msg):
        self._command(msg.name, msg.position, msg.velocity, msg.effort)

    def _command(self, names, position, velocity, effort):
        if self.rogues and self.rogue_action == 'estop':
            # Every command refused while a rogue publishes: the command timeout damps.
            self.counters['commands_while_rogue'] += 1
            return
        try:
            self.core.command(names, position, velocity, effort, time.monotonic())
        except ValueError as exc:
            self.core.counters['commands_rejected'] += 1
            self.last_reject = str(exc)
            self.get_logger().warn(f'hardware/command rejected: {exc}',
                                   throttle_duration_sec=2.0)

    def _on_heartbeat(self, msg):
        self.core.beat(time.monotonic())

    # -- the loop -------------------------------------------------------------------------
    def _tick(self):
        for sub, handler in self._polled:
            for data in sub.take_all_raw():
                handler(data)
        now = time.monotonic()
        newest = None
        for rec in self.lowstate.take():
            event = self.core.take_state(rec, now)
            newest = rec if self.core.state is rec else newest
            if event is not None:
                self._remote(event)
        if newest is not None:
            self._call_remote()
            self._publish_state()
        out, cause = self.core.compose(now)
        if out is not None:
            try:
                self.lowcmd.write(out)
            except Exception as exc:  # noqa: BLE001 - counted, reported; the next tick retries
                self.counters['write_errors'] += 1
                self.last_error = str(exc)
            else:
                self._echo()
        self._report(cause)

    def _echo(self):
        """Publish the LowCmd_ just written on driver/applied_command: its joint targets
        (NaN where a term is off, an array left empty when off for every joint), stamped
        now. Its gains are not in a JointState: damping is a velocity target of 0."""
        q, dq, tau = self.core.written()
        sec, nanosec = divmod(self.get_clock().now().nanoseconds, 1_000_000_000)
        self.pub_applied.publish(self._applied_enc.encode(
            sec, nanosec, None if np.isnan(q).all() else q,
            None if np.isnan(dq).all() else dq, tau))

    def _publish_state(self):
        # The messages' bytes, made directly (core/cdr.py), as sim_robot does: at 500 Hz the
        # message objects and rclpy's conversion of them cost more than the rest of this.
        # imu first: a node woken by joint_states (policy_runner's tick) then finds the same
        # sample's imu already there.
        sec, nanosec = divmod(self.get_clock().now().nanoseconds, 1_000_000_000)
        quat, gyro, acc = self.core.imu()
        self.pub_imu.publish(self._imu_enc.encode(sec, nanosec, quat, gyro, acc))
        q, dq, tau = self.core.joint_state()
        self.pub_joint.publish(self._joint_enc.encode(sec, nanosec, q, dq, tau))

    def _remote(self, event):
        """The remote's e-stop (already damping here) or reset: ask the supervisor too. A
        service not (yet) discovered is asked again every tick until it answers the call: the
        e-stop must reach the supervisor, and the bridge damps meanwhile."""
        self.get_logger().warn(f'wireless remote: {event} buttons pressed'
                               + (' - damping, calling safety/estop' if event == 'estop'
                                  else ' - calling safety/reset'))
        # An e-stop supersedes a pending reset; a reset never replaces a pending e-stop.
        if event == 'estop' or self._pending_remote != 'estop':
            self._pending_remote = event
            self._pending_since = time.monotonic()
        self._call_remote()

    def _call_remote(self):
        event = self._pending_remote
        if event is None:
            return
        client = self.cli_estop if event == 'estop' else self.cli_reset
        if not client.service_is_ready():
            if not self._pending_reported:
                self.counters['remote_service_unavailable'] += 1
                self.get_logger().error(f'{client.srv_name} not available yet: asking again '
                                        'every tick' + ('; this bridge damps meanwhile'
                                                        if event == 'estop' else ''))
                self._pending_reported = True
            return
        self._pending_remote, self._pending_reported = None, False
        self.counters['remote_service_calls'] += 1
        future = client.call_async(Trigger.Request())
        if event == 'reset':
            future.add_done_callback(self._reset_done)

    def _reset_done(self, future):
        try:
            result = future.result()
        except Exception as exc:  # noqa: BLE001 - reported; the latch stays
            self.get_logger().error(f'safety/reset failed: {exc}')
            return
        if result.success:
            self.core.clear_remote()
            self.get_logger().info(f'remote reset accepted: {result.message}')
        else:
            self.get_logger().warn(f'remote reset refused: {result.message}')

    def _report(self, cause):
        damped = cause != 'commanded'
        if damped and self.rogues and self.rogue_action == 'estop':
            cause = f'rogue publisher: {self.rogue_why}; {cause}'
        key = (damped, re.sub(r'[0-9.]+', '#', cause))   # not every change of a figure
        if self._driver_state is not None and self._driver_state[0] == key:
            return
        self._driver_state = (key, cause)
        self.pub_driver.publish(String(data=json.dumps({'damped': damped, 'cause': cause})))

    def _publish_diagnostics(self):
        now = time.monotonic()
        t0, sent0 = self._diag_last
        c = self.core.counters
        sent = c['lowcmd_sent'] + c['damping_sent']
        self._diag_last = (now, sent)
        rate = (sent - sent0) / max(now - t0, 1e-9)
        cause = self._driver_state[1] if self._driver_state else 'starting'
        writers, readers = self.lowstate.matched(), self.lowcmd.matched()
        problem = self._check_wire(now, writers)
        status = DiagnosticStatus(name=diag_name(self, self.core.cfg.interface),
                                  hardware_id=self.wire_settings.describe())
        if problem:
            status.level = DiagnosticStatus.ERROR
            status.message = f'damping: {problem}'
        elif cause != 'commanded':
            status.level = DiagnosticStatus.WARN
            status.message = f'damping: {cause}'
        else:
            status.level = DiagnosticStatus.OK
            status.message = f'commanding, LowCmd_ {rate:.0f} Hz'
        status.message += (f'; {writers} LowState_ writer(s), {readers} LowCmd_ reader(s) '
                           f'matched on {self.wire_settings.describe()}')
        if self.counters['write_errors']:
            status.level = DiagnosticStatus.ERROR
            status.message += f'; {self.counters["write_errors"]} LowCmd_ writes failed'
        values = dict(c, **self.counters, lowcmd_rate_hz=f'{rate:.1f}',
                      lowstate_malformed=self.lowstate.malformed, cause=cause,
                      last_reject=self.last_reject, last_error=self.last_error,
                      executor=self.executor_kind, lowstate_writers_matched=writers,
                      lowcmd_readers_matched=readers, wire=self.wire_settings.describe(),
                      peer=self.core.cfg.peer, wire_problem=problem)
        status.values = [KeyValue(key=k, value=str(v)) for k, v in values.items()]
        out = DiagnosticArray(status=[status])
        out.header.stamp = self.get_clock().now().to_msg()
        self.pub_diag.publish(out)

    def _check_wire(self, now, writers):
        """After unitree.no_writer_warning_s without a usable LowState_: what is wrong (logged
        once per problem as an error naming the settings), else ''."""
        waited = now - self._started
        problem = ''
        if self.core.state is None and waited >= self.no_writer_warning_s:
            if writers == 0:
                problem = self.wire_settings.no_writer_advice(waited)
            else:
                problem = (f'{writers} LowState_ writer(s) matched but '
                           + self.core.no_state_reason())
        if problem and problem.split(' in ')[0] != self._wire_problem.split(' in ')[0]:
            self.get_logger().error(problem)
        self._wire_problem = problem
        return problem

    def destroy_node(self):
        for sub, _ in getattr(self, '_polled', ()):
            sub.destroy()
        self._polled = []
        return super().destroy_node()

    def before_shutdown(self):
        """Leave the robot damped, not on its last target (it obeys the last thing heard)."""
        out = self.core.damping()
        if out is None:
            return
        for _ in range(SHUTDOWN_DAMPING_SENDS):
            self.lowcmd.write(out)
            time.sleep(1.0 / self.rate_hz)


def main(args=None):
    """Run the unitree_bridge node."""
    try:
        raise SystemExit(run(UnitreeBridge, args))
    except ImportError as exc:
        raise SystemExit(f'[unitree_bridge] {exc}') from None


if __name__ == '__main__':
    main()

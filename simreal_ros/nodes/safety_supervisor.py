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
import os
import threading
import time

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockChange, ClockType, JumpThreshold
from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.parameter import Parameter
from rcl_interfaces.msg import SetParametersResult
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import Float64MultiArray, String
from std_srvs.srv import SetBool, Trigger

from simreal_ros.core.cdr import (JointStateDecoder, JointStateEncoder, decode_imu_orientation,
                                  split_stamp)
from simreal_ros.core.config import ConfigError
from simreal_ros.core.safety import SAFE_MODES, SOURCES, Supervisor, SupervisorConfig
from simreal_ros.core.safety.stages import RecordWriter
from simreal_ros.core.publishers import PublisherRule
from simreal_ros.nodes.common import (COMMAND_QOS, EXECUTOR_DOC, LATCHED_QOS,
                                      OWN_TICK_LOOP_DOC, SENSOR_SUB_QOS, HotLoop,
                                      PolledSubscription, PublisherWatch, declare, declare_names,
                                      declare_priority, declare_rogue_parameters,
                                      deserialize_or_none, diag_name, run,
                                      stamp_to_sec, timing_trace)

ARRAYS = {
    'joint_names': (Parameter.Type.STRING_ARRAY, 'supervised joints (names as in joint_states)'),
    'kp': (Parameter.Type.DOUBLE_ARRAY, 'position gain per joint the driver applies (N*m/rad); '
           'used to limit the torque a position target implies'),
    'kd': (Parameter.Type.DOUBLE_ARRAY, 'velocity gain per joint the driver applies '
           '(N*m*s/rad)'),
    'position_lower': (Parameter.Type.DOUBLE_ARRAY, 'soft lower position limit per joint (rad), '
                       'inside the hard range'),
    'position_upper': (Parameter.Type.DOUBLE_ARRAY, 'soft upper position limit per joint (rad)'),
    'velocity_limit': (Parameter.Type.DOUBLE_ARRAY, 'velocity limit per joint at stage 1.00 '
                       '(rad/s): velocity targets are clipped, faster joints may only brake'),
    'torque_limit': (Parameter.Type.DOUBLE_ARRAY, 'limit per joint at stage 1.00 (N*m) on the '
                     'torque a command implies, kp*(q_t-q) + kd*(dq_t-dq) + effort'),
    'max_target_rate': (Parameter.Type.DOUBLE_ARRAY, 'max change of a position target per '
                        'second at stage 1.00 (rad/s)'),
    'max_target_accel': (Parameter.Type.DOUBLE_ARRAY, 'max change of the position target\'s '
                         'rate per second at stage 1.00 (rad/s^2), braking before the command; '
                         'empty = no acceleration limit'),
    'trip_velocity': (Parameter.Type.DOUBLE_ARRAY, 'e-stop when a measured joint velocity '
                      'exceeds this (rad/s, not scaled by the stage)'),
    'stages': (Parameter.Type.DOUBLE_ARRAY, 'stage scales on velocity, torque and rate limits, '
               'increasing, in (0, 1]; default 0.10 0.25 0.50 0.75 1.00'),
    'stage_dwell_s': (Parameter.Type.DOUBLE_ARRAY, 'minimum clean time in a stage before '
                      'promotion (s); one value or one per stage'),
    'demote_on': (Parameter.Type.STRING_ARRAY, 'faults that demote one stage: limit, watchdog, '
                  'rejected (of the policy), estop (automatic trips), operator (safety/estop); '
                  'default limit, watchdog, estop, rejected'),
    'array_joint_order': (Parameter.Type.STRING_ARRAY, 'joint order of the Float64MultiArray '
                          'output (default: joint_names)'),
    'sysid.position_lower': (Parameter.Type.DOUBLE_ARRAY, 'sysid soft lower limits (rad); '
                             'empty = main limits (always intersected with them)'),
    'sysid.position_upper': (Parameter.Type.DOUBLE_ARRAY, 'sysid soft upper limits (rad)'),
    'sysid.velocity_limit': (Parameter.Type.DOUBLE_ARRAY, 'sysid velocity limits (rad/s); '
                             'min with the main limits times sysid.limit_scale; SysID limits '
                             'are not scaled by the stage'),
    'sysid.torque_limit': (Parameter.Type.DOUBLE_ARRAY, 'sysid torque limits (N*m)'),
    'sysid.max_target_rate': (Parameter.Type.DOUBLE_ARRAY, 'sysid target rate limits (rad/s)'),
    'sysid.max_target_accel': (Parameter.Type.DOUBLE_ARRAY, 'sysid target acceleration limits '
                               '(rad/s^2)'),
    'bringup.default_position': (Parameter.Type.DOUBLE_ARRAY, 'the pose safety/go_default '
                                 'moves to and holds until the policy takes over (rad per '
                                 'joint, inside the soft limits; usually policy_runner\'s '
                                 'default_position); empty = go_default is refused'),
    'bringup.max_velocity': (Parameter.Type.DOUBLE_ARRAY, 'peak joint speed of the bring-up '
                             '(rad/s, one value or one per joint; also capped by velocity_limit '
                             'and max_target_rate x stage); empty = 0.5'),
}


def _where(status):
    if status['mode'] == 'policy':
        return f'stage {status["stage"]["stage"]:.2f}'
    return 'the sysid limits'


class SafetySupervisor(Node):
    """Forward one command source to the hardware through limits, stages, watchdogs, e-stop."""

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

    # -- parameters -------------------------------------------------------------------------
    def _declare_parameters(self):
        p = {}
        for name, (ptype, description) in ARRAYS.items():
            value = self.declare_parameter(
                name, ptype, ParameterDescriptor(description=description, read_only=True)).value
            p[name] = list(value) if value is not None else []
        p['rate_hz'] = declare(self, 'rate_hz', 500.0, 'control tick rate (Hz)', low=1.0,
                               high=5000.0, read_only=True)
        p['safe_mode'] = declare(self, 'safe_mode', 'damping', 'output while e-stopped or without '
                                 'a fresh command: ' + ', '.join(SAFE_MODES), read_only=True)
        p['mode'] = declare(self, 'mode', 'policy', 'source forwarded at start: policy or sysid',
                            read_only=True)
        for name, default in (('policy', 0.06), ('sysid', 0.06), ('joint_states', 0.05),
                              ('imu', 0.05)):
            p[f'{name}_timeout_s'] = declare(
                self, f'{name}_timeout_s', default, f'max age of {name} by header stamp and by '
                'arrival (s); stale commands -> safe mode, stale joint_states/imu -> e-stop',
                low=1e-3, high=10.0, read_only=True)
        p['check_stamps'] = declare(self, 'check_stamps', True, 'also check header stamps (not '
                                    'only arrival times)', read_only=True)
        p['use_imu'] = declare(self, 'use_imu', False, 'floating base: watch imu and base tilt',
                               read_only=True)
        p['max_tilt_rad'] = declare(self, 'max_tilt_rad', 0.0, 'e-stop beyond this base tilt '
                                    '(rad); 0 = off', low=0.0, high=3.1416, read_only=True)
        p['reset_tolerance'] = declare(self, 'reset_tolerance', 0.1, 'reset needs the latest '
                                       'position targets within this of the state (rad)',
                                       low=0.0, high=10.0, read_only=True)
        p['reject_trip_count'] = declare(self, 'reject_trip_count', 10, 'e-stop after this many '
                                         'rejected commands in a row', low=1, high=100000,
                                         read_only=True)
        p['reset_velocity_tolerance'] = declare(
            self, 'reset_velocity_tolerance', 0.5, 'reset and every start of forwarding need the '
            'joints nearly still and the command\'s velocity targets near the measured ones '
            '(rad/s)', low=0.0, high=100.0, read_only=True)
        p['state_position_margin'] = declare(
            self, 'state_position_margin', 0.3, 'a measured position beyond the soft range by '
            'more than this is implausible, never used (rad; the soft limits sit inside the '
            'hard range, a joint can be pushed a little past them)', low=0.0, high=10.0,
            read_only=True)
        p['state_velocity_factor'] = declare(
            self, 'state_velocity_factor', 3.0, 'a measured velocity beyond this times '
            'velocity_limit, or a position jump further than that velocity moves a joint '
            'between two samples, is implausible', low=1.0, high=100.0, read_only=True)
        p['implausible_trip_count'] = declare(
            self, 'implausible_trip_count', 5, 'this many implausible joint_states in a row are '
            'a sensor fault (e-stop); one glitch is only counted (5 samples = 10 ms at 500 Hz)',
            low=1, high=100000, read_only=True)
        p['late_tick_periods'] = declare(
            self, 'late_tick_periods', 5.0, 'a control tick more than this many periods after '
            'the previous one (wall clock) with no joint_states since (a stalled process) '
            'forwards nothing computed from the old state (counted: late_ticks); with a new '
            'state it is a slow process and computes as usual (counted: slow_ticks)',
            low=1.0, high=1000.0, read_only=True)
        p['stale_hold_s'] = declare(
            self, 'stale_hold_s', 0.0, 'when the policy goes stale, hold its last target this '
            'long before the safe mode output (s): a walking robot keeps its stance through a '
            'brief stall of the computer; 0 = damp at once (right for an arm)', low=0.0,
            high=5.0, read_only=True)
        p['sysid_release_s'] = declare(
            self, 'sysid_release_s', 1.0, 'the SysID path is granted to one experiment node '
            '(header.frame_id of its commands) until it has been silent this long (s)',
            low=0.0, high=60.0, read_only=True)
        p['bringup.min_duration_s'] = declare(
            self, 'bringup.min_duration_s', 2.0, 'the bring-up to the default pose takes at least '
            'this long (s), longer when a joint has further to go than bringup.max_velocity '
            'allows', low=0.0, high=600.0, read_only=True)
        p['heartbeat_rate_hz'] = declare(
            self, 'heartbeat_rate_hz', 50.0, 'safety/heartbeat rate: drivers damp when it '
            'stops (Hz)', low=1.0, high=1000.0, read_only=True)
        p['robot_name'] = declare(self, 'robot_name', '', 'robot name (the /** section of the '
                                  'robot file): names the default stage record', read_only=True)
        p['auto_advance'] = declare(self, 'auto_advance', False, 'promote automatically after '
                                    'a clean dwell', read_only=True)
        p['demote_holdoff_s'] = declare(self, 'demote_holdoff_s', 0.5, 'after a demotion, '
                                        'faults within this time do not demote again (s)',
                                        low=0.0, high=60.0, read_only=True)
        p['stage_file'] = declare(self, 'stage_file', '', 'JSON record of stage transitions and '
                                  "the stage list; '' = $ROS_HOME/simreal_ros/stages/"
                                  '<namespace>/<robot_name>.json (per robot and namespace)',
                                  read_only=True)
        p['resume_stage'] = declare(self, 'resume_stage', False, 'start at the stage recorded '
                                    'in stage_file (else the lowest)', read_only=True)
        p['sysid.limit_scale'] = declare(self, 'sysid.limit_scale', 0.5, 'sysid velocity, '
                                         'torque and rate limits as a fraction of the main ones',
                                         low=0.001, high=1.0, read_only=True)
        p['forward_on_input'] = declare(self, 'forward_on_input', True, 'also filter and '
                                        'forward a command as it arrives (not only on ticks); '
                                        'it then replaces its tick slot\'s output: at most one '
                                        'hardware/command per tick, whatever the source\'s rate',
                                        read_only=True)
        for name, what in (('policy', 'policy_runner\'s rate_hz'),
                           ('sysid', 'the experiments\' command_rate_hz')):
            p[f'{name}_rate_hz'] = declare(
                self, f'{name}_rate_hz', 0.0, f'the rate {name}/command is declared to come at '
                f'(Hz; {what}); faster is counted (commands.{name}.too_fast in safety/state, '
                'WARN on /diagnostics), not a fault: one output per tick whatever it sends; '
                '0 = rate_hz', low=0.0, high=100000.0, read_only=True)
        p['forward_on_tick'] = declare(self, 'forward_on_tick', True, 'republish the latest '
                                       'command, filtered with the newest state, every tick; '
                                       'false = forward only on input (safe outputs still go '
                                       'out every tick), e.g. for a lockstep simulation',
                                       read_only=True)
        p['array_topic'] = declare(self, 'array_topic', '', 'Float64MultiArray output topic for '
                                   "ros2_control forward controllers; '' = off", read_only=True)
        p['array_field'] = declare(self, 'array_field', 'position', 'field the array carries: '
                                   'position, velocity or effort', read_only=True)
        p['state_rate_hz'] = declare(self, 'state_rate_hz', 10.0, 'safety/state refresh rate '
                                     '(also published on every event)', low=0.1, high=100.0,
                                     read_only=True)
        p['executor'] = declare(self, 'executor', 'events', EXECUTOR_DOC, read_only=True)
        p['own_tick_loop'] = declare(self, 'own_tick_loop', True, OWN_TICK_LOOP_DOC,
                                     read_only=True)
        p['live_gap.require'] = declare(
            self, 'live_gap.require', 'auto', 'promotion needs a fresh live reality gap below '
            "its threshold (sim_bridge's shadow of the identified model, on live_gap.topic): "
            "'auto' = once a live-gap message says the model is identified (then for good), "
            "'true' = always (no live value, no promotion), 'false' = never", read_only=True)
        p['live_gap.topic'] = declare(
            self, 'live_gap.topic', 'sim_bridge/live_gap', 'live reality gap (std_msgs/String '
            'JSON, latched) published by sim_bridge', read_only=True)
        p['live_gap.max_age_s'] = declare(
            self, 'live_gap.max_age_s', 2.0, 'a live gap older than this (by stamp and by '
            'arrival) is unknown: no promotion (s)', low=0.01, high=600.0, read_only=True)
        p['live_gap.drift_action'] = declare(
            self, 'live_gap.drift_action', 'hold', 'sustained drift (live gap ERROR for '
            "live_gap.drift_s): 'hold' (no promotion), 'demote' (one stage down, again after "
            "each further live_gap.drift_s) or 'estop'", read_only=True)
        p['live_gap.drift_s'] = declare(
            self, 'live_gap.drift_s', 3.0, 'how long the live gap must stay ERROR before '
            'live_gap.drift_action (s)', low=0.01, high=3600.0, read_only=True)
        p['driver_publishers'] = declare_names(
            self, 'driver_publishers', 'nodes that may publish joint_states and imu (names '
            'relative to this node\'s namespace, or /ns/name); empty (the default): any one '
            'node, and a second one makes both rogues: two drivers cannot both be right')
        p['policy_publishers'] = declare_names(
            self, 'policy_publishers', 'nodes that may publish policy/command (as '
            'driver_publishers); empty (the default): any one node, normally policy_runner')
        p['live_gap.publishers'] = declare_names(
            self, 'live_gap.publishers', 'nodes that may publish live_gap.topic (as '
            'driver_publishers); empty (the default): any one node, normally sim_bridge. A '
            'rogue there is named and refuses every promotion while it publishes (a fake OK '
            'could otherwise earn a stage); it is not an e-stop: the live gap moves nothing')
        p['rogue_publisher_action'], p['publisher_check_period_s'] = declare_rogue_parameters(
            self, 'hardware/command, joint_states, imu, policy/command and live_gap.topic',
            'a latched e-stop naming it; reset refused while it is there (live_gap.topic: '
            'promotions refused instead)')
        p['poll_inputs'] = declare(
            self, 'poll_inputs', True, 'take joint_states and imu at the start of each tick '
            '(every sample waiting, in order) instead of one executor callback per message: '
            'the same checks with fewer callbacks (bench/cpu_budget.py, G1: 65.2 % of a core '
            'instead of 71.0 %); false = a callback per message', read_only=True)
        if not p['stage_file']:
            home = os.environ.get('ROS_HOME', os.path.join(os.path.expanduser('~'), '.ros'))
            ns = self.get_namespace().strip('/').replace('/', '.') or '_root'
            p['stage_file'] = os.path.join(home, 'simreal_ros', 'stages', ns,
                                           f'{p["robot_name"] or "robot"}.json')
        if not p['joint_names']:
            raise ConfigError('parameter joint_names is empty: list the joints to supervise '
                              '(the /** section of the robot parameter file)')
        return p

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
        now = self._now()
        with self._lock:
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

    # -- services ---------------------------------------------------------------------------
    def _on_rogues(self, topic, rogues, why):
        """The publishers of `topic` broke (rogues) or again keep (none) their rule."""
        if topic == self._live_gap_topic:
            with self._lock:
                self.core.live_gap.untrusted = why if rogues else ''
        if not rogues:
            self._rogues.pop(topic, None)
            self.get_logger().warning(f'publishers of {topic} as allowed again')
            return
        self._rogues[topic] = (rogues, why)
        self.get_logger().error(f'rogue publisher: {why}')
        if topic == self._live_gap_topic:
            return   # no e-stop: promotions are refused while it lasts (see above)
        if self.rogue_action == 'estop':
            now = self._now()
            with self._lock:
                self._send(self.core.rogue_publisher(why, now), now)
            self._log_events()

    def _srv_estop(self, request, response):
        now = self._now()
        with self._lock:
            already = self.core.latched
            self._send(self.core.estop('operator: safety/estop service', now), now)
            cause = self.core.cause
        response.success = True
        response.message = (f'e-stop already latched ({cause})' if already else
                            f'e-stop latched; output: {self.core.cfg.safe_mode}')
        self._log_events()
        return response

    def _srv_reset(self, request, response):
        blocking = [why for topic, (_, why) in self._rogues.items()
                    if topic != self._live_gap_topic]   # that one refuses promotions only
        if blocking:
            response.success = False
            response.message = 'reset refused: rogue publisher still there: ' + '; '.join(
                blocking)
            self.get_logger().warning(response.message)
            return response
        with self._lock:
            response.success, response.message = self.core.reset(self._now())
        if not response.success:
            self.get_logger().warning(response.message)
        self._log_events()
        return response

    def _srv_advance(self, request, response):
        with self._lock:
            response.success, response.message = self.core.advance_stage(self._now())
        if not response.success:
            self.get_logger().warning(f'advance_stage refused: {response.message}')
        self._log_events()
        return response

    def _srv_select(self, request, response):
        mode = 'sysid' if request.data else 'policy'
        with self._lock:
            response.success, response.message = self.core.select_mode(mode, self._now())
        if not response.success:
            self.get_logger().warning(f'select_sysid refused: {response.message}')
        self._log_events()
        return response

    def _srv_go_default(self, request, response):
        with self._lock:
            response.success, response.message = self.core.go_default(self._now())
        if not response.success:
            self.get_logger().warning(response.message)
        self._log_events()
        return response

    # -- parameters and time ------------------------------------------------------------------
    def _on_set_parameters(self, params):
        """Refuse every change at run time (use_sim_time included: a clock switch mid-run)."""
        names = [p.name for p in params]
        return SetParametersResult(successful=False, reason=(
            f'safety_supervisor parameters are read-only at run time ({", ".join(names)}): '
            'restart the node to change them'))

    def _on_time_jump(self, jump):
        now = self._now()
        with self._lock:
            if jump.clock_change in (ClockChange.ROS_TIME_ACTIVATED,
                                     ClockChange.ROS_TIME_DEACTIVATED):
                if self.core.q is not None:
                    self.core.clock_jumps += 1
                    self.core._trip(f'ROS time source changed ({jump.clock_change.name})', now)
            else:
                self.core.clock_jump(jump.delta.nanoseconds * 1e-9, now)
            out = self.core.tick(now, count=False) if self.core.latched else None
            if out is not None:
                self._send(out, now)
        self._log_events()

    # -- reporting --------------------------------------------------------------------------
    def _status(self):
        """The core's status plus the record writer's (caller holds the lock)."""
        s = self.core.status(self._now())
        s['stage_record'] = {'file': self.stage_file, 'writes': self.writer.writes,
                             'write_failures': self.writer.failures, 'error': self.writer.error}
        s['dds_transport'] = getattr(self, 'dds_transport', 'unknown')
        # 'own' when run()'s loop calls the tick (common.HotLoop), 'timer' otherwise.
        s['tick_loop'] = self.hot_loop.kind
        s['skipped_tick_slots'] = self.hot_loop.skipped
        # Polled inputs this node could not read directly (another middleware's data
        # representation): deserialized by rclpy instead, correct but slower.
        s['inputs_via_rclpy'] = self._raw_fallbacks
        s['inputs_undecodable'] = self.undecodable_inputs
        s['rogue_publishers'] = {t: {'nodes': r, 'why': w}
                                 for t, (r, w) in getattr(self, '_rogues', {}).items()}
        return s

    def _publish_heartbeat(self):
        with self._lock:
            latched, reason, ticks = self.core.latched, self.core.safe_reason, self.core.ticks
            bringup = self.core.bringup.active
            scale, mode, admitted = self.core.stage.scale, self.core.mode, self.core.admits_policy
        hb = DiagnosticStatus(name=self.get_fully_qualified_name(), hardware_id='heartbeat')
        if latched:
            hb.level, hb.message = DiagnosticStatus.ERROR, 'estop'
        elif reason:
            hb.level, hb.message = DiagnosticStatus.WARN, 'bringup' if bringup else 'safe'
        else:
            hb.level, hb.message = DiagnosticStatus.OK, 'forwarding'
        hb.values = [KeyValue(key='tick', value=str(ticks)),
                     KeyValue(key='stage', value=f'{scale:.2f}'),
                     KeyValue(key='mode', value=mode),
                     KeyValue(key='policy_admitted', value='true' if admitted else 'false')]
        self.pub_heartbeat.publish(hb)

    def _publish_state(self):
        with self._lock:
            status = self._status()
        self.pub_state.publish(String(data=json.dumps(status)))

    def _publish_diagnostics(self):
        with self._lock:
            s = self._status()
        st = DiagnosticStatus(name=diag_name(self), hardware_id=s['mode'])
        if s['rogue_publishers']:
            st.level = DiagnosticStatus.ERROR
            st.message = 'rogue publisher: ' + '; '.join(
                r['why'] for r in s['rogue_publishers'].values())
        elif s['estop']:
            st.level, st.message = DiagnosticStatus.ERROR, f'E-STOP: {s["estop_cause"]}'
        elif s['stage_record']['error']:
            st.level, st.message = DiagnosticStatus.ERROR, s['stage_record']['error']
        elif s['output'] == 'bringup':
            st.level, st.message = DiagnosticStatus.WARN, s['safe_reason']
        elif s['output'] != 'forwarding':
            st.level, st.message = DiagnosticStatus.WARN, f'safe mode: {s["safe_reason"]}'
        elif (s['rejected'][s['mode']] or s['clipped_outputs']
              or s['commands'][s['mode']]['too_fast']):
            c = s['commands'][s['mode']]
            st.level = DiagnosticStatus.WARN
            st.message = (f'forwarding {s["mode"]} at {_where(s)}; '
                          f'{s["clipped_outputs"]} clipped outputs, '
                          f'{s["rejected"][s["mode"]]} rejected commands, {c["too_fast"]} '
                          f'beyond its declared {c["declared_rate_hz"]:g} Hz')
        else:
            st.level = DiagnosticStatus.OK
            st.message = f'forwarding {s["mode"]} at {_where(s)}'
        values = {'executor': getattr(self, 'executor_kind', 'single'),
                  'tick_loop': s['tick_loop'], 'skipped_tick_slots': s['skipped_tick_slots'],
                  'dds_transport': s['dds_transport'],
                  'stage': s['stage']['stage'], 'highest_stage': s['stage']['highest'],
                  'estop_cause': s['estop_cause'], 'output': s['output'],
                  'clipped_outputs': s['clipped_outputs'], 'last_reject': s['last_reject'],
                  'implausible_states': s['implausible_states'],
                  'last_implausible': s['last_implausible'], 'late_ticks': s['late_ticks'],
                  'slow_ticks': s['slow_ticks'],
                  'max_tick_gap_ms': s['max_tick_gap_ms'], 'clock_jumps': s['clock_jumps'],
                  'grace_holds': s['grace_holds'], 'sysid_owner': s['sysid_owner'],
                  'foreign_sysid': s['foreign_sysid'],
                  'stage_record_write_failures': s['stage_record']['write_failures'],
                  'bringup.phase': s['bringup']['phase'],
                  'bringup.progress': s['bringup'].get('progress'),
                  'bringup.max_error_rad': s['bringup'].get('max_error_rad'),
                  'rogue_publishers': ' '.join(sorted({n for r in s['rogue_publishers'].values()
                                                       for n in r['nodes']})),
                  'rogue_publisher_spells': sum(w.rogue_spells for w in self.watches),
                  'live_gap.required': s['live_gap']['required'],
                  'live_gap.status': s['live_gap']['status'],
                  'live_gap.worst_joint': s['live_gap']['worst_joint'],
                  'live_gap.refusal': s['live_gap']['refusal'] or ''}
        for kind, per_joint in s['clips'].items():
            values[f'clips.{kind}'] = sum(per_joint.values())
        for source, count in s['rejected'].items():
            values[f'rejected.{source}'] = count
        for source, c in s['commands'].items():
            for key, v in c.items():
                values[f'commands.{source}.{key}'] = v
        values['deferred_inputs'] = s['deferred_inputs']
        values['replaced_ticks'] = s['replaced_ticks']
        for name, info in s['inputs'].items():
            values[f'age_ms.{name}'] = info['arrival_age_ms']
        st.values = [KeyValue(key=k, value=str(v)) for k, v in values.items()]
        out = DiagnosticArray(status=[st])
        out.header.stamp = self.get_clock().now().to_msg()
        self.pub_diag.publish(out)

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
        self.writer.stop()      # one last write of the stage record
        for sub, _ in getattr(self, '_polled', ()):
            sub.destroy()
        return super().destroy_node()


def main(args=None):
    """Run the safety_supervisor node."""
    raise SystemExit(run(SafetySupervisor, args))


if __name__ == '__main__':
    main()

"""What friction_id, inertia_id and latency_id share: parameters, services, the command loop.

Subscribes:
    joint_states (sensor_msgs/JointState), safety/state (std_msgs/String, latched)
Publishes:
    sysid/command (sensor_msgs/JointState, the supervisor's SysID input), sysid/result
    (std_msgs/String, latched YAML), ~/progress (std_msgs/String)
Services:
    ~/start, ~/abort (std_srvs/Trigger)
Parameters:
    the robot file's `friction_id` / `inertia_id` / `latency_id` sections: docs/configuration.md.

The maths is in simreal_ros.core.sysid; what a run checks, sends and stops on: docs/nodes.md.
"""
import json
import math
import os
import sys
import threading
import time

import numpy as np
from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import ClockChange, JumpThreshold
from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from std_srvs.srv import Trigger

from simreal_ros.core.config import ConfigError, resolve_path, setting_dir
from simreal_ros.core.files import write_text
from simreal_ros.core.sysid import NominalModel, SysidSettings, check_limits
from simreal_ros.core.sysid.design import check_sample_rate
from simreal_ros.core.sysid.records import result_text
from simreal_ros.core.sysid.session import SysidSession
from simreal_ros.nodes.common import (LATCHED_QOS, SENSOR_SUB_QOS, COMMAND_QOS, declare,
                                      declare_priority, per_robot_dir, timing_trace)
from simreal_ros.core.bridge.params import bridge_parameters

SUBSCRIBE_GRACE_S = 1.0   # first joint_states after ~/start subscribes (DDS matching)
# The joint states' rate is measured over this much of the run's first samples (the approach
# to the first pose), then checked against command_rate_hz (design.check_sample_rate).
RATE_WINDOW_S = 1.0

COMMON_ARRAYS = {
    'joint_names': (Parameter.Type.STRING_ARRAY, 'robot joints (as in joint_states)'),
    'joints': (Parameter.Type.STRING_ARRAY, 'joints identified by ~/start, in this order; '
               'empty = all joint_names'),
    'kp': (Parameter.Type.DOUBLE_ARRAY, "the driver's position gain per joint (N*m/rad)"),
    'kd': (Parameter.Type.DOUBLE_ARRAY, "the driver's velocity gain per joint (N*m*s/rad)"),
    'hold_position': (Parameter.Type.DOUBLE_ARRAY, 'pose the other joints are held at, and the '
                      'centre of the tested joint (rad)'),
    'position_lower': (Parameter.Type.DOUBLE_ARRAY, 'lowest position target (rad): the '
                       "supervisor's SysID soft limit"),
    'position_upper': (Parameter.Type.DOUBLE_ARRAY, 'highest position target (rad)'),
    'velocity_limit': (Parameter.Type.DOUBLE_ARRAY, 'velocity and target-rate limit (rad/s), '
                       "<= the supervisor's sysid limits (which no policy stage scales)"),
    'torque_limit': (Parameter.Type.DOUBLE_ARRAY, 'limit on the torque a command implies '
                     "(N*m), <= the supervisor's sysid torque limits"),
    'acceleration_limit': (Parameter.Type.DOUBLE_ARRAY, 'target acceleration limit (rad/s^2)'),
}
ARMATURE_MAX = ('heaviest armature per joint (kg*m^2): the multi-sine is scaled to the torque '
                'the PD needs on a joint between its link inertia and that much more; empty: to '
                'the torque of a joint that does not move')
KIND_ARRAYS = {
    'friction': {'friction_speeds': 'sweep speeds (rad/s), each in both directions'},
    'inertia': {'inertia_band_hz': 'multi-sine band [low, high] (Hz)',
                'armature_max': ARMATURE_MAX},
    'latency': {'latency_band_hz': 'multi-sine band [low, high] (Hz)',
                'armature_max': ARMATURE_MAX},
}
KIND_SCALARS = {
    'friction': {'friction_passes': (1, 'back-and-forth sweeps at each speed (more data '
                                        'where the range is short)', 1, 10),
                 'friction_settled_s': (0.0, 'settled constant-speed time wanted per speed '
                                        'and direction (s): more passes at the speeds whose '
                                        'sweeps are short; 0: friction_passes at every '
                                        'speed', 0.0, 30.0),
                 'friction_budget_s': (0.0, 'robot time a joint\'s friction experiment may '
                                       'take (s): friction_settled_s\'s passes are added, '
                                       'the speeds furthest from it first, while it fits; 0: '
                                       'no cap', 0.0, 600.0)},
    'inertia': {'inertia_duration_s': (10.0, 'multi-sine duration per joint (s)', 1.0, 120.0),
                'armature_goal': (0.0, 'armature interval wanted (95 % half-width over the '
                                  'value): a joint whose interval is wider gets '
                                  'inertia_extend_s more multi-sine, fit with the first; 0: '
                                  'off', 0.0, 1.0),
                'inertia_extend_s': (0.0, 'multi-sine added (s) to a joint whose armature '
                                     'interval is wider than armature_goal; 0: off', 0.0,
                                     120.0),
                'inertia_extend_budget_s': (0.0, 'robot time (s) a run may spend on '
                                            'extensions, the widest armature intervals '
                                            'first, once every joint\'s first multi-sine is '
                                            'fit; 0: no cap', 0.0, 3600.0)},
    'latency': {'latency_duration_s': (4.0, 'multi-sine duration per joint (s)', 1.0, 60.0),
                'max_latency_s': (0.06, 'largest delay searched (s)', 0.005, 0.5)},
}


def _sysid_trips(state):
    """The supervisor's count of stale spells of its SysID input (0 when not reported)."""
    try:
        return int(state['inputs']['sysid']['watchdog_trips'] or 0)
    except (KeyError, TypeError, ValueError):
        return 0


class SysidNode(Node):
    """Base of the three SysID nodes; subclasses set KIND and NODE_NAME."""

    KIND = None
    # Whether the method needs the measured torque (joint_states' effort): friction and
    # inertia fit torque; latency fits positions and uses effort only to check saturation.
    NEEDS_EFFORT = True
    NODE_NAME = None

    def __init__(self):
        super().__init__(self.NODE_NAME)
        self.priority = declare_priority(self, 0, 50)   # before the work starts
        self.trace = timing_trace()   # bench/policy_staleness.py's events, else None
        p = self._declare_parameters()
        self.p = p
        self.robot = p['robot_name'] or 'robot'
        names = p['joint_names']
        if not names:
            raise ConfigError(f'{self.NODE_NAME}.joint_names is empty (set it in /** of the '
                              'robot parameter file)')
        model = resolve_path(p['model_path'], f'{self.NODE_NAME}.model_path',
                             relative_to=setting_dir(sys.argv, self.get_name(), 'model_path'))
        self.nominal = NominalModel(model, names)
        params = {k: v for k, v in p.items() if v is not None and v != []}
        self.settings = SysidSettings.from_params(params, names, p['kp'], p['kd'],
                                                  source=self.NODE_NAME)
        self.joints = p['joints'] or list(names)
        unknown = [j for j in self.joints if j not in names]
        if unknown:
            raise ConfigError(f'{self.NODE_NAME}.joints: {unknown} not in joint_names {names}')
        self.index = {n: i for i, n in enumerate(names)}
        self.session = None
        self.workers = []
        self.latest = None            # (arrival on the steady clock, q, qd, tau)
        self.samples_without_effort = 0   # joint_states without effort, not used
        self.supervisor = None        # last safety/state mapping
        self.status = 'idle'
        self._design_token = None
        self.started_at = -math.inf
        self.last_result = None
        self._last_progress = -math.inf
        self.time_jump = None         # why ROS time went back during the running experiment
        self.rate_checked = True      # the joint states' rate, checked once per run
        self._supervisor_seen = None  # ROS time of the last safety/state
        self._last_command = None     # ROS time of the last command published
        self._lock = threading.Lock()

        control = MutuallyExclusiveCallbackGroup()
        sensors = MutuallyExclusiveCallbackGroup()
        services = MutuallyExclusiveCallbackGroup()
        self.pub_cmd = self.create_publisher(JointState, 'sysid/command', COMMAND_QOS)
        hardware = self.resolve_topic_name('hardware/command')
        if self.pub_cmd.topic_name == hardware:
            raise ConfigError(f'sysid/command resolves to the hardware topic {hardware}: SysID '
                              'commands go through safety_supervisor only; remove the remap')
        self.sender = self.get_fully_qualified_name()
        self.pub_result = self.create_publisher(String, 'sysid/result', LATCHED_QOS)
        self.pub_progress = self.create_publisher(String, '~/progress', 10)
        # joint_states (500 Hz or more) and the command timer exist only while an experiment
        # runs: three idle SysID nodes would otherwise take most of a CPU core.
        self.sensors = sensors
        self.sub_joints = None
        self.create_subscription(String, p['supervisor_state_topic'], self._on_supervisor,
                                 LATCHED_QOS, callback_group=sensors)
        self.create_service(Trigger, '~/start', self._srv_start, callback_group=services)
        self.create_service(Trigger, '~/abort', self._srv_abort, callback_group=services)
        self.timer = self.create_timer(1.0 / self.settings.command_rate_hz, self._tick,
                                       callback_group=control)
        self.timer.cancel()
        # The experiment is a schedule in ROS time. On sim time, ROS time that goes back means
        # a second /clock publisher (or a restarted simulator): the schedule and the recorded
        # data would mix two timelines, so the run stops (checked by the next tick).
        self._jump_handler = self.get_clock().create_jump_callback(
            JumpThreshold(min_forward=None, min_backward=Duration(nanoseconds=-1),
                          on_clock_change=True), post_callback=self._on_time_jump)
        self.bridge = None
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.get_logger().info(
            f'{self.KIND} identification ready for {self.joints}; commands on '
            f'{self.pub_cmd.topic_name}; start with: ros2 service call '
            f'{self.get_fully_qualified_name()}/start std_srvs/srv/Trigger')

    # -- parameters ------------------------------------------------------------------------
    def _array(self, name, ptype, description):
        # `joints` may be set while idle (`simreal sysid --joints`, `ros2 param set`); the rest
        # shapes the experiment design and its limits, fixed at start-up.
        desc = ParameterDescriptor(description=description, read_only=name != 'joints')
        value = self.declare_parameter(name, ptype, desc).value
        return list(value) if value is not None else []

    def _on_set_parameters(self, params):
        """Accept `joints` (the only writable parameter) while no experiment runs."""
        for param in params:
            if param.name != 'joints':
                continue
            if param.type_ != Parameter.Type.STRING_ARRAY:
                return SetParametersResult(successful=False, reason='joints is a string array '
                                           'of joint names (empty = all joint_names)')
            joints = list(param.value) or list(self.index)
            unknown = [j for j in joints if j not in self.index]
            if unknown:
                return SetParametersResult(successful=False, reason=(
                    f'{unknown} not in joint_names {list(self.index)}'))
            if len(set(joints)) != len(joints):
                return SetParametersResult(successful=False,
                                           reason=f'joints {joints} names a joint twice')
            with self._lock:
                if self.session is not None or self.status == 'designing':
                    return SetParametersResult(successful=False, reason=(
                        f'an experiment is running on {self.joints}; abort it or wait'))
                self.joints = joints
            self.get_logger().info(f'joints set to {joints}')
        return SetParametersResult(successful=True)

    def _declare_parameters(self):
        p = {}
        for name, (ptype, desc) in COMMON_ARRAYS.items():
            p[name] = self._array(name, ptype, desc)
        for name, desc in KIND_ARRAYS[self.KIND].items():
            p[name] = self._array(name, Parameter.Type.DOUBLE_ARRAY, desc)
        for name, (default, desc, lo, hi) in KIND_SCALARS[self.KIND].items():
            p[name] = declare(self, name, default, desc, low=lo, high=hi, read_only=True)
        p['robot_name'] = declare(self, 'robot_name', 'robot', 'robot name in result files',
                                  read_only=True)
        p['model_path'] = declare(self, 'model_path', '', 'nominal MJCF of the robot (links): '
                                  'absolute, relative or package://simreal_ros/...',
                                  read_only=True)
        p['supervisor_state_topic'] = declare(self, 'supervisor_state_topic', 'safety/state',
                                              'safety_supervisor state (latched JSON)',
                                              read_only=True)
        p['require_supervisor'] = declare(self, 'require_supervisor', True, 'refuse to start '
                                          'unless safety_supervisor is in sysid mode without '
                                          'e-stop and grants the SysID path to no other node; '
                                          'stop when that changes (false: bench tests whose '
                                          'driver listens on sysid/command)', read_only=True)
        p['results_dir'] = per_robot_dir(self, declare(
            self, 'results_dir', '~/.ros/simreal_ros/sysid', 'folder for result YAML and raw '
            'MCAP files; under a namespace, its subfolder of that name', read_only=True))
        p['range_margin'] = declare(self, 'range_margin', 0.15, 'distance kept from each end '
                                    'of the joint range (rad)', low=0.0, high=1.0,
                                    read_only=True)
        p['command_rate_hz'] = declare(self, 'command_rate_hz', 240.0, 'command rate (Hz); '
                                       'a run stops, naming a rate that works, where one of '
                                       'its first 10 harmonics lands within 2 Hz of a '
                                       'multiple of the joint_states rate (that ripple reads '
                                       'as friction)',
                                       low=20.0, high=1000.0, read_only=True)
        p['settle_s'] = declare(self, 'settle_s', 0.3, 'hold before and after excitations '
                                '(s); a friction sweep counts as settled 2 time constants of '
                                "the joint's PD loop after its acceleration, at most this",
                                low=0.0, high=5.0, read_only=True)
        p['sweep_half_range'] = declare(self, 'sweep_half_range', 0.6, 'largest excursion each '
                                        'side of hold_position (rad)', low=0.01, high=3.0,
                                        read_only=True)
        p['joint_states_timeout_s'] = declare(self, 'joint_states_timeout_s', 0.3, 'stop when '
                                              'no joint_states arrived for this long (s, '
                                              'steady clock)', low=0.01,
                                              high=5.0, read_only=True)
        p['late_command_s'] = declare(self, 'late_command_s', 0.05, 'two commands further '
                                      'apart than this (s, ROS time) disturb the experiment: '
                                      'the segment is repeated', low=0.005, high=1.0,
                                      read_only=True)
        p['joint_states_gap_s'] = declare(self, 'joint_states_gap_s', 0.1, 'joint_states '
                                          'stamped further apart (s) disturb the experiment: '
                                          'the segment is repeated',
                                          low=0.005, high=5.0, read_only=True)
        p['max_repeats'] = declare(self, 'max_repeats', 3, 'disturbed segments repeated per '
                                   'joint at most; past it a disturbed segment is left out '
                                   'of the estimate (still reported), and a joint fails only '
                                   'when what is left is not enough', low=0, high=100,
                                   read_only=True)
        p['max_duration_factor'] = declare(
            self, 'max_duration_factor', 1.5, 'a joint still running after this times its '
            'planned robot time plus max_repeats repeats of its longest segment '
            '(disturbances that never stop) ends as a failure (disturbed, cut short) and the '
            'run goes on', low=1.0, high=100.0, read_only=True)
        p['simulation_dt'] = declare(self, 'simulation_dt', 0.001, 'step of the joint '
                                     'simulation the latency estimate aligns with (s)',
                                     low=1e-4, high=0.01, read_only=True)
        p['sim_bridge_node'] = declare(self, 'sim_bridge_node', 'sim_bridge', 'node whose '
                                       'parameters receive identified values (best effort)',
                                       read_only=True)
        return p

    # -- inputs ----------------------------------------------------------------------------
    def _on_joint_states(self, msg):
        parsed = self._parse_joint_states(msg)
        if parsed is None:
            return
        q, qd, tau = parsed
        if any(math.isnan(tau[self.index[j]]) for j in self.joints):
            if self.NEEDS_EFFORT:
                # Never a zero in place of a missing torque: the sample is not used, counted.
                self.samples_without_effort += 1
                return
            tau = [0.0 if math.isnan(v) else v for v in tau]
        now = self.get_clock().now().nanoseconds * 1e-9
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        # Freshness by arrival on a steady clock: a simulator catching up on /clock makes ROS
        # time jump, which is not a sensor outage.
        self.latest = (time.monotonic(), q, qd, tau)
        session = self.session
        if session is not None:
            stamp = stamp if stamp > 0 else now
            # A gap in the driver's stamps: the robot went unobserved (a stalled driver).
            gap = stamp - session.last_sample_time(stamp)
            if gap > self.p['joint_states_gap_s']:
                session.disturbed(stamp - gap, f'joint_states stamps {gap * 1e3:.0f} ms apart '
                                  f'(joint_states_gap_s {self.p["joint_states_gap_s"]:g})')
            session.add_sample(stamp, q, qd, tau)

    def _parse_joint_states(self, msg):
        """Return (q, qd, tau) in joint_names order, or None when a joint is missing."""
        n = len(self.index)
        if len(msg.position) != len(msg.name) or len(msg.velocity) != len(msg.name):
            return None
        q = [math.nan] * n
        qd = [math.nan] * n
        tau = [math.nan] * n      # NaN: no effort in the message (never read as zero)
        for k, name in enumerate(msg.name):
            i = self.index.get(name)
            if i is not None:
                q[i] = msg.position[k]
                qd[i] = msg.velocity[k]
                if k < len(msg.effort):
                    tau[i] = msg.effort[k]
        if any(math.isnan(v) for v in q):
            return None
        return q, qd, tau

    def _current_state(self):
        """Wait (briefly, on a private subscription) for one joint_states; (q, qd, tau) or None."""
        from rclpy.wait_for_message import wait_for_message
        wait = max(2.0, 4 * self.p['joint_states_timeout_s'])
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            ok, msg = wait_for_message(JointState, self, 'joint_states',
                                       qos_profile=SENSOR_SUB_QOS,
                                       time_to_wait=deadline - time.monotonic())
            if not ok:
                return None
            parsed = self._parse_joint_states(msg)
            if parsed is not None:
                return parsed
        return None

    def _on_time_jump(self, jump):
        if self.session is None or self.time_jump is not None:
            return
        if jump.clock_change in (ClockChange.ROS_TIME_ACTIVATED,
                                 ClockChange.ROS_TIME_DEACTIVATED):
            self.time_jump = f'ROS time source changed ({jump.clock_change.name})'
        elif jump.delta.nanoseconds < 0:
            self.time_jump = (f'ROS time went back {-jump.delta.nanoseconds * 1e-9:.3f} s (a '
                              'second /clock publisher, or the simulator restarted)')

    def _on_supervisor(self, msg):
        try:
            state = json.loads(msg.data)
        except ValueError:
            self.get_logger().warn(f'unreadable {self.p["supervisor_state_topic"]} message')
            return
        previous, self.supervisor = self.supervisor, state
        now = self._now()
        session = self.session
        if session is not None and previous is not None and isinstance(state, dict):
            # A hold of the SysID commands (a stale spell, a reject) since the last state:
            # the joint did not follow the schedule meanwhile; that segment is repeated.
            trips = _sysid_trips(state) - _sysid_trips(previous)
            stopped = (previous.get('output') == 'forwarding'
                       and state.get('output') == 'safe')
            if trips > 0 or stopped:
                since = self._supervisor_seen if self._supervisor_seen else now
                why = state.get('safe_reason') or 'its SysID input went stale'
                session.disturbed(since, f'safety_supervisor held the commands ({why})',
                                  held=True)
        self._supervisor_seen = now

    def _supervisor_problem(self, starting=False):
        if not self.p['require_supervisor']:
            return None
        s = self.supervisor
        if s is None:
            return (f'no safety_supervisor state on {self.p["supervisor_state_topic"]}: start '
                    'safety_supervisor (or set require_supervisor:=false for a bench test)')
        if s.get('estop'):
            return (f'safety_supervisor e-stop is latched ({s.get("estop_cause")})'
                    + ('; a SysID start never releases an e-stop: reset it first (ros2 service '
                       'call /safety/reset std_srvs/srv/Trigger)' if starting else ''))
        if s.get('mode') != 'sysid':
            return ('safety_supervisor forwards the policy, not sysid: stop the policy '
                    '(/policy_runner/enable false), then ros2 service call /safety/select_sysid '
                    'std_srvs/srv/SetBool "{data: true}"')
        owner = s.get('sysid_owner')
        if s.get('sysid_owner_active') and owner not in (None, self.sender):
            return (f'safety_supervisor grants the SysID path to {owner} (one experiment at a '
                    'time): wait for it or abort it')
        return None

    # -- services --------------------------------------------------------------------------
    def _srv_start(self, request, response):
        with self._lock:
            response.success, response.message = self._start()
        # One call site per severity: rclpy refuses a call site whose severity changes
        # (Jazzy's rclpy 7.1.6 raised here; test_distro_compat).
        if response.success:
            self.get_logger().info(f'start: {response.message}')
        else:
            self.get_logger().warning(f'start: {response.message}')
        return response

    def _start(self):
        if self.session is not None or self.status == 'designing':
            return False, f'already running ({self.status}); call ~/abort first'
        state = self._current_state()
        if state is None:
            return False, ('no joint_states with every joint of joint_names: is the robot (or '
                           'sim_robot) running?')
        self.latest = (time.monotonic(),) + state
        no_effort = [j for j in self.joints if math.isnan(state[2][self.index[j]])]
        if no_effort and self.NEEDS_EFFORT:
            return False, (f'joint_states carries no effort for {no_effort}: {self.KIND} '
                           'identification fits the measured torque (the effort field of '
                           f'{self.resolve_topic_name("joint_states")}); publish it from the '
                           'driver (the applied or measured torque), or identify latency, '
                           'which does without it')
        problem = self._supervisor_problem(starting=True)
        if problem:
            return False, problem
        # The design (nominal simulations) takes a while: not in the executor's thread.
        self.status = 'designing'
        self._design_token = token = object()
        threading.Thread(target=self._design, args=(token, self.latest[1]),
                         daemon=True).start()
        note = (f'; joint_states carries no effort for {no_effort}: identified from positions '
                'alone, the torque-saturation check skipped' if no_effort else '')
        return True, (f'{self.KIND} identification of {self.joints} accepted: designing the '
                      f'experiment; progress on {self.get_fully_qualified_name()}/progress, the '
                      f'result on sysid/result{note}')

    def _design(self, token, hold):
        """Build and check the session (worker thread), then start commanding."""
        settings = self.settings
        problem, session = None, None
        try:
            session = SysidSession(self.KIND, settings, self.nominal, self.robot, self.joints,
                                   hold, self.p['results_dir'], self.p['simulation_dt'],
                                   max_repeats=self.p['max_repeats'],
                                   max_duration_factor=self.p['max_duration_factor'])
            for exp in session.experiments:
                bad = check_limits(exp, settings, self.nominal)
                if bad:
                    problem = f'{exp.joint}: design outside the limits: {bad}'
                    break
        except (ConfigError, ValueError) as exc:
            problem = f'cannot design the experiment: {exc}'
        with self._lock:
            if self._design_token is not token or self.status != 'designing':
                return      # aborted meanwhile
            if problem is None:
                problem = self._supervisor_problem(starting=True)
            if problem:
                self.status = 'idle'
                self.get_logger().warn(f'{self.KIND} identification not started: {problem}')
                self._publish_progress({'experiment': self.KIND, 'phase': 'aborted',
                                        'reason': problem, 'percent': None,
                                        'time_left_s': None})
                return
            self.workers = []
            self.time_jump = None
            self.rate_checked = False
            self._last_command = None
            self.session = session
            self.started_at = time.monotonic()
            self.status = 'running'
            self.sub_joints = self.create_subscription(JointState, 'joint_states',
                                                       self._on_joint_states, SENSOR_SUB_QOS,
                                                       callback_group=self.sensors)
            self.timer.reset()
            self.get_logger().info(f'{self.KIND} identification of {self.joints} started: '
                                   f'{session.total:.0f} s of robot time')

    def _srv_abort(self, request, response):
        with self._lock:
            running = self.session is not None or self.status == 'designing'
            if self.status == 'designing':
                self.status = 'idle'
            self._stop('aborted by ~/abort')
        response.success = True
        response.message = ('aborted: no result published' if running else 'nothing to abort')
        return response

    def _idle(self):
        """Stop commanding and listening: no timer, no joint_states subscription."""
        self.session = None
        self.status = 'idle'
        self.timer.cancel()
        if self.sub_joints is not None:
            self.destroy_subscription(self.sub_joints)
            self.sub_joints = None

    def _stop(self, why):
        if self.session is None:
            return
        self._idle()
        self.workers = []
        self.get_logger().warn(f'{self.KIND} identification stopped: {why}; no result published')
        self._publish_progress({'experiment': self.KIND, 'phase': 'aborted', 'reason': why,
                                'percent': None, 'time_left_s': None})

    def _sample_rate_problem(self, session):
        """Once RATE_WINDOW_S of joint states is in: why the run cannot give honest friction
        at their rate with this command rate (design.check_sample_rate), or None. Measured
        from the driver's stamps, during the approach to the first pose (nothing identified
        yet): a ripple folded to 0 Hz reads as friction with a narrow interval."""
        samples = session.samples
        if self.rate_checked or len(samples) < 50:
            return None
        span = samples[-1][0] - samples[0][0]
        if span < RATE_WINDOW_S:
            return None
        self.rate_checked = True
        # The mean period of the regular steps (a gap, a stalled driver, is not the rate)
        steps = np.diff([row[0] for row in samples])
        typical = float(np.median(steps))
        if typical <= 0:
            return None
        rate = 1.0 / float(np.mean(steps[(steps > 0.5 * typical) & (steps < 1.5 * typical)]))
        return check_sample_rate(self.settings, rate, self.get_name())

    # -- control loop ----------------------------------------------------------------------
    def _now(self):
        return self.get_clock().now().nanoseconds * 1e-9

    def _tick(self):
        begun = time.time()
        with self._lock:
            session = self.session
            if session is None:
                return
            now = self._now()
            if self.time_jump is not None:
                self._stop(self.time_jump)
                return
            # The joint_states subscription is made by ~/start: its first message may take
            # discovery time (up to SUBSCRIBE_GRACE_S); after that the stream's age counts.
            if time.monotonic() - max(self.latest[0], self.started_at + SUBSCRIBE_GRACE_S) \
                    > self.p['joint_states_timeout_s']:
                self._stop('joint_states stale')
                return
            problem = self._supervisor_problem() or self._sample_rate_problem(session)
            if problem:
                self._stop(problem)
                return
            last, self._last_command = self._last_command, now
            if last is not None and now - last > self.p['late_command_s']:
                session.disturbed(last, f'commands late: {(now - last) * 1e3:.0f} ms between '
                                  f'two (late_command_s {self.p["late_command_s"]:g})')
            names, pos, vel, eff = session.command(now)
            msg = JointState()
            msg.header.stamp = self.get_clock().now().to_msg()
            msg.header.frame_id = self.sender
            msg.name = list(names)
            msg.position = [float(v) for v in pos]
            msg.velocity = [float(v) for v in vel]
            msg.effort = [float(v) for v in eff]
            self.pub_cmd.publish(msg)
            if self.trace is not None:   # tick start, publish
                self.trace.add('sysid', begun, time.time())
            if session.joint_over(now):
                work = session.finish_joint()
                worker = threading.Thread(target=self._estimate, args=(work,), daemon=True)
                worker.start()
                self.workers.append(worker)
            if now - self._last_progress >= 0.5:
                self._last_progress = now
                info = session.progress(now)
                self._publish_progress(info)
            # The workers first: one may queue an inertia extension before it ends, and the
            # run is over only when none did.
            if not any(w.is_alive() for w in self.workers) and session.commanding_done:
                self._finish(session)

    def _estimate(self, work):
        """Run a joint's estimation (worker thread).

        With thread_priority the thread starts on SCHED_FIFO as the loop's; it goes to real-time
        priority 1: below every loop thread, above ordinary work. Not lower: it holds Python's
        lock (GIL) while it computes, and preempted by ordinary work it would keep the loop
        thread waiting for it.
        """
        begun = time.time()
        if os.sched_getscheduler(0) == os.SCHED_FIFO:
            try:
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
            except OSError:
                pass
        work()
        if self.trace is not None:
            self.trace.add('estimate', begun, time.time())

    def _publish_progress(self, info):
        if self.samples_without_effort:
            info = dict(info, samples_without_effort=self.samples_without_effort)
        self.pub_progress.publish(String(data=json.dumps(info)))
        if info.get('joint') is not None:
            self.get_logger().info(
                f'{info["experiment"]} {info["joint"]}: {info["phase"]}, '
                f'{info["percent"]:.0f} % done, {info["time_left_s"]:.0f} s left',
                throttle_duration_sec=2.0)

    def _finish(self, session):
        self._idle()
        text = result_text(self.robot, self.KIND, session.results, session.failures)
        path = os.path.join(session.results_dir, session.base + '.yaml')
        write_text(path, text)
        self.pub_result.publish(String(data=text))
        self.last_result = text
        for doc in session.results:
            lo, hi = doc['interval']
            self.get_logger().info(f'{doc["joint"]} {doc["parameter"]} = {doc["value"]:.6g} '
                                   f'[{lo:.6g}, {hi:.6g}] {doc["units"]}')
        for fail in session.failures:
            self.get_logger().error(f'{fail["joint"]}: {fail["reason"]}: {fail["detail"]}')
        self.get_logger().info(f'results in {path}')
        self._publish_progress({'experiment': self.KIND, 'phase': 'done', 'percent': 100.0,
                                'time_left_s': 0.0, 'result_file': path,
                                'results': len(session.results),
                                'failures': len(session.failures)})
        self._push_to_bridge(session.results, path)

    # -- sim_bridge ------------------------------------------------------------------------
    def _push_to_bridge(self, results, path):
        """Best effort: write identified values into sim_bridge's parameters when it runs.

        One client of the node's `set_parameters` service (rcl_interfaces, on every distro):
        rclpy's AsyncParameterClient would do the same but is Jazzy and later, and makes six
        service clients where one is used.
        """
        from rcl_interfaces.srv import SetParameters
        name = self.p['sim_bridge_node']
        if self.bridge is None:
            self.bridge = self.create_client(SetParameters, f'{name}/set_parameters')
        if not self.bridge.service_is_ready():
            self.get_logger().info(f'{name} is not running: identified values not pushed (they '
                                   f'are in {path})')
            return
        # The same mapping the CLI and the demo push: values and 95 % half-widths (the
        # bridge's export centres and widens its randomisation ranges with them).
        out = [Parameter(k, value=float(v))
               for k, v in sorted(bridge_parameters([{'results': results}]).items())]
        if not out:
            return
        request = SetParameters.Request(parameters=[p.to_parameter_msg() for p in out])
        future = self.bridge.call_async(request)
        future.add_done_callback(lambda f: self._bridge_done(f, out, name))

    def _bridge_done(self, future, params, name):
        try:
            results = future.result().results
        except Exception as exc:  # noqa: BLE001 - best effort; the files hold the results
            self.get_logger().warn(f'could not push results to {name}: {exc}')
            return
        refused = [f'{p.name}: {r.reason}' for p, r in zip(params, results) if not r.successful]
        if refused:
            self.get_logger().warn(f'{name} refused {refused}')
        else:
            self.get_logger().info(f'pushed {[p.name for p in params]} to {name}')

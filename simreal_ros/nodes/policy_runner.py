"""policy_runner: run an ONNX policy on joint_states / imu / cmd_vel and publish joint targets.

    ros2 run simreal_ros policy_runner --ros-args --params-file config/robots/g1_12dof.yaml
    ros2 service call /policy_runner/enable std_srvs/srv/SetBool "{data: true}"
    ros2 service call /policy_runner/reset std_srvs/srv/Trigger
    ros2 topic pub --once /cmd_vel geometry_msgs/msg/Twist "{linear: {x: 0.5}}"

Subscribes:
    joint_states (sensor_msgs/JointState), imu (sensor_msgs/Imu, when the observation uses it),
    cmd_vel (geometry_msgs/Twist), safety/heartbeat (diagnostic_msgs/DiagnosticStatus)
Publishes:
    policy/command (sensor_msgs/JointState, reliable keep-last 1), /diagnostics
Services:
    ~/enable (std_srvs/SetBool), ~/reset (std_srvs/Trigger)
Parameters:
    the robot file's `policy_runner` section (policy_path, rate_hz, observation.*, action_*,
    ease_in_s, lockstep, ...): docs/configuration.md lists every one.

Late and refused inputs, taking over the robot (ease-in) and lockstep: docs/nodes.md.
"""
import math
import sys
import threading
import time

import numpy as np

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import Twist
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from sensor_msgs.msg import Imu, JointState
from std_srvs.srv import SetBool, Trigger

from simreal_ros.core.cdr import JointStateDecoder, JointStateSample
from simreal_ros.core.config import ConfigError, params_files, setting_file
from simreal_ros.core.observation import term_parameters
from simreal_ros.core.policy import (RUNNER_PARAMETERS, CommandLimits, LoopTiming,
                                     PhaseAligner, PolicyController, StartPhase)
from simreal_ros.nodes.common import (COMMAND_QOS, EXECUTOR_DOC, SENSOR_SUB_QOS,
                                      PolledSubscription, declare, declare_priority,
                                      deserialize_or_none, diag_name, hot_timer_callback,
                                      run, stamp_to_sec, timing_trace)


ALIGN_EARLY_S = 0.0012   # see _schedule_alignment


class PolicyRunner(Node):
    """Timer-driven ONNX policy loop between the driver topics and policy/command."""

    NODE_NAME = 'policy_runner'

    def __init__(self):
        super().__init__(self.NODE_NAME)
        self.priority = declare_priority(self, -5, 50)   # before the work starts
        params = self._declare_parameters()
        # A relative policy_path is relative to the parameter file that sets it.
        self.ctl = PolicyController(params, source=self.get_name(), params_file=setting_file(
            params_files(sys.argv), self.get_name(), 'policy_path'))
        self.period = 1.0 / float(params['rate_hz'])
        self.max_age = float(params['max_input_age_s'])
        self.late_max_age = max(float(params['late_input_max_age_s']), self.max_age)
        self.future_tol = float(params['future_stamp_tolerance_s'])
        self.cmd_timeout = float(params['cmd_vel_timeout_s'])
        self.cmd_limits = CommandLimits(params['cmd_vel_min'], params['cmd_vel_max'],
                                        f'{self.get_name()} parameters')
        self.executor_kind = params['executor']
        self._zero_cmd = (0.0, 0.0, 0.0)
        self._warn_after = {}   # message kind -> monotonic time before which it is not logged
        self.lockstep = bool(params['lockstep'])
        self.enabled = False
        self.counters = dict(ticks=0, published=0, stale_ticks=0, bad_input=0, non_finite=0,
                             inputs_via_rclpy=0, inputs_undecodable=0,
                             resets=0, lockstep_steps=0, lockstep_clock_waits=0,
                             phase_alignments=0, awaited_ticks=0,
                             await_timeouts=0, late_inputs_used=0, future_stamped=0,
                             duplicate_names=0, missing_velocity=0, cmd_vel_received=0,
                             cmd_vel_rejected=0, cmd_vel_timeouts=0, handovers=0,
                             imu_taken=0)
        self.last_problem = ''
        self.trace = timing_trace()   # bench/policy_staleness.py's events, else None
        self.timing = LoopTiming(self.period)
        self._lock = threading.Lock()
        self._joint = None   # (msg, arrival monotonic)
        self._joint_seq = 0  # joint_states messages received
        self._awaiting = None  # (tick start, _joint_seq then): the tick awaits joint_states
        self._imu = None
        # Samples stamped before the one in use, never used (_older_than_in_use).
        self.counters.update(joint_states_out_of_order=0, imu_out_of_order=0)
        self._cmd = None     # ((vx, vy, wz) clipped, arrival monotonic s)
        self._cmd_timed_out = False
        self._last_stamp = None   # lockstep: the observation stamp last computed
        self._clock_wait = None   # lockstep: the stamp held until /clock reaches it
        self.heartbeat_timeout = float(params['heartbeat_timeout_s'])
        self._heartbeat = None    # (policy_admitted, steady arrival time) from the supervisor
        ease = float(params['ease_in_s'])
        if ease > 0 and (self.lockstep or self.ctl.actions.mode != 'position'):
            # lockstep reproduces a reference rollout step by step; effort actions have no pose
            self.get_logger().info(f'ease_in_s {ease:g} not used ('
                                   f'{"lockstep" if self.lockstep else "effort actions"})')
            ease = 0.0
        self.start = StartPhase(ease, self.ctl.joint_map.to_command(self.ctl.default_position))

        control = MutuallyExclusiveCallbackGroup()
        inputs = MutuallyExclusiveCallbackGroup()
        self.pub_cmd = self.create_publisher(JointState, 'policy/command', COMMAND_QOS)
        self.pub_diag = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        # Taken as bytes and read directly (core/cdr.py): 500 messages a second, of which a
        # 50 Hz policy uses one in ten; rclpy's message objects were most of their cost.
        self._state_decoder = JointStateDecoder()
        self.create_subscription(JointState, 'joint_states', self._on_joint_states_raw,
                                 SENSOR_SUB_QOS, callback_group=inputs, raw=True)
        self._imu_poll = None
        if self.ctl.needs_imu:
            if params['poll_imu'] and not self.lockstep:
                self._imu_poll = self._polled_imu()
            if self._imu_poll is None:
                self.create_subscription(Imu, 'imu', self._on_imu, SENSOR_SUB_QOS,
                                         callback_group=inputs)
        self.create_subscription(Twist, 'cmd_vel', self._on_cmd_vel, 10, callback_group=inputs)
        if self.start.active:
            self.create_subscription(DiagnosticStatus, 'safety/heartbeat', self._on_heartbeat,
                                     COMMAND_QOS, callback_group=inputs)
        self.create_service(SetBool, '~/enable', self._on_enable, callback_group=control)
        self.create_service(Trigger, '~/reset', self._on_reset, callback_group=control)
        self.control = control
        # Without arguments: rclpy passed its TimerInfo as `aligned` (a true value).
        self.tick_timer = self.create_timer(self.period, hot_timer_callback(self._tick),
                                            callback_group=control)
        # Phase alignment to joint_states (wall clock only: on /clock the timer already fires
        # on the simulation's clock messages; in lockstep the observation drives the step).
        if params['align_mode'] not in ('await', 'after'):
            raise ConfigError(f"policy_runner parameter align_mode: {params['align_mode']!r} is "
                              "neither 'await' nor 'after'")
        lead = params['align_lead_s'] if params['align_mode'] == 'await' else None
        self.aligner = (PhaseAligner(margin_s=params['align_margin_s'], lead_s=lead)
                        if params['align_to_joint_states'] and not self.lockstep
                        and not self.get_parameter('use_sim_time').value else None)
        self._align_pending = None    # why an alignment is due: 'enable' or 'drift'
        # 'await': ends a tick's wait for its joint_states message (reset per awaiting tick)
        self._wait_timer = None
        if self.aligner is not None and self.aligner.lead is not None:
            self._wait_timer = self.create_timer(
                max(params['align_max_wait_s'], 1e-5), self._await_expired,
                callback_group=control, clock=Clock(clock_type=ClockType.STEADY_TIME))
            self._wait_timer.cancel()
        self._align_timer = None
        self._align_when = None
        self._align_reason = None
        self._last_tick_wall = None   # perf_counter time of the last computed timer tick
        self._last_publish = None     # perf_counter time of the last command
        self.create_timer(1.0, self._publish_diagnostics,
                          clock=Clock(clock_type=ClockType.STEADY_TIME))
        session = self.ctl.session
        state = f'recurrent state {session.state_pairs}' if session.recurrent else 'no state'
        self.get_logger().info(
            f'{self.ctl.path.name}: {self.ctl.builder.size} observations '
            f'[{self.ctl.builder.describe()}] -> {self.ctl.joint_map.n} '
            f'{self.ctl.actions.mode} targets at {1 / self.period:g} Hz'
            f'{" (lockstep)" if self.lockstep else ""}; {state}; '
            f'metadata: {"; ".join(self.ctl.metadata_notes)}. Disabled until '
            f'{self.get_name()}/enable')

    # -- parameters -----------------------------------------------------------------------
    def _declare_parameters(self):
        p = {}
        for name, default, description, low, high in RUNNER_PARAMETERS:
            p[name] = self._declare(name, default, description, low, high)
        p['max_input_age_s'] = self._declare(
            'max_input_age_s', 0.02, 'inputs up to this old (by header stamp, ROS time) are '
            'fresh; older ones are late (see late_input_max_age_s) (s)', 0.0, 10.0)
        p['late_input_max_age_s'] = self._declare(
            'late_input_max_age_s', 0.06, 'a late input up to this old is still used, and '
            'counted (late_inputs_used); an older one is not: the tick publishes nothing and is '
            'counted (stale_ticks). Default: 3 periods of a 50 Hz policy, the age at which the '
            "supervisor's policy_timeout_s gives up on the policy anyway (s)", 0.0, 10.0)
        p['future_stamp_tolerance_s'] = self._declare(
            'future_stamp_tolerance_s', 0.01, 'an input stamped more than this ahead of now is '
            'refused (counted: future_stamped); 10 ms is well above the offset of clocks synced '
            'by NTP/PTP on one network, far below a wrong clock (s)', 0.0, 10.0)
        p['cmd_vel_timeout_s'] = self._declare(
            'cmd_vel_timeout_s', 0.5, 'a cmd_vel older than this (steady clock) gives way to a '
            'zero command (counted: cmd_vel_timeouts); 0.5 s: five periods of a 10 Hz teleop, '
            'a few steps of a walking robot (s)', 0.01, 3600.0)
        p['cmd_vel_min'] = self._declare(
            'cmd_vel_min', [-1.0, -1.0, -1.0], 'lower bound of cmd_vel (vx m/s, vy m/s, wz '
            'rad/s), clipped elements counted (cmd_vel_clipped); +-1 is the usual training '
            'range of legged velocity policies', None, None)
        p['cmd_vel_max'] = self._declare(
            'cmd_vel_max', [1.0, 1.0, 1.0], 'upper bound of cmd_vel (vx m/s, vy m/s, wz rad/s)',
            None, None)
        p['executor'] = self._declare('executor', 'events', EXECUTOR_DOC, None, None)
        p['align_to_joint_states'] = self._declare(
            'align_to_joint_states', True, 'choose the tick phase against the joint_states '
            "arrivals (see align_mode) at enable ('after': also when it drifts); the rate "
            'stays rate_hz (wall clock only)', None, None)
        p['align_mode'] = self._declare(
            'align_mode', 'await', "'await': each tick falls align_lead_s before the "
            'joint_states arrivals; it computes at once with a message at most align_lead_s '
            'old, or else when the next one arrives (waiting at most align_max_wait_s); '
            "'after': each tick falls align_margin_s after the 99th-percentile arrival phase "
            'and computes at once', None, None)
        p['align_lead_s'] = self._declare(
            'align_lead_s', 0.0003, "align_mode 'await': the tick's time before the "
            '1st-percentile joint_states arrival phase, and the age up to which the newest '
            'message is taken as this tick\'s (s)', 0.0, 0.1)
        p['align_max_wait_s'] = self._declare(
            'align_max_wait_s', 0.004, "align_mode 'await': the longest a tick waits for its "
            'joint_states message; then it computes with the newest it has, if not too old (s)',
            0.0, 0.1)
        p['align_margin_s'] = self._declare(
            'align_margin_s', 0.0002, "align_mode 'after': margin after the 99th-percentile "
            'joint_states arrival phase (s)', 0.0, 0.1)
        p['ease_in_s'] = self._declare(
            'ease_in_s', 2.0, 'once safety_supervisor admits the policy, move from the measured '
            'pose to default_position over this long, then start the policy (until admitted: '
            'the measured pose); 0 = the policy at once. Unitree deploy scripts and rl_sar move '
            'to the default pose over about 2 s (s)', 0.0, 60.0)
        p['heartbeat_timeout_s'] = self._declare(
            'heartbeat_timeout_s', 0.2, 'safety/heartbeat older than this (steady clock), once '
            'heard, means the supervisor does not admit the policy: the measured pose is '
            'commanded (s)', 0.01, 10.0)
        p['poll_imu'] = self._declare(
            'poll_imu', True, 'take imu when a tick needs it (the newest waiting, the rest '
            'dropped and counted in imu_taken) instead of one callback per message: a 500 Hz imu '
            'costs 500 executor callbacks a second for the one a 50 Hz policy uses. Not in '
            'lockstep, where each step waits for its imu', None, None)
        p['lockstep'] = self._declare(
            'lockstep', False, 'compute once per new observation stamp (with sim_robot '
            'lockstep) instead of on the timer', None, None)
        terms = p.get('observation.terms') or []
        if isinstance(terms, str) or not all(isinstance(t, str) for t in terms):
            raise ConfigError('parameter observation.terms must be a list of term names')
        for term in terms:
            kind = self._declare(f'observation.{term}.kind', term,
                                 f'kind of observation term {term!r}', None, None)
            for key, default, description in term_parameters(term, kind):
                if key == 'kind':
                    continue
                p[f'observation.{term}.{key}'] = self._declare(
                    f'observation.{term}.{key}', default, description, None, None)
            p[f'observation.{term}.kind'] = kind
        return p

    def _declare(self, name, default, description, low, high):
        value = declare(self, name, default, description, low=low, high=high, read_only=True,
                        dynamic_typing=True)
        return list(value) if isinstance(value, (list, tuple)) or hasattr(value, 'tolist') \
            else value

    def _warn(self, kind, text, error=False):
        """Log at most every 2 s per kind (checked here: the logger's own throttle looks up its
        caller on every call, which was 9 % of this node's CPU on stale ticks)."""
        now = time.monotonic()
        if now < self._warn_after.get(kind, 0.0):
            return
        self._warn_after[kind] = now + 2.0
        if error:   # one call site per severity (rclpy refuses a change at one site)
            self.get_logger().error(text)
        else:
            self.get_logger().warning(text)

    # -- inputs ---------------------------------------------------------------------------
    def _on_joint_states_raw(self, data):
        try:
            msg = JointStateSample(self._state_decoder.decode(data))
        except ValueError:   # bytes core/cdr does not read (another representation)
            self.counters['inputs_via_rclpy'] += 1
            msg = deserialize_or_none(data, JointState)
            if msg is None:      # malformed: dropped and counted; staleness does the rest
                self.counters['inputs_undecodable'] += 1
                self._warn('undecodable', 'joint_states: a malformed sample was dropped')
                return
        if not self._older_than_in_use(msg, self._joint, 'joint_states'):
            self._on_joint_states(msg)

    def _on_joint_states(self, msg):
        arrival = time.perf_counter()
        if self.trace is not None:
            self.trace.add('js', stamp_to_sec(msg.header.stamp), time.time())
        self._joint = (msg, arrival)
        self._joint_seq += 1
        if self.lockstep:
            self._lockstep_try()
        elif self.aligner is not None:
            if self._awaiting is not None:
                with self._lock:
                    self._try_awaited()
            self.aligner.on_state(arrival, stamp_to_sec(msg.header.stamp))
            if self._align_pending and self.enabled and self._align_timer is None:
                self._schedule_alignment(time.perf_counter())

    # -- phase alignment ------------------------------------------------------------------
    def _schedule_alignment(self, now):
        """Start a one-shot timer for the aligned tick; the periodic timer restarts from it."""
        earliest = now
        if self._align_pending == 'drift' and self._last_tick_wall is not None:
            # Shift the phase, not the rate: the aligned tick replaces the next periodic one
            # (the slot nearest to it), so no period is cut short by more than half a
            # joint_states period.
            stream = self.aligner.stream_period() or 0.0
            earliest = max(now, self._last_tick_wall + self.period - 0.5 * stream)
        when = self.aligner.next_tick(earliest)
        if when is None:
            return   # not enough joint_states yet: the plain timer phase meanwhile
        # The fit took time (or the process was descheduled): a slot gone by is skipped.
        now = time.perf_counter()
        if when < now + self.aligner.min_lead:
            when += self.aligner.period * math.ceil(
                (now + self.aligner.min_lead - when) / self.aligner.period)
        self._align_reason, self._align_pending = self._align_pending, None
        # A one-shot timer here fires 0.2 ms late at the median and 0.9 ms at the 99th
        # percentile, and the periodic timer restarts from it: it is set ALIGN_EARLY_S early
        # and the callback waits out the rest on the clock (once per alignment).
        self._align_when = when
        self._align_timer = self.create_timer(max(when - now - ALIGN_EARLY_S, 1e-5),
                                              self._aligned_tick,
                                              callback_group=self.control,
                                              clock=Clock(clock_type=ClockType.STEADY_TIME))

    def _aligned_tick(self):
        timer, self._align_timer = self._align_timer, None
        if timer is not None:
            self.destroy_timer(timer)
        until = min(self._align_when, time.perf_counter() + ALIGN_EARLY_S + 0.0005)
        while time.perf_counter() < until:
            pass
        self.tick_timer.reset()   # the next periodic tick is one period from now
        self.counters['phase_alignments'] += 1
        if self._align_reason == 'enable':
            self.timing.restart()   # the loop starts here; a drift re-alignment is a period
        self._tick(aligned=True)

    def _polled_imu(self):
        """imu taken when a tick needs it (see poll_imu), or None where rclpy cannot."""
        try:
            return PolledSubscription(self, Imu, 'imu', SENSOR_SUB_QOS)
        except (AttributeError, ImportError, TypeError) as exc:
            self.get_logger().warning(f'poll_imu unavailable with this rclpy ({exc}): '
                                      'a callback per imu message instead')
            return None

    def _take_imu(self):
        """With poll_imu: make the newest imu waiting this node's imu (lock held)."""
        if self._imu_poll is not None:
            msg, taken = self._imu_poll.take_newest()
            if msg is not None and not self._older_than_in_use(msg, self._imu, 'imu'):
                self._imu = (msg, time.perf_counter())
                self.counters['imu_taken'] += taken

    def _older_than_in_use(self, msg, entry, topic):
        """Return True (counted, named, not used) for a sample stamped before the one in use
        (`entry`) while that one is still usable: an observation is never built from a sample
        older than the last one (a reordering network, a driver's second thread), and the
        command stamped with it would be out of order at the supervisor. When the one in use
        is too old to use, or stamped ahead of this clock (a restarted simulator or driver
        whose clock went back), the older sample starts the order again."""
        if entry is None:
            return False
        stamp, used = stamp_to_sec(msg.header.stamp), stamp_to_sec(entry[0].header.stamp)
        if stamp >= used:
            return False
        age = self._now() - used
        if age > self.late_max_age or -age > self.future_tol:
            return False
        self.counters[f'{topic}_out_of_order'] += 1
        self.last_problem = (f'{topic} stamped {(used - stamp) * 1e3:.1f} ms before the one '
                             'in use (out of order): not used')
        self._warn('out_of_order', self.last_problem)
        return True

    def _on_imu(self, msg):
        if self._older_than_in_use(msg, self._imu, 'imu'):
            return
        self._imu = (msg, time.perf_counter())
        if self.lockstep:
            self._lockstep_try()
        elif self._awaiting is not None:
            with self._lock:
                self._try_awaited()

    def _try_awaited(self):
        """Compute the awaiting tick once its joint_states message (and imu) has arrived.

        With an imu the tick takes the imu stamped with that joint_states message (a driver
        that stamps both from one sample, as sim_robot does), waiting for it at most until
        the next joint_states message.
        """
        if self._awaiting is None:
            return
        wall0, seq0 = self._awaiting
        if self._joint_seq <= seq0:
            return
        if self.ctl.needs_imu and self._joint_seq - seq0 < 2:
            self._take_imu()
            imu = self._imu
            if imu is None or (stamp_to_sec(imu[0].header.stamp)
                               < stamp_to_sec(self._joint[0].header.stamp)):
                return
        self._awaiting = None
        self._wait_timer.cancel()
        if self.enabled:
            self.counters['awaited_ticks'] += 1
            self._compute_tick(wall0)

    def _await_expired(self):
        """align_max_wait_s passed without the awaited message: compute with the newest."""
        with self._lock:
            self._wait_timer.cancel()
            if self._awaiting is None:
                return
            wall0, _ = self._awaiting
            self._awaiting = None
            self.counters['await_timeouts'] += 1
            if self.enabled:
                self._compute_tick(wall0)

    def _on_heartbeat(self, msg):
        admitted = any(kv.key == 'policy_admitted' and kv.value == 'true' for kv in msg.values)
        self._heartbeat = (admitted, time.monotonic())

    def _admitted(self):
        hb = self._heartbeat
        if hb is None:
            return True   # no supervisor heard (a bench): the ease starts at enable
        return hb[0] and time.monotonic() - hb[1] <= self.heartbeat_timeout

    def _on_cmd_vel(self, msg):
        self.counters['cmd_vel_received'] += 1
        try:
            cmd = self.cmd_limits.apply(msg.linear.x, msg.linear.y, msg.angular.z)
        except ValueError as exc:
            self.counters['cmd_vel_rejected'] += 1
            self.last_problem = str(exc)
            self._warn('cmd_vel', f'cmd_vel refused: {exc}')
            return
        self._cmd = (cmd, time.monotonic())
        self._cmd_timed_out = False

    def _now(self):
        return self.get_clock().now().nanoseconds * 1e-9

    # -- services -------------------------------------------------------------------------
    def _on_enable(self, request, response):
        with self._lock:
            if request.data and not self.enabled:
                self.ctl.reset(self._now())
                self.start.restart()
                self.timing.restart()
                self._align_pending = 'enable' if self.aligner is not None else None
            self.enabled = bool(request.data)
        response.success = True
        response.message = ('enabled: publishing policy/command' if self.enabled
                            else 'disabled: publishing nothing')
        self.get_logger().info(response.message)
        if self.enabled and self.lockstep:
            self._lockstep_try()
        return response

    def _on_reset(self, request, response):
        with self._lock:
            self.ctl.reset(self._now())
            self.counters['resets'] += 1
        response.success = True
        response.message = 'recurrent state, last action and history zeroed'
        return response

    # -- the loop -------------------------------------------------------------------------
    def _tick(self, aligned=False):
        if self.lockstep:
            # A step held back because its observation was ahead of this node's /clock is
            # taken when the clock catches up: this timer fires on /clock.
            self._lockstep_try()
            return
        if not aligned and self._align_timer is not None:
            return   # the aligned tick, due within a period, takes this one's place
        now = self._now()
        wall0 = time.perf_counter()
        if self.trace is not None:
            self.trace.add('tick', time.time(), bool(aligned))
        with self._lock:
            self.counters['ticks'] += 1
            if not self.enabled:
                self._awaiting = None
                return
            self.timing.tick(now)
            if self._awaiting is not None:   # align_max_wait_s is over a period: no command
                self.counters['await_timeouts'] += 1
                self.timing.miss('no_command')
                self._awaiting = None
            joint = self._joint
            if self.aligner is not None and self.aligner.should_await(
                    wall0, joint[1] if joint is not None else None):
                self._awaiting = (wall0, self._joint_seq)
                self._wait_timer.reset()
                return
            self._compute_tick(wall0)

    def _compute_tick(self, wall0):
        """The tick's work (lock held): check the inputs' age, compute, publish."""
        now = self._now()
        self._take_imu()
        joint, imu = self._joint, self._imu
        stale, late = self._stale(joint, 'joint_states', now)
        if not stale and self.ctl.needs_imu:
            stale, late_imu = self._stale(imu, 'imu', now)
            late = late or late_imu
        if stale:
            if self.trace is not None:
                self.trace.add('stale', time.time(), stale)
            self.counters['stale_ticks'] += 1
            self.last_problem = stale
            self._warn('stale', f'not publishing: {stale}')
            return
        if late:
            self.counters['late_inputs_used'] += 1
        self._compute_and_publish(joint, imu, now)
        self._last_tick_wall = wall0
        if self.aligner is not None and self.aligner.on_tick(wall0 - joint[1]):
            self._align_pending = 'drift'   # re-align at the next joint_states
        self.timing.overrun(time.perf_counter() - wall0)

    def _stale(self, entry, topic, now):
        """Return (why the input is not usable or '', whether it is late but usable)."""
        if entry is None:
            return f'no {topic} received yet', False
        age = now - stamp_to_sec(entry[0].header.stamp)
        if age > self.late_max_age:
            return (f'{topic} is {age * 1e3:.1f} ms old (late_input_max_age_s '
                    f'{self.late_max_age:g})'), False
        return '', age > self.max_age

    def _lockstep_try(self):
        """Compute for the newest observation once joint_states and imu share its stamp."""
        with self._lock:
            joint, imu = self._joint, self._imu
            if not self.enabled or joint is None:
                return
            stamp = stamp_to_sec(joint[0].header.stamp)
            if self.ctl.needs_imu and (imu is None
                                       or stamp_to_sec(imu[0].header.stamp) != stamp):
                return
            if self._last_stamp is not None and stamp <= self._last_stamp:
                return
            now = self._now()
            if stamp - now > self.future_tol:
                # sim_robot's joint_states for step k can be taken before its /clock of step k
                # (two topics, no order between them): refused as from the future, the step
                # was never computed and sim_robot waited for it for ever (the H1-2 lockstep
                # stalled at t = 0.02 s in 2 of 6 runs). Wait for the clock; count the wait.
                if self._clock_wait != stamp:
                    self._clock_wait = stamp
                    self.counters['lockstep_clock_waits'] += 1
                return
            self._last_stamp = stamp
            self.counters['lockstep_steps'] += 1
            self._compute_and_publish(joint, imu, now)

    def _compute_and_publish(self, joint, imu, now):
        begun = time.time()
        msg, arrival = joint
        stamp = stamp_to_sec(msg.header.stamp)
        ahead = max(stamp, stamp_to_sec(imu[0].header.stamp) if imu is not None else stamp) - now
        if ahead > self.future_tol:
            self.counters['future_stamped'] += 1
            self.last_problem = (f'input stamped {ahead * 1e3:.1f} ms in the future '
                                 f'(future_stamp_tolerance_s {self.future_tol:g})')
            self._warn('future', f'not publishing: {self.last_problem}')
            return
        command = None
        if self._cmd is not None:
            if time.monotonic() - self._cmd[1] <= self.cmd_timeout:
                command = self._cmd[0]
            else:
                command = self._zero_cmd
                if not self._cmd_timed_out:
                    self._cmd_timed_out = True
                    self.counters['cmd_vel_timeouts'] += 1
        velocity = msg.velocity
        if not len(velocity) and self.ctl.builder.needs_velocity:
            self.counters['missing_velocity'] += 1
            self.last_problem = ('joint_states has no velocities and the observation uses '
                                 'joint_vel: not zero-filled')
            self._warn('velocity', f'not publishing: {self.last_problem}')
            return
        try:
            imu_q = imu_w = None
            eased, handover = None, False
            if self.start.active:
                admitted = self._admitted()
                measured = None   # not needed once the policy runs (the common tick)
                if not (admitted and self.start.phase == 'policy'):
                    measured = self.ctl.joint_map.to_command(
                        self.ctl.joint_map.to_policy(msg.name, msg.position))
                eased, handover = self.start.command(now, admitted, measured)
                if handover:
                    self.counters['handovers'] += 1
                    self.ctl.reset(now)   # the policy starts as a training episode does
            if imu is not None:
                o, w = imu[0].orientation, imu[0].angular_velocity
                imu_q, imu_w = (o.x, o.y, o.z, o.w), (w.x, w.y, w.z)
            inputs = self.ctl.inputs(stamp, msg.name, msg.position, velocity, imu_q, imu_w,
                                     command)
            t0 = time.perf_counter()
            if eased is None:
                targets, _ = self.ctl.step(inputs)
            else:
                targets = eased
                if not np.all(np.isfinite(targets)):
                    raise ValueError('the measured pose is not finite (check joint_states)')
            inference = time.perf_counter() - t0
        except ValueError as exc:
            key = ('non_finite' if 'not finite' in str(exc) else
                   'duplicate_names' if 'more than once' in str(exc) else 'bad_input')
            self.counters[key] += 1
            self.last_problem = str(exc)
            self._warn(key, f'not publishing: {exc}', error=True)
            return
        out = JointState()
        out.header.stamp.sec = msg.header.stamp.sec
        out.header.stamp.nanosec = msg.header.stamp.nanosec
        out.name = self.ctl.command_names
        if self.ctl.actions.mode == 'position':
            out.position = targets.tolist()
        else:
            out.effort = targets.tolist()
        self.pub_cmd.publish(out)
        published = time.perf_counter()
        if self.trace is not None:   # sample stamp, compute start, inference, publish
            self.trace.add('pub', stamp, begun, inference, time.time(),
                           published - arrival)
        last, self._last_publish = self._last_publish, published
        if last is not None and not self.lockstep and published - last < 1.5 * self.period:
            self.timing.record('publish_period_err_ms',
                               abs(published - last - self.period) * 1e3)
        self.counters['published'] += 1
        self.timing.record('inference_us', inference * 1e6)
        self.timing.record('e2e_latency_ms', (published - arrival) * 1e3)
        self.timing.record('obs_age_ms', (self._now() - stamp) * 1e3)

    # -- diagnostics ----------------------------------------------------------------------
    def _publish_diagnostics(self):
        with self._lock:
            summary = self.timing.summary()
            counters = dict(self.counters)
        status = DiagnosticStatus(name=diag_name(self, 'loop'),
                                  hardware_id=str(self.ctl.path))
        problems = sum(counters[k] for k in (
            'stale_ticks', 'bad_input', 'non_finite', 'future_stamped', 'duplicate_names',
            'missing_velocity', 'cmd_vel_rejected'))
        if not self.enabled:
            status.level, status.message = DiagnosticStatus.OK, 'disabled'
        elif problems:
            status.level = DiagnosticStatus.WARN
            status.message = (f'{problems} ticks or inputs refused: '
                              f'{counters["stale_ticks"]} stale ticks, {counters["bad_input"]} '
                              f'bad inputs, {counters["non_finite"]} non-finite outputs '
                              f'(last: {self.last_problem})')
        else:
            status.level, status.message = DiagnosticStatus.OK, 'running'
        values = dict(counters, enabled=self.enabled, rate_hz=1 / self.period,
                      start_phase=self.start.phase if self.start.active else 'off',
                      eases=self.start.eases,
                      executor=self.executor_kind, cmd_vel_clipped=self.cmd_limits.clipped,
                      observation_clipped=self.ctl.builder.clipped,
                      action_clipped=self.ctl.actions.clipped, last_problem=self.last_problem)
        if self.aligner is not None and self.aligner.offset is not None:
            values['align_offset_ms'] = round(self.aligner.offset * 1e3, 3)
        values.update({k: (f'{v:.4f}' if isinstance(v, float) else v)
                       for k, v in summary.items()})
        status.values = [KeyValue(key=k, value=str(v)) for k, v in values.items()]
        out = DiagnosticArray(status=[status])
        out.header.stamp = self.get_clock().now().to_msg()
        self.pub_diag.publish(out)


def main(args=None):
    """Run the policy_runner node."""
    raise SystemExit(run(PolicyRunner, args))


if __name__ == '__main__':
    main()

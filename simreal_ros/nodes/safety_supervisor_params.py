"""safety_supervisor's parameters: every one declared with its descriptor and range.

Part of the safety_supervisor node (simreal_ros/nodes/safety_supervisor.py), which mixes in
`Parameters`; docs/configuration.md lists every parameter (generated from these declarations).
"""
import os

from rcl_interfaces.msg import ParameterDescriptor
from rclpy.parameter import Parameter

from simreal_ros.core.config import ConfigError
from simreal_ros.core.safety import SAFE_MODES
from simreal_ros.nodes.common import (EXECUTOR_DOC, OWN_TICK_LOOP_DOC, declare, declare_names,
                                      declare_rogue_parameters)

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


class Parameters:
    """Declare and read the parameters (mixed into SafetySupervisor)."""

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
        p['state_disorder_trip_count'] = declare(
            self, 'state_disorder_trip_count', 5, 'a joint_states (or imu) sample stamped '
            'before the one in use, or beyond its timeout ahead, is never used (counted: '
            'inputs.<input>.out_of_order, from_future); this many in a row, none used between, '
            'are a sensor fault (e-stop) and the order starts again from the next fresh '
            'sample. 5 = 10 ms at 500 Hz, inside joint_states_timeout_s, so the cause is named '
            'before the watchdog trips', low=1, high=100000, read_only=True)
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

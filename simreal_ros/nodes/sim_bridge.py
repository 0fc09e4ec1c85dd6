"""sim_bridge: the robot's MuJoCo model with identified parameters; reality gap; export.

    ros2 run simreal_ros sim_bridge --ros-args --params-file config/robots/arm3.yaml
    ros2 param set /sim_bridge joints.elbow_pitch.damping 0.15
    ros2 service call /sim_bridge/evaluate_gap std_srvs/srv/Trigger
    ros2 topic echo /sim_bridge/gap --qos-durability transient_local
    ros2 service call /sim_bridge/export std_srvs/srv/Trigger
    ros2 service call /sim_bridge/refine std_srvs/srv/Trigger
    simreal gap --live

Subscribes:
    hardware/command, driver/applied_command, joint_states (sensor_msgs/JointState; the live
    gap's shadow)
Publishes:
    ~/gap, ~/refined, ~/live_gap (std_msgs/String, latched JSON), /diagnostics
Services:
    ~/evaluate_gap, ~/export, ~/refine (std_srvs/Trigger)
Parameters:
    the robot file's `sim_bridge` section; per joint joints.<joint>.damping | frictionloss |
    armature (+ _half_width), latency_s, recording, holdout, shadow.*: docs/configuration.md.

What the gap, the refinement, the held-out split and the shadow do: docs/nodes.md.
"""
import json
import math
import os
import sys
import threading

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from std_srvs.srv import Trigger

from simreal_ros.core.bridge import BridgeSession, JOINT_KEYS
from simreal_ros.core.bridge.params import RANGES, UNITS
from simreal_ros.core.bridge.recording import latest_recording, read_mcap, split
from simreal_ros.core.files import inside
from simreal_ros.core.bridge.refine import RefinementError, moving_joints, refine
from simreal_ros.core.bridge.session import write_traces
from simreal_ros.core.bridge.shadow import ShadowConfig, ShadowGap, noise_floor_of
from simreal_ros.core.config import ConfigError, setting_dir
from simreal_ros.nodes.common import (LATCHED_QOS, PolledSubscription, declare, diag_name,
                                      per_robot_dir, run, stamp_to_sec)

NODE_NAME = 'sim_bridge'


class SimBridge(Node):
    NODE_NAME = NODE_NAME

    def __init__(self):
        super().__init__(NODE_NAME)
        arrays = {'joint_names': (Parameter.Type.STRING_ARRAY, 'robot joints (as in '
                                  'joint_states)'),
                  'kp': (Parameter.Type.DOUBLE_ARRAY, "the driver's position gain per joint "
                         '(N*m/rad), as sim_robot'),
                  'kd': (Parameter.Type.DOUBLE_ARRAY, "the driver's velocity gain per joint "
                         '(N*m*s/rad)'),
                  'torque_limit': (Parameter.Type.DOUBLE_ARRAY, 'motor torque limit per joint '
                                   '(N*m); empty = the MJCF actuator ranges only')}
        p = {}
        for name, (ptype, text) in arrays.items():
            p[name] = self.declare_parameter(
                name, ptype, ParameterDescriptor(description=text, read_only=True)).value
        p['model_path'] = declare(self, 'model_path', '', 'nominal MJCF of the robot '
                                  '(package://simreal_ros/..., absolute or relative path)',
                                  read_only=True)
        p['robot_name'] = declare(self, 'robot_name', 'robot', 'name used for exported files',
                                  read_only=True)
        p['physics_dt'] = declare(self, 'physics_dt', 0.001, 'replay physics step (s)',
                                  low=1e-4, high=0.01, read_only=True)
        p['gantry_lift'] = declare(self, 'gantry_lift', -1.0, 'floating base: >= 0 replays '
                                   'with the base fixed this many m above its initial pose, '
                                   'as the robot hung in its gantry for SysID (set as '
                                   "sim_robot's); < 0: the model as it is (a robot that walks) "
                                   '(m)', low=-1.0, high=5.0, read_only=True)
        p['gap_threshold'] = declare(self, 'gap_threshold', 0.15, 'overall NRMSE above which '
                                     'the gap gate fails (deployment blocked)', low=0.001,
                                     high=10.0)
        p['max_shift_s'] = declare(self, 'max_shift_s', 0.05, 'cross-correlation alignment '
                                   'search range, +- s', low=0.0, high=1.0)
        p['skip_s'] = declare(self, 'skip_s', 0.2, 'initial replay transient left out of the '
                              'score (s)', low=0.0, high=10.0)
        self.holdout = declare(self, 'holdout', 0.3, 'fraction of the recording, at its end, '
                               'that ~/evaluate_gap scores and ~/refine never fits (held-out '
                               'data); 0 = score and fit the whole recording', low=0.0,
                               high=0.9)
        self.recordings_dir = per_robot_dir(self, declare(
            self, 'recordings_dir', '~/.ros/simreal_ros/sysid', 'folder searched for the '
            'newest .mcap (read-only: recording is confined to it); under a namespace, its '
            'subfolder of that name', read_only=True))
        self.export_dir = per_robot_dir(self, declare(
            self, 'export_dir', '~/.ros/simreal_ros/sim_bridge', 'folder ~/export writes into '
            '(read-only); under a namespace, its subfolder of that name', read_only=True))
        self.recording = declare(self, 'recording', '', 'MCAP to evaluate, inside '
                                 'recordings_dir (a name relative to it, or a path in it); '
                                 'empty = newest complete one there')
        if self.recording:
            try:
                inside(self.recordings_dir, self.recording)
            except ValueError as exc:
                raise ConfigError(f'sim_bridge.recording: {exc}') from exc
        params = {k: v for k, v in p.items() if v is not None and v != []}
        if not p['model_path']:
            raise ConfigError('model_path is empty: give the robot parameter file '
                              '(--params-file config/robots/<robot>.yaml)')
        self.session = BridgeSession.from_params(
            params, config_dir=setting_dir(sys.argv, self.get_name(), 'model_path'))
        names = self.session.names
        start = self.session.nominal
        self.lock = threading.Lock()
        self.params = start.copy()
        self.params.interval = {k: [math.nan] * len(names) for k in JOINT_KEYS}
        for i, joint in enumerate(names):
            for key in JOINT_KEYS:
                lo, hi = RANGES[key]
                value = declare(self, f'joints.{joint}.{key}', float(getattr(start, key)[i]),
                                f'{key} of {joint} ({UNITS[key]})', low=lo, high=hi)
                getattr(self.params, key)[i] = value
                half = declare(self, f'joints.{joint}.{key}_half_width', -1.0,
                               f'95 % interval half-width of {key} of {joint} '
                               f'({UNITS[key]}); -1 = unknown', low=-1.0, high=hi)
                self.params.interval[key][i] = half if half >= 0 else math.nan
        lo, hi = RANGES['latency_s']
        self.params.latency_s = declare(self, 'latency_s', float(start.latency_s),
                                        'command transport delay (s)', low=lo, high=hi)
        half = declare(self, 'latency_s_half_width', -1.0, '95 % interval half-width of '
                       'latency_s (s); -1 = unknown', low=-1.0, high=hi)
        self.params.interval['latency_s'] = half if half >= 0 else math.nan
        self.params.validate()
        self.add_on_set_parameters_callback(self._on_set)
        self.last = None   # (recording, GapReport)
        self.pub = self.create_publisher(String, '~/gap', LATCHED_QOS)
        services = MutuallyExclusiveCallbackGroup()
        self.create_service(Trigger, '~/evaluate_gap', self._on_evaluate,
                            callback_group=services)
        self.create_service(Trigger, '~/export', self._on_export, callback_group=services)
        self.pub_refined = self.create_publisher(String, '~/refined', LATCHED_QOS)
        self.create_service(Trigger, '~/refine', self._on_refine, callback_group=services)
        self._refiner = None   # the background refinement thread
        self._shadow_init()
        self.get_logger().info(f'sim_bridge ready: {len(names)} joints, model '
                               f'{self.session.model_path}')

    # -- the shadow: the live reality gap (simreal_ros.core.bridge.shadow) -------------------
    def _shadow_init(self):
        cfg = ShadowConfig(
            window_s=declare(self, 'shadow.window_s', 1.5, 'live gap: length of each replayed '
                             'window, from the measured state at its start (s)', low=0.2,
                             high=30.0, read_only=True),
            warn_ratio=declare(self, 'shadow.warn_ratio', 3.0, 'live gap per joint above '
                               'which it is WARN, in units of the noise floor measured offline',
                               low=1.0, high=1e6, read_only=True),
            error_ratio=declare(self, 'shadow.error_ratio', 5.0, 'live gap per joint above '
                                'which (in shadow.persist_windows windows in a row) it is ERROR, '
                                'in units of the offline noise floor', low=1.0, high=1e6,
                                read_only=True),
            persist_windows=declare(self, 'shadow.persist_windows', 4, 'consecutive windows '
                                    'above shadow.error_ratio before ERROR (they overlap: '
                                    'more than window_s / period_s, so one glitch is not '
                                    'drift)', low=1, high=100, read_only=True),
            max_gap_s=declare(self, 'shadow.max_gap_s', 0.05, 'a window with a longer hole in '
                              'joint_states (twice as long in hardware/command) is not scored '
                              '(unknown) (s)', low=0.001, high=10.0, read_only=True),
            max_shift_s=declare(self, 'shadow.max_shift_s', 0.02, 'live gap: alignment search '
                                'range, +- s', low=0.0, high=1.0, read_only=True))
        enabled = declare(self, 'shadow.enabled', True, 'replay the commands the driver '
                          'applied (driver/applied_command, else hardware/command) through the '
                          'model live and publish the gap on ~/live_gap and /diagnostics',
                          read_only=True)
        use_applied = declare(self, 'shadow.use_applied', True, 'live gap: replay what the '
                              'driver applied (driver/applied_command) while it arrives; false: '
                              'always hardware/command as the supervisor sent it (a driver '
                              'whose report is not to be trusted)', read_only=True)
        self.transport_in_latency = declare(
            self, 'shadow.transport_in_latency', True, 'live gap: latency_s was measured from '
            'the commands as sent (SysID through the supervisor): it holds the transport to '
            'the driver, so driver/applied_command is replayed latency_s minus the median '
            '(apply - send) offset after each apply time; false: latency_s is the delay after '
            'the driver applied a command (SysID on the plant itself), replayed as it is')
        period = declare(self, 'shadow.period_s', 0.5, 'live gap: one window is scored every '
                         'this many seconds (off the 500 Hz path)', low=0.05, high=60.0,
                         read_only=True)
        self.shadow = None
        self.pub_live = self.create_publisher(String, '~/live_gap', LATCHED_QOS)
        if not enabled:
            return
        self.shadow = ShadowGap(self.session.replayer, cfg.validate('sim_bridge.shadow'))
        self.shadow.applied_off = '' if use_applied else 'shadow.use_applied is false'
        self.shadow.transport_in_latency = self.transport_in_latency
        self._sim_time = bool(self.get_parameter('use_sim_time').value)
        self._shadow_params_version = None
        self._params_version = 0
        self.offline = None
        self.pub_diag = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        self._deep = int(period * 500 * 4) + 100
        self._shadow_subs = None   # made once the model is identified (see _shadow_tick)
        self.create_timer(period, self._shadow_tick,
                          callback_group=MutuallyExclusiveCallbackGroup())

    def _shadow_state(self, msg, _info):
        self.shadow.add_state(stamp_to_sec(msg.header.stamp), msg.name, msg.position,
                              msg.velocity)

    def _shadow_command(self, msg, info):
        # When the supervisor sent it, not its header stamp: the supervisor keeps the source
        # command's stamp on every tick it re-sends (rate-limited targets move between
        # ticks under one stamp), and the robot obeys each one as it arrives. On simulated
        # time the send time is on another clock: the stamp, then.
        sent = info.get('source_timestamp') if isinstance(info, dict) else None
        t = (sent * 1e-9 if sent and not self._sim_time else stamp_to_sec(msg.header.stamp))
        self.shadow.add_command(t, msg.name, msg.position, msg.velocity, msg.effort)

    def _shadow_applied(self, msg, _info):
        # Stamped by the driver when it handed the command on, on the robot's clock (that of
        # joint_states): replayed from there when this stream covers the window.
        self.shadow.add_applied(stamp_to_sec(msg.header.stamp), msg.name, msg.position,
                                msg.velocity, msg.effort)

    def identified(self, params):
        """The model differs from the nominal MJCF: SysID results (or a robot file) set it."""
        nominal = self.session.nominal
        return bool(any(np.any(np.abs(np.asarray(getattr(params, k)) -
                                      np.asarray(getattr(nominal, k))) > 1e-12)
                        for k in JOINT_KEYS) or abs(params.latency_s - nominal.latency_s) > 1e-12)

    def _subscribe_shadow(self):
        deep = self._deep
        self._shadow_subs = [
            (PolledSubscription(self, JointState, 'joint_states', QoSProfile(
                history=HistoryPolicy.KEEP_LAST, depth=deep,
                reliability=ReliabilityPolicy.BEST_EFFORT)), self._shadow_state),
            (PolledSubscription(self, JointState, 'hardware/command', QoSProfile(
                history=HistoryPolicy.KEEP_LAST, depth=deep,
                reliability=ReliabilityPolicy.RELIABLE)), self._shadow_command)]
        if not self.shadow.applied_off:
            # after hardware/command: an echo finds the command it matches already there
            self._shadow_subs.append((PolledSubscription(
                self, JointState, 'driver/applied_command', QoSProfile(
                    history=HistoryPolicy.KEEP_LAST, depth=deep,
                    reliability=ReliabilityPolicy.RELIABLE)), self._shadow_applied))

    def _shadow_tick(self):
        now = self.get_clock().now().nanoseconds * 1e-9
        if self._shadow_params_version != self._params_version:
            params = self._current()
            self.shadow.set_params(params, self.identified(params))
            self._shadow_params_version = self._params_version
        if not self.shadow.identified and self._shadow_subs is None:
            # Nothing identified yet (the gate is off): no 500 Hz inputs, no replay, so a SysID
            # run on a small computer does not share it with the shadow.
            doc = self.shadow._unknown(now, 'model not identified: no SysID results pushed '
                                            'to sim_bridge yet (the live gap starts with them)')
            self.pub_live.publish(String(data=json.dumps(doc)))
            return
        if self._shadow_subs is None:
            self._subscribe_shadow()
        for sub, take in self._shadow_subs:
            for msg, info in sub.take_all_with_info():
                take(msg, info)
        doc = self.shadow.evaluate(now)
        if self.offline is not None:
            doc['offline'] = self.offline
        doc['cpu_s'] = round(self.shadow.cpu_s, 3)
        self.pub_live.publish(String(data=json.dumps(doc)))
        self._shadow_diagnostics(doc)

    def _shadow_diagnostics(self, doc):
        levels = {'OK': DiagnosticStatus.OK, 'WARN': DiagnosticStatus.WARN,
                  'ERROR': DiagnosticStatus.ERROR}
        out = DiagnosticArray()
        out.header.stamp = self.get_clock().now().to_msg()
        model = 'identified' if doc['identified'] else 'nominal'
        for joint, j in doc['joints'].items():
            st = DiagnosticStatus(name=diag_name(self, f'live gap {joint}'), hardware_id=joint)
            if j['status'] == 'unknown':
                st.level = DiagnosticStatus.STALE
                st.message = f'{joint}: live gap unknown: {doc.get("reason", "")}'
            else:
                st.level = levels[j['status']]
                st.message = (f'{joint}: live gap {j["gap_over_floor"]:.2f} x the noise floor '
                              f'({j["status"]}; {model} model)')
            st.values = [KeyValue(key=k, value=str(v)) for k, v in j.items()]
            st.values.append(KeyValue(key='floor_source', value=str(doc.get('floor_source'))))
            st.values.append(KeyValue(key='command_source',
                                      value=str(doc.get('command_source'))))
            out.status.append(st)
        self.pub_diag.publish(out)

    # -- parameters: validated by their descriptors; here only copied into JointParams ------
    def _on_set(self, changes):
        names = self.session.names
        with self.lock:
            updated = self.params.copy()
            for change in changes:
                name, value = change.name, change.value
                if name == 'latency_s':
                    updated.latency_s = float(value)
                elif name == 'latency_s_half_width':
                    updated.interval['latency_s'] = value if value >= 0 else math.nan
                elif name.startswith('joints.'):
                    parts = name.split('.')
                    joint, key = '.'.join(parts[1:-1]), parts[-1]
                    if joint not in names:
                        return SetParametersResult(successful=False, reason=f'unknown joint '
                                                   f'{joint!r}; joints are {names}')
                    i = names.index(joint)
                    if key.endswith('_half_width'):
                        updated.interval[key[:-len('_half_width')]][i] = (
                            value if value >= 0 else math.nan)
                    else:
                        getattr(updated, key)[i] = float(value)
                elif name == 'recording':
                    if value:
                        try:
                            inside(self.recordings_dir, value)
                        except ValueError as exc:
                            return SetParametersResult(successful=False, reason=(
                                f'recording: {exc} (recordings_dir is fixed at start)'))
                    self.recording = value
                elif name == 'holdout':
                    self.holdout = float(value)
                elif name == 'shadow.transport_in_latency':
                    self.transport_in_latency = bool(value)
                    if getattr(self, 'shadow', None) is not None:
                        self.shadow.transport_in_latency = bool(value)
                elif name in ('gap_threshold', 'max_shift_s', 'skip_s'):
                    setattr(self.session, 'threshold' if name == 'gap_threshold' else name,
                            float(value))
            try:
                updated.validate()
            except ConfigError as exc:
                return SetParametersResult(successful=False, reason=str(exc))
            self.params = updated
            self._params_version = getattr(self, '_params_version', 0) + 1
        return SetParametersResult(successful=True)

    def _current(self):
        with self.lock:
            p = self.params.copy()
        p.interval = {k: (float(v) if k == 'latency_s' else np.asarray(v, float))
                      for k, v in p.interval.items()}
        p.source = {k: ['sim_bridge parameters'] * len(p.names) for k in JOINT_KEYS}
        return p

    # -- services -------------------------------------------------------------------------
    def _selected_recording(self):
        """Return (recording, path, None), or (None, path, why not) for a refusal."""
        busy = self._busy()
        if busy:
            return None, None, busy
        path = (str(inside(self.recordings_dir, self.recording)) if self.recording
                else latest_recording(self.recordings_dir))
        if not path:
            return None, None, (f'no recording: parameter recording is empty and there is no '
                                f'.mcap under {self.recordings_dir}')
        try:
            return read_mcap(os.path.expanduser(path), self.session.names), path, None
        except (ConfigError, ValueError) as exc:
            return None, path, f'cannot read {path}: {exc}'

    def _busy(self):
        """The reason to refuse a replay while the refinement thread owns the replayer."""
        if self._refiner is not None and self._refiner.is_alive():
            return (f'a refinement is running (its result comes on '
                    f'{self.pub_refined.topic_name}); try again after it')
        return None

    def _on_evaluate(self, _request, response):
        rec, path, why = self._selected_recording()
        if rec is None:
            response.success, response.message = False, why
            return response
        whole = rec
        try:
            if self.holdout > 0:
                _, rec = split(whole, self.holdout)
            report = self.session.evaluate(rec, self._current(), name=path)
        except (ConfigError, ValueError) as exc:
            response.success = False
            response.message = f'cannot evaluate {path}: {exc}'
            self.get_logger().error(response.message)
            return response
        self.last = (rec, report)
        self._offline_to_shadow(rec, report, path)
        doc = report.to_dict()
        doc['reading'] = getattr(rec, 'source', {})
        doc['held_out'] = self.holdout > 0
        doc['evaluated_span_s'] = getattr(rec, 'span_s', [float(rec.t[0]), float(rec.t[-1])])
        doc['recording_span_s'] = [float(whole.t[0]), float(whole.t[-1])]
        try:
            doc['traces'] = write_traces(os.path.expanduser(self.export_dir), rec, report,
                                         self.session.names, path)
        except (OSError, ValueError) as exc:   # the score stands without its picture
            doc['traces_error'] = f'cannot write the replay traces: {exc}'
        self.pub.publish(String(data=json.dumps(doc)))
        verdict = 'PASS' if report.identified.passed else 'FAIL'
        response.success = True
        response.message = (f'{verdict}: gap {100 * report.identified.value:.2f} % (threshold '
                            f'{100 * report.identified.threshold:.0f} %), nominal '
                            f'{100 * report.nominal.value:.2f} %, noise floor '
                            f'{100 * report.identified.noise_floor["overall"]:.2f} %, shift '
                            f'{1e3 * report.identified.shift_s:+.1f} ms; '
                            + (f'held-out last {100 * self.holdout:.0f} % of ' if self.holdout
                               > 0 else 'the whole of ') + path)
        self.get_logger().info(response.message)
        return response

    def _offline_to_shadow(self, rec, report, path):
        """The offline noise floor and verdict feed the live gap (and through it the gate)."""
        if self.shadow is None:
            return
        try:
            self.shadow.set_floor(*noise_floor_of(rec, self.session.names),
                                  source=f'offline: {os.path.basename(str(path))}')
        except ValueError as exc:
            self.get_logger().warning(f'live gap keeps its noise floor: {path}: {exc}')
        self.offline = {'passed': bool(report.identified.passed),
                        'gap': float(report.identified.value),
                        'threshold': float(report.identified.threshold),
                        'recording': os.path.basename(str(path)),
                        'held_out': bool(getattr(rec, 'held_out', False))}

    def _on_export(self, _request, response):
        busy = self._busy()
        if busy:
            response.success, response.message = False, busy
            return response
        out = os.path.expanduser(self.export_dir)
        rec, report = self.last if self.last else (None, None)
        try:
            paths = self.session.export(out, self._current(), report, rec)
        except (ConfigError, OSError, RuntimeError) as exc:
            response.success = False
            response.message = f'export to {out} failed: {exc}'
            return response
        response.success = True
        response.message = json.dumps(paths)
        self.get_logger().info(f'exported {paths}')
        return response

    def _on_refine(self, _request, response):
        rec, path, why = self._selected_recording()
        if rec is None:
            response.success, response.message = False, why
            return response
        if self.holdout > 0:
            rec, _ = split(rec, self.holdout)   # the held-out part stays unseen by the fit
        joints = moving_joints(rec, self.session.names)
        if not joints:
            response.success = False
            response.message = f'no joint moved in {path}: nothing to refine on'
            return response
        start = self._current()
        self._refiner = threading.Thread(target=self._refine, args=(rec, path, joints, start),
                                         daemon=True)
        self._refiner.start()
        response.success = True
        response.message = (f'refining {joints} and latency_s on {path} in the background; '
                            f'the result is published on {self.pub_refined.topic_name}')
        self.get_logger().info(response.message)
        return response

    def _refine(self, rec, path, joints, start):
        """Worker: refine, then set the values as parameters and publish the result."""
        doc = {'recording': path, 'joints': joints}
        try:
            result = refine(self.session.replayer, [rec], start, joints=joints,
                            skip_s=self.session.skip_s, log=self.get_logger().info)
        except (RefinementError, ValueError, RuntimeError) as exc:
            doc.update(success=False, message=f'refinement failed, nothing changed: {exc}')
            self.get_logger().error(doc['message'])
            self.pub_refined.publish(String(data=json.dumps(doc)))
            return
        p, values = result.params, {}
        for key in JOINT_KEYS:
            for j in joints:
                i = self.session.names.index(j)
                values[f'joints.{j}.{key}'] = float(getattr(p, key)[i])
                half = float(p.half_width(key)[i])
                values[f'joints.{j}.{key}_half_width'] = half if math.isfinite(half) else -1.0
        values['latency_s'] = float(p.latency_s)
        half = float(p.half_width('latency_s'))
        values['latency_s_half_width'] = half if math.isfinite(half) else -1.0
        outcome = self.set_parameters([Parameter(k, value=v) for k, v in values.items()])
        refused = [f'{k}: {r.reason}' for k, r in zip(values, outcome) if not r.successful]
        doc.update(success=not refused, values=values, cost_start=result.cost_start,
                   cost_final=result.cost_final, rollouts=result.evaluations,
                   wall_s=round(result.wall_s, 2),
                   message=(f'refused {refused}' if refused else
                            f'refined in {result.wall_s:.0f} s ({result.evaluations} '
                            f'rollouts): cost {result.cost_start:.4g} -> '
                            f'{result.cost_final:.4g}; parameters set'))
        if refused:     # one call site per severity (rclpy's rule, test_distro_compat)
            self.get_logger().error(doc['message'])
        else:
            self.get_logger().info(doc['message'])
        self.pub_refined.publish(String(data=json.dumps(doc)))


def main(args=None):
    raise SystemExit(run(SimBridge, args))


if __name__ == '__main__':
    main()

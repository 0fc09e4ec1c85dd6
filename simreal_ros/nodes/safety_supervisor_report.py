"""safety_supervisor's reporting: `safety/state` (latched JSON), `safety/heartbeat` and
`/diagnostics`, from the core's status.

Part of the safety_supervisor node (simreal_ros/nodes/safety_supervisor.py), which mixes in
`Reporting` and creates the publishers and timers.
"""
import json

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from std_msgs.msg import String

from simreal_ros.nodes.common import diag_name


def _where(status):
    if status['mode'] == 'policy':
        return f'stage {status["stage"]["stage"]:.2f}'
    return 'the sysid limits'


class Reporting:
    """State, heartbeat and diagnostics (mixed into SafetySupervisor)."""

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
              or s['commands'][s['mode']]['too_fast'] or s['state_out_of_order']
              or s['state_from_future']):
            c = s['commands'][s['mode']]
            st.level = DiagnosticStatus.WARN
            st.message = (f'forwarding {s["mode"]} at {_where(s)}; '
                          f'{s["clipped_outputs"]} clipped outputs, '
                          f'{s["rejected"][s["mode"]]} rejected commands, {c["too_fast"]} '
                          f'beyond its declared {c["declared_rate_hz"]:g} Hz, '
                          f'{s["state_out_of_order"] + s["state_from_future"]} measured '
                          'samples out of order')
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
                  'last_implausible': s['last_implausible'],
                  'last_state_disorder': s['last_state_disorder'], 'late_ticks': s['late_ticks'],
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
            for key in ('out_of_order', 'from_future', 'same_stamp'):
                if key in info:    # measured samples not used for their stamps
                    values[f'inputs.{name}.{key}'] = info[key]
        st.values = [KeyValue(key=k, value=str(v)) for k, v in values.items()]
        out = DiagnosticArray(status=[st])
        out.header.stamp = self.get_clock().now().to_msg()
        self.pub_diag.publish(out)

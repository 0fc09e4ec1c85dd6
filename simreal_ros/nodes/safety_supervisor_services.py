"""safety_supervisor's services and the events that act like them: the operator's e-stop,
reset, stage promotion, source selection and bring-up; a rogue publisher; a clock jump; a
parameter change (refused).

Part of the safety_supervisor node (simreal_ros/nodes/safety_supervisor.py), which mixes in
`Services` and creates the services; the rules are the core's (simreal_ros.core.safety).
"""
from rcl_interfaces.msg import SetParametersResult
from rclpy.clock import ClockChange


class Services:
    """The service callbacks (mixed into SafetySupervisor; the caller does not hold the lock)."""

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

"""sim_robot's lockstep mode (issue 6: policy_runner parity): simulated time advances one
control period at a time, each step waiting for the command computed from the last state.

Part of the sim_robot node (simreal_ros/nodes/sim_robot.py), which mixes in `Lockstep`.
"""
import time

import rclpy

from simreal_ros.core.config import ConfigError
from simreal_ros.nodes.common import declare


class Lockstep:
    """Lockstep stepping (mixed into SimRobot; the plant and its lock are the node's)."""

    # -- lockstep mode (issue 6: policy_runner parity) -----------------------------------
    # Simulated time advances one control period at a time: sim_robot publishes /clock,
    # joint_states and imu stamped t, then waits for the command computed from them (header
    # stamp >= t), applies it at t and steps one period. Without a command for
    # lockstep_timeout_s (wall time; 0 = wait for ever) it steps anyway and counts it. So a ROS
    # deployment can be compared step by step with a reference loop.
    def _lockstep_declare(self):
        p = {}
        p['lockstep'] = declare(self, 'lockstep', False, 'advance one lockstep_period_s at a '
                                'time, waiting for the command stamped with the current time',
                                read_only=True)
        p['lockstep_period_s'] = declare(self, 'lockstep_period_s', 0.02, 'control period in '
                                         'lockstep mode (a multiple of physics_dt) (s)',
                                         low=1e-5, high=1.0, read_only=True)
        p['lockstep_timeout_s'] = declare(self, 'lockstep_timeout_s', 0.0, 'wall time to wait '
                                          'for the command of a tick before stepping anyway '
                                          '(s); 0 = wait for ever', low=0.0, high=3600.0,
                                          read_only=True)
        return p

    def _lockstep_init(self, p):
        self.lockstep = p['lockstep']
        if not self.lockstep:
            return
        self.publish_clock = True
        self.lockstep_steps = int(round(p['lockstep_period_s'] / self.physics_dt))
        if self.lockstep_steps < 1 or abs(self.lockstep_steps * self.physics_dt
                                          - p['lockstep_period_s']) > 1e-9:
            raise ConfigError(f'lockstep_period_s {p["lockstep_period_s"]} must be a whole '
                              f'multiple of physics_dt {self.physics_dt}')
        self.lockstep_timeout = p['lockstep_timeout_s']
        self._lockstep_reading = None
        self._lockstep_since = None

    def _lockstep_start(self, group):
        from rclpy.clock import Clock, ClockType
        self.counters.update(lockstep_steps=0, lockstep_timeouts=0)
        with self._lock:
            self._lockstep_publish()
        # Republishes the current state while waiting (late subscribers), handles timeouts.
        self.create_timer(0.05, self._lockstep_poll, callback_group=group,
                          clock=Clock(clock_type=ClockType.STEADY_TIME))

    def _lockstep_stamp_ns(self):
        return rclpy.time.Time(seconds=self.plant.time).nanoseconds

    def _lockstep_publish(self):
        self._lockstep_reading = self.plant.measure()
        self._lockstep_since = time.monotonic()
        self._publish(self._lockstep_reading)

    def _lockstep_command(self, cmd, stamp_ns, cmd_names=(), position=(), velocity=(),
                          effort=()):
        with self._lock:
            self.plant.submit(cmd, self.plant.time)
            self._applied(self.plant.time, cmd_names, position, velocity, effort)
            if stamp_ns >= self._lockstep_stamp_ns():
                self._lockstep_advance()

    def _lockstep_advance(self):
        self.plant.step(self.lockstep_steps)
        self._applied_damping()
        self._sim_last = self.plant.time
        self.counters['ticks'] += 1
        self.counters['lockstep_steps'] += 1
        self._lockstep_publish()

    def _lockstep_poll(self):
        with self._lock:
            waited = time.monotonic() - self._lockstep_since
            if self.lockstep_timeout > 0 and waited > self.lockstep_timeout:
                self.counters['lockstep_timeouts'] += 1
                self._lockstep_advance()
            elif waited > 0.05:
                self._publish(self._lockstep_reading)

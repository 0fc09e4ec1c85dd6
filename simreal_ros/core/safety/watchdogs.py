"""Watchdogs and the e-stop latch: input ages, automatic trips, the operator's e-stop, reset.

`Watchdog` ages one input by header stamp and by arrival. `Latch` is the part of `Supervisor`
that trips (joint_states or imu stale, velocity or tilt, repeated rejects or implausible
states, a clock going back, a rogue publisher), latches, and releases only on a reset whose
checks pass (fresh inputs, a command near the measured state).
"""
import math

import numpy as np

from simreal_ros.core.safety.limits import implied_torque


class Watchdog:
    """Age of one input by header stamp and by arrival; stale when either exceeds the timeout."""

    def __init__(self, name, timeout_s, check_stamp=True):
        self.name = name
        self.timeout = float(timeout_s)
        self.check_stamp = check_stamp
        self.stamp = None
        self.arrival = None
        self.received = 0
        self.trips = 0
        self.was_stale = False
        self.late_at_trip = None

    def feed(self, stamp, now):
        self.stamp = float(stamp)
        self.arrival = float(now)
        self.received += 1

    @property
    def ever(self):
        return self.arrival is not None

    def ages(self, now):
        if self.arrival is None:
            return math.inf, math.inf
        return float(now) - self.stamp, float(now) - self.arrival

    def stale(self, now):
        """Return why the input is stale, or None when fresh."""
        if self.arrival is None:
            return f'no {self.name} received yet'
        stamp_age, arrival_age = self.ages(now)
        if arrival_age > self.timeout:
            return f'{self.name} last arrived {arrival_age * 1e3:.0f} ms ago ' \
                   f'(timeout {self.timeout * 1e3:.0f} ms)'
        if self.check_stamp:
            # A zero stamp is old like any other (only a simulation's first instant is 0).
            if self.stamp == 0.0 and abs(stamp_age) > self.timeout:
                return f'{self.name} header stamp is zero (stamp messages with the clock time)'
            if abs(stamp_age) > self.timeout:
                return f'{self.name} header stamp is {stamp_age * 1e3:.0f} ms old ' \
                       f'(timeout {self.timeout * 1e3:.0f} ms)'
        return None

    def check(self, now):
        """Return (stale reason or None, True on a fresh -> stale change, which is counted)."""
        reason = self.stale(now)
        newly = reason is not None and not self.was_stale and self.ever
        self.trips += int(newly)
        if newly:  # how far past the timeout the trip was seen (detection delay)
            stamp_age, arrival_age = self.ages(now)
            ages = [arrival_age] + ([stamp_age] if self.check_stamp else [])
            self.late_at_trip = max(ages) - self.timeout
        self.was_stale = reason is not None
        return reason, newly


class Latch:
    """Trips, the e-stop latch and its reset (mixed into Supervisor)."""

    def estop(self, cause, now):
        """Latch the e-stop now and return the safe output to send at once."""
        self._trip(cause, now, fault='operator')
        return self.tick(now, count=False)

    def rogue_publisher(self, why, now):
        """Latch the e-stop: a node that may not publish an input or the output does
        (`why` names it); return the safe output to send at once."""
        self.rogue_publishers += 1
        self._trip(f'rogue publisher: {why}', now)
        return self.tick(now, count=False)

    def clock_jump(self, delta_s, now):
        """Note a jump of the node's clock (rclpy jump callback): backward, or forward beyond
        the `joint_states` watchdog, is a safe-mode cause (e-stop, named).

        A shorter forward jump only makes inputs look older (the safe direction: each source's
        watchdog judges it); a simulator catching up on a loaded machine advances /clock by
        tens of ms at once, and that must not stop a SysID run on simulated time.
        """
        if self.q is None:
            return
        limit = self.cfg.timeouts['joint_states']
        if delta_s < 0 or delta_s > limit:
            self.clock_jumps += 1
            self._trip(f'clock jumped {"back" if delta_s < 0 else "forward"} by '
                       f'{abs(delta_s) * 1e3:.0f} ms (a second /clock, a restarted simulator '
                       f'or a stepped system clock)', now)

    def reset(self, now):
        """Release the e-stop if inputs are fresh and the command is near the state."""
        if not self.latched:
            return True, 'e-stop is not latched; nothing to reset'
        problems = self._reset_problems(now, require_source=False)
        if problems:
            return False, 'reset refused: ' + '; '.join(problems)
        self.latched = False
        self.events.append((now, f'e-stop reset (was: {self.cause})'))
        self.cause = ''
        self._forget_targets()
        self.hold_position = None
        # The checks just passed with a fresh command: forwarding starts on the next tick.
        # Without one, the first fresh command must pass them (the output stays safe till then).
        self.recover = bool(self._reset_problems(now, require_source=True, still=False))
        where = (f'stage {self.stage.scale:.2f}' if self.mode == 'policy'
                 else 'its own limits (sysid.*, not scaled by the stage)')
        fresh = self.dogs[self.mode].stale(now) is None
        return True, (f'e-stop reset; forwarding {self.mode} at {where}' if fresh else
                      f'e-stop reset; {self.mode} forwarded at {where} once it sends fresh '
                      'commands near the state')

    def _reset_problems(self, now, require_source=True, still=True, command=True):
        """Return what stands against forwarding the selected source (empty: nothing).

        The same checks guard an operator's reset and every start of forwarding (the first
        command, or the first after a safe spell): fresh state, no implausible sample pending,
        the latest command near the measured state (position, velocity targets, implied
        torque); a reset also needs the joints nearly still (`still`). `command=False` leaves
        the command out (a bring-up is the supervisor's own motion).
        """
        problems = []
        for name in ('joint_states',) + (('imu',) if self.cfg.use_imu else ()):
            reason = self.dogs[name].stale(now)
            if reason:
                problems.append(reason)
        if self.implausible_in_row:
            problems.append(f'the last joint_states was implausible ({self.last_implausible})')
        source_reason = self.dogs[self.mode].stale(now)
        if source_reason and require_source:
            problems.append(source_reason)
        if self.q is not None and still:
            tol = self.cfg.reset_velocity_tolerance
            fast = np.abs(self.dq) > tol
            if fast.any():
                problems.append(f'joints {self._names(fast)} still move '
                                f'({np.abs(self.dq[fast]).round(2).tolist()} rad/s > '
                                f'reset_velocity_tolerance {tol} rad/s)')
        if self.cfg.use_imu and self.cfg.max_tilt_rad > 0 and self.tilt > self.cfg.max_tilt_rad:
            problems.append(f'base tilt {math.degrees(self.tilt):.0f} deg exceeds max_tilt_rad')
        cmd = self.commands[self.mode] if command else None
        if cmd is not None and self.q is not None and source_reason is None:
            if cmd.position is not None:
                err = np.abs(cmd.position - self.q[cmd.index])
                far = err > self.cfg.reset_tolerance
                if far.any():
                    worst = int(np.argmax(err))
                    problems.append(
                        f'the latest {self.mode} command is {err[worst]:.3f} rad from the '
                        f'measured position of {self.names[cmd.index[worst]]} (reset_tolerance '
                        f'{self.cfg.reset_tolerance:.3f} rad); command the current pose first')
            tau = np.abs(implied_torque(self.limits[self.mode], cmd, self.q, self.dq))
            tmax = self.limits[self.mode].torque_limit[cmd.index] * self.scale
            if np.any(tau > tmax):
                worst = int(np.argmax(tau / tmax))
                problems.append(
                    f'the latest {self.mode} command would push {tau[worst]:.1f} N*m on '
                    f'{self.names[cmd.index[worst]]} at the measured state (torque limit '
                    f'{tmax[worst]:.1f} N*m at this stage)')
            if cmd.velocity is not None:
                verr = np.abs(cmd.velocity - self.dq[cmd.index])
                tol = self.cfg.reset_velocity_tolerance
                if np.any(verr > tol):
                    worst = int(np.argmax(verr))
                    problems.append(
                        f'the latest {self.mode} command asks {verr[worst]:.2f} rad/s more than '
                        f'the measured velocity of {self.names[cmd.index[worst]]} '
                        f'(reset_velocity_tolerance {tol} rad/s)')
        return problems

    def _check_trips(self, now):
        if self.latched:
            return
        reason, _ = self.dogs['joint_states'].check(now)
        if reason is not None:
            self._trip(f'joint_states stale: {reason}', now, fault='watchdog')
            return
        if self.cfg.use_imu:
            reason, _ = self.dogs['imu'].check(now)
            if reason is not None:
                self._trip(f'imu stale: {reason}', now, fault='watchdog')
                return
            if self.cfg.max_tilt_rad > 0 and self.tilt > self.cfg.max_tilt_rad:
                self._trip(f'base tilt {math.degrees(self.tilt):.1f} deg > max_tilt_rad '
                           f'{math.degrees(self.cfg.max_tilt_rad):.1f} deg', now)
                return
        fast = np.abs(self.dq) > self.cfg.trip_velocity
        if fast.any():
            self._trip(f'joint velocity beyond trip_velocity: {self._names(fast)} '
                       f'({np.abs(self.dq[fast]).round(2).tolist()} rad/s)', now)

    def _trip(self, cause, now, fault='estop'):
        if self.latched:
            return
        self.latched = True
        self.cause = cause
        self.estops += 1
        self.events.append((now, f'E-STOP: {cause}'))
        if self.bringup.active:
            self.bringup.end('cancelled', now, f'e-stop: {cause}')
            self.events.append((now, 'bring-up cancelled by the e-stop (a reset does not '
                                     'resume it: safety/go_default again)'))
        self._stage_fault(fault, now, cause)
        if fault not in ('estop', 'operator'):   # an automatic trip is an e-stop fault too
            self.stage.fault('estop', now)

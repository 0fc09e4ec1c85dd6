"""What the supervisor takes in: measured state checked before use, commands checked whole.

`Inputs` is the part of `Supervisor` that receives joint_states, imu, commands and the live
gap. A measured sample with a duplicated name, a missing joint, a non-finite value, a position
outside the soft range by more than `state_position_margin`, a velocity beyond
`state_velocity_factor` times its limit, or a jump larger than that velocity allows is
implausible: counted, never used; `implausible_trip_count` in a row is a sensor fault. A
measured sample (joint_states, imu) stamped before the one in use, or beyond its timeout ahead
of this clock, is never used either (`_stamp_order`); `state_disorder_trip_count` in a row is a
sensor fault. A command must name every joint, be finite, in order and not from the future
(docs/real_robot.md, "What the supervisor takes as input").
"""
import math

import numpy as np

from simreal_ros.core.safety.limits import Command, Rejected, validate_command


def tilt_of(quaternion_wxyz):
    """Return the angle (rad) between the body z axis and the world z axis."""
    w, x, y, z = (float(v) for v in quaternion_wxyz)
    norm2 = w * w + x * x + y * y + z * z
    cos_tilt = 1.0 - 2.0 * (x * x + y * y) / norm2
    return math.acos(min(1.0, max(-1.0, cos_tilt)))


class Inputs:
    """Measured state, imu, commands and the live gap in (mixed into Supervisor)."""

    # -- inputs -------------------------------------------------------------------------------
    def on_joint_state(self, names, position, velocity, stamp, now):
        """Take a joint state; return (ok, reason). An implausible one is never used, nor one
        stamped before the one in use or beyond the timeout ahead (_stamp_order)."""
        reason = self._stamp_order('joint_states', stamp, now)
        if reason is not None:
            self.state_rejected += 1
            return False, reason
        reason, implausible = self._check_state(names, position, velocity, stamp, now)
        if reason is not None:
            self.state_rejected += 1
            if implausible:
                self.implausible += 1
                self.implausible_in_row += 1
                self.last_implausible = reason
                if (self.implausible_in_row >= self.cfg.implausible_trip_count
                        and not self.latched):
                    self._trip(f'sensor fault: {self.implausible_in_row} implausible '
                               f'joint_states in a row (last: {reason})', now)
            return False, reason
        self.implausible_in_row = 0
        self._in_order('joint_states', stamp)
        self.q, self.dq = self._q, self._dq
        self.state_stamp = float(stamp)
        self.dogs['joint_states'].feed(stamp, now)
        self._state_since_tick = True
        return True, ''

    def _check_state(self, names, position, velocity, stamp, now):
        """Return (reason or None, implausible?) and set self._q, self._dq when usable."""
        if names is self._state_names_seen:
            # The very tuple checked before (core/cdr.py's decoder hands out the same one
            # while the names' bytes do not change): nothing to convert or look up.
            names, idx = self._state_names, self._state_index
        else:
            seen = names if type(names) is tuple else None   # immutable: safe to recognise
            names = tuple(str(n) for n in names)
            idx = self._state_index if names == self._state_names else None
            self._state_names_seen = seen if idx is not None else None
        position = np.asarray(position, dtype=float).reshape(-1)
        velocity = np.asarray(velocity, dtype=float).reshape(-1)
        if idx is None:   # a driver's names do not change: checked once
            if len(set(names)) != len(names):
                dup = sorted({n for n in names if names.count(n) > 1})
                return f'joint_states names {dup} more than once', True
            lookup = {n: i for i, n in enumerate(names)}
            missing = [n for n in self.names if n not in lookup]
            if missing:
                return f'joint_states lacks {missing}', True
            idx = np.array([lookup[n] for n in self.names], dtype=int)
            self._state_names, self._state_index = names, idx
            self._state_names_seen = seen
        if position.size != len(names) or velocity.size != len(names):
            return (f'joint_states needs position and velocity for every name '
                    f'({len(names)} names, {position.size} positions, '
                    f'{velocity.size} velocities)'), True
        q, dq = position[idx], velocity[idx]
        if not (np.isfinite(q).all() and np.isfinite(dq).all()):
            return 'joint_states has non-finite values', True
        lim = self.cfg.limits
        margin = self.cfg.state_position_margin
        out = (q < lim.position_lower - margin) | (q > lim.position_upper + margin)
        if out.any():
            return (f'joint_states position of {self._names(out)} '
                    f'{q[out].round(3).tolist()} rad is beyond the range by more than '
                    f'state_position_margin {margin} rad'), True
        vmax = lim.velocity_limit * self.cfg.state_velocity_factor
        fast = np.abs(dq) > vmax
        if fast.any():
            return (f'joint_states velocity of {self._names(fast)} '
                    f'{dq[fast].round(2).tolist()} rad/s is beyond state_velocity_factor x '
                    f'velocity_limit'), True
        dog = self.dogs['joint_states']
        restart = 'joint_states' in self._order_restart
        if self.q is not None and not restart:
            # Never negative: a sample stamped before the one in use was refused before this
            # (_stamp_order); time going back is not time elapsed.
            dt = max(float(stamp) - self.state_stamp if self.cfg.check_stamps
                     else float(now) - dog.arrival, 0.0)
            # As far as the fastest plausible velocity moves a joint in the time between the
            # samples, plus one period of it (a sample is taken at some instant of its period).
            reach = vmax * (dt + self.cfg.period_s)
            jump = np.abs(q - self.q) > reach
            if jump.any():
                return (f'joint_states position of {self._names(jump)} jumped '
                        f'{np.abs(q - self.q)[jump].round(3).tolist()} rad in '
                        f'{dt * 1e3:.1f} ms, further than the joint can move'), True
        if (self.q is None or restart) and dog.check_stamp and abs(now - stamp) > dog.timeout:
            # Supervision starts with a fresh reading; an old one delivered at start-up (DDS
            # matching, a slow first tick) is not a stream that stopped. So does a new order
            # after persistent disorder (a driver restarted with its clock behind).
            when = 'after the disorder' if restart else 'at start-up'
            return (f'joint_states {when} is {(now - stamp) * 1e3:.0f} ms old (timeout '
                    f'{dog.timeout * 1e3:.0f} ms); waiting for a fresh one'), False
        self._q, self._dq = q, dq
        return None, False

    def on_imu(self, orientation_wxyz, stamp, now):
        """Take the base orientation (w, x, y, z); return (ok, reason)."""
        o = orientation_wxyz
        if type(o) is not tuple or len(o) != 4:     # core/cdr.py's decoder gives a tuple
            o = tuple(np.asarray(o, dtype=float).reshape(-1).tolist())
        else:
            o = tuple(float(v) for v in o)
        # Plain floats: four values are cheaper without numpy (this runs at 500 Hz).
        if (len(o) != 4 or not all(math.isfinite(v) for v in o)
                or abs(math.sqrt(sum(v * v for v in o)) - 1.0) > 0.05):
            self.state_rejected += 1
            return False, f'imu orientation is not a unit quaternion: {list(o)}'
        dog = self.dogs['imu']
        reason = self._stamp_order('imu', stamp, now)
        if reason is not None:
            self.state_rejected += 1
            return False, reason
        if ((not dog.ever or 'imu' in self._order_restart) and dog.check_stamp
                and abs(now - stamp) > dog.timeout):
            self.state_rejected += 1
            return False, f'imu at start-up is {(now - stamp) * 1e3:.0f} ms old; waiting'
        self._in_order('imu', stamp)
        self.tilt = tilt_of(o)
        dog.feed(stamp, now)
        return True, ''

    def _stamp_order(self, kind, stamp, now):
        """Return why a measured sample of `kind` (joint_states, imu) is not in order, or None.

        A sample stamped before the one in use is older information (a reordering network,
        a driver publishing from two threads): never used, counted (`out_of_order`), the
        newer one stays and its watchdog runs. One stamped beyond the input's timeout ahead
        of this clock is never used either (`from_future`): it would otherwise be the stamp
        later samples are ordered against. A sample stamped as the one in use (a duplicate,
        or a coarse clock) is not older: it meets the other checks (the jump check then
        allows one period's motion) and is counted (`same_stamp`). Each input is ordered
        against itself only (joint_states and imu may come from two clocks; each watchdog
        judges its own against this one). Without check_stamps nothing here applies.

        `state_disorder_trip_count` such samples in a row (none used between) are persistent
        disorder: a sensor fault e-stop naming it, and the order starts again from the next
        fresh sample (a driver restarted with its clock behind): the e-stop latches, so the
        robot is supervised again only through safety/reset and its checks.
        """
        o = self.stamp_order[kind]
        ref = o['ref']
        if ref is None or not self.cfg.check_stamps:
            return None     # the first sample (or the first of a new order) must be fresh
        stamp = float(stamp)
        ahead = stamp - now
        dog = self.dogs[kind]
        if ahead > dog.timeout:
            o['from_future'] += 1
            why = (f'{kind} stamped {ahead * 1e3:.0f} ms ahead of this clock (timeout '
                   f'{dog.timeout * 1e3:.0f} ms): not used; synchronise the clocks')
        elif stamp < ref:
            o['out_of_order'] += 1
            why = (f'{kind} stamped {(ref - stamp) * 1e3:.1f} ms before the one in use (out of '
                   'order): not used')
        else:
            if stamp == ref:
                o['same_stamp'] += 1
            return None
        o['in_row'] += 1
        self.last_state_disorder = why
        count = self.cfg.state_disorder_trip_count
        if o['in_row'] >= count:
            if not self.latched:
                self._trip(f'sensor fault: {o["in_row"]} {kind} in a row out of order or from '
                           f'the future (state_disorder_trip_count {count}; last: {why})', now)
            # The order starts again from the next fresh sample (see above); latched.
            o['ref'] = None
            o['in_row'] = 0
            self._order_restart.add(kind)
        return why

    def _in_order(self, kind, stamp):
        """Note that a sample of `kind` stamped `stamp` is now the one in use."""
        o = self.stamp_order[kind]
        o['ref'] = float(stamp)
        o['in_row'] = 0
        self._order_restart.discard(kind)

    def on_command(self, source, names, position, velocity, effort, stamp, now, sender=''):
        """Validate a command of `source`; keep it when valid. Return (ok, reason).

        `sender` names the node (header.frame_id): the SysID path is granted to one sender.
        A command must name every supervised joint (a subset is rejected whole: a joint left
        out would keep a stale target), and be stamped no earlier than the latest one taken
        from its source (an older one is counted as `out_of_order` and never used).
        """
        if source == 'sysid':
            foreign = self._sysid_grant(str(sender), now)
            if foreign:
                self.foreign_sysid += 1
                self.last_reject = f'sysid/command from {sender!r}: {foreign}'
                return False, foreign
        self._count_rate(source, now)
        try:
            cmd = self._complete(validate_command(names, position, velocity, effort,
                                                  self.names), source)
        except Rejected as exc:
            self.rejected[source] += 1
            self.rejected_in_row[source] += 1
            self.last_reject = f'{source}/command: {exc}'
            if source == self.mode:
                if source == 'policy':
                    self._stage_fault('rejected', now, str(exc))
                if (self.rejected_in_row[source] >= self.cfg.reject_trip_count
                        and not self.latched):
                    self._trip(f'{self.rejected_in_row[source]} rejected {source} commands in a'
                               f' row (last: {exc})', now)
            return False, str(exc)
        dog = self.dogs[source]
        ahead = float(stamp) - now
        if self.cfg.check_stamps and ahead > dog.timeout:
            # From the future beyond the timeout (a policy computer's clock ahead): never
            # used, and never the stamp later commands are ordered against.
            self.from_future[source] += 1
            why = (f'stamped {ahead * 1e3:.0f} ms ahead of this clock (timeout '
                   f'{dog.timeout * 1e3:.0f} ms): not used; synchronise the clocks')
            self.last_reject = f'{source}/command: {why}'
            return False, why
        if self.cfg.check_stamps and dog.stamp is not None and float(stamp) < dog.stamp:
            # Older than what is in force: not newer information (a second publisher, a
            # source's bug). Never used, counted; the newer command stays (its watchdog runs).
            self.out_of_order[source] += 1
            why = (f'stamped {(dog.stamp - float(stamp)) * 1e3:.1f} ms before the latest '
                   f'{source}/command taken (out of order): not used')
            self.last_reject = f'{source}/command: {why}'
            return False, why
        self.rejected_in_row[source] = 0
        if not self._used[source] and self.commands[source] is not None:
            self.superseded[source] += 1
        self._used[source] = False
        self.commands[source] = cmd
        dog.feed(stamp, now)
        return True, ''

    def _complete(self, cmd, source):
        """Return `cmd` in the supervised joints' order; Rejected when it leaves one out."""
        if cmd.index.size != self.n:
            named = set(cmd.index.tolist())
            missing = [n for i, n in enumerate(self.names) if i not in named]
            self.incomplete[source] += 1
            raise Rejected(f'command names {cmd.index.size} of the {self.n} supervised joints '
                           f'(missing {missing}): every joint is commanded on every tick, a '
                           'subset is rejected whole')
        if (cmd.index == self._all).all():
            return cmd
        order = np.argsort(cmd.index)
        return Command(self._all.copy(), *(None if v is None else v[order]
                                           for v in (cmd.position, cmd.velocity, cmd.effort)))

    def _count_rate(self, source, now):
        """Count a command beyond the source's declared rate (a bucket of one timeout's worth
        of commands, refilled at 1.25 x the rate: jitter and a short queue pass) and measure
        its rate over about a second."""
        rate = self.cfg.source_rate_hz[source]
        burst = max(2.0, rate * self.cfg.timeouts[source])
        bucket = self._tokens[source]
        tokens = burst if bucket is None else min(burst, bucket[0] + max(0.0, now - bucket[1])
                                                  * rate * 1.25)
        if tokens >= 1.0:
            tokens -= 1.0
        else:
            self.too_fast[source] += 1
        self._tokens[source] = (tokens, now)
        w = self._rate_window[source]
        if w[0] is None or now - w[0] > 1.0 or now < w[0]:
            if w[0] is not None and 0 < now - w[0] <= 2.0:
                w[2] = w[1] / (now - w[0])
            w[0], w[1] = now, 0
        w[1] += 1

    def _sysid_grant(self, sender, now):
        """Return why `sender` may not command the SysID path, or None (granted)."""
        owner = self.sysid_owner
        if owner is not None and owner != sender:
            idle = now - self.sysid_owner_seen
            if idle <= self.cfg.sysid_release_s:
                return (f'the SysID path is granted to {owner!r} (its last command '
                        f'{idle * 1e3:.0f} ms ago); one experiment at a time')
            self.events.append((now, f'sysid grant of {owner!r} released (silent for '
                                     f'{idle:.1f} s)'))
            owner = None
        if owner is None:
            self.sysid_owner = sender
            self.events.append((now, f'sysid path granted to {sender!r}'))
            self.commands['sysid'] = None
        self.sysid_owner_seen = now
        return None

    # -- operator requests ------------------------------------------------------------------
    def on_live_gap(self, doc, now):
        """Take one live-gap document of the shadow model (core.safety.live_gap); return
        (ok, reason). It only ever holds or lowers the stage (or e-stops, when configured)."""
        was = self.live_gap.required
        ok, reason = self.live_gap.on_gap(doc, now)
        if ok and self.live_gap.required and not was:
            self.events.append((now, 'live gap gate on: the model is identified; promotion '
                                     'now needs a fresh live gap below its threshold'))
        return ok, reason

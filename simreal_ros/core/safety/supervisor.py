"""The safety supervisor's tick, without ROS: inputs in, one safe output per tick.

`Supervisor` puts together the checked inputs (`inputs.Inputs`), the watchdogs and e-stop
latch (`watchdogs.Latch`), the limit filter (`limits`), the stage machine (`stages`), the
bring-up (`bringup`) and the live-gap gate (`live_gap`); this file holds the mode (which source
is forwarded), the source clocks the rate limits use, and the tick, which applies the rules in
the order docs/nodes.md ("safety_supervisor: the rules of a tick") gives them. All times are
seconds on one clock (ROS time in the node, so sim time works).
"""
from dataclasses import dataclass
import math

import numpy as np

from simreal_ros.core.safety.bringup import Bringup, bringup_limits
from simreal_ros.core.safety.config import INPUTS, LATE_STEP_PERIODS, SOURCES
from simreal_ros.core.safety.inputs import Inputs
from simreal_ros.core.safety.limits import (KINDS, Command, Rejected, _clip, count_clips,
                                            filter_command)
from simreal_ros.core.safety.live_gap import LiveGapGate
from simreal_ros.core.safety.stages import StageMachine
from simreal_ros.core.safety.watchdogs import Latch, Watchdog


@dataclass
class Output:
    """One hardware/command: names and fields (None = field left empty)."""

    names: list
    position: np.ndarray = None
    velocity: np.ndarray = None
    effort: np.ndarray = None
    safe: bool = False
    reason: str = 'forwarding'
    stamp: float = None  # forwarded: the command's header stamp (the state it was made from)
    bringup: bool = False  # the bring-up's targets (safe: the supervisor's own, every tick)


class Supervisor(Inputs, Latch):
    """Limits, stages, watchdogs, e-stop latch and mode; the node is a thin adapter around it."""

    def __init__(self, cfg, now=0.0):
        self.cfg = cfg
        self.names = list(cfg.limits.names)
        self.n = len(self.names)
        self.stage = StageMachine(cfg.stages, cfg.stage_dwell_s, now, cfg.auto_advance,
                                  cfg.demote_on, cfg.demote_holdoff_s,
                                  cfg.stage_file or None, cfg.resume_stage,
                                  max_accrue_step_s=cfg.timeouts['policy'],
                                  write_through=False)
        self.limits = {'policy': cfg.limits, 'sysid': cfg.sysid_limits}
        self.dogs = {k: Watchdog(k, cfg.timeouts[k], cfg.check_stamps) for k in INPUTS}
        self.mode = cfg.mode
        self.q = None
        self.dq = None
        self.state_stamp = None
        self.tilt = 0.0
        self.commands = {s: None for s in SOURCES}
        self.previous_target = np.full(self.n, np.nan)
        self.previous_rate = np.full(self.n, np.nan)    # the target's last rate of change
        self.target_changed = np.full(self.n, np.nan)   # when each previous_target last moved
        # ... and the source's clock then (source_clock; NaN: moved on the supervisor's own)
        self.target_changed_src = np.full(self.n, np.nan)
        self.target_lagging = np.zeros(self.n, dtype=bool)   # short of its command (clipped)
        self._all = np.arange(self.n)
        self.latched = False
        self.cause = ''
        self.hold_position = None
        self.safe_reason = 'waiting for joint_states'
        self.clips = {k: np.zeros(self.n, dtype=int) for k in KINDS}
        self.clipped_outputs = 0
        self.rejected = {s: 0 for s in SOURCES}
        self.rejected_in_row = {s: 0 for s in SOURCES}
        self.incomplete = {s: 0 for s in SOURCES}     # rejected: not every joint named
        self.out_of_order = {s: 0 for s in SOURCES}   # stamped before the latest taken
        self.from_future = {s: 0 for s in SOURCES}    # stamped beyond the timeout ahead
        self.too_fast = {s: 0 for s in SOURCES}       # beyond the source's declared rate
        self.superseded = {s: 0 for s in SOURCES}     # replaced before any output used them
        self._used = {s: True for s in SOURCES}       # the latest command went into an output
        self._tokens = {s: None for s in SOURCES}     # (tokens, time): the rate's bucket
        self._rate_window = {s: [None, 0, None] for s in SOURCES}   # start, count, last Hz
        self.slot_output = None      # the output sent on input in this tick slot (or None)
        self.slot_time = None        # when it was sent (the supervisor's clock)
        self._slot_clipped = False
        self._slot_deferred = False  # a command waited for the tick (its slot was taken)
        self.deferred_inputs = 0     # commands not forwarded on input: their slot was taken
        self.replaced_ticks = 0      # ticks whose slot an output sent on input already filled
        self.last_reject = ''
        self.state_rejected = 0
        self.implausible = 0
        self.implausible_in_row = 0
        self.last_implausible = ''
        # Measured samples by stamp (inputs._stamp_order): the stamp in use ('ref'), counts.
        self.stamp_order = {k: {'ref': None, 'out_of_order': 0, 'from_future': 0,
                                'same_stamp': 0, 'in_row': 0} for k in ('joint_states', 'imu')}
        self.last_state_disorder = ''
        self._order_restart = set()   # inputs whose order starts again (persistent disorder)
        self.estops = 0
        self.ticks = 0
        self.outputs = 0
        self.late_ticks = 0
        self.max_tick_gap = 0.0
        self.clock_jumps = 0
        self.rogue_publishers = 0   # e-stops for a node publishing what it may not
        self.grace_holds = 0
        self.foreign_sysid = 0
        self.sysid_owner = None
        self.sysid_owner_seen = None
        self.recover = True          # the next forwarding must pass the reset checks
        self.last_forward = None     # (time, Command) of the last forwarded output
        self.spell = None            # the current not-forwarding spell: {'since', 'hold', ...}
        self._last_now = None
        self._last_wall = None
        self._state_since_tick = False   # a joint state accepted since the last counted tick
        self._state_names = None           # the last joint_states names that passed the name
        self._state_index = None           # checks, and where this robot's joints are in them
        self._state_names_seen = None      # the tuple object those names came in (identity)
        self.slow_ticks = 0                # late ticks that had a new state (computed normally)
        self.bringup = Bringup()
        self.live_gap = LiveGapGate(cfg.live_gap_require, cfg.live_gap_max_age_s,
                                    cfg.live_gap_drift_action, cfg.live_gap_drift_s,
                                    cfg.check_stamps, self.names)
        self.events = []  # (time, text) for the operator log; the node drains it
        for text in self.stage.warnings:
            self.events.append((now, f'WARNING: {text}'))


    def not_clean(self, now):
        """Return why the policy is not being forwarded cleanly now, or None."""
        if self.latched:
            return f'e-stop latched: {self.cause}'
        if self.mode != 'policy':
            return 'in SysID mode'
        if self.safe_reason:
            return self.safe_reason
        return None

    def advance_stage(self, now):
        """Promote one stage when the dwell, accrued while forwarding cleanly, is long enough."""
        if self.latched:
            return False, f'e-stop latched ({self.cause}); reset first'
        if self.stage.index < len(self.stage.scales) - 1:
            gap = self.live_gap.refusal(now)
            if gap:
                return False, gap
        ok, msg = self.stage.request_advance(now, self.not_clean(now))
        if ok:
            self.events.append((now, 'stage ' + msg))
        return ok, msg

    def select_mode(self, mode, now):
        """Switch the forwarded source; only while nothing is forwarded (a safe state)."""
        if mode not in SOURCES:
            return False, f'unknown mode {mode!r}; use one of {SOURCES}'
        if mode == self.mode:
            return True, f'already forwarding {mode}'
        if self.bringup.active:
            return False, (f'the bring-up owns the output ({self.bringup.phase} the default '
                           'pose): it ends when the policy takes over or with an e-stop '
                           '(safety/estop, then safety/reset); switch then')
        if not self.latched and not self.safe_reason:
            return False, (f'switching {self.mode} -> {mode} needs a safe state: stop the '
                           f'{self.mode} source first (policy_runner/enable false, or '
                           'safety/estop), then switch')
        old, self.mode = self.mode, mode
        self._forget_targets()
        self.recover = True
        if mode == 'policy':
            self.sysid_owner = None
        self.events.append((now, f'mode {old} -> {mode}'))
        latched = '; reset the e-stop (safety/reset) first' if self.latched else ''
        return True, (f'mode {old} -> {mode}; {mode} is forwarded once it sends fresh commands '
                      f'near the state{latched}')

    def go_default(self, now):
        """Start the bring-up (see simreal_ros.core.safety.bringup): from the measured pose to
        `bringup.default_position`, then hold it until the policy takes over. Return (ok,
        message); a refusal names what stands against it."""
        b = self.bringup
        if self.latched:
            return False, (f'bring-up refused: e-stop latched ({self.cause}); reset it first '
                           '(safety/reset), then go_default')
        if self.cfg.bringup_position is None:
            return False, ('bring-up refused: no default pose: parameter '
                           'bringup.default_position is empty; give one value per joint in the '
                           'safety_supervisor section of the robot file')
        if self.mode != 'policy':
            owner = f', granted to {self.sysid_owner!r}' if self.sysid_owner else ''
            return False, (f'bring-up refused: SysID owns the output (mode sysid{owner}); '
                           'select the policy source first (safety/select_sysid false)')
        if b.active:
            return True, (f'bring-up already under way ({b.phase} the default pose, '
                          f'{b.progress(now) * 100:.0f} %)')
        if self.admits_policy:
            return False, ('bring-up refused: the policy is being forwarded; disable it first '
                           '(policy_runner/enable false: simreal disable)')
        problems = self._reset_problems(now, require_source=False, command=False)
        if problems:
            return False, 'bring-up refused: ' + '; '.join(problems)
        speed = self.cfg.bringup_max_velocity
        if speed is None:
            speed = np.full(self.n, 0.5)
        scale = self.scale
        duration = b.begin(self.q, self.cfg.bringup_position, now,
                           bringup_limits(self.cfg.limits, speed, scale), scale,
                           self.cfg.bringup_min_duration_s)
        peak = b.peak_speed()
        worst = int(np.argmax(peak / b.speed))
        text = (f'bring-up: moving to the default pose over {duration:.2f} s (peak '
                f'{peak[worst]:.3f} rad/s on {self.names[worst]}, limit {b.speed[worst]:.3f} '
                f'rad/s at stage {self.stage.scale:.2f}), then holding it until the policy takes '
                'over; an e-stop cancels it')
        self.events.append((now, text))
        return True, text

    # -- the control tick -------------------------------------------------------------------
    def source_clock(self, now):
        """The selected source's clock now: (stamp of its latest command, that stamp plus
        the time since it arrived), in s; None without stamps (check_stamps false: then the
        supervisor's own clock, as for the bring-up).

        The rate and acceleration limits measure the target's motion on the source's clock,
        per joint: a target that reached its previous command moves by the time between the
        two commands' stamps (commands taken in a burst, a queue after a stall, are as far
        apart as their source made them, however late the supervisor takes them); a target
        still short of its command (clipped) moves by the time since, on the stamp's clock
        advanced in real time. Each move starts from the source time the last one reached,
        so the credits add up to the source's clock, which the stamp watchdog keeps within
        a source timeout of the supervisor's: over any time W a target travels at most the
        rate x (W + 3 timeouts), and a target that truly moves faster is clipped.
        """
        dog = self.dogs[self.mode]
        if not self.cfg.check_stamps or dog.arrival is None:
            return None
        return dog.stamp, dog.stamp + (now - dog.arrival)

    def _source_time(self, src):
        """Per joint: where the target stands on the source's clock once it moves now."""
        stamp, running = src
        return np.where(self.target_lagging, running, stamp)

    def rate_dt(self, now, src=None):
        """Per joint: the time the rate limit allows a target change for (s).

        A source slower than the supervisor sends a staircase; each step may move as far as
        the rate allows over the time since the target last moved, at most the source's
        timeout, so a command stream within the rate passes unchanged and a faster one is
        slewed over the following ticks. Without a previous target (the first output, or the
        first after an e-stop, a stale spell or a mode switch) the step is measured from the
        measured position and gets the same cap as a target that stood still: one source
        timeout. The torque limit, which scales with the stage, bounds that first step too,
        and forwarding starts only with a command near the state in the first place.
        """
        cap = self.cfg.timeouts[self.mode]
        elapsed = now - self.target_changed
        if src is not None:      # on the source's clock where the target last moved on it
            on_src = self._source_time(src) - self.target_changed_src   # NaN: not on it
            elapsed = np.where(on_src == on_src, on_src, elapsed)
        since = _clip(elapsed, 0.0, cap)
        return np.where(np.isfinite(self.previous_target) & np.isfinite(since), since, cap)

    @property
    def admits_policy(self):
        """The policy's commands are being forwarded, or held through a brief hiccup; False
        while the next forwarding must pass the reset checks (policy_runner then commands the
        measured pose, and eases to its default pose once admitted)."""
        return self.mode == 'policy' and not self.latched and not self.recover

    @property
    def scale(self):
        """The limit scale of the selected source: the stage for the policy, 1 for SysID."""
        return self.stage.scale if self.mode == 'policy' else 1.0

    def forward_input(self, now, wall=None):
        """Return the output to send now for a command just taken (forward_on_input), or None
        when this tick slot already had one sent on input: the command waits for the tick.

        One output per tick slot: the one sent on input replaces the tick's (tick_output
        then sends nothing unless the output turns safe), so a source publishing faster than
        the supervisor never multiplies the rate a driver sees. A slot is one tick period
        of the supervisor's clock: a command a period or more after the last one sent on
        input opens the next slot even when the tick is late, so a lockstep simulator
        (whose /clock, and so the supervisor's tick, waits for this very command) is never
        kept waiting on a tick that cannot come.
        """
        if self.slot_output is not None and now - self.slot_time < self.cfg.period_s * 0.999:
            self.deferred_inputs += 1
            self._slot_deferred = True
            return None
        out = self.tick(now, count=False, wall=wall)
        self.slot_output, self.slot_time = out, now
        self._slot_deferred = False     # this output carries the newest command
        return out

    def tick_output(self, now, wall=None, forward_on_tick=True):
        """Run the control tick; return the Output to send, or None (nothing may be sent
        yet, or this slot's output already went out on input). `forward_on_tick` false:
        forwarded outputs go out on input only (safe ones, and a command that waited for
        its slot, still on the tick)."""
        slot, self.slot_output = self.slot_output, None
        out = self.tick(now, wall=wall, slot=slot)
        if out is None or (slot is not None and (out is slot or (out.safe and slot.safe))):
            return None     # (a change to safe is never held back); one that waited: next
        deferred, self._slot_deferred = self._slot_deferred, False
        if out.safe or forward_on_tick or deferred:
            return out
        return None

    def tick(self, now, count=True, wall=None, slot=None):
        """Return this tick's Output, or None when nothing may be published yet.

        `slot`: an output already sent on input in this tick slot (tick_output); a tick that
        would forward returns it unchanged instead of computing another.

        `wall` (s, a monotonic clock; None = not checked, e.g. on simulated time) lets the
        supervisor notice its own stalls: a counted tick more than `late_tick_periods` periods
        after the previous one forwards nothing computed from what may be old state.
        """
        late = None
        if count:
            self.ticks += 1
        if wall is not None and self._last_wall is not None:
            # Also on input (count=False): after a stall, queued commands arrive before the
            # late tick runs, and must not be forwarded with what may be old state either.
            gap = wall - self._last_wall
            if gap > self.cfg.late_tick_periods * self.cfg.period_s:
                if self._state_since_tick:
                    # A joint state arrived after the previous tick: this process is slow
                    # (a loaded computer), not stalled, and the state is as new as it can
                    # know. Repeating the last output on every slow tick would freeze the
                    # robot's targets for as long as the load lasts.
                    if count:
                        self.slow_ticks += 1
                else:
                    late = (f'supervisor tick {gap * 1e3:.1f} ms after the previous one '
                            f'(late_tick_periods {self.cfg.late_tick_periods:g}) and no '
                            'joint_states since: the state may be old')
                    if count:
                        self.late_ticks += 1
                        self.events.append((now, late))
            if count:
                self.max_tick_gap = max(self.max_tick_gap, gap)
            if gap > self.cfg.timeouts['joint_states'] and self.q is not None:
                # Longer than the state watchdog: the driver has had no command for as long,
                # and has damped. Resuming on its own is not this supervisor's call, also not
                # for a command taken before the late tick (a fresh state may have come first).
                self._trip(f'supervisor stalled for {gap * 1e3:.0f} ms (longer than '
                           'joint_states_timeout_s): the robot was without supervision', now,
                           fault='watchdog')
        if count and wall is not None:
            self._last_wall = wall
        if count:
            self._state_since_tick = False
        if self._last_now is not None and now < self._last_now - 1e-6 and self.q is not None:
            self.clock_jumps += 1
            self._trip(f'clock went back {(self._last_now - now) * 1e3:.1f} ms (a second '
                       '/clock, a restarted simulator or a stepped system clock)', now)
        self._last_now = now if self._last_now is None else max(self._last_now, now)
        waiting = [k for k in ('joint_states', 'imu') if k == 'joint_states' or self.cfg.use_imu
                   if not self.dogs[k].ever]
        if waiting:
            self.safe_reason = f'waiting for {" and ".join(waiting)} (publishing nothing)'
            return self._safe_output(now, self.safe_reason) if self.latched else None
        self._check_trips(now)
        if self.latched:
            self.stage.accrue(now, False)
            return self._safe_output(now, f'e-stop: {self.cause}')
        drift = self.live_gap.drift(now)
        if drift is not None:
            action, cause = drift
            if action == 'estop':
                self._trip(cause, now, fault='live_gap')
                return self._safe_output(now, f'e-stop: {self.cause}')
            t = self.stage.demote(now, cause)
            self.events.append((now, cause + (f'; stage {t["from"]:.2f} -> {t["to"]:.2f}'
                                              if t else '; already at the lowest stage')))
        t = None if self.live_gap.refusal(now) else self.stage.update(now)
        if t is not None:
            self.events.append((now, f'stage {t["from"]:.2f} -> {t["to"]:.2f} (auto_advance)'))
        stale, newly = self.dogs[self.mode].check(now)
        if self.bringup.active:
            out = self._bringup_output(now, stale, late)
            if out is not None:
                return out
        if stale is not None:
            if newly:
                self.events.append((now, f'{self.mode} stale -> safe mode: {stale}'))
            # A source never heard from is not a fault of it (a supervisor started before its
            # policy keeps a resumed stage); one that went silent is.
            return self._not_forwarding(now, f'{self.mode} stale: {stale}',
                                        fault='watchdog' if self.dogs[self.mode].ever else None)
        if late is not None:
            return self._late_output(now, late)
        if self.recover:
            # Not 'joints still': a source back after a hiccup mid-motion (a SysID sweep)
            # meets a moving joint; its command must match the motion (position, velocity
            # targets, implied torque) instead. An operator's reset also wants them still.
            problems = self._reset_problems(now, still=False)
            if problems:
                return self._not_forwarding(now, 'not starting to forward: '
                                            + '; '.join(problems))
            self.recover = False
            self.events.append((now, f'forwarding {self.mode} (checks passed: fresh state, '
                                     'command matching the state)'))
        if slot is not None and not slot.safe:
            # This slot's output went out on input (forward_input): one output per tick.
            self.replaced_ticks += 1
            if count:
                self.stage.accrue(now, self.mode == 'policy' and not self._slot_clipped)
            return slot
        cmd = self.commands[self.mode]
        limits = self.limits[self.mode]
        src = self.source_clock(now)
        dt = self.rate_dt(now, src)
        # The target's rate for the acceleration limit: a target that has stood still for a
        # whole source timeout is at rest, and no target moves faster than the rate limit
        # (a torque-rule shift within a fraction of a tick is not a rate). Without both, an
        # old large rate opposing the command held the target still for good.
        rmax = limits.max_target_rate * self.scale
        rate = np.where(dt >= self.cfg.timeouts[self.mode], 0.0,
                        _clip(self.previous_rate, -rmax, rmax))
        try:
            out, clips = filter_command(limits, self.scale, cmd, self.q, self.dq,
                                        self.previous_target, dt, rate,
                                        accel_dt_floor=self.cfg.period_s)
        except Rejected as exc:
            self.rejected[self.mode] += 1
            self.last_reject = f'{self.mode}/command: {exc}'
            return self._not_forwarding(now, f'filter rejected the command: {exc}')
        kinds = [k for k, m in clips.items() if m.any()]   # each mask looked at once
        clipped = bool(kinds)
        if clipped:
            count_clips(self.clips, {k: clips[k] for k in kinds}, cmd.index)
            self.clipped_outputs += 1
            if self.mode == 'policy':
                self._stage_fault('limit', now, '/'.join(kinds) + ' clipped for '
                                  + ', '.join(self._names_idx(cmd.index[np.any(
                                      np.stack(list(clips.values())), axis=0)]))
                                  + self._motion_figures(cmd, clips, dt, rate, limits))
        self._remember_target(out, now, dt, src, cmd)
        self._used[self.mode] = True
        self._slot_clipped = clipped
        self.hold_position = None
        if self.spell is not None:
            self.events.append((now, f'forwarding {self.mode} again after '
                                     f'{(now - self.spell["since"]) * 1e3:.0f} ms'))
            self.spell = None
        self.safe_reason = ''
        self.outputs += 1
        self.last_forward = (now, out)
        if count:
            self.stage.accrue(now, self.mode == 'policy' and not clipped)
        return Output([self.names[i] for i in out.index], out.position, out.velocity,
                      out.effort, safe=False, reason='forwarding',
                      stamp=self.dogs[self.mode].stamp)

    def _bringup_output(self, now, stale, late):
        """Return the bring-up's output for this tick, or None when it has just ended (the
        policy passed the reset checks while the default pose was held: the caller forwards
        it now; or a target the filter rejected: the caller's safe sequence)."""
        b = self.bringup
        self.stage.accrue(now, False)
        if b.update(now, LATE_STEP_PERIODS * self.cfg.period_s) == 'moving':
            reason = f'bring-up: moving to the default pose ({b.progress(now) * 100:.0f} %)'
        else:
            if stale is not None:
                wait = f'waiting for the policy ({stale})'
            elif late is not None:
                wait = late
            else:
                problems = self._reset_problems(now, still=False)
                if not problems:
                    b.end('done', now, 'the policy passed the checks and took over')
                    self.events.append((now, 'bring-up done: the policy takes over at the '
                                             'default pose'))
                    return None
                wait = 'the policy is not admitted yet: ' + '; '.join(problems)
            reason = f'bring-up: holding the default pose; {wait}'
        if late is not None:
            if b.last is None:
                return self._late_output(now, late)
            out = b.last      # nothing new computed from what may be old state
        else:
            position, velocity = b.sample(now)
            cmd = Command(np.arange(self.n), position=position, velocity=velocity)
            dt = self.rate_dt(now)
            rmax = b.limits.max_target_rate * self.scale
            rate = np.where(dt >= self.cfg.timeouts[self.mode], 0.0,
                            _clip(self.previous_rate, -rmax, rmax))
            try:
                out, clips = filter_command(b.limits, self.scale, cmd, self.q, self.dq,
                                            self.previous_target, dt, rate)
            except Rejected as exc:
                b.end('cancelled', now, f'filter rejected the bring-up target: {exc}')
                self.events.append((now, f'bring-up cancelled: {exc}'))
                return None
            b.clips += int(any(m.any() for m in clips.values()))
            self._remember_target(out, now, dt)
            b.last = out
        self.hold_position = None     # the robot moved: a later hold captures it anew
        self.safe_reason = reason
        return Output(list(self.names), out.position.copy(), out.velocity.copy(), None, True,
                      reason, bringup=True)

    def _remember_target(self, out, now, dt, src=None, cmd=None):
        if out.position is None:
            return
        i = out.index
        before = self.previous_target[i]
        moved = ~(before == out.position)      # NaN (no previous target) counts as moved
        step_dt = np.asarray(dt, dtype=float)
        step_dt = step_dt[i] if step_dt.ndim else np.full(i.size, float(step_dt))
        with np.errstate(divide='ignore', invalid='ignore'):
            rate = np.where(np.isfinite(before) & (step_dt > 0),
                            (out.position - before) / np.where(step_dt > 0, step_dt, 1.0),
                            np.nan)
        self.previous_rate[i[moved]] = rate[moved]
        self.target_changed[i[moved]] = now
        if src is None or cmd is None or cmd.position is None:
            self.target_changed_src[i[moved]] = np.nan
        else:
            # Where the target now stands on the source's clock: at the command's stamp when
            # it reached it from a target that had reached the one before; else (it had to
            # catch up, or still has) the stamp's clock run on to now.
            stamp, running = src
            reached = out.position == cmd.position
            if moved.any():
                at = np.where(self.target_lagging[i] | ~reached, running, stamp)
                self.target_changed_src[i[moved]] = at[moved]
            self.target_lagging[i] = ~reached
        self.previous_target[i] = out.position

    def _forget_targets(self):
        self.previous_target[:] = np.nan
        self.previous_rate[:] = np.nan
        self.target_changed_src[:] = np.nan
        self.target_lagging[:] = False
        self.last_forward = None

    def _late_output(self, now, reason):
        """A late tick: repeat the last output unchanged (what the driver already executes),
        compute nothing new from what may be old state; without one, the safe mode output."""
        self.stage.accrue(now, False)
        if self.last_forward is None:
            return self._safe_output(now, reason)
        out = self.last_forward[1]
        self.safe_reason = f'repeating the last output ({reason})'
        return Output([self.names[i] for i in out.index], out.position, out.velocity,
                      out.effort, True, self.safe_reason)

    def _not_forwarding(self, now, reason, fault=None, recover=True):
        """Return the safe sequence's output while nothing may be forwarded (not latched).

        Within `stale_hold_s` of the last forwarded output the policy's last target is held,
        re-filtered with the newest state at the stage's limits; after that (or without a
        last target, or for SysID) the safe mode output. A spell that outlasts the hold is a
        stage fault of `fault` kind, and forwarding then restarts through the reset checks.
        """
        self.stage.accrue(now, False)
        if self.spell is None:
            self.spell = {'since': now, 'hold': False, 'faulted': False}
        grace = self.cfg.stale_hold_s
        if (grace > 0 and self.mode == 'policy' and self.last_forward is not None
                and not self.recover and now - self.last_forward[0] <= grace):
            last = self.last_forward[1]
            try:
                out, _ = filter_command(self.limits['policy'], self.scale, last, self.q, self.dq,
                                        self.previous_target, 0.0)
            except Rejected:
                out = None
            if out is not None:
                if not self.spell['hold']:
                    self.spell['hold'] = True
                    self.grace_holds += 1
                    self.events.append((now, f'holding the last target for up to '
                                             f'{grace * 1e3:.0f} ms: {reason}'))
                self.safe_reason = f'holding the last target ({reason})'
                return Output([self.names[i] for i in out.index], out.position, out.velocity,
                              out.effort, True, self.safe_reason)
        if fault is not None and not self.spell['faulted'] and self.mode == 'policy':
            self.spell['faulted'] = True
            self._stage_fault(fault, now, reason)
        if recover:
            self.recover = True
        return self._safe_output(now, reason)


    def _stage_fault(self, kind, now, detail):
        t = self.stage.fault(kind, now, detail)
        if t is not None:
            self.events.append((now, f'stage {t["from"]:.2f} -> {t["to"]:.2f} ({t["cause"]})'))

    def _safe_output(self, now, reason):
        self.safe_reason = reason
        self._forget_targets()
        zeros = np.zeros(self.n)
        mode = self.cfg.safe_mode
        if mode == 'hold' and self.q is not None:
            if self.hold_position is None:
                self.hold_position = self.q.copy()
            cmd = Command(np.arange(self.n), position=self.hold_position.copy())
            try:
                # The full torque limit, whatever the stage: a robot held at 10 % of its
                # torque would sag or drop (the torque rule still bounds the hold).
                out, _ = filter_command(self.limits[self.mode], 1.0, cmd, self.q, self.dq,
                                        self.hold_position, 0.0)
                return Output(list(self.names), out.position, zeros, None, True, reason)
            except Rejected:
                mode = 'damping'
        if mode == 'zero_torque':
            return Output(list(self.names), None, None, zeros, True, reason)
        return Output(list(self.names), None, zeros, None, True, reason)

    def _names(self, mask):
        return [self.names[i] for i in np.flatnonzero(mask)]

    def _motion_figures(self, cmd, clips, dt, rate, limits):
        """For a rate or acceleration clip: what the command asked of the first such joint
        (the step's rate over the time allowed, the target's previous rate, the limits), so
        an operator can tell a command too fast from a step measured over too short a time."""
        moving = clips['rate'] | clips['acceleration']
        if cmd.position is None or not moving.any():
            return ''
        k = int(np.argmax(moving))
        j = int(cmd.index[k])
        step_dt = float(np.asarray(dt, dtype=float)[j]) if np.ndim(dt) else float(dt)
        prev = self.previous_target[j]
        if not np.isfinite(prev) or step_dt <= 0:
            return ''
        asked = (float(cmd.position[k]) - prev) / step_dt
        return (f' (asked {asked:.3g} rad/s over {step_dt * 1e3:.3g} ms, previous '
                f'{float(rate[j]):.3g} rad/s; limits {limits.max_target_rate[j] * self.scale:.3g}'
                f' rad/s, {limits.max_target_accel[j] * self.scale:.3g} rad/s^2)')

    def _names_idx(self, idx):
        return [self.names[i] for i in idx]

    # -- reporting ---------------------------------------------------------------------------
    def status(self, now):
        """Return the state an operator needs, as plain data (safety/state, diagnostics)."""
        ages = {}
        for k, dog in self.dogs.items():
            if k == 'imu' and not self.cfg.use_imu:
                continue
            s, a = dog.ages(now)
            ages[k] = {'stamp_age_ms': None if math.isinf(s) else round(s * 1e3, 2),
                       'arrival_age_ms': None if math.isinf(a) else round(a * 1e3, 2),
                       'received': dog.received, 'watchdog_trips': dog.trips,
                       'trip_past_timeout_ms': (None if dog.late_at_trip is None
                                                else round(dog.late_at_trip * 1e3, 2))}
            if k in self.stamp_order:   # measured samples not used for their stamps
                o = self.stamp_order[k]
                ages[k].update(out_of_order=o['out_of_order'], from_future=o['from_future'],
                               same_stamp=o['same_stamp'])
        stage = self.stage.to_dict()
        stage['transitions'] = stage['transitions'][-10:]
        stage['clean_for_s'] = round(self.stage.clean_for(now), 3)
        stage['last_fault'] = self.stage.last_fault
        stage['dwell_needed_s'] = self.stage.dwell[self.stage.index]
        owner_age = (None if self.sysid_owner is None
                     else round((now - self.sysid_owner_seen) * 1e3, 1))
        return {
            'mode': self.mode,
            'estop': self.latched,
            'estop_cause': self.cause,
            'output': ('waiting' if self.safe_reason.startswith('waiting')
                       and not self.latched
                       else 'bringup' if self.bringup.active
                       else 'safe' if self.safe_reason else 'forwarding'),
            'safe_mode': self.cfg.safe_mode,
            'safe_reason': self.safe_reason,
            'stage': stage,
            'clips': {k: {n: int(c) for n, c in zip(self.names, v) if c}
                      for k, v in self.clips.items()},
            'clipped_outputs': self.clipped_outputs,
            'rejected': dict(self.rejected),
            'last_reject': self.last_reject,
            'state_rejected': self.state_rejected,
            'implausible_states': self.implausible,
            'last_implausible': self.last_implausible,
            'state_out_of_order': sum(o['out_of_order'] for o in self.stamp_order.values()),
            'state_from_future': sum(o['from_future'] for o in self.stamp_order.values()),
            'last_state_disorder': self.last_state_disorder,
            'estops': self.estops,
            'ticks': self.ticks,
            'late_ticks': self.late_ticks, 'slow_ticks': self.slow_ticks,
            'max_tick_gap_ms': round(self.max_tick_gap * 1e3, 2),
            'clock_jumps': self.clock_jumps,
            'grace_holds': self.grace_holds,
            'sysid_owner': self.sysid_owner,
            'sysid_owner_age_ms': owner_age,
            'sysid_owner_active': (self.sysid_owner is not None
                                   and owner_age <= self.cfg.sysid_release_s * 1e3),
            'foreign_sysid': self.foreign_sysid,
            'outputs_forwarded': self.outputs,
            # One output per tick slot (forward_input); each source against its declared rate.
            'deferred_inputs': self.deferred_inputs,
            'replaced_ticks': self.replaced_ticks,
            'commands': {s: {'declared_rate_hz': self.cfg.source_rate_hz[s],
                             'rate_hz': (None if self._rate_window[s][2] is None
                                         else round(self._rate_window[s][2], 1)),
                             'too_fast': self.too_fast[s], 'superseded': self.superseded[s],
                             'out_of_order': self.out_of_order[s],
                             'from_future': self.from_future[s],
                             'incomplete': self.incomplete[s]} for s in SOURCES},
            'inputs': ages,
            'tilt_deg': round(math.degrees(self.tilt), 2) if self.cfg.use_imu else None,
            'bringup': dict(self.bringup.to_dict(now, self.names, self.q),
                            configured=self.cfg.bringup_position is not None),
            'live_gap': self.live_gap.status(now),
        }

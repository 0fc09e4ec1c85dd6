"""The safety supervisor's logic, without ROS: inputs in, one safe output per tick.

`Supervisor` owns the limit filter, the stage machine, the watchdogs, the e-stop latch and the
mode (which command source is forwarded). The `safety_supervisor` node feeds it messages as
arrays and publishes what `tick()` returns. All times are seconds on one clock (ROS time in the
node, so sim time works).

Measured state is checked before it is used (`on_joint_state`): a sample with a duplicated
name, a missing joint, a non-finite value, a position outside the soft range by more than
`state_position_margin`, a velocity beyond `state_velocity_factor` times its limit, or a
position that moved further since the last accepted sample than that velocity allows, is
implausible: it is counted and never used, and `implausible_trip_count` of them in a row is a
sensor fault (e-stop, cause named).

Rules, in the order a tick applies them:

1. ROS time going back (a second /clock, a stepped system clock) -> e-stop, cause named.
2. no fresh `joint_states` yet -> no output at all (`waiting`); an e-stop still latches.
3. automatic e-stop trips (latched): `joint_states` stale (header stamp or arrival older than
   its timeout), `imu` stale or base tilt beyond `max_tilt_rad` (floating base), a joint faster
   than its `trip_velocity`, `reject_trip_count` rejected commands in a row from the selected
   source, `implausible_trip_count` implausible samples in a row.
4. e-stop latched -> the safe mode output (`damping`: kp=0, kd>0, i.e. no positions and zero
   velocity targets; `hold`: the position at the trip, at the full torque limit whatever the
   stage; `zero_torque`: zero effort).
5. the tick itself came more than `late_tick_periods` late and no joint state has arrived
   since the previous tick (a stalled process: its state may be old): the last output is
   repeated unchanged (what the driver already executes) and nothing new is computed; a
   stall longer than the `joint_states` timeout is an e-stop. A late tick with a new state
   is a slow process, not a stalled one: it computes as usual (counted: `slow_ticks`), so a
   loaded computer does not freeze the targets of a walking robot.
6. not forwarding, not latched: the selected source (`policy` or `sysid`) never sent a
   command or is stale, or forwarding would start (first command, or after a
   safe spell) with a command that fails the reset checks (`reset_tolerance`,
   `reset_velocity_tolerance`). The output is the safe sequence: for `stale_hold_s` after the
   last forwarded output the policy's last target is held (re-filtered with the new state; a
   walking robot keeps its stance through a brief hiccup: `grace_holds` counts it), then the
   safe mode output. Forwarding resumes when a fresh command arrives; after the safe mode
   output it must pass the reset checks first.
7. a bring-up (`go_default`, see simreal_ros.core.safety.bringup) owns the output while it
   moves to and holds the default pose: its targets, filtered with the current state at the
   stage's scale and limits tightened to `bringup.max_velocity`, instead of the safe sequence;
   a late tick repeats its last output. While it holds, a fresh policy command that passes
   the reset checks ends it (`done`) and is forwarded at once; while it moves, none does. An
   e-stop cancels it (`cancelled`), and a reset does not resume it.
8. otherwise its latest command is filtered (limits.filter_command) with the current state and
   the source's scale; every clip is counted.

Stages measure trust in the policy: the stage scale applies to `policy` commands, and limit
hits, stale (beyond the hold grace) or rejected commands of the policy are stage faults. Clean
dwell accrues only on ticks that forward the policy without a clip. `sysid` commands are designed
experiments inside their own, tighter limits (`sysid.*`), applied unscaled; their clips and
rejects are counted and reported but do not demote the policy's stage. Automatic e-stops
(joint_states stale, velocity or tilt trips, repeated rejects) are faults of the robot and
demote in either mode; an operator's e-stop demotes only when `demote_on` lists `operator`.

The SysID path is granted to one experiment at a time: SysID commands carry their node's name
in `header.frame_id`; the first sender holds the grant until its commands have been stale for
`sysid_release_s` or the mode goes back to `policy`, and commands of any other sender are
rejected (counted as `foreign_sysid`, never forwarded, not an e-stop: another node's mistake is
not the running experiment's fault).

The live reality gap (simreal_ros.core.safety.live_gap, fed by `on_live_gap`) is one more
condition of a promotion, requested or automatic, and its sustained drift one more cause of a
demotion or an e-stop (`live_gap_drift_action`); it never raises a stage.
"""
from dataclasses import dataclass, field
import math

import numpy as np

from simreal_ros.core.config import ConfigError
from simreal_ros.core.safety.bringup import Bringup, bringup_limits
from simreal_ros.core.safety.live_gap import LiveGapGate
from simreal_ros.core.safety.limits import (KINDS, Command, Limits, Rejected, _clip,
                                            count_clips, filter_command, implied_torque,
                                            validate_command)
from simreal_ros.core.safety.stages import DEFAULT_STAGES, StageMachine

SAFE_MODES = ('damping', 'hold', 'zero_torque')
FAULT_KINDS = ('limit', 'watchdog', 'estop', 'rejected', 'operator')
SOURCES = ('policy', 'sysid')
INPUTS = ('joint_states', 'imu') + SOURCES


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


def _per_joint(params, key, n, source):
    value = params.get(key)
    arr = np.asarray(value if value is not None else [], dtype=float).reshape(-1)
    if arr.size == 1:
        arr = np.full(n, float(arr[0]))
    if arr.size != n or not np.isfinite(arr).all() or np.any(arr <= 0):
        raise ConfigError(f'{source}.{key}: expected {n} finite values > 0 (one per joint), got '
                          f'{arr.tolist()}')
    return arr


@dataclass
class SupervisorConfig:
    """Everything the supervisor needs, validated; build with from_params()."""

    limits: Limits
    sysid_limits: Limits
    trip_velocity: np.ndarray
    period_s: float = 0.002
    stages: tuple = DEFAULT_STAGES
    stage_dwell_s: tuple = (5.0,)
    auto_advance: bool = False
    demote_on: tuple = ('limit', 'watchdog', 'estop', 'rejected')  # + 'operator'
    demote_holdoff_s: float = 0.5
    stage_file: str = ''
    resume_stage: bool = False
    safe_mode: str = 'damping'
    timeouts: dict = field(default_factory=lambda: {'policy': 0.06, 'sysid': 0.06,
                                                    'joint_states': 0.05, 'imu': 0.05})
    check_stamps: bool = True
    use_imu: bool = False
    max_tilt_rad: float = 0.0
    reset_tolerance: float = 0.1
    reset_velocity_tolerance: float = 0.5
    reject_trip_count: int = 10
    mode: str = 'policy'
    state_position_margin: float = 0.3
    state_velocity_factor: float = 3.0
    implausible_trip_count: int = 5
    late_tick_periods: float = 5.0
    stale_hold_s: float = 0.0
    sysid_release_s: float = 1.0
    bringup_position: np.ndarray = None     # the default pose; None = go_default refused
    bringup_max_velocity: np.ndarray = None  # rad/s per joint (default 0.5)
    bringup_min_duration_s: float = 2.0
    live_gap_require: str = 'auto'          # core.safety.live_gap: auto, true, false
    live_gap_max_age_s: float = 2.0
    live_gap_drift_action: str = 'hold'     # hold, demote, estop
    live_gap_drift_s: float = 3.0

    @classmethod
    def from_params(cls, p, source='safety_supervisor'):
        """Build from flat node parameters (names as in the parameter file)."""
        names = list(p.get('joint_names') or [])
        limits = Limits.from_mapping(names, {k: p.get(k) for k in (
            'kp', 'kd', 'position_lower', 'position_upper', 'velocity_limit', 'torque_limit',
            'max_target_rate', 'max_target_accel')}, source)
        scale = float(p.get('sysid.limit_scale', 0.5))
        if not 0.0 < scale <= 1.0:
            raise ConfigError(f'{source}.sysid.limit_scale must be in (0, 1], got {scale}')
        sysid = limits.scaled_speed(scale).tightened(
            {k: p.get('sysid.' + k) for k in ('position_lower', 'position_upper',
                                              'velocity_limit', 'torque_limit',
                                              'max_target_rate', 'max_target_accel')},
            source + '.sysid')
        trip = _per_joint(p, 'trip_velocity', len(names), source)
        safe_mode = p.get('safe_mode', 'damping')
        if safe_mode not in SAFE_MODES:
            raise ConfigError(f'{source}.safe_mode must be one of {SAFE_MODES}, got '
                              f'{safe_mode!r}')
        mode = p.get('mode', 'policy')
        if mode not in SOURCES:
            raise ConfigError(f'{source}.mode must be one of {SOURCES}, got {mode!r}')
        demote_on = tuple(p.get('demote_on', cls.demote_on))
        bad = set(demote_on) - set(FAULT_KINDS)
        if bad:
            raise ConfigError(f'{source}.demote_on: unknown fault kinds {sorted(bad)}; use '
                              f'{", ".join(FAULT_KINDS)}')
        timeouts = {k: float(p.get(f'{k}_timeout_s', v)) for k, v in
                    cls.__dataclass_fields__['timeouts'].default_factory().items()}
        for k, v in timeouts.items():
            if not (v > 0 and math.isfinite(v)):
                raise ConfigError(f'{source}.{k}_timeout_s must be > 0, got {v}')
        rate = float(p.get('rate_hz', 500.0))
        if not rate > 0:
            raise ConfigError(f'{source}.rate_hz must be > 0, got {rate}')
        extra = {}
        for key, low, cast in (('state_position_margin', 0.0, float),
                               ('state_velocity_factor', 1.0, float),
                               ('implausible_trip_count', 1, int),
                               ('late_tick_periods', 1.0, float),
                               ('stale_hold_s', 0.0, float),
                               ('sysid_release_s', 0.0, float),
                               ('reset_velocity_tolerance', 0.0, float)):
            value = cast(p.get(key, cls.__dataclass_fields__[key].default))
            if not (math.isfinite(value) and value >= low):
                raise ConfigError(f'{source}.{key} must be >= {low}, got {value}')
            extra[key] = value
        extra.update(_bringup_params(p, names, limits, source))
        extra.update(live_gap_require=str(p.get('live_gap.require', 'auto')),
                     live_gap_max_age_s=float(p.get('live_gap.max_age_s', 2.0)),
                     live_gap_drift_action=str(p.get('live_gap.drift_action', 'hold')),
                     live_gap_drift_s=float(p.get('live_gap.drift_s', 3.0)))
        LiveGapGate(extra['live_gap_require'], extra['live_gap_max_age_s'],
                    extra['live_gap_drift_action'], extra['live_gap_drift_s'],
                    source=source)   # validates, naming the parameter
        return cls(limits=limits, sysid_limits=sysid, trip_velocity=trip, period_s=1.0 / rate,
                   stages=tuple(p.get('stages') or DEFAULT_STAGES),
                   stage_dwell_s=tuple(p.get('stage_dwell_s') or (5.0,)),
                   auto_advance=bool(p.get('auto_advance', False)), demote_on=demote_on,
                   demote_holdoff_s=float(p.get('demote_holdoff_s', 0.5)),
                   stage_file=str(p.get('stage_file', '') or ''),
                   resume_stage=bool(p.get('resume_stage', False)), safe_mode=safe_mode,
                   timeouts=timeouts, check_stamps=bool(p.get('check_stamps', True)),
                   use_imu=bool(p.get('use_imu', False)),
                   max_tilt_rad=float(p.get('max_tilt_rad', 0.0)),
                   reset_tolerance=float(p.get('reset_tolerance', 0.1)),
                   reject_trip_count=int(p.get('reject_trip_count', 10)), mode=mode, **extra)


# A bring-up's trajectory advances at most this many periods per tick (bringup.Bringup.update).
LATE_STEP_PERIODS = 2.0


def _bringup_params(p, names, limits, source):
    """Validate the bring-up parameters (`bringup.*`); ConfigError naming the parameter."""
    n = len(names)
    raw = p.get('bringup.default_position')
    pose = np.asarray(raw if raw is not None else [], dtype=float).reshape(-1)
    if pose.size == 0:
        pose = None
    elif pose.size != n or not np.isfinite(pose).all():
        raise ConfigError(f'{source}.bringup.default_position: expected {n} finite values '
                          f'(one per joint, {list(names)}) or none, got {pose.tolist()}')
    else:
        outside = (pose < limits.position_lower) | (pose > limits.position_upper)
        if outside.any():
            bad = [names[i] for i in np.flatnonzero(outside)]
            raise ConfigError(
                f'{source}.bringup.default_position of {bad} {pose[outside].tolist()} is outside '
                'the soft limits position_lower/position_upper: the bring-up could not reach it')
    raw = p.get('bringup.max_velocity')
    if raw is None or len(np.atleast_1d(raw)) == 0:
        raw = [0.5]
    speed = _per_joint({'bringup.max_velocity': raw}, 'bringup.max_velocity', n, source)
    duration = float(p.get('bringup.min_duration_s', 2.0))
    if not (math.isfinite(duration) and duration >= 0.0):
        raise ConfigError(f'{source}.bringup.min_duration_s must be >= 0, got {duration}')
    return {'bringup_position': pose, 'bringup_max_velocity': speed,
            'bringup_min_duration_s': duration}


def tilt_of(quaternion_wxyz):
    """Return the angle (rad) between the body z axis and the world z axis."""
    w, x, y, z = (float(v) for v in quaternion_wxyz)
    norm2 = w * w + x * x + y * y + z * z
    cos_tilt = 1.0 - 2.0 * (x * x + y * y) / norm2
    return math.acos(min(1.0, max(-1.0, cos_tilt)))


class Supervisor:
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
        self.latched = False
        self.cause = ''
        self.hold_position = None
        self.safe_reason = 'waiting for joint_states'
        self.clips = {k: np.zeros(self.n, dtype=int) for k in KINDS}
        self.clipped_outputs = 0
        self.rejected = {s: 0 for s in SOURCES}
        self.rejected_in_row = {s: 0 for s in SOURCES}
        self.last_reject = ''
        self.state_rejected = 0
        self.implausible = 0
        self.implausible_in_row = 0
        self.last_implausible = ''
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

    # -- inputs -------------------------------------------------------------------------------
    def on_joint_state(self, names, position, velocity, stamp, now):
        """Take a joint state; return (ok, reason). An implausible one is never used."""
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
        if self.q is not None:
            dt = max(abs(float(stamp) - self.state_stamp) if self.cfg.check_stamps
                     else float(now) - dog.arrival, 0.0)
            # As far as the fastest plausible velocity moves a joint in the time between the
            # samples, plus one period of it (a sample is taken at some instant of its period).
            reach = vmax * (dt + self.cfg.period_s)
            jump = np.abs(q - self.q) > reach
            if jump.any():
                return (f'joint_states position of {self._names(jump)} jumped '
                        f'{np.abs(q - self.q)[jump].round(3).tolist()} rad in '
                        f'{dt * 1e3:.1f} ms, further than the joint can move'), True
        if self.q is None and dog.check_stamp and abs(now - stamp) > dog.timeout:
            # Supervision starts with a fresh reading; an old one delivered at start-up (DDS
            # matching, a slow first tick) is not a stream that stopped.
            return (f'joint_states at start-up is {(now - stamp) * 1e3:.0f} ms old (timeout '
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
        if not dog.ever and dog.check_stamp and abs(now - stamp) > dog.timeout:
            self.state_rejected += 1
            return False, f'imu at start-up is {(now - stamp) * 1e3:.0f} ms old; waiting'
        self.tilt = tilt_of(o)
        dog.feed(stamp, now)
        return True, ''

    def on_command(self, source, names, position, velocity, effort, stamp, now, sender=''):
        """Validate a command of `source`; keep it when valid. Return (ok, reason).

        `sender` names the node (header.frame_id): the SysID path is granted to one sender.
        """
        if source == 'sysid':
            foreign = self._sysid_grant(str(sender), now)
            if foreign:
                self.foreign_sysid += 1
                self.last_reject = f'sysid/command from {sender!r}: {foreign}'
                return False, foreign
        try:
            cmd = validate_command(names, position, velocity, effort, self.names)
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
        self.rejected_in_row[source] = 0
        self.commands[source] = cmd
        self.dogs[source].feed(stamp, now)
        return True, ''

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
    def rate_dt(self, now):
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
        since = _clip(now - self.target_changed, 0.0, cap)
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

    def tick(self, now, count=True, wall=None):
        """Return this tick's Output, or None when nothing may be published yet.

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
            return self._not_forwarding(now, f'{self.mode} stale: {stale}', fault='watchdog')
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
        cmd = self.commands[self.mode]
        limits = self.limits[self.mode]
        dt = self.rate_dt(now)
        # The target's rate for the acceleration limit: a target that has stood still for a
        # whole source timeout is at rest, and no target moves faster than the rate limit
        # (a torque-rule shift within a fraction of a tick is not a rate). Without both, an
        # old large rate opposing the command held the target still for good.
        rmax = limits.max_target_rate * self.scale
        rate = np.where(dt >= self.cfg.timeouts[self.mode], 0.0,
                        _clip(self.previous_rate, -rmax, rmax))
        try:
            out, clips = filter_command(limits, self.scale, cmd, self.q, self.dq,
                                        self.previous_target, dt, rate)
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
                                      np.stack(list(clips.values())), axis=0)])))
        self._remember_target(out, now, dt)
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

    def _remember_target(self, out, now, dt):
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
        self.previous_target[i] = out.position

    def _forget_targets(self):
        self.previous_target[:] = np.nan
        self.previous_rate[:] = np.nan
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
        stage = self.stage.to_dict()
        stage['transitions'] = stage['transitions'][-10:]
        stage['clean_for_s'] = round(self.stage.clean_for(now), 3)
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
            'inputs': ages,
            'tilt_deg': round(math.degrees(self.tilt), 2) if self.cfg.use_imu else None,
            'bringup': dict(self.bringup.to_dict(now, self.names, self.q),
                            configured=self.cfg.bringup_position is not None),
            'live_gap': self.live_gap.status(now),
        }

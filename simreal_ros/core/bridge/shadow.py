"""Live reality gap: the identified model shadows the robot while it runs (no ROS).

`ShadowGap` keeps the last seconds of what the supervisor sent (`hardware/command`, by name)
and what the robot measured (`joint_states`), and on each `evaluate(now)` replays one window
of `window_s` seconds through the identified MuJoCo model (`Replayer`), starting from the
measured state at the window's start, and scores it with the offline score's function
(`gap.evaluate`: NRMSE after cross-correlation alignment). Commands carry header stamps like
the recordings `sim_bridge/evaluate_gap` reads, so the identified latency means the same here.

Per joint the result is the *gap over the floor*: at the delay that fits best (the offline
score's whole-sample alignment, refined to 0.25 ms: a constant sub-sample delay the identified
latency misses is not drift), the window's NRMSE divided by the NRMSE a perfect simulator would
score on that window, with the sensor noise measured offline (the
noise std per channel estimated on the evaluated recording, `set_floor`). That is the RMS
replay error in units of the offline sensor noise, pooled over position and velocity as the
offline score pools them (mean of the two); it does not blow up when the robot barely moves,
as a plain NRMSE does. Before an offline floor exists the noise is estimated on the live data
(the same estimator; `floor_source: live`).

Which commands are replayed (`command_source` in the document): what the driver applied
(`driver/applied_command`, `add_applied`: one message per command it handed to the actuators,
stamped on the robot's clock when it did) while that stream covers the window, else what the
supervisor sent (`hardware/command`, `add_command`), saying why (`command_source_reason`). A
command that reaches the driver after its loop has computed that period is applied one period
later than it was sent: replayed at its send time it counted as gap (issue 41: 1.48 x the floor
on a nominal run; 1.03 at the applied times). The identified latency was measured from the
commands as sent, so it holds the constant part of the transport too: the applied stream is
replayed `latency_s - offset` after each apply time, `offset` the median of (apply stamp - send
time) over commands matched by content (never below zero delay); a latency measured after the
driver applied the commands (SysID on the plant itself: `transport_in_latency` False) is
replayed as it is. Content, not a stamp carried along: a driver that writes its robot's
commands at its own rate (unitree_bridge) repeats one command many times and has no field for
another stamp; the first echo of each new command's values is its apply time. Input rejected
(a joint unknown, a length wrong, non-finite, out of order) is counted (`rejected`); an applied
stamp at most `APPLIED_SKEW_S` before the previous one is clock jitter, not disorder: replayed
at the previous one's time, in arrival order, and counted (`applied_clamped`).

Status per joint: OK, WARN above `warn_ratio`, ERROR once above `error_ratio` in
`persist_windows` consecutive windows (one noisy window is not drift; windows overlap, so the
default 4 windows 0.5 s apart need the gap over 3 s of data, longer than any one window: a
single glitch cannot make an ERROR). An ERROR holds until the joint's gap has been at most
`warn_ratio` in `persist_windows` windows in a row (hysteresis: drift does not flicker back
to WARN on one better window). `unknown` when there is no model value (too little data,
no commands, a hole in the data longer than `max_gap_s`, a replay that diverged): never a
pass.
"""
from collections import deque
from dataclasses import dataclass
import math
import time

import numpy as np

from simreal_ros.core.bridge.gap import _overlap, evaluate, noise_std
from simreal_ros.core.config import ConfigError
from simreal_ros.core.sysid.estimators import Recording

LEVELS = ('OK', 'WARN', 'ERROR')
UNKNOWN = 'unknown'
SENT = 'hardware/command'
APPLIED = 'driver/applied_command'
MATCH_KEEP = 4000     # sent commands remembered for matching their applied echo
OFFSETS_KEEP = 1000   # matched (apply - send) offsets whose median is the transport delay
APPLIED_SKEW_S = 0.001   # an applied stamp this much before the previous one is clock jitter


@dataclass
class ShadowConfig:
    """How the shadow scores: window, thresholds relative to the noise floor, persistence."""

    window_s: float = 1.5
    warn_ratio: float = 2.0
    error_ratio: float = 3.0
    persist_windows: int = 4
    max_shift_s: float = 0.02
    max_gap_s: float = 0.05    # a window with a longer hole in joint_states is not scored

    def validate(self, source='sim_bridge.shadow'):
        checks = ((self.window_s, 'window_s', 0.2, 30.0), (self.warn_ratio, 'warn_ratio', 1.0,
                                                           1e6),
                  (self.error_ratio, 'error_ratio', 1.0, 1e6),
                  (self.max_shift_s, 'max_shift_s', 0.0, 1.0),
                  (self.max_gap_s, 'max_gap_s', 0.001, 10.0))
        for value, name, lo, hi in checks:
            if not (math.isfinite(value) and lo <= value <= hi):
                raise ConfigError(f'{source}.{name} must be in [{lo}, {hi}], got {value}')
        if self.error_ratio < self.warn_ratio:
            raise ConfigError(f'{source}.error_ratio ({self.error_ratio}) must be >= '
                              f'warn_ratio ({self.warn_ratio})')
        if int(self.persist_windows) < 1:
            raise ConfigError(f'{source}.persist_windows must be >= 1, got '
                              f'{self.persist_windows}')
        return self


class ShadowGap:
    """Window buffers, replay through the identified model, per-joint status with persistence."""

    def __init__(self, replayer, cfg=None, rate_hz=500.0):
        self.replayer = replayer
        self.names = list(replayer.names)
        self.index = {n: i for i, n in enumerate(self.names)}
        self.cfg = (cfg or ShadowConfig()).validate()
        keep = int(math.ceil((self.cfg.window_s + 1.0) * rate_hz * 2))
        self.states = deque(maxlen=keep)     # (t, q, dq)
        self.commands = deque(maxlen=keep)   # (t, position, velocity, effort): full rows
        self.applied = deque(maxlen=keep)    # the same, as the driver applied them
        n = len(self.names)
        # the command each joint obeys (as read_mcap), as sent and as applied
        self._rows = {SENT: [np.full(n, np.nan), np.full(n, np.nan), np.zeros(n)],
                      APPLIED: [np.full(n, np.nan), np.full(n, np.nan), np.zeros(n)]}
        self._sent_at = {}                   # content key -> send time of a new command
        self._sent_key = None                # content of the last sent row
        self._applied_key = None             # content of the last applied row
        self.offsets = deque(maxlen=OFFSETS_KEEP)   # apply stamp - send time, matched
        self.params = None
        self.model = None
        self.identified = False
        self.sigma = None                    # {'position': (n,), 'velocity': (n,)} noise std
        self.floor_source = 'none'
        self._live_sigma = []
        self.over = np.zeros(n, dtype=int)   # consecutive windows above error_ratio
        self.under = np.zeros(n, dtype=int)  # consecutive windows at most warn_ratio
        self.error = np.zeros(n, dtype=bool)  # latched ERROR per joint (hysteresis)
        self.windows = 0
        self.cpu_s = 0.0
        self.rejected = 0
        self.clamped = 0                     # applied stamps a hair early, kept in order
        self.last = None
        self.source, self.source_why, self.shift = SENT, f'no {APPLIED} received', 0.0
        self.applied_off = ''                # why the applied stream is not used, if set
        # latency_s was measured from the commands as sent (it holds the transport to the
        # driver, which the applied stream has already had): False for a SysID on the plant
        self.transport_in_latency = True

    # -- inputs ---------------------------------------------------------------------------
    def set_params(self, params, identified):
        """Use these JointParams from now on (compiled once here, not per window)."""
        self.params = params.copy()
        self.model = self.replayer.model(self.params)
        self.identified = bool(identified)
        self._clear()

    def _clear(self):
        self.over[:] = 0
        self.under[:] = 0
        self.error[:] = False

    def set_floor(self, position_std, velocity_std, source='offline'):
        """The sensor noise std per joint (rad, rad/s) measured offline on a recording."""
        sig = {'position': np.asarray(position_std, float),
               'velocity': np.asarray(velocity_std, float)}
        for key, v in sig.items():
            if v.shape != (len(self.names),) or not np.all(np.isfinite(v)) or np.any(v <= 0):
                raise ValueError(f'noise floor {key}: expected {len(self.names)} finite values '
                                 f'> 0, got {v.tolist()}')
        self.sigma = sig
        self.floor_source = source

    def add_state(self, t, names, position, velocity):
        """One joint_states sample (by name); a sample lacking a joint or non-finite is skipped."""
        n = len(self.names)
        q, dq = np.full(n, np.nan), np.full(n, np.nan)
        if len(position) != len(names) or len(velocity) != len(names):
            self.rejected += 1
            return False
        for k, name in enumerate(names):
            i = self.index.get(name)
            if i is not None:
                q[i], dq[i] = position[k], velocity[k]
        if not (np.all(np.isfinite(q)) and np.all(np.isfinite(dq)) and math.isfinite(t)):
            self.rejected += 1
            return False
        if self.states and t <= self.states[-1][0]:
            self.rejected += 1
            return False
        self.states.append((float(t), q, dq))
        return True

    def add_command(self, t, names, position=(), velocity=(), effort=()):
        """One hardware/command message, read as the driver and `read_mcap` read it."""
        row = self._row(SENT, t, names, position, velocity, effort)
        if row is None:
            return False
        self.commands.append(row)
        key = _content(row)
        if key != self._sent_key:            # new values: their first send
            self._sent_at.pop(key, None)
            self._sent_at[key] = row[0]
            while len(self._sent_at) > MATCH_KEEP:
                del self._sent_at[next(iter(self._sent_at))]
        self._sent_key = key
        return True

    def add_applied(self, t, names, position=(), velocity=(), effort=()):
        """One driver/applied_command message: a command as the driver handed it on, stamped
        then on the robot's clock. Its first echo of a sent command's values gives one
        (apply - send) offset."""
        row = self._row(APPLIED, t, names, position, velocity, effort)
        if row is None:
            return False
        if self.applied and row[0] < self.applied[-1][0]:
            if self.applied[-1][0] - row[0] > APPLIED_SKEW_S:
                self.rejected += 1           # out of order: the window stays in order
                return False
            # A stamp a hair before the previous one (a driver's clock read twice for one
            # instant): the driver applied this one after it, as it arrived, and obeys it. It
            # is replayed at the previous one's time, and counted; dropped, the replay kept
            # the older target (sim_robot's 1 us offsets: 7 % of a loaded demo's commands).
            row = (self.applied[-1][0],) + row[1:]
            self.clamped += 1
        self.applied.append(row)
        key = _content(row)
        if key != self._applied_key:
            sent = self._sent_at.pop(key, None)
            if sent is not None:
                self.offsets.append(row[0] - sent)
        self._applied_key = key
        return True

    def _row(self, stream, t, names, position, velocity, effort):
        idx = [self.index.get(n) for n in names]
        k = len(idx)
        if not k or any(i is None for i in idx) or not math.isfinite(t) or \
                any(len(a) not in (0, k) for a in (position, velocity, effort)):
            self.rejected += 1
            return None
        pos, vel, eff = self._rows[stream]
        has_p, has_v = len(position) == k, len(velocity) == k
        pos[idx] = np.asarray(position, float) if has_p else np.nan
        vel[idx] = (np.asarray(velocity, float) if has_v else (0.0 if has_p else np.nan))
        eff[idx] = np.asarray(effort, float) if len(effort) == k else 0.0
        return (float(t), pos.copy(), vel.copy(), eff.copy())

    def offset(self):
        """The median (apply stamp - send time) of the matched commands (s), or None."""
        return float(np.median(self.offsets)) if self.offsets else None

    def _source(self, t_start, t_end):
        """(rows, replay shift s, source, why): the applied stream while it covers the window
        and its offset is known, else the sent one (why says what the applied stream lacks)."""
        delay = float(self.params.latency_s) if self.params is not None else 0.0
        if self.applied_off:
            return self.commands, 0.0, SENT, self.applied_off
        if not self.applied:
            return self.commands, 0.0, SENT, f'no {APPLIED} received'
        offset = self.offset()
        last = self.applied[-1][0]
        if last < t_end - 2 * self.cfg.max_gap_s:
            return self.commands, 0.0, SENT, (
                f'{APPLIED} stopped {t_end - last:.2f} s before the newest joint_states '
                f'(the driver no longer reports what it applies)')
        if self.applied[0][0] > t_start:
            return self.commands, 0.0, SENT, f'{APPLIED} does not cover the window yet'
        if offset is None:
            return self.commands, 0.0, SENT, (f'no {APPLIED} matched a {SENT} yet (its '
                                              'transport delay is unknown)')
        # Replayed latency_s - offset after the apply time, never before it; latency_s as it
        # is when it was measured after the driver applied the commands (no transport in it).
        shift = min(max(offset, 0.0), delay) if self.transport_in_latency else 0.0
        return self.applied, shift, APPLIED, ''

    # -- one window -----------------------------------------------------------------------
    def window(self):
        """The newest `window_s` of data as a Recording (times from its start), or (None, why)."""
        if not self.states:
            return None, 'no joint_states yet'
        if not self.commands:
            return None, 'no hardware/command yet (nothing is driving the robot)'
        t_end = self.states[-1][0]
        t_start = t_end - self.cfg.window_s
        if self.states[0][0] > t_start:
            return None, (f'{t_end - self.states[0][0]:.2f} s of joint_states so far; a window '
                          f'needs {self.cfg.window_s:.2f} s')
        source_rows, shift, self.source, self.source_why = self._source(t_start, t_end)
        self.shift = shift
        rows = [s for s in self.states if s[0] >= t_start]
        cmds = [(c[0] - shift,) + tuple(c[1:]) for c in source_rows if c[0] - shift <= t_end]
        lead = t_start - (float(self.params.latency_s) - shift if self.params else 0.0)
        before = [c for c in cmds if c[0] <= lead]
        cmds = ([before[-1]] if before else []) + [c for c in cmds if c[0] > lead]
        if not cmds or cmds[-1][0] < t_start:
            return None, (f'no {self.source} within the window (nothing is driving the '
                          'robot)')
        if np.any(np.isnan(cmds[-1][1]) & np.isnan(cmds[-1][2])):
            return None, 'not every joint has been commanded yet'
        t0 = rows[0][0]
        t = np.array([r[0] for r in rows]) - t0
        holes = np.diff(np.concatenate([t, [t_end - t0]]))
        cmd_holes = np.diff([max(c[0], t_start) for c in cmds] + [t_end])
        if holes.max(initial=0.0) > self.cfg.max_gap_s or \
                cmd_holes.max(initial=0.0) > 2 * self.cfg.max_gap_s:
            worst = max(holes.max(initial=0.0), cmd_holes.max(initial=0.0))
            return None, (f'a {1e3 * worst:.0f} ms hole in joint_states or {self.source} '
                          f'within the window (max_gap_s {self.cfg.max_gap_s:g}): not scored')
        q = np.array([r[1] for r in rows])
        dq = np.array([r[2] for r in rows])
        ct = np.maximum(np.array([c[0] for c in cmds]) - t0, -1.0)
        q, dq = q.copy(), dq.copy()
        q[0], dq[0] = _start_state(t, q, dq)
        rec = Recording(self.names, t, q, dq, np.zeros_like(q), ct,
                        np.array([c[1] for c in cmds]), np.array([c[2] for c in cmds]),
                        np.array([c[3] for c in cmds]))
        rec.t_end = t_end
        return rec, ''

    def evaluate(self, now=None):
        """Replay the newest window and score it; return the published document (a dict)."""
        started = time.process_time()
        doc = self._evaluate(now)
        self.cpu_s += time.process_time() - started
        doc['windows'] = self.windows
        doc['rejected'] = self.rejected
        doc['applied_clamped'] = self.clamped
        doc['command_source'] = self.source
        if self.source_why:
            doc['command_source_reason'] = self.source_why
        offset = self.offset()
        doc['applied_offset_s'] = offset
        doc['replay_delay_s'] = (None if self.params is None else
                                 float(self.params.latency_s) - self.shift)
        self.last = doc
        return doc

    def _unknown(self, now, why):
        self.over[:] = 0   # an ERROR holds through unknown windows; a new one starts afresh
        return {'stamp': now, 'status': UNKNOWN, 'reason': why, 'identified': self.identified,
                'joints': {n: {'status': UNKNOWN} for n in self.names},
                'floor_source': self.floor_source, 'worst_joint': None}

    def _evaluate(self, now):
        if self.model is None:
            return self._unknown(now, 'no model parameters yet')
        rec, why = self.window()
        if rec is None:
            return self._unknown(now, why)
        stamp = rec.t_end   # the data's time (the newest joint_states stamp): its freshness
        try:
            q, dq = self.replayer.rollout(rec, self.params, model=self.model)
            result = evaluate(rec, q, dq, self.names, threshold=math.inf,
                              max_shift_s=self.cfg.max_shift_s, label='live', skip_s=0.0)
        except (ValueError, RuntimeError) as exc:
            return self._unknown(stamp, f'replay failed: {exc}')
        self.windows += 1
        sigma, source = self._sigma(rec)
        ratio, per_q, shift = self._aligned_ratio(rec, q, dq, sigma, result.shift_s)
        doc = {'stamp': stamp, 'window_s': self.cfg.window_s, 'identified': self.identified,
               'floor_source': source, 'shift_s': shift, 'joints': {}}
        for i, name in enumerate(self.names):
            r = float(ratio[i])
            level = self.level(i, r)
            doc['joints'][name] = {
                'status': level, 'gap_over_floor': r,
                'motion_rad_s': float(np.std(rec.velocity[:, i])),
                'nrmse_position': result.nrmse['position'][i],
                'nrmse_velocity': result.nrmse['velocity'][i],
                'position_over_floor': float(per_q['position'][i]),
                'velocity_over_floor': float(per_q['velocity'][i]),
                'windows_over_error': int(self.over[i])}
        worst = max(self.names, key=lambda n: doc['joints'][n]['gap_over_floor'])
        rank = {lvl: k for k, lvl in enumerate(LEVELS)}
        doc['status'] = max((j['status'] for j in doc['joints'].values()), key=rank.get)
        doc['worst_joint'] = worst
        doc['gap_over_floor'] = doc['joints'][worst]['gap_over_floor']
        doc['reason'] = (f'{worst}: gap {doc["gap_over_floor"]:.2f} x the noise floor '
                         f'(WARN > {self.cfg.warn_ratio:g}, ERROR > {self.cfg.error_ratio:g} in '
                         f'{self.cfg.persist_windows} windows)')
        return doc

    def _aligned_ratio(self, rec, q, dq, sigma, coarse_s, fine_s=0.004, step_s=0.00025):
        """Per joint: RMS error over the noise floor, pooled over position and velocity, at
        the delay that fits best: the offline score's whole-sample shift refined in steps of
        `step_s` within +-`fine_s` (one shift for all joints, the simulation interpolated at
        the shifted times). A constant delay the identified latency misses by a fraction of a
        sample would otherwise count as gap: at 0.3 rad/s, 1 ms is 3x a 0.1 mrad encoder's
        noise. Returns (ratio per joint, {quantity: ratio per joint}, shift s)."""
        t = np.asarray(rec.t, float)
        meas = {'position': np.asarray(rec.position, float),
                'velocity': np.asarray(rec.velocity, float)}
        sim = {'position': q, 'velocity': dq}
        best = None
        for shift in coarse_s + np.arange(-fine_s, fine_s + step_s / 2, step_s):
            inside = (t - shift >= t[0]) & (t - shift <= t[-1])
            if inside.sum() < len(t) // 2:
                continue
            per_q, ratio = {}, 0.0
            for key in ('position', 'velocity'):
                shifted = np.stack([np.interp(t[inside] - shift, t, sim[key][:, j])
                                    for j in range(sim[key].shape[1])], axis=1)
                rmse = np.sqrt(np.mean((shifted - meas[key][inside]) ** 2, axis=0))
                per_q[key] = rmse / sigma[key]
                ratio = ratio + per_q[key] / 2.0
            if best is None or ratio.sum() < best[0].sum():
                best = (ratio, per_q, float(shift))
        return best

    def level(self, i, ratio):
        """Joint i's status after one more window scored `ratio` (persistence, hysteresis)."""
        self.over[i] = self.over[i] + 1 if ratio > self.cfg.error_ratio else 0
        self.under[i] = self.under[i] + 1 if ratio <= self.cfg.warn_ratio else 0
        if self.over[i] >= self.cfg.persist_windows:
            self.error[i] = True
        elif self.under[i] >= self.cfg.persist_windows:
            self.error[i] = False
        if self.error[i]:
            return 'ERROR'
        return 'WARN' if ratio > self.cfg.warn_ratio else 'OK'

    def _sigma(self, rec):
        if self.sigma is not None:
            return self.sigma, self.floor_source
        live = {k: noise_std(np.asarray(getattr(rec, k), float)) for k in ('position',
                                                                           'velocity')}
        self._live_sigma.append(live)
        del self._live_sigma[:-20]
        med = {k: np.maximum(np.median([s[k] for s in self._live_sigma], axis=0), 1e-9)
               for k in ('position', 'velocity')}
        return med, 'live'


def _start_state(t, q, dq, n=15):
    """The replay's start state: a quadratic fit of the first `n` samples at t[0], so one noisy
    sample does not start the model off the robot (velocity noise would become a position
    error that the score then counts as gap)."""
    n = min(n, len(t))
    if n < 5:
        return q[0], dq[0]
    x = t[:n] - t[0]
    a = np.polyfit(x, q[:n], 2)
    b = np.polyfit(x, dq[:n], 2)
    return a[-1], b[-1]


def _content(row):
    """A command's values as bytes at float32 precision (a Unitree LowCmd_ carries float32):
    the key that matches an applied command to the one sent."""
    return np.concatenate(row[1:]).astype(np.float32).tobytes()


def noise_floor_of(rec, names):
    """Noise std per joint (position, velocity) of a recording: the offline noise floor."""
    idx = [rec.names.index(n) for n in names]
    return (noise_std(np.asarray(rec.position, float)[:, idx]),
            noise_std(np.asarray(rec.velocity, float)[:, idx]))


__all__ = ['APPLIED', 'LEVELS', 'SENT', 'ShadowConfig', 'ShadowGap', 'UNKNOWN', 'noise_floor_of']

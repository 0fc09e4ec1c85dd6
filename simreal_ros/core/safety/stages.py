"""The stage machine: a speed scale that is earned one stage at a time and lost on a fault.

Stages are scales on the velocity, torque, target-rate and target-acceleration limits (default
0.10, 0.25, 0.50, 0.75, 1.00). Promotion goes one stage up, only after the current stage has
been clean for its dwell time, on request (`safety/advance_stage`) or automatically
(`auto_advance`). Clean time is *accrued*: it grows only while the supervisor reports a clean
forwarding tick (`accrue(now, True)`: the policy's output forwarded, inputs fresh, no e-stop,
not in SysID mode, no limit hit). Idle time, SysID time, a stale policy or a stall earns
nothing. A fault demotes one stage (configurable per kind) and clears the clean time; after a
demotion, further faults within `demote_holdoff_s` only clear the clean time, so one burst of
clipping costs one stage, a persisting one walks down to the lowest stage.

Every transition and the highest stage reached go to a record (JSON) together with the stage
list they were earned with, so an operator can resume where they were after a restart
(`resume`), still one stage at a time. A record earned with another stage list is not resumed:
the machine starts at the first stage and says why (`warnings`).

Writing the record is not done here on the control path: each change marks the record dirty
(`pending()`), and a `RecordWriter` thread writes it atomically (temporary file, fsync, rename).
A failed write is counted and reported by the writer; the stage held in memory is unaffected.
"""
import json
import math
from pathlib import Path
import threading

from simreal_ros.core.config import ConfigError
from simreal_ros.core.files import write_text

DEFAULT_STAGES = (0.10, 0.25, 0.50, 0.75, 1.00)
HISTORY_KEPT = 200


class StageMachine:
    """Current stage, accrued clean dwell, promotion and demotion, with a record."""

    def __init__(self, scales=DEFAULT_STAGES, dwell_s=(5.0,), now=0.0, auto_advance=False,
                 demote_on=('limit', 'watchdog', 'estop', 'rejected'), holdoff_s=0.5,
                 record_path=None, resume=False, max_accrue_step_s=0.1, write_through=True):
        scales = [float(s) for s in scales]
        if not scales:
            raise ConfigError('stages is empty: give at least one scale, e.g. [0.1, 0.25, 1.0]')
        if any(not (0.0 < s <= 1.0) or not math.isfinite(s) for s in scales):
            raise ConfigError(f'stages must be scales in (0, 1], got {scales}')
        if any(b <= a for a, b in zip(scales, scales[1:])):
            raise ConfigError(f'stages must increase strictly, got {scales}')
        dwell = [float(d) for d in dwell_s]
        if len(dwell) == 1:
            dwell = dwell * len(scales)
        if len(dwell) != len(scales) or any(not math.isfinite(d) or d < 0 for d in dwell):
            raise ConfigError(f'stage_dwell_s needs one value >= 0 or one per stage '
                              f'({len(scales)}), got {list(dwell_s)}')
        self.scales = scales
        self.dwell = dwell
        self.auto_advance = bool(auto_advance)
        self.demote_on = set(demote_on)
        self.holdoff = float(holdoff_s)
        self.max_accrue_step = float(max_accrue_step_s)
        self.record_path = Path(record_path) if record_path else None
        self.write_through = bool(write_through)
        self.index = 0
        self.highest = 0
        self.transitions = []
        self.last_fault = None     # the latest fault, demoting or not: why the dwell restarted
        self.clean_s = 0.0
        self._accrue_at = None   # time of the last clean tick (None: the last tick was not)
        self.last_demotion = -math.inf
        self.faults = 0
        self.warnings = []
        self._dirty = False
        self._version = 0
        if self.record_path is not None and self.record_path.is_file():
            record = load_record(self.record_path)
            saved = record.get('stages')
            same = (isinstance(saved, list) and len(saved) == len(scales)
                    and all(abs(float(a) - b) < 1e-9 for a, b in zip(saved, scales)))
            self.transitions = list(record.get('transitions', []))[-HISTORY_KEPT:]
            if same:
                self.highest = min(int(record.get('highest_index', 0)), len(scales) - 1)
                if resume:
                    self.index = min(int(record.get('stage_index', 0)), self.highest)
            else:
                self.warnings.append(
                    f'stage record {self.record_path} was earned with stages {saved}, not '
                    f'{scales}: starting at the first stage {scales[0]:.2f}')
                resume = False
        self._record(now, self.index, self.index, 'start' + (' (resumed)' if resume else ''))

    @property
    def scale(self):
        return self.scales[self.index]

    def clean_for(self, now=None):
        """Return the clean time accrued in this stage (s)."""
        return self.clean_s

    def accrue(self, now, clean):
        """Add the time since the previous clean tick when this tick is clean too."""
        now = float(now)
        if clean and self._accrue_at is not None:
            self.clean_s += min(max(0.0, now - self._accrue_at), self.max_accrue_step)
        self._accrue_at = now if clean else None

    def fault(self, kind, now, detail=''):
        """Note a fault of `kind` ('limit', 'watchdog', 'estop', 'rejected'); maybe demote."""
        now = float(now)
        self.faults += 1
        self.last_fault = {'time': round(now, 6), 'cause': f'{kind}: {detail}' if detail else kind}
        self.clean_s = 0.0
        self._accrue_at = None
        if kind not in self.demote_on or self.index == 0:
            return None
        if now - self.last_demotion < self.holdoff:
            return None
        self.last_demotion = now
        return self._move(now, self.index - 1, f'{kind}: {detail}' if detail else kind)

    def demote(self, now, cause):
        """Go one stage down for `cause` (the live gap's drift action); None at the lowest."""
        self.clean_s = 0.0
        self._accrue_at = None
        if self.index == 0:
            return None
        return self._move(float(now), self.index - 1, cause)

    def request_advance(self, now, not_clean=None):
        """Promote one stage if allowed; return (ok, message).

        `not_clean` is the supervisor's reason why it is not forwarding the policy cleanly
        right now (None when it is): a promotion is refused then, whatever the dwell.
        """
        now = float(now)
        if self.index == len(self.scales) - 1:
            return False, f'already at the highest stage {self.scale:.2f}'
        if not_clean:
            return False, (f'not forwarding the policy cleanly ({not_clean}); a stage is '
                           'earned only while the policy runs within its limits')
        need = self.dwell[self.index]
        if self.clean_s < need:
            return False, (f'stage {self.scale:.2f} has been clean for {self.clean_s:.2f} s of '
                           f'forwarding the policy; promotion needs {need:.2f} s without limit '
                           'hits, watchdog trips or e-stops')
        t = self._move(now, self.index + 1, 'promotion requested')
        return True, f'stage {t["from"]:.2f} -> {t["to"]:.2f}'

    def update(self, now):
        """Promote automatically when auto_advance is on and the dwell is clean; return it."""
        if not self.auto_advance or self.index == len(self.scales) - 1:
            return None
        if self.clean_s >= self.dwell[self.index]:
            return self._move(float(now), self.index + 1, 'auto_advance')
        return None

    def _move(self, now, index, cause):
        old = self.index
        self.index = index
        self.highest = max(self.highest, index)
        self.clean_s = 0.0
        self._accrue_at = None
        return self._record(now, old, index, cause)

    def _record(self, now, old, new, cause):
        t = {'time': round(float(now), 6), 'from': self.scales[old], 'to': self.scales[new],
             'cause': cause}
        self.transitions.append(t)
        del self.transitions[:-HISTORY_KEPT]
        if self.record_path is not None:
            self._dirty = True
            self._version += 1
            if self.write_through:
                write_record(self.record_path, self.to_dict())
                self._dirty = False
        return t

    def pending(self):
        """Return (version, path, data) of a record not written yet, else None (no I/O)."""
        if not self._dirty or self.record_path is None:
            return None
        return self._version, self.record_path, self.to_dict()

    def written(self, version):
        """Note that the record of `version` is on disk (a newer change stays pending)."""
        if version == self._version:
            self._dirty = False

    def to_dict(self):
        return {'stage': self.scale, 'stage_index': self.index, 'stages': list(self.scales),
                'highest': self.scales[self.highest], 'highest_index': self.highest,
                'transitions': list(self.transitions)}


def load_record(path):
    """Read a stage record file; ConfigError naming the file when it is unreadable."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise ConfigError(f'stage record {path} is unreadable ({exc}); fix or delete it') from exc
    if not isinstance(data, dict):
        raise ConfigError(f'stage record {path} is not a mapping; fix or delete it')
    return data


def write_record(path, data):
    """Write JSON atomically and durably: temporary file, fsync, rename, fsync the folder."""
    write_text(path, json.dumps(data, indent=1))


class RecordWriter:
    """A thread that writes a StageMachine's pending record off the control path.

    `take` is called with the caller's lock held (it must not do I/O: it returns the
    StageMachine's `pending()`); `done(version)` likewise. A failed write is counted, kept in
    `error`, and retried after `retry_s`; `poke()` asks for a write now.
    """

    def __init__(self, take, done, lock, retry_s=1.0):
        self._take, self._done, self._lock = take, done, lock
        self.retry_s = float(retry_s)
        self.writes = 0
        self.failures = 0
        self.error = ''
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name='stage-record-writer',
                                        daemon=True)
        self._thread.start()

    def poke(self):
        self._wake.set()

    def _run(self):
        while not self._stop.is_set():
            self._wake.wait(self.retry_s if self.error else 0.5)
            self._wake.clear()
            self.flush()

    def flush(self):
        """Write the pending record now, if any; return True when nothing is left pending."""
        with self._lock:
            item = self._take()
        if item is None:
            return True
        version, path, data = item
        try:
            write_record(path, data)
        except OSError as exc:
            self.failures += 1
            self.error = f'stage record {path} not written: {exc}'
            return False
        with self._lock:
            self._done(version)
        self.writes += 1
        self.error = ''
        return True

    def stop(self, timeout=2.0):
        """Stop the thread after one last write attempt."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)
        self.flush()

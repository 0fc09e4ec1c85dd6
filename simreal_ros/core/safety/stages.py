"""The stage machine: a speed scale that is earned one stage at a time and lost on a fault.

Stages are scales on the velocity, torque and target-rate limits (default 0.10, 0.25, 0.50, 0.75,
1.00). Promotion goes one stage up, only after the current stage has been clean (no limit hit, no
watchdog trip, no e-stop) for its dwell time, on request (`safety/advance_stage`) or
automatically (`auto_advance`). A fault demotes one stage (configurable per kind); after a
demotion, further faults within `demote_holdoff_s` only restart the clean timer, so one burst
of clipping costs one stage, a persisting one walks down to the lowest stage.

Every transition and the highest stage reached are written to a record file (JSON, atomic
rename) so an operator can resume where they were after a restart (`resume`), still one stage
at a time.
"""
import json
import math
import os
from pathlib import Path

from simreal_ros.core.config import ConfigError

DEFAULT_STAGES = (0.10, 0.25, 0.50, 0.75, 1.00)
HISTORY_KEPT = 200


class StageMachine:
    """Current stage, clean-dwell timing, promotion and demotion, with a record file."""

    def __init__(self, scales=DEFAULT_STAGES, dwell_s=(5.0,), now=0.0, auto_advance=False,
                 demote_on=('limit', 'watchdog', 'estop', 'rejected'), holdoff_s=0.5,
                 record_path=None, resume=False):
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
        self.record_path = Path(record_path) if record_path else None
        self.index = 0
        self.highest = 0
        self.transitions = []
        self.clean_since = float(now)
        self.last_demotion = -math.inf
        self.faults = 0
        if self.record_path is not None and self.record_path.is_file():
            record = load_record(self.record_path)
            self.highest = min(int(record.get('highest_index', 0)), len(scales) - 1)
            self.transitions = list(record.get('transitions', []))[-HISTORY_KEPT:]
            if resume:
                self.index = min(int(record.get('stage_index', 0)), self.highest)
        self._record(now, self.index, self.index, 'start' + (' (resumed)' if resume else ''))

    @property
    def scale(self):
        return self.scales[self.index]

    def clean_for(self, now):
        return max(0.0, float(now) - self.clean_since)

    def fault(self, kind, now, detail=''):
        """Note a fault of `kind` ('limit', 'watchdog', 'estop', 'rejected'); maybe demote."""
        now = float(now)
        self.faults += 1
        self.clean_since = now
        if kind not in self.demote_on or self.index == 0:
            return None
        if now - self.last_demotion < self.holdoff:
            return None
        self.last_demotion = now
        return self._move(now, self.index - 1, f'{kind}: {detail}' if detail else kind)

    def request_advance(self, now):
        """Promote one stage if allowed; return (ok, message)."""
        now = float(now)
        if self.index == len(self.scales) - 1:
            return False, f'already at the highest stage {self.scale:.2f}'
        need = self.dwell[self.index]
        clean = self.clean_for(now)
        if clean < need:
            return False, (f'stage {self.scale:.2f} has been clean for {clean:.2f} s; promotion '
                           f'needs {need:.2f} s without limit hits, watchdog trips or e-stops')
        t = self._move(now, self.index + 1, 'promotion requested')
        return True, f'stage {t["from"]:.2f} -> {t["to"]:.2f}'

    def update(self, now):
        """Promote automatically when auto_advance is on and the dwell is clean; return it."""
        if not self.auto_advance or self.index == len(self.scales) - 1:
            return None
        if self.clean_for(now) >= self.dwell[self.index]:
            return self._move(float(now), self.index + 1, 'auto_advance')
        return None

    def _move(self, now, index, cause):
        old = self.index
        self.index = index
        self.highest = max(self.highest, index)
        self.clean_since = now
        return self._record(now, old, index, cause)

    def _record(self, now, old, new, cause):
        t = {'time': round(float(now), 6), 'from': self.scales[old], 'to': self.scales[new],
             'cause': cause}
        self.transitions.append(t)
        del self.transitions[:-HISTORY_KEPT]
        if self.record_path is not None:
            write_record(self.record_path, self.to_dict())
        return t

    def to_dict(self):
        return {'stage': self.scale, 'stage_index': self.index, 'stages': self.scales,
                'highest': self.scales[self.highest], 'highest_index': self.highest,
                'transitions': self.transitions}


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
    """Write the record atomically (a reader never sees half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + '.tmp')
    with open(tmp, 'w') as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)

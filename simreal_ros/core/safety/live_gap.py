"""The live-gap gate: no promotion while the simulator no longer describes the robot.

`sim_bridge`'s shadow (simreal_ros.core.bridge.shadow) replays the supervisor's output through
the identified model over short windows and publishes, per joint, the gap over the noise floor
and a status (OK / WARN / ERROR / unknown), and with it whether the model is identified and the
verdict of the latest offline evaluation (`offline.passed`). This gate reads those documents.

Whether it is required (`live_gap.require`):
- `auto` (default): from the first document that says the model is identified (SysID results
  pushed to sim_bridge, or identified values in the robot file) until the process ends. A
  robot without an identified model (no sim_bridge section, as the G1) is never gated; once
  one exists, a shadow that goes silent blocks promotion, it does not switch the gate off.
- `true`: always, also before any document arrives (no live value -> no promotion).
- `false`: never (the operator's explicit choice, reported in safety/state).

While required, a promotion (requested or automatic) is refused when there is no document
fresher than `max_age_s` (by its stamp and by its arrival), when its status is not OK or WARN
(unknown, or ERROR naming the joint and its gap), or when the offline evaluation it reports
failed. Sustained drift (status ERROR for `drift_s` without a break) triggers `drift_action`:
`hold` (only the refusal), `demote` (one stage down, again after each further `drift_s`) or
`estop`.
"""
import math

from simreal_ros.core.config import ConfigError

REQUIRE = ('auto', 'true', 'false')
DRIFT_ACTIONS = ('hold', 'demote', 'estop')
PASSING = ('OK', 'WARN')


class LiveGapGate:
    """Freshness, status and drift of the live gap; the supervisor asks it before promoting."""

    def __init__(self, require='auto', max_age_s=2.0, drift_action='hold', drift_s=3.0,
                 check_stamps=True, names=None, source='safety_supervisor'):
        require = str(require).lower()
        if require not in REQUIRE:
            raise ConfigError(f'{source}.live_gap.require must be one of {REQUIRE}, got '
                              f'{require!r}')
        if drift_action not in DRIFT_ACTIONS:
            raise ConfigError(f'{source}.live_gap.drift_action must be one of '
                              f'{DRIFT_ACTIONS}, got {drift_action!r}')
        for name, value in (('max_age_s', max_age_s), ('drift_s', drift_s)):
            if not (math.isfinite(float(value)) and float(value) > 0):
                raise ConfigError(f'{source}.live_gap.{name} must be > 0, got {value}')
        self.require = require
        self.max_age_s = float(max_age_s)
        self.drift_action = drift_action
        self.drift_s = float(drift_s)
        self.check_stamps = bool(check_stamps)
        self.names = list(names) if names is not None else None
        self.identified = False     # a document said the model is identified (sticky)
        self.doc = None
        self.arrival = None
        self.received = 0
        self.malformed = 0
        self.last_malformed = ''
        self.error_since = None     # start of the current ERROR spell
        self.actions = 0            # drift actions taken
        self.untrusted = ''         # why the topic's publishers break their rule ('' = they keep it)
        self._acted_at = None

    @property
    def required(self):
        return self.require == 'true' or (self.require == 'auto' and self.identified)

    def on_gap(self, doc, now):
        """Take one live-gap document (a dict); return (ok, reason). A malformed one is
        counted and ignored (the previous value ages and goes stale)."""
        why = _malformed(doc, self.names)
        if why:
            self.malformed += 1
            self.last_malformed = why
            return False, why
        self.doc = doc
        self.arrival = float(now)
        self.received += 1
        if doc.get('identified'):
            self.identified = True
        if doc['status'] == 'ERROR':
            if self.error_since is None:
                self.error_since = float(now)
        else:
            self.error_since = None
            self._acted_at = None
        return True, ''

    def age(self, now):
        """Age (s) of the newest document: the older of its stamp and its arrival; inf if none."""
        if self.doc is None:
            return math.inf
        age = now - self.arrival
        if self.check_stamps:
            age = max(age, now - float(self.doc['stamp']))
        return age

    def refusal(self, now):
        """Why a promotion must be refused now, or None (also None when not required)."""
        if not self.required:
            return None
        if self.untrusted:
            # A node that should not publish the live gap does (a rogue could say OK): what
            # arrives cannot earn a stage until the publishers keep their rule again.
            return f'live gap not trusted: {self.untrusted}'
        if self.doc is None:
            return ('live gap unknown: no value from the shadow model (sim_bridge/live_gap) '
                    'yet; a stage is earned only while the identified model describes the '
                    'robot')
        age = self.age(now)
        if age > self.max_age_s:
            return (f'live gap unknown: the newest value is {age:.1f} s old '
                    f'(live_gap.max_age_s {self.max_age_s:g}); is sim_bridge running?')
        doc = self.doc
        offline = doc.get('offline') or {}
        if offline and offline.get('passed') is False:
            return (f'offline reality gap failed: {100 * float(offline.get("gap", math.nan)):.2f} '
                    f'% > {100 * float(offline.get("threshold", math.nan)):.0f} % on '
                    f'{offline.get("recording", "the evaluated recording")}')
        status = doc['status']
        if status in PASSING:
            return None
        if status == 'ERROR':
            bad = [f'{n} {j.get("gap_over_floor", math.nan):.1f}x'
                   for n, j in doc['joints'].items() if j.get('status') == 'ERROR']
            return (f'live gap above its threshold: {", ".join(bad)} the noise floor; the '
                    'simulator no longer describes the robot')
        return f'live gap unknown: {doc.get("reason") or status}'

    def drift(self, now):
        """Return (action, cause) when sustained drift calls for one now, else None."""
        if not self.required or self.error_since is None or self.age(now) > self.max_age_s:
            return None
        if now - self.error_since < self.drift_s:
            return None
        if self.drift_action == 'hold':
            return None
        since = self._acted_at if self._acted_at is not None else self.error_since
        if self._acted_at is not None and (self.drift_action == 'estop'
                                           or now - since < self.drift_s):
            return None
        self._acted_at = float(now)
        self.actions += 1
        worst = self.doc.get('worst_joint')
        joint = self.doc['joints'].get(worst, {})
        return self.drift_action, (f'live gap drift: {worst} at '
                                   f'{joint.get("gap_over_floor", math.nan):.1f}x the noise '
                                   f'floor for {now - self.error_since:.1f} s')

    def status(self, now):
        doc = self.doc or {}
        age = self.age(now)
        return {'require': self.require, 'required': self.required,
                'identified': self.identified, 'status': doc.get('status'),
                'worst_joint': doc.get('worst_joint'),
                'gap_over_floor': doc.get('gap_over_floor'),
                'age_s': None if math.isinf(age) else round(age, 3),
                'refusal': self.refusal(now), 'untrusted': self.untrusted,
                'drift_action': self.drift_action,
                'drift_actions': self.actions, 'received': self.received,
                'malformed': self.malformed}


def _malformed(doc, names=None):
    if not isinstance(doc, dict):
        return f'expected a JSON object, got {type(doc).__name__}'
    stamp = doc.get('stamp')
    if not isinstance(stamp, (int, float)) or not math.isfinite(stamp):
        return f'stamp must be a finite number (s), got {stamp!r}'
    if doc.get('status') not in ('OK', 'WARN', 'ERROR', 'unknown'):
        return f'status must be OK, WARN, ERROR or unknown, got {doc.get("status")!r}'
    joints = doc.get('joints')
    if not isinstance(joints, dict):
        return 'joints must be an object {joint: {status, gap_over_floor}}'
    for name, j in joints.items():
        if names is not None and name not in names:
            return f'joints names {name!r}, not a supervised joint ({", ".join(names)})'
        if not isinstance(j, dict):
            return f'joints.{name} must be an object'
        g = j.get('gap_over_floor')
        if g is not None and (not isinstance(g, (int, float)) or math.isnan(g)):
            return f'joints.{name}.gap_over_floor must be a number, got {g!r}'
    return ''

"""The safety_supervisor section read and checked: limits, timeouts, safe mode, bring-up.

`SupervisorConfig.from_params` turns the parameters into one checked object, or raises a
ConfigError naming the parameter; nothing else reads the parameters.
"""
from dataclasses import dataclass, field
import math

import numpy as np

from simreal_ros.core.config import ConfigError
from simreal_ros.core.safety.live_gap import LiveGapGate
from simreal_ros.core.safety.limits import Limits
from simreal_ros.core.safety.stages import DEFAULT_STAGES

SAFE_MODES = ('damping', 'hold', 'zero_torque')
FAULT_KINDS = ('limit', 'watchdog', 'estop', 'rejected', 'operator')
SOURCES = ('policy', 'sysid')
INPUTS = ('joint_states', 'imu') + SOURCES


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
    state_disorder_trip_count: int = 5
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
    # The rate each source declares (Hz); faster is counted (too_fast), see on_command.
    source_rate_hz: dict = field(default_factory=lambda: {'policy': 500.0, 'sysid': 500.0})

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
                               ('state_disorder_trip_count', 1, int),
                               ('late_tick_periods', 1.0, float),
                               ('stale_hold_s', 0.0, float),
                               ('sysid_release_s', 0.0, float),
                               ('reset_velocity_tolerance', 0.0, float)):
            value = cast(p.get(key, cls.__dataclass_fields__[key].default))
            if not (math.isfinite(value) and value >= low):
                raise ConfigError(f'{source}.{key} must be >= {low}, got {value}')
            extra[key] = value
        extra.update(_bringup_params(p, names, limits, source))
        extra['source_rate_hz'] = {}
        for s in SOURCES:
            value = float(p.get(f'{s}_rate_hz', 0.0) or 0.0)
            if not (math.isfinite(value) and value >= 0.0):
                raise ConfigError(f'{source}.{s}_rate_hz must be >= 0 (0 = rate_hz), got '
                                  f'{value}')
            extra['source_rate_hz'][s] = value if value > 0 else rate
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

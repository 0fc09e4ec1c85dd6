"""Estimators for joint friction, inertia (armature) and command latency, with honest intervals.

Every estimator returns a `Fit`: estimates with 95 % intervals, residual statistics and the
condition number of the regression, or raises `IdentificationError` whose `reason` is one of
'not enough excitation', 'joint did not move', 'saturated', 'bad data' when the data cannot
support a number.

Intervals are sandwich (heteroscedasticity- and autocorrelation-consistent, Newey-West)
intervals: residuals of filtered signals and of a simulated response are correlated in time,
and ordinary least-squares intervals would be several times too narrow.
"""
from dataclasses import dataclass, field
import math

import numpy as np
from scipy import signal, stats

from simreal_ros.core.sysid.model import STICTION, simulate_joint

REASONS = ('not enough excitation', 'joint did not move', 'saturated', 'bad data')
FRICTION_KEYS = ('coulomb_friction', 'viscous_damping')
COMBINED = 'combined with the multi-sine'


class IdentificationError(ValueError):
    """The data cannot support an estimate; `reason` is one of REASONS."""

    def __init__(self, reason, detail):
        assert reason in REASONS, reason
        super().__init__(f'{reason}: {detail}')
        self.reason = reason
        self.detail = detail


@dataclass
class Estimate:
    parameter: str
    value: float
    low: float
    high: float
    units: str
    method: str

    @property
    def interval(self):
        return (self.low, self.high)

    def covers(self, truth):
        return self.low <= truth <= self.high


@dataclass
class Fit:
    kind: str
    joint: str
    estimates: dict                  # parameter -> Estimate
    residual_rms: float
    residual_max: float
    r_squared: float
    condition: float
    samples: int
    notes: dict = field(default_factory=dict)

    def value(self, parameter):
        return self.estimates[parameter].value


@dataclass
class Recording:
    """What an experiment commanded and what the robot measured (times from the start)."""

    names: list
    t: np.ndarray             # sample times (s)
    position: np.ndarray      # (N, n) measured
    velocity: np.ndarray
    effort: np.ndarray
    cmd_t: np.ndarray         # command arrival times (s)
    cmd_position: np.ndarray  # (M, n)
    cmd_velocity: np.ndarray
    cmd_effort: np.ndarray

    def validate(self):
        arrays = (self.position, self.velocity, self.effort)
        if len(self.t) < 10 or any(a.shape != (len(self.t), len(self.names)) for a in arrays):
            raise IdentificationError('bad data', f'{len(self.t)} samples with inconsistent '
                                      'shapes; the recording is incomplete')
        if not all(np.all(np.isfinite(a)) for a in arrays):
            raise IdentificationError('bad data', 'non-finite measurements in the recording')
        if np.any(np.diff(self.t) <= 0):
            raise IdentificationError('bad data', 'sample times are not increasing')


def row_at(times, query):
    """Index of the row (held from times[j]) that is active at each query time."""
    return np.clip(np.searchsorted(times, query, side='right') - 1, 0, len(times) - 1)


def sample_labels(rec, experiment):
    """Map the experiment's per-command labels (segment, steady, speed) to the samples."""
    j = row_at(experiment.t, rec.t)
    return experiment.segment[j], experiment.steady[j], experiment.target_speed[j]


def _decorrelation_lag(r):
    r = r - r.mean()
    n = len(r)
    spec = np.fft.rfft(r, 2 * n)
    acf = np.fft.irfft(spec * np.conj(spec))[:n]
    if acf[0] <= 0:
        return 1
    acf = acf / acf[0]
    below = np.nonzero(acf < 0.1)[0]
    first = int(below[0]) if below.size else n // 10
    return int(max(2, min(4 * first, n // 5)))


def ols_hac(X, y, lag=None):
    """Least squares with a Newey-West covariance; return theta, cov, residuals, cond, lag."""
    scale = np.linalg.norm(X, axis=0)
    scale[scale == 0] = 1.0
    Xs = X / scale
    cond = float(np.linalg.cond(Xs))
    theta_s, *_ = np.linalg.lstsq(Xs, y, rcond=None)
    r = y - Xs @ theta_s
    lag = _decorrelation_lag(r) if lag is None else lag
    g = Xs * r[:, None]
    S = g.T @ g
    for ell in range(1, lag + 1):
        w = 1.0 - ell / (lag + 1.0)
        G = g[ell:].T @ g[:-ell]
        S += w * (G + G.T)
    inv = np.linalg.pinv(Xs.T @ Xs)
    cov_s = inv @ S @ inv
    theta = theta_s / scale
    cov = cov_s / np.outer(scale, scale)
    return theta, cov, r, cond, lag


def _z(level=0.95):
    return float(stats.norm.ppf(0.5 + level / 2))


def _estimate(name, value, std, units, method):
    h = _z() * std
    return Estimate(name, float(value), float(value - h), float(value + h), units, method)


def lowpass(x, fs, cutoff):
    """Zero-phase 4th-order Butterworth low-pass along axis 0."""
    b, a = signal.butter(4, min(cutoff / (fs / 2), 0.95))
    return signal.filtfilt(b, a, x, axis=0, padlen=min(len(x) - 1, 3 * max(len(a), len(b))))


def _dilate(mask, k):
    if k <= 0:
        return mask
    return np.convolve(mask.astype(float), np.ones(2 * k + 1), mode='same') > 0


def _check_saturation(tau, limit, mask, joint):
    if limit is None or not np.isfinite(limit):
        return
    frac = float(np.mean(np.abs(tau[mask]) >= 0.98 * limit)) if np.any(mask) else 0.0
    if frac > 0.01:
        raise IdentificationError('saturated', f'{joint}: torque at the limit ({limit:g} N*m) in '
                                  f'{100 * frac:.1f} % of the samples; lower the excitation '
                                  'amplitude or speeds')


def _after_command_gaps(rec, settle):
    """Samples from a gap in the commands (> 2.5 nominal periods) until `settle` s after."""
    dt = np.diff(rec.cmd_t)
    out = np.zeros(len(rec.t), dtype=bool)
    if dt.size == 0:
        return out
    nominal = float(np.median(dt))
    for k in np.nonzero(dt > 2.5 * nominal)[0]:
        out |= (rec.t >= rec.cmd_t[k]) & (rec.t <= rec.cmd_t[k + 1] + settle)
    return out


def _r2(y, r):
    var = float(np.var(y))
    return 1.0 - float(np.var(r)) / var if var > 0 else 0.0


def estimate_friction(rec, experiment, nominal, torque_limit=None, filter_hz=20.0,
                      effort_lag_s=0.0):
    """Coulomb and viscous friction from constant-velocity sweeps in both directions.

    Model: tau - tau_rigid(q, qd, qdd) = Fc*sign(v) + Fv*qd + Ja*qdd + b, on settled
    constant-velocity samples; tau_rigid is the nominal model's inverse dynamics (gravity,
    coupling), Ja the joint's armature (what is left of the speed's ripple), b a torque offset
    (sensor bias, gravity model error); Ja and b are fitted and reported as notes.
    """
    rec.validate()
    i = experiment.index
    joint = experiment.joint
    seg, steady, speed = sample_labels(rec, experiment)
    _check_saturation(rec.effort[:, i], torque_limit, seg >= 0, joint)
    if np.count_nonzero(steady) < 50:
        raise IdentificationError('not enough excitation', f'{joint}: only '
                                  f'{np.count_nonzero(steady)} constant-velocity samples')
    speeds = np.unique(speed[steady])
    if np.count_nonzero(speeds > 0) < 2 or np.count_nonzero(speeds < 0) < 1:
        raise IdentificationError('not enough excitation', f'{joint}: sweeps need >= 2 speeds '
                                  'and both directions to separate Coulomb and viscous friction')
    qd_i = rec.velocity[:, i]
    for v in speeds:
        sel = steady & (speed == v)
        moved = float(np.mean(qd_i[sel]))
        if abs(moved) < 0.3 * abs(v) or math.copysign(1, moved) != math.copysign(1, v):
            raise IdentificationError('joint did not move', f'{joint}: commanded {v:+.3f} rad/s, '
                                      f'measured {moved:+.4f} rad/s (blocked, at a limit or '
                                      'the command did not reach the robot)')
    # Constant velocity by the clock and by the measurement (a late command or a bump leaves
    # the joint off its speed for a moment: those samples are not steady state), and not
    # within 0.2 s after a gap in the commands (a late command makes the target jump).
    steady = steady & (np.abs(qd_i - speed) <= 0.25 * np.abs(speed))
    steady &= ~_after_command_gaps(rec, 0.2)
    if np.count_nonzero(steady) < 50:
        raise IdentificationError('not enough excitation', f'{joint}: only '
                                  f'{np.count_nonzero(steady)} samples at the commanded speeds')
    fs = 1.0 / float(np.median(np.diff(rec.t)))
    qf = lowpass(rec.position, fs, filter_hz)
    qdf = lowpass(rec.velocity, fs, filter_hz)
    qddf = np.gradient(qdf, rec.t, axis=0)
    # The effort read with a joint state is the torque of the driver's last control step,
    # computed from the state at that step's start: `effort_lag_s` before the position. On a
    # hanging leg gravity changes along the sweep (~19 N*m per rad on the G1's hip pitch), so
    # gravity taken at the read position is off by slope * speed * lag, a torque linear in
    # the speed: -3 to -6 % of the hip's viscous friction at a 0.5 ms step. The rigid part is
    # taken where the joints were `effort_lag_s` earlier.
    rigid = nominal.inverse_dynamics(qf[steady] - effort_lag_s * qdf[steady],
                                     qdf[steady] - effort_lag_s * qddf[steady],
                                     qddf[steady])[:, i]
    # The torque is filtered as the motion is: the PD torque ripples at the command rate (a
    # position target held for a command period, kp * speed / rate peak to peak, aliased by
    # the sensor rate), which the rigid part (filtered motion) does not carry; left in, it
    # doubled the viscous interval of the G1's hip pitch (7.4 -> 3.9 %).
    y = lowpass(rec.effort[:, i], fs, filter_hz)[steady] - rigid
    # The joint's own armature is not in tau_rigid (the inertia experiment identifies it). A
    # sweep is never exactly at constant speed (a hanging leg's gravity speeds it up and slows
    # it along the sweep, the PD rings): armature * qdd left in y biased the G1's hip pitch
    # (viscous -25 to -48 %). A column of the joint's acceleration takes it out.
    X = np.column_stack([np.sign(speed[steady]), qdf[steady, i], qddf[steady, i],
                         np.ones(len(y))])
    theta, cov, r, cond, lag = ols_hac(X, y)
    std, misfit, std_hac, std_speeds = friction_std(X, y, r, cov, speed[steady])
    if theta[0] <= 0 or theta[1] < -3 * std[1]:
        raise IdentificationError('not enough excitation', f'{joint}: fit gave Coulomb '
                                  f'{theta[0]:.4f} N*m, viscous {theta[1]:.4f} N*m*s/rad; '
                                  'the sweeps do not explain the torque')
    method = ('quasistatic constant-velocity sweeps, LS with Newey-West interval, at least '
              'the leave-one-speed-out spread')
    if misfit['flagged']:
        method += (f'; MODEL MISFIT: the mean torque at {misfit["worst_speed"]:+.2f} rad/s is '
                   f'{misfit["worst_residual"]:+.3f} N*m off the Coulomb + viscous line, '
                   f'{misfit["ratio"]:.1f} x the noise floor (Stribeck friction, backlash or a '
                   'torque-speed limit?); interval widened by that factor')
    est = {'coulomb_friction': _estimate('coulomb_friction', theta[0], std[0], 'N*m', method),
           'viscous_damping': _estimate('viscous_damping', theta[1], std[1], 'N*m*s/rad',
                                        method)}
    return Fit('friction', joint, est, float(np.sqrt(np.mean(r**2))), float(np.max(np.abs(r))),
               _r2(y, r), cond, len(y),
               {'torque_offset': float(theta[3]), 'acceleration_coefficient': float(theta[2]),
                'hac_lag': lag,
                'speeds': [float(v) for v in speeds], 'misfit': misfit,
                'std_hac': [float(v) for v in std_hac[:2]],
                'std_speeds': [float(v) for v in std_speeds[:2]],
                'std_model_of': {k: _model_part(std[j], std_hac[j] * max(1.0, misfit['ratio']))
                                 for j, k in enumerate(FRICTION_KEYS)}})


def friction_std(X, y, r, cov, speed):
    """Standard deviations of the friction line's coefficients: (std, misfit, hac, speeds).

    The Newey-West part (`cov`, residual `r`) times the model misfit ratio when above 1, and
    at least the leave-one-speed-out spread (`_leave_one_speed_out`): a line that bends a
    little at one speed (a Stribeck dip below the misfit flag) moves the Coulomb estimate
    more than the Newey-West interval allows (arm3's shoulder yaw Coulomb friction +0.31 %
    with +-0.30 %; on synthetic sweeps with such a dip it covered 61 %, with the spread 86 %).
    """
    misfit = _speed_misfit(r, speed)
    std_hac = np.sqrt(np.diag(cov))
    std_speeds = _leave_one_speed_out(X, y, speed)
    return (np.maximum(std_hac * max(1.0, misfit['ratio']), std_speeds), misfit, std_hac,
            std_speeds)


def _leave_one_speed_out(X, y, speed):
    """Jackknife standard deviation of the coefficients over the speed groups.

    Each signed speed is left out in turn and the line refitted on the others; the spread of
    those fits, sqrt((G-1)/G * sum (theta_-g - mean)^2), is the coefficients' uncertainty
    with each speed's own error as one draw (a cluster jackknife): it grows where one speed
    pulls the line, which the per-speed misfit ratio (an RMS over all speeds) does not see.
    """
    groups = np.unique(speed)
    fits = []
    for v in groups:
        keep = speed != v
        if np.count_nonzero(np.unique(speed[keep]) > 0) < 1 or np.count_nonzero(
                np.unique(speed[keep]) < 0) < 1 or len(np.unique(speed[keep])) < 3:
            continue
        theta, *_ = np.linalg.lstsq(X[keep], y[keep], rcond=None)
        fits.append(theta)
    if len(fits) < 3:
        return np.zeros(X.shape[1])
    fits = np.array(fits)
    g = len(fits)
    return np.sqrt((g - 1) / g * np.sum((fits - fits.mean(axis=0))**2, axis=0))


MISFIT_RATIO = 4.0   # speed-group residuals this many times their noise floor: wrong model


def _speed_misfit(r, speed):
    """How far the model misses each speed's mean torque, against that mean's noise floor.

    Coulomb + viscous friction is a straight line in speed per direction: with >= 2 speeds per
    direction the group means of the residual must sit within their noise. The ratio is the
    RMS of (group mean / its standard error), the standard error from the spread about the
    group means with their own correlation time (the noise floor: a wrong model makes the
    whole residual correlated, not the noise about each group's mean); a Stribeck dip,
    backlash or a torque-speed limit bends the line and the ratio grows with the data instead
    of staying ~1 (a Birge ratio).
    """
    about = r.copy()
    for v in np.unique(speed):
        about[speed == v] -= np.mean(r[speed == v])
    lag = _decorrelation_lag(about)
    z, worst = [], (0.0, 0.0, 0.0)
    for v in np.unique(speed):
        g = r[speed == v]
        if g.size < 10:
            continue
        n_eff = max(1.0, g.size / max(lag, 1))
        se = float(np.std(g)) / math.sqrt(n_eff)
        mean = float(np.mean(g))
        zi = abs(mean) / max(se, 1e-12)
        z.append(zi)
        if zi > worst[0]:
            worst = (zi, float(v), mean)
    ratio = float(np.sqrt(np.mean(np.square(z)))) if z else 0.0
    return {'ratio': round(ratio, 3), 'worst_speed': worst[1],
            'worst_residual': round(worst[2], 5), 'flagged': bool(ratio > MISFIT_RATIO)}


def estimate_inertia(rec, experiment, nominal, torque_limit=None, filter_hz=None,
                     min_speed=0.05, effort_lag_s=None):
    """Armature and effective inertia from a multi-sine by filtered least squares.

    Model: tau - tau_rigid = Ja*qdd + Fv*qd + Fc*sign(qd) + b (+ a time-offset term), with
    the same zero-phase filter on torque and every regressor column; samples near zero
    velocity (where dry friction sticks) are left out. The interval adds, to the Newey-West
    part, how far the estimate moves with the filter cut-off. Effective inertia = Ja + the
    nominal link inertia at the pose (mj_fullM diagonal). effort_lag_s: the control step an
    effort reading averages over, when known: the effort's time offset is then half of it,
    not fit (_inertia_regression), and the free fit's difference joins the interval.
    """
    rec.validate()
    i = experiment.index
    joint = experiment.joint
    seg, _, _ = sample_labels(rec, experiment)
    fs = 1.0 / float(np.median(np.diff(rec.t)))
    if filter_hz is None:
        filter_hz = 25.0
    excite = seg >= 0
    if np.count_nonzero(excite) < 100:
        raise IdentificationError('not enough excitation', f'{joint}: no excitation samples')
    _check_saturation(rec.effort[:, i], torque_limit, excite, joint)
    qdf = lowpass(rec.velocity, fs, filter_hz)
    rms_v = float(np.sqrt(np.mean(qdf[excite, i]**2)))
    if rms_v < 2 * min_speed:
        tau = rec.effort[excite, i]
        raise IdentificationError('joint did not move', f'{joint}: RMS velocity {rms_v:.4f} '
                                  'rad/s during the excitation while its torque swung '
                                  f'{float(np.ptp(tau)):.3g} N*m peak to peak (dry friction '
                                  'holding it, a blocked joint, or commands that did not reach '
                                  'the robot)')
    theta, cov, r, cond, lag, y = _inertia_regression(rec, nominal, i, excite, fs, filter_hz,
                                                      min_speed, joint, effort_lag_s)
    std = np.sqrt(np.diag(cov))
    # Model-error part of the interval: how much the estimate moves when the filter cut-off
    # does (0.6x and 1.6x); a perfect model would not care.
    spread = np.zeros_like(theta)
    for factor in (0.6, 1.6):
        fc = min(filter_hz * factor, 0.4 * fs)
        alt = _inertia_regression(rec, nominal, i, excite, fs, fc, min_speed, joint,
                                  effort_lag_s)[0]
        spread = np.maximum(spread, np.abs(alt - theta))
    if effort_lag_s:
        # ... and when the effort's offset is fit instead of taken as half the step: where
        # the motion says another offset (a driver whose effort reads otherwise), the
        # interval says how much that moves the estimate.
        alt = _inertia_regression(rec, nominal, i, excite, fs, filter_hz, min_speed, joint)[0]
        spread[:4] = np.maximum(spread[:4], np.abs(alt[:4] - theta[:4]))
    std_hac = std
    std = np.sqrt(std**2 + spread**2)
    rel = std[0] * _z() / max(abs(theta[0]), 1e-9)
    link = nominal.mass_diagonal(np.median(rec.position[excite], axis=0))[i]
    if cond > 1e4 or (rel > 0.5 and std[0] * _z() > 0.1 * (link + abs(theta[0]))):
        # Say which torque drowned the armature's: a joint whose dry friction is several times
        # its inertia torque at the allowed acceleration (the G1's knee with 2.8 N*m of
        # Coulomb friction against ~2 N*m) sticks and slips through the multi-sine.
        qdd_rms = float(np.sqrt(np.mean(np.gradient(qdf[excite, i], rec.t[excite])**2)))
        inertia_tau = (link + max(theta[0], 0.0)) * qdd_rms
        why = (f'; its Coulomb friction {theta[2]:.3g} N*m is {theta[2] / inertia_tau:.1f} x the '
               f'inertia torque ({inertia_tau:.3g} N*m RMS at {qdd_rms:.3g} rad/s^2): a larger '
               'acceleration_limit for this joint (inside the SysID limits) or a longer '
               'multi-sine' if inertia_tau > 0 and theta[2] > inertia_tau else
               '; a larger multi-sine amplitude or duration')
        raise IdentificationError('not enough excitation', f'{joint}: armature '
                                  f'{theta[0]:.4g} +- {std[0] * _z():.2g} kg*m^2 (condition '
                                  f'{cond:.0f}){why} would narrow it')
    method = 'multi-sine, filtered LS on tau = J*qdd + Fv*qd + Fc*sign(qd), Newey-West'
    est = {'armature': _estimate('armature', theta[0], std[0], 'kg*m^2', method),
           'effective_inertia': _estimate('effective_inertia', theta[0] + link, std[0],
                                          'kg*m^2', method + ' + nominal link inertia')}
    return Fit('inertia', joint, est, float(np.sqrt(np.mean(r**2))), float(np.max(np.abs(r))),
               _r2(y, r), cond, len(y),
               {'link_inertia': float(link), 'viscous_damping': float(theta[1]),
                'coulomb_friction': float(theta[2]), 'torque_offset': float(theta[3]),
                'viscous_damping_std': float(std[1]), 'coulomb_friction_std': float(std[2]),
                'viscous_damping_std_model': float(spread[1]),
                'coulomb_friction_std_model': float(spread[2]),
                'effort_time_offset_s': float(theta[4]),
                'armature_std_noise': float(std_hac[0]),
                'armature_std_filter': float(spread[0]),
                'filter_hz': float(filter_hz), 'hac_lag': lag,
                'effort_lag_s': effort_lag_s})


def _model_part(total, noise):
    """The part of a standard deviation beyond its noise part (a model-error term)."""
    return float(math.sqrt(max(0.0, float(total)**2 - float(noise)**2)))


def combine_friction(sweep, multisine):
    """One friction estimate from the sweeps' and the multi-sine's, each (value, std[, model]).

    The two experiments see the same Coulomb + viscous friction in independent recordings:
    the sweeps at a few constant speeds, the multi-sine over every speed it passes (its
    regression fits both terms beside the armature). Their inverse-variance mean is the more
    precise where either is weak: a short sweep (the G1's ankle roll reaches 1 rad/s settled,
    not 1.8) or small viscous friction under the sensor noise.

    Only the noise parts average down. `model` is the part of each std that is a model error
    (the sweeps' leave-one-speed-out spread, the multi-sine's filter spread): a model error
    both experiments share (arm3's shoulder pitch reads its Coulomb friction 0.8 % low in
    both) does not, so the two are added as fully correlated, w1*m1 + w2*m2. Where the values
    disagree beyond their intervals the std is scaled by the Birge ratio sqrt(chi^2), as a
    particle-data average is, so the interval reaches both. Returns {'value', 'std', 'scale',
    'weight_sweep'}.
    """
    v1, s1, m1 = (tuple(map(float, sweep)) + (0.0,))[:3]
    v2, s2, m2 = (tuple(map(float, multisine)) + (0.0,))[:3]
    if not (s1 > 0 and s2 > 0 and math.isfinite(v2) and math.isfinite(s2)):
        return {'value': v1, 'std': s1, 'scale': 1.0, 'weight_sweep': 1.0}
    w1 = (1.0 / s1**2) / (1.0 / s1**2 + 1.0 / s2**2)
    w2 = 1.0 - w1
    m1, m2 = min(m1, s1), min(m2, s2)
    noise = math.hypot(w1 * _model_part(s1, m1), w2 * _model_part(s2, m2))
    std = math.hypot(noise, w1 * m1 + w2 * m2)
    scale = max(1.0, abs(v1 - v2) / math.hypot(s1, s2))
    return {'value': w1 * v1 + w2 * v2, 'std': scale * std, 'scale': scale,
            'weight_sweep': w1}


def combined_method(method, combined):
    """The method text of a friction estimate combined by `combine_friction`."""
    c = combined
    return (f'{method}; {COMBINED} (inverse-variance, {100 * c["weight_sweep"]:.0f} % sweeps'
            + (f', interval x{c["scale"]:.2f}: the two disagree' if c['scale'] > 1 else '')
            + ')')


def combined_friction_fit(friction, inertia):
    """The friction Fit with Coulomb and viscous friction combined with the multi-sine's.

    `inertia`'s notes carry the multi-sine's friction terms and their standard deviations.
    A sweep fit whose model misfit is flagged (Stribeck, backlash) is returned as it is: the
    multi-sine assumes the same straight line, and averaging would narrow an interval the
    misfit widened. The sweeps' own values stay in the notes ('sweeps').
    """
    misfit = (friction.notes or {}).get('misfit') or {}
    if misfit.get('flagged') or inertia is None:
        return friction
    estimates, sweeps = dict(friction.estimates), {}
    for key in FRICTION_KEYS:
        est = estimates[key]
        s1 = (est.high - est.low) / (2 * _z())
        m1 = ((friction.notes or {}).get('std_model_of') or {}).get(key, 0.0)
        other = (inertia.notes.get(key), inertia.notes.get(key + '_std'),
                 inertia.notes.get(key + '_std_model', 0.0))
        if other[0] is None or other[1] is None:
            return friction
        c = combine_friction((est.value, s1, m1), other)
        sweeps[key] = {'value': est.value, 'std': s1, 'std_model': m1,
                       'multisine': [float(v) for v in other],
                       'scale': round(c['scale'], 3),
                       'weight_sweep': round(c['weight_sweep'], 3)}
        estimates[key] = _estimate(key, c['value'], c['std'], est.units,
                                   combined_method(est.method, c))
    notes = dict(friction.notes or {})
    notes['sweeps'] = sweeps
    return Fit(friction.kind, friction.joint, estimates, friction.residual_rms,
               friction.residual_max, friction.r_squared, friction.condition, friction.samples,
               notes)


def white_noise_std(x):
    """Standard deviation of the white part of a sampled signal, robustly.

    The second difference x[k+1] - 2x[k] + x[k-1] of white noise has 6 x its variance, and a
    smooth motion hardly any (its third derivative times dt^2); the median absolute deviation
    ignores the few jolts a stick-slip puts in. A sensor whose noise was low-passed before us
    reads low here, which errs toward no correction.
    """
    x = np.asarray(x, float)
    if x.size < 10:
        return 0.0
    d2 = x[2:] - 2 * x[1:-1] + x[:-2]
    return 1.4826 * float(np.median(np.abs(d2 - np.median(d2)))) / math.sqrt(6.0)


def derivative(x, t):
    """d/dt of samples `x` (along axis 0) at times `t`, fourth-order in the step.

    The central difference np.gradient takes reads a sine of frequency f low by about
    (2 pi f dt)^2 / 6: 1.6 % at 25 Hz sampled at 500 Hz, 6.4 % at 250 Hz. The inertia fit
    subtracts the link's torque M * qdd with that acceleration, and a link 100 times its
    armature (a G1 hip) turns a 0.03 % shortfall into 3 % of armature. Here each sample's
    derivative is that of the polynomial through it and its two neighbours each side (the
    five-point stencil on an even grid, (2 pi f dt)^4 / 30 low), with the samples' own times:
    a joint-state clock's jitter does not enter. The two samples at each end keep
    np.gradient's.
    """
    x = np.asarray(x, float)
    t = np.asarray(t, float)
    out = np.gradient(x, t, axis=0)
    if len(t) < 5:
        return out
    n = len(t) - 4
    nodes = [t[j:j + n] for j in range(5)]        # t_{k-2} .. t_{k+2} for each centre k
    centre = nodes[2]
    shape = (-1,) + (1,) * (x.ndim - 1)
    acc = np.zeros((n,) + x.shape[1:])
    for j in range(5):
        if j == 2:
            w = sum(1.0 / (centre - nodes[m]) for m in range(5) if m != 2)
        else:
            w = 1.0 / (nodes[j] - centre)
            for m in range(5):
                if m not in (j, 2):
                    w = w * (centre - nodes[m]) / (nodes[j] - nodes[m])
        acc += w.reshape(shape) * x[j:j + n]
    out[2:-2] = acc
    return out


def accel_noise_gain(fs, filter_hz):
    """Variance of `derivative(lowpass(w))` per unit variance of a white `w` sampled at fs.

    Zero-phase Butterworth (|H|^2 per pass, so |H|^4 in power) times the five-point
    derivative ((8 sin(w) - sin(2w)) / 6 / dt); integrated over the Nyquist band.
    """
    b, a = signal.butter(4, min(filter_hz / (fs / 2), 0.95))
    w, h = signal.freqz(b, a, worN=4096)
    power = np.abs(h)**4 * ((8 * np.sin(w) - np.sin(2 * w)) / 6 * fs)**2
    return float(np.trapezoid(power, w) / np.pi)


# A joint counts as stuck (held by its dry friction) where its velocity, low-passed at
# STUCK_FILTER_HZ, stays under STUCK_SPEED rad/s or under 4 x that filtered velocity's noise.
STUCK_FILTER_HZ = 50.0
STUCK_SPEED = 0.01
# Refits with the stuck samples' holding torque taken out (_inertia_regression); 0: none.
STICTION_PASSES = 2


def _stuck(rec, i, fs, excite):
    """Samples where joint i stands still (its friction is not Fc * sign(qd) there), and the
    sign of its motion elsewhere (from the velocity low-passed at STUCK_FILTER_HZ)."""
    v = lowpass(rec.velocity[:, i], fs, STUCK_FILTER_HZ)
    noise = white_noise_std(rec.velocity[excite, i]) * math.sqrt(
        min(1.0, STUCK_FILTER_HZ / (fs / 2)))
    stuck = np.abs(v) < max(STUCK_SPEED, 4.0 * noise)
    return stuck, np.where(stuck, 0.0, np.sign(v))


def _inertia_solve(X, y, var_n, inertia):
    """OLS with Newey-West covariance, then the errors-in-variables correction of the
    acceleration column (see _inertia_regression); returns theta, cov, r, cond, lag."""
    theta, cov, r, cond, lag = ols_hac(X, y)
    n = len(y)
    XtX = X.T @ X
    XtX[0, 0] -= n * var_n
    Xty = X.T @ y
    Xty[0] += inertia * n * var_n
    if var_n > 0 and XtX[0, 0] > 0.5 * n * np.mean(X[:, 0]**2):   # noise well below signal
        theta = np.linalg.solve(XtX, Xty)
        r = y - X @ theta
    return theta, cov, r, cond, lag


def _inertia_regression(rec, nominal, i, excite, fs, filter_hz, min_speed, joint,
                        effort_lag_s=None):
    """Filtered LS of the multi-sine's torque on the joint's acceleration, velocity, dry
    friction, an offset and an effort time offset; returns theta, cov, r, cond, lag, y.

    The acceleration is the derivative of the measured velocity: its noise is in the
    regressor and, times the joint's whole inertia M (the rigid part subtracted from the
    torque uses the same noisy acceleration), in the torque left over. Least squares then
    reads the armature low by about M * var(noise) / var(qdd): 5-10 % of a G1 hip's armature
    (0.007 under 0.9 kg*m^2 of leg) at its velocity noise. The noise variance is measured on
    the recording (white_noise_std) and taken out (an errors-in-variables correction).

    Stiction: a joint whose dry friction is large against its inertia torque stands still for
    a part of the multi-sine (a light G1 ankle with 0.8 N*m of Coulomb friction: 27 % of
    it), and there its friction is whatever holds it, not Fc * sign(qd). The filter smears
    that torque over the moving samples around (the samples near zero speed are left out,
    but the smear is longer), and it read such an ankle's armature 10-13 % low on a
    noise-free recording. So, STICTION_PASSES times: on the stuck samples (_stuck) the
    torque is replaced by the one the current fit gives a moving joint there (the friction
    that held it taken out, before the filter), the dry-friction column is zero there, and
    the fit is made again. The armature's noise-free error over the wide draw (15 seeds, 12
    legs): p95 4.3 -> 3.0 %.

    The effort's time offset: an effort reading is the torque over the last control step,
    half a step behind the motion sample, and a joint's viscous torque read against an
    acceleration half a step off passes for armature (damping * offset: a G1 knee with 2.84
    N*m*s/rad at a 2 ms step, 16 % of its 0.018 kg*m^2). With `effort_lag_s` (that step)
    the offset is half of it, taken out of the torque; without, it is fit (last column). A
    knee whose friction makes it stick and slip fit 0.2 ms for 1 ms and read its armature
    15 % low; estimate_inertia widens the interval by how far the fit offset moves it.
    """
    qf = lowpass(rec.position, fs, filter_hz)
    qdf = lowpass(rec.velocity, fs, filter_hz)
    qddf = derivative(qdf, rec.t)
    slow = _dilate(np.abs(qdf[:, i]) < min_speed, int(round(0.01 * fs)))
    edge = int(round(2.0 * fs / filter_hz))
    use = excite & ~slow
    use[:edge] = False
    use[-edge:] = False
    if np.count_nonzero(use) < 100:
        raise IdentificationError('not enough excitation', f'{joint}: only '
                                  f'{np.count_nonzero(use)} moving samples')
    var_n = white_noise_std(rec.velocity[excite, i])**2 * accel_noise_gain(fs, filter_hz)
    inertia = float(nominal.mass_diagonal(np.median(qf[use], axis=0))[i])
    stuck, moving_sign = _stuck(rec, i, fs, excite)
    stiction_passes = STICTION_PASSES if stuck[excite].any() else 0
    rigid_all = (nominal.inverse_dynamics(qf, qdf, qddf)[:, i] if stiction_passes
                 else None)
    rigid = (rigid_all[use] if rigid_all is not None else
             nominal.inverse_dynamics(qf[use], qdf[use], qddf[use])[:, i])

    def fit(effort, sign):
        tauf = lowpass(effort, fs, filter_hz)
        sf = lowpass(sign, fs, filter_hz)
        y = tauf[use] - rigid
        # Last column: a small time offset between the effort and the motion samples (an
        # effort reading is the torque of the last control step; a joint state is the end of
        # it): the measured torque is tau(t - dt_e) ~ tau(t) - dt_e * dtau/dt.
        X = np.column_stack([qddf[use, i], qdf[use, i], sf[use], np.ones(len(y)),
                             -derivative(tauf, rec.t)[use]])
        if not effort_lag_s:
            return _inertia_solve(X, y, var_n, inertia) + (y,)
        # The offset known (half the step the effort averages over): taken out of the
        # torque, not fit.
        half = 0.5 * float(effort_lag_s)
        theta, cov, r, cond, lag = _inertia_solve(X[:, :4], y - half * X[:, 4], var_n,
                                                  inertia)
        full = np.zeros((5, 5))
        full[:4, :4] = cov
        return np.append(theta, half), full, r, cond, lag, y

    effort = rec.effort[:, i]
    theta, cov, r, cond, lag, y = fit(effort, np.sign(qdf[:, i]))
    for _ in range(stiction_passes):
        moving = rigid_all + theta[0] * qddf[:, i] + theta[1] * qdf[:, i] + theta[3]
        # read as the effort is: its time offset too (else the stuck samples, a quarter of
        # a sticking knee's, say the offset is 0, and the armature takes damping * offset)
        moving = moving - theta[4] * derivative(moving, rec.t)
        theta, cov, r, cond, lag, y = fit(np.where(stuck, moving, effort), moving_sign)
    return theta, cov, r, cond, lag, y


def latency_window(rec, i, nominal, excite, filter_hz, max_s=None, accel_hz=None,
                   velocity=None):
    """The window the latency fit simulates joint `i` over, and the rest of the arm's part in it.

    From 50 ms before the excitation to its end (or `max_s` after its start). Returns (k0, the
    filtered velocities, the window slice, the torque of the other joints' motion on joint i,
    gravity's slope at the joint (N*m/rad), the link's own inertia at the window's median pose).
    The other joints' accelerations are differentiated from the unfiltered velocities: joint
    i's own dry friction puts steps into them (each stick and slip of a hip jerks the held
    knee and ankle) and a `filter_hz` low-pass smears those steps into the torque the
    simulation integrates; on the G1's hip pitch (noise off) that read the latency 0.09 ms
    late (0.13 ms with a 40 Hz filter, 0.04 ms without; 0.04 ms also without friction).
    `accel_hz` low-passes them all the same and `velocity` replaces the measured velocities
    (estimate_latency's model-error terms).
    """
    fs = 1.0 / float(np.median(np.diff(rec.t)))
    qf = lowpass(rec.position, fs, filter_hz)
    qd_raw = np.asarray(rec.velocity if velocity is None else velocity, float)
    qdf = lowpass(qd_raw, fs, filter_hz)
    qddf = np.gradient(qd_raw if accel_hz is None else lowpass(qd_raw, fs, accel_hz),
                       rec.t, axis=0)
    k0 = max(0, excite[0] - int(0.05 * fs))
    k1 = excite[-1] + 1 if max_s is None else min(excite[-1] + 1, excite[0] + int(max_s * fs))
    win = slice(k0, k1)
    qdd_rest = qddf[win].copy()
    qdd_rest[:, i] = 0.0
    rest = nominal.inverse_dynamics(qf[win], qdf[win], qdd_rest)[:, i]
    delta = np.zeros(len(rec.names))
    delta[i] = 1e-4
    zero = np.zeros_like(qf[win])
    slope = (nominal.inverse_dynamics(qf[win] + delta, zero, zero)[:, i]
             - nominal.inverse_dynamics(qf[win] - delta, zero, zero)[:, i]) / 2e-4
    link = nominal.mass_diagonal(np.median(qf[win], axis=0))[i]
    return k0, (qf, qdf), win, rest, slope, link


INPUT_NOISE_REPLICATES = 4


def _input_noise_std(rec, i, nominal, excite, filter_hz, fine, d, best, cost):
    """How far the best delay moves when the other joints' velocities get their noise again.

    The simulation takes the other joints' measured motion as its input (their coupling
    torque), noise included: an output-error interval does not count that noise, and through
    the joint's dry friction it moves the delay (it shakes a sticking joint loose). Each
    replicate adds white noise of the level measured on each other joint (robust spread of
    its sample-to-sample velocity differences / sqrt 2) and refits; returns the RMS of the
    moves (their mean is part of it: on the G1's hip pitch they are 0.01-0.05 ms, mostly
    late). Replicates use a fixed seed, so a recording always gives the same interval.
    """
    vel = np.asarray(rec.velocity, float)
    dv = np.diff(vel, axis=0)
    sigma = 1.4826 * np.median(np.abs(dv - np.median(dv, axis=0)), axis=0) / math.sqrt(2)
    sigma[i] = 0.0
    if not np.any(sigma > 0):
        return 0.0
    rng = np.random.default_rng(0)
    moves = []
    for _ in range(INPUT_NOISE_REPLICATES):
        noisy = vel + rng.normal(0.0, 1.0, vel.shape) * sigma
        coupling = latency_window(rec, i, nominal, excite, filter_hz, velocity=noisy)[3]
        moves.append(best(fine, cost(fine, coupling=coupling)) - d)
    return float(np.sqrt(np.mean(np.square(moves))))


def estimate_latency(rec, experiment, nominal, joint_params, kp, kd, physics_dt,
                     max_latency=0.06, torque_limit=None, coarse_s=1.0, filter_hz=40.0):
    """Command transport delay by aligning measured and simulated velocity (sub-sample).

    The identified joint (nominal links + joint_params: armature, viscous_damping,
    coulomb_friction of this joint) is simulated from the recorded commands delayed by d, with
    the other joints as measured; d minimises the velocity output error. The servo's own lag
    is in the simulation, so it is not counted as delay. Coarse grid (1 ms) on the first
    `coarse_s` of the excitation, then a 0.1 ms grid on all of it and a parabola through the
    minimum.

    The interval combines three parts: the measurement noise (Newey-West on the velocity
    output error), the joint parameters' own uncertainty (propagated through the simulation)
    and a model-error part measured from the data: how far the best delay moves when the
    other joints' accelerations (their coupling torque on this joint) are low-passed at
    `filter_hz` instead of differentiated raw. A joint whose coupling the one-joint
    simulation gets right does not care (the G1's ankle roll moves < 0.01 ms); the G1's hip
    pitch, whose dry friction jerks the held knee and ankle, moves 0.05-0.1 ms, of the order
    of the bias its estimate keeps (0.04-0.18 ms late over seeds 1000-1004).
    """
    rec.validate()
    i = experiment.index
    joint = experiment.joint
    seg, _, _ = sample_labels(rec, experiment)
    excite = np.nonzero(seg >= 0)[0]
    if excite.size < 100:
        raise IdentificationError('not enough excitation', f'{joint}: no excitation samples')
    lim = np.inf if torque_limit is None else float(torque_limit)
    _check_saturation(rec.effort[:, i], lim, seg >= 0, joint)
    rms_v = float(np.sqrt(np.mean(rec.velocity[excite, i]**2)))
    if rms_v < 0.05:
        # Say what held it: a joint whose dry friction the PD's torque swing hardly passes
        # sticks through a multi-sine whose amplitude the acceleration limit set (a G1 ankle
        # with 1.2 N*m of Coulomb friction at 20 rad/s^2).
        tau = rec.effort[excite, i]
        swing = float(np.max(np.abs(tau - np.median(tau))))
        fc = float(np.asarray(joint_params.get('coulomb_friction', [0.0] * (i + 1)))[i])
        why = (f'; its Coulomb friction {fc:.3g} N*m against a torque swing of {swing:.3g} '
               'N*m: a larger acceleration_limit or velocity_limit for this joint in '
               'latency_id (inside the SysID limits) moves it' if fc > 0.3 * swing else
               f' (torque swing {swing:.3g} N*m: a blocked joint, or commands that did not '
               'reach the robot)')
        raise IdentificationError('joint did not move', f'{joint}: RMS velocity {rms_v:.4f} '
                                  'rad/s during the excitation' + why)
    fs = 1.0 / float(np.median(np.diff(rec.t)))
    k0, (qf, qdf), win, rest, slope, link = latency_window(rec, i, nominal, excite, filter_hz)
    theta = np.array([joint_params['armature'][i], joint_params['viscous_damping'][i],
                      joint_params['coulomb_friction'][i]])
    theta_std = np.array([joint_params.get('armature_std', np.zeros(len(rec.names)))[i],
                          joint_params.get('viscous_damping_std', np.zeros(len(rec.names)))[i],
                          joint_params.get('coulomb_friction_std',
                                           np.zeros(len(rec.names)))[i]])
    sample_t = rec.t[win]
    meas = rec.velocity[win, i]
    cols = np.column_stack([rec.cmd_position[:, i], rec.cmd_velocity[:, i],
                            rec.cmd_effort[:, i]])

    def simulate(delays, n=None, params=None, coupling=None):
        st = sample_t if n is None else sample_t[:n]
        m = len(st)
        a, fv, fc = theta if params is None else params
        tau_rest = rest if coupling is None else coupling
        _, qd = simulate_joint(st, qf[win][:m, i], tau_rest[:m], slope[:m], link + a, fv, fc,
                               kp[i], kd[i], rec.cmd_t, cols, physics_dt, delays,
                               qd0=qdf[k0, i], torque_limit=lim, stiction=STICTION)
        return qd

    def cost(delays, n=None, coupling=None):
        sim = simulate(delays, n, coupling=coupling)
        m = sim.shape[0]
        return np.sum((sim - meas[:m, None])**2, axis=0)

    def best(fine, c):
        k = int(np.clip(np.argmin(c), 2, len(fine) - 3))
        a2, a1, _ = np.polyfit(fine[k - 2:k + 3] - fine[k], c[k - 2:k + 3], 2)
        return float(fine[k] - a1 / (2 * a2)) if a2 > 0 else float(fine[k])

    n_coarse = min(len(sample_t), int(coarse_s * fs) + (excite[0] - k0))
    grid = np.arange(0.0, max_latency + 1e-9, 0.001)
    d0 = float(grid[int(np.argmin(cost(grid, n_coarse)))])
    fine = np.arange(max(0.0, d0 - 0.0015), min(max_latency, d0 + 0.0015) + 1e-9, 1e-4)
    d = best(fine, cost(fine))
    if d <= 2e-4 or d >= max_latency - 2e-4:
        raise IdentificationError('not enough excitation', f'{joint}: best delay {d * 1e3:.2f} '
                                  f'ms is at the search bound [0, {max_latency * 1e3:.0f}] ms')
    # Interval: measurement part (Newey-West on the output error) plus the part the joint
    # parameters' own uncertainty brings (first-order propagation through the simulation).
    h = 2e-4
    dth = np.maximum(np.abs(theta) * 0.02, 1e-4)
    cols_d = np.array([d - h, d, d + h, d, d, d])
    params = np.tile(theta[:, None], (1, 6))
    for k in range(3):
        params[k, 3 + k] += dth[k]
    sims = simulate(cols_d, params=params)
    sens = (sims[:, 2] - sims[:, 0]) / (2 * h)
    r = meas - sims[:, 1]
    step, cov, _, _, lag = ols_hac(sens[:, None], r)
    dd_dtheta = np.array([-(sens @ (sims[:, 3 + k] - sims[:, 1])) / dth[k] / (sens @ sens)
                          for k in range(3)])
    std_noise = float(np.sqrt(cov[0, 0]))
    std_params = float(np.sqrt(np.sum((dd_dtheta * theta_std)**2)))
    # Model-error part: the best delay with the coupling torque's accelerations low-passed.
    smeared = latency_window(rec, i, nominal, excite, filter_hz, accel_hz=filter_hz)[3]
    std_model = abs(best(fine, cost(fine, coupling=smeared)) - d)
    std_input = _input_noise_std(rec, i, nominal, excite, filter_hz, fine, d, best, cost)
    std = float(np.sqrt(std_noise**2 + std_params**2 + std_model**2 + std_input**2))
    if std * _z() > 0.005:
        raise IdentificationError('not enough excitation', f'{joint}: delay {d * 1e3:.2f} ms '
                                  f'+- {std * _z() * 1e3:.1f} ms; excite more or faster')
    method = 'multi-sine, output-error alignment with the identified joint simulation'
    est = {'latency': _estimate('latency', d, std, 's', method)}
    return Fit('latency', joint, est, float(np.sqrt(np.mean(r**2))), float(np.max(np.abs(r))),
               _r2(meas, r), 1.0, len(r),
               {'hac_lag': lag, 'coarse_delay': d0, 'gauss_newton_step': float(step[0]),
                'std_noise': std_noise, 'std_from_params': std_params,
                'std_model': std_model, 'std_input_noise': std_input,
                'joint_params': {'armature': float(theta[0]), 'viscous_damping': float(theta[1]),
                                 'coulomb_friction': float(theta[2])}})

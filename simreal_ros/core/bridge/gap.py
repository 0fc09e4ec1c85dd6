"""Reality gap: how far a simulated replay is from what the robot measured.

- Alignment: one time shift for the run, the integer sample lag that maximises the normalised
  cross-correlation of simulated and measured joint velocities (mean removed) within
  +-`max_shift_s`; it is reported, and the error is computed on the overlapping samples.
- NRMSE per joint and quantity (position, velocity): RMS error / standard deviation of the
  measured signal. Overall per quantity it is pooled over joints, sqrt(sum MSE / sum variance),
  so a joint that barely moved cannot dominate; `overall` is the mean of the two quantities.
- Noise floor: the NRMSE a perfect simulator would score, sensor noise / signal spread. The
  noise of each channel is estimated from the data itself: the residual of a local cubic
  (Savitzky-Golay) smoother, robust (median absolute deviation) and corrected for the part of
  the noise the smoother keeps (variance factor 1 - c0, c0 its centre weight).
- Gate: pass when the overall NRMSE <= threshold (default 0.15).
"""
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy import signal

QUANTITIES = ('position', 'velocity')
DEFAULT_THRESHOLD = 0.15


def noise_std(x, window=9, order=5):
    """Estimate white sensor noise std per column of x (samples x channels)."""
    x = np.atleast_2d(np.asarray(x, float).T).T
    if x.shape[0] < 3 * window:
        raise ValueError(f'{x.shape[0]} samples: too few to estimate the noise floor '
                         f'(need >= {3 * window})')
    smooth = signal.savgol_filter(x, window, order, axis=0)
    c0 = signal.savgol_coeffs(window, order)[window // 2]
    r = (x - smooth)[window:-window]
    mad = np.median(np.abs(r - np.median(r, axis=0)), axis=0)
    return 1.4826 * mad / np.sqrt(1.0 - c0)


def align_shift(sim, meas, dt, max_shift_s=0.05):
    """Integer lag (samples) of `meas` relative to `sim` maximising the velocity correlation.

    Positive lag: the measurement happens later than the simulation (meas[k + lag] ~ sim[k]).
    """
    sim = np.asarray(sim, float) - np.mean(sim, axis=0)
    meas = np.asarray(meas, float) - np.mean(meas, axis=0)
    n = len(sim)
    max_lag = int(min(round(max_shift_s / dt), n // 4))
    best, best_lag = -np.inf, 0
    for lag in range(-max_lag, max_lag + 1):
        a, b = (sim[:n - lag], meas[lag:]) if lag >= 0 else (sim[-lag:], meas[:n + lag])
        den = np.sqrt(np.sum(a * a) * np.sum(b * b))
        c = np.sum(a * b) / den if den > 0 else 0.0
        if c > best + 1e-12:
            best, best_lag = c, lag
    return best_lag


def _overlap(lag, n):
    if lag >= 0:
        return slice(0, n - lag), slice(lag, n)
    return slice(-lag, n), slice(0, n + lag)


@dataclass
class GapResult:
    """Reality gap of one replay against one recording."""

    label: str
    names: list
    nrmse: dict            # quantity -> per-joint list
    overall: dict          # quantity -> pooled value, plus 'overall'
    noise_floor: dict      # quantity -> pooled floor, plus 'overall'; 'per_joint'
    shift_s: float
    shift_samples: int
    threshold: float
    samples: int
    extras: dict = field(default_factory=dict)

    @property
    def value(self):
        return self.overall['overall']

    @property
    def passed(self):
        return bool(self.value <= self.threshold)

    def to_dict(self):
        out = asdict(self)
        out['value'] = self.value
        out['passed'] = self.passed
        return out

    def summary(self):
        verdict = 'PASS' if self.passed else 'FAIL'
        return (f'{self.label}: gap {100 * self.value:.2f} % ({verdict} at '
                f'{100 * self.threshold:.0f} %), position {100 * self.overall["position"]:.2f} '
                f'%, velocity {100 * self.overall["velocity"]:.2f} %, noise floor '
                f'{100 * self.noise_floor["overall"]:.2f} %, shift {1e3 * self.shift_s:+.1f} ms')


def evaluate(rec, sim_q, sim_dq, names=None, threshold=DEFAULT_THRESHOLD, max_shift_s=0.05,
             label='model', skip_s=0.0):
    """Score a replay (sim_q, sim_dq at the recording's samples) against the measurement.

    names: joints to score (default: all of the recording's, in the replay's column order).
    skip_s: leave out the first seconds (the initial-state transient of the replay).
    """
    names = list(rec.names) if names is None else list(names)
    idx = [rec.names.index(n) for n in names]
    t = np.asarray(rec.t, float)
    if not np.all(np.isfinite(sim_q)) or not np.all(np.isfinite(sim_dq)):
        raise ValueError(f'{label}: the replay diverged (non-finite state)')
    dt = float(np.median(np.diff(t)))
    first = int(np.searchsorted(t, t[0] + skip_s))
    meas = {'position': np.asarray(rec.position, float)[first:, idx],
            'velocity': np.asarray(rec.velocity, float)[first:, idx]}
    sim = {'position': np.asarray(sim_q, float)[first:], 'velocity': np.asarray(sim_dq,
                                                                               float)[first:]}
    lag = align_shift(sim['velocity'], meas['velocity'], dt, max_shift_s)
    s_sim, s_meas = _overlap(lag, len(meas['velocity']))
    nrmse, overall, floor, floor_joint = {}, {}, {}, {}
    for key in QUANTITIES:
        m = meas[key][s_meas]
        e = sim[key][s_sim] - m
        var = np.var(m, axis=0)
        var_safe = np.where(var > 0, var, np.inf)
        mse = np.mean(e**2, axis=0)
        sigma = noise_std(meas[key])
        nrmse[key] = np.sqrt(mse / var_safe).tolist()
        overall[key] = float(np.sqrt(np.sum(mse) / np.sum(var))) if np.sum(var) > 0 else \
            float('inf')
        floor[key] = float(np.sqrt(np.sum(sigma**2) / np.sum(var))) if np.sum(var) > 0 else \
            float('inf')
        floor_joint[key] = np.sqrt(sigma**2 / var_safe).tolist()
    overall['overall'] = float(np.mean([overall[k] for k in QUANTITIES]))
    floor['overall'] = float(np.mean([floor[k] for k in QUANTITIES]))
    floor['per_joint'] = floor_joint
    return GapResult(label, names, nrmse, overall, floor, lag * dt, int(lag), float(threshold),
                     int(len(meas['velocity'][s_meas])))

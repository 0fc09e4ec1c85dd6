"""What a SysID fit looked like, small enough to travel with its result: the report's plots.

Each experiment's estimate comes with a compact curve (`fit_curve`), stored in the result
mapping under `fit_curve` (records.result_documents) so that a report drawn anywhere (the
`simreal` CLI, the demo, a reviewer's machine) plots the fit from the result YAML alone:

- friction: per commanded speed the mean measured friction torque (torque minus the nominal
  rigid-body torque, the fitted acceleration term and offset) with its spread, against the
  fitted Coulomb + viscous line; the misfit is their difference per speed;
- inertia: the filtered torque the regression explains against the torque the fitted
  armature, friction and offset predict, on at most `POINTS` of its samples;
- latency: the joint's measured velocity against the identified joint simulated from the
  commands at the identified delay and at no delay (the first `LATENCY_WINDOW_S` of the
  excitation).

Numbers are rounded (the plot's needs, not the estimate's: the estimate is in `value`).
"""
import numpy as np

from simreal_ros.core.sysid import estimators as est
from simreal_ros.core.sysid.model import simulate_joint, STICTION

POINTS = 300             # samples kept of an inertia fit
LATENCY_WINDOW_S = 0.6   # of the latency excitation, plotted
DIGITS = 5


def _round(values):
    return [round(float(v), DIGITS) for v in np.asarray(values, float).reshape(-1)]


def _thin(n, points=POINTS):
    return np.unique(np.linspace(0, n - 1, min(n, points)).round().astype(int))


def friction_curve(rec, experiment, nominal, fit):
    """Mean friction torque per commanded speed, its spread, and the fitted line."""
    i = experiment.index
    seg, steady, speed = est.sample_labels(rec, experiment)
    qd = rec.velocity[:, i]
    steady = steady & (np.abs(qd - speed) <= 0.25 * np.abs(speed))
    steady &= ~est._after_command_gaps(rec, 0.2)
    fs = 1.0 / float(np.median(np.diff(rec.t)))
    qf = est.lowpass(rec.position, fs, 20.0)
    qdf = est.lowpass(rec.velocity, fs, 20.0)
    qddf = np.gradient(qdf, rec.t, axis=0)
    rigid = nominal.inverse_dynamics(qf[steady], qdf[steady], qddf[steady])[:, i]
    notes = fit.notes or {}
    y = (rec.effort[steady, i] - rigid - notes.get('acceleration_coefficient', 0.0)
         * qddf[steady, i] - notes.get('torque_offset', 0.0))
    fc = fit.value('coulomb_friction')
    fv = fit.value('viscous_damping')
    rows = []
    for v in np.unique(speed[steady]):
        sel = speed[steady] == v
        mean_v = float(np.mean(qd[steady][sel]))
        mean_t = float(np.mean(y[sel]))
        rows.append((mean_v, mean_t, float(np.std(y[sel])),
                     mean_t - (fc * np.sign(mean_v) + fv * mean_v), int(np.count_nonzero(sel))))
    rows.sort()
    cols = list(zip(*rows)) if rows else [[]] * 5
    return {'kind': 'friction', 'speed': _round(cols[0]), 'torque': _round(cols[1]),
            'torque_std': _round(cols[2]), 'misfit': _round(cols[3]),
            'samples': [int(n) for n in cols[4]], 'coulomb': float(fc), 'viscous': float(fv)}


def inertia_curve(rec, experiment, nominal, fit):
    """Measured (filtered) torque against the fitted model's torque, thinned to POINTS.

    The measured torque is the fit's own: where the joint stood still its holding torque
    was taken out before the filter (estimators._inertia_regression)."""
    i = experiment.index
    seg, _, _ = est.sample_labels(rec, experiment)
    fs = 1.0 / float(np.median(np.diff(rec.t)))
    filter_hz = float((fit.notes or {}).get('filter_hz', 25.0))
    _, _, r, _, _, y = est._inertia_regression(rec, nominal, i, seg >= 0, fs, filter_hz, 0.05,
                                               experiment.joint,
                                               (fit.notes or {}).get('effort_lag_s'))
    k = _thin(len(y))
    return {'kind': 'inertia', 'measured': _round(y[k]), 'model': _round((y - r)[k]),
            'armature': float(fit.value('armature')), 'r_squared': float(fit.r_squared)}


def latency_curve(rec, experiment, nominal, fit, kp, kd, physics_dt, torque_limit=np.inf):
    """Measured velocity vs the identified joint simulated at the found delay and at none."""
    i = experiment.index
    seg, _, _ = est.sample_labels(rec, experiment)
    excite = np.nonzero(seg >= 0)[0]
    k0, (qf, qdf), win, rest, slope, link = est.latency_window(rec, i, nominal, excite, 40.0,
                                                               LATENCY_WINDOW_S)
    cols = np.column_stack([rec.cmd_position[:, i], rec.cmd_velocity[:, i],
                            rec.cmd_effort[:, i]])
    delay = float(fit.value('latency'))
    joint = fit.notes['joint_params']   # what the fit simulated this joint with
    _, sim = simulate_joint(rec.t[win], qf[win, i], rest, slope, link + joint['armature'],
                            joint['viscous_damping'], joint['coulomb_friction'], kp[i], kd[i],
                            rec.cmd_t, cols, physics_dt, [delay, 0.0], qd0=qdf[k0, i],
                            torque_limit=torque_limit, stiction=STICTION)
    t = rec.t[win] - rec.t[excite[0]]
    return {'kind': 'latency', 't': _round(t), 'measured': _round(rec.velocity[win, i]),
            'identified': _round(sim[:, 0]), 'no_delay': _round(sim[:, 1]),
            'latency_s': delay}


def fit_curve(kind, rec, experiment, nominal, fit, kp, kd, physics_dt, torque_limit=np.inf):
    """The compact curve of one fit (see the module docstring); kind as the experiment."""
    if kind == 'friction':
        return friction_curve(rec, experiment, nominal, fit)
    if kind == 'inertia':
        return inertia_curve(rec, experiment, nominal, fit)
    return latency_curve(rec, experiment, nominal, fit, kp, kd, physics_dt, torque_limit)

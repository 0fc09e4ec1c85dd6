"""Seed baselines: the naive methods this project started from, run on the same recordings.

They exist so the benchmark can say how much better the real estimators are; nothing else
should use them.
- `baseline_friction`: steady-state torque at constant speed, raw effort, one direction:
  Coulomb = torque at the slowest speed, viscous = slope between the slowest and fastest.
- `baseline_inertia`: torque / acceleration at the single sample of largest measured
  acceleration (finite difference of velocity); armature = that minus the link inertia.
- `baseline_latency`: time from the first command change until the joint has moved more
  than a threshold.
"""
import numpy as np

from simreal_ros.core.sysid.estimators import sample_labels


def baseline_friction(rec, experiment):
    """Return {'coulomb_friction', 'viscous_damping'} by the naive steady-state method."""
    i = experiment.index
    _, steady, speed = sample_labels(rec, experiment)
    positive = sorted(v for v in np.unique(speed[steady]) if v > 0)
    tau = {v: float(np.mean(rec.effort[steady & (speed == v), i])) for v in positive}
    slow, fast = positive[0], positive[-1]
    return {'coulomb_friction': tau[slow],
            'viscous_damping': (tau[fast] - tau[slow]) / (fast - slow)}


def baseline_inertia(rec, experiment, nominal):
    """Return {'armature', 'effective_inertia'} from one torque / acceleration ratio."""
    i = experiment.index
    seg, _, _ = sample_labels(rec, experiment)
    acc = np.gradient(rec.velocity[:, i], rec.t)
    acc[seg < 0] = 0.0
    k = int(np.argmax(np.abs(acc)))
    j = float(rec.effort[k, i] / acc[k])
    link = nominal.mass_diagonal(rec.position[k])[i]
    return {'effective_inertia': j, 'armature': j - link}


def baseline_latency(rec, experiment, threshold=0.002):
    """Return {'latency'}: first command change until |q - q_start| > threshold (rad)."""
    i = experiment.index
    c = rec.cmd_position[:, i]
    start = np.nonzero(np.abs(c - c[row_before(rec.cmd_t, experiment.excitation_start)])
                       > 1e-9)[0]
    start = start[start >= np.searchsorted(rec.cmd_t, experiment.excitation_start)]
    if start.size == 0:
        return {'latency': float('nan')}
    t_cmd = rec.cmd_t[start[0]]
    k0 = np.searchsorted(rec.t, t_cmd)
    moved = np.nonzero(np.abs(rec.position[k0:, i] - rec.position[k0, i]) > threshold)[0]
    if moved.size == 0:
        return {'latency': float('nan')}
    return {'latency': float(rec.t[k0 + moved[0]] - t_cmd)}


def row_before(times, t):
    return max(0, int(np.searchsorted(times, t, side='right')) - 1)

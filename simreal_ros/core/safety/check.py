"""An independent checker of the limit filter's contract, for property tests and the bench.

`limit_violations` states, from the outside, what a safe output is: it does not reuse the
filter's arithmetic, only the definitions (soft range, rate window, velocity and effort bounds,
the implied torque and its allowed window). It also checks that the filter does not alter a
command that is already within every limit (stage 1.00 lockstep parity).
"""
import numpy as np

from simreal_ros.core.safety.limits import implied_torque, torque_window

REL = 1e-9


def limit_violations(limits, scale, cmd, out, q, dq, previous_target, dt, slack=1.0):
    """Return a list of violation texts (empty = the output respects every limit).

    Each bound is allowed `slack` x (1e-9 + 1e-9 |bound|) for rounding; `slack=0` judges
    exactly (used to decide whether a command was within every limit before filtering).
    """
    with np.errstate(all='ignore'):
        return _violations(limits, scale, cmd, out, q, dq, previous_target, dt, slack)


def _violations(limits, scale, cmd, out, q, dq, previous_target, dt, slack):
    def _tol(x):
        return slack * (1e-9 + REL * np.abs(x))
    bad = []
    if not np.array_equal(cmd.index, out.index):
        return ['output names differ from the command names']
    i = out.index
    for key in ('position', 'velocity', 'effort'):
        a, b = getattr(cmd, key), getattr(out, key)
        if (a is None) != (b is None):
            bad.append(f'field {key} added or removed')
        elif b is not None and not np.all(np.isfinite(b)):
            bad.append(f'{key} not finite')
    if bad:
        return bad
    vmax = limits.velocity_limit[i] * scale
    tmax = limits.torque_limit[i] * scale
    kp, kd = limits.kp[i], limits.kd[i]
    if out.velocity is not None and np.any(np.abs(out.velocity) > vmax + _tol(vmax)):
        bad.append(f'velocity target beyond {vmax.tolist()}: {out.velocity.tolist()}')
    if out.effort is not None and np.any(np.abs(out.effort) > tmax + _tol(tmax)):
        bad.append(f'effort beyond {tmax.tolist()}: {out.effort.tolist()}')
    lo, hi = torque_window(limits, scale, i, dq)
    tau = implied_torque(limits, out, q, dq)
    outside = ~((tau >= lo - _tol(lo)) & (tau <= hi + _tol(hi)))  # NaN counts as outside
    has_p = out.position is not None
    p_lo, p_hi = limits.position_lower[i], limits.position_upper[i]
    if has_p:
        beyond = (out.position < p_lo - _tol(p_lo)) | (out.position > p_hi + _tol(p_hi))
        for j in np.flatnonzero(beyond):
            bad.append(f'joint {i[j]}: target {out.position[j]:.6g} outside the position range '
                       f'[{p_lo[j]:.6g}, {p_hi[j]:.6g}]')
        # The range wins over the torque rule: where the torque-limited target lies beyond a
        # bound, the target sits at that bound (and the other knobs must do what they can).
        at_lo = np.isclose(out.position, p_lo, rtol=1e-9, atol=1e-12) & (tau > hi)
        at_hi = np.isclose(out.position, p_hi, rtol=1e-9, atol=1e-12) & (tau < lo)
        range_bound = (at_lo | at_hi) & (kp > 0)
    else:
        range_bound = np.zeros(i.size, dtype=bool)
    for j in np.flatnonzero(outside):
        if has_p and kp[j] > 0 and not range_bound[j]:
            bad.append(f'joint {i[j]}: implied torque {tau[j]:.6g} outside '
                       f'[{lo[j]:.6g}, {hi[j]:.6g}]')
            continue
        # Without a position knob: every other knob must be saturated towards the window.
        sign = 1.0 if tau[j] > hi[j] else -1.0  # the knobs must sit at -sign * bound
        if out.velocity is not None and kd[j] > 0 and not np.isclose(
                out.velocity[j], -sign * vmax[j], rtol=1e-9, atol=1e-12):
            bad.append(f'joint {i[j]}: torque {tau[j]:.6g} outside the window while the '
                       'velocity target could still reduce it')
        if out.effort is not None and not np.isclose(out.effort[j], -sign * tmax[j],
                                                     rtol=1e-9, atol=1e-12):
            bad.append(f'joint {i[j]}: torque {tau[j]:.6g} outside the window while the '
                       'effort could still reduce it')
    if has_p:
        p = out.position
        prev = previous_target[i]
        prev = np.where(np.isfinite(prev), prev, q[i])
        dt = np.asarray(dt, dtype=float)
        step = limits.max_target_rate[i] * scale * np.maximum(dt[i] if dt.ndim else dt, 0.0)
        f_lo = np.maximum(limits.position_lower[i], prev - step)
        f_hi = np.minimum(limits.position_upper[i], prev + step)
        empty = f_lo > f_hi
        # Rate window entirely outside the soft range: the range wins, at its nearest bound.
        near = np.where(prev + step < limits.position_lower[i], limits.position_lower[i],
                        limits.position_upper[i])
        f_lo = np.where(empty, near, f_lo)
        f_hi = np.where(empty, near, f_hi)
        rest = implied_torque(limits, out, q, dq) - np.where(kp > 0, kp * (p - q[i]), 0.0)
        with np.errstate(divide='ignore', invalid='ignore', over='ignore'):
            t_lo = q[i] + (lo - rest) / kp
            t_hi = q[i] + (hi - rest) / kp
        for j in range(i.size):
            if f_lo[j] - _tol(f_lo[j]) <= p[j] <= f_hi[j] + _tol(f_hi[j]):
                continue
            if kp[j] <= 0:
                bad.append(f'joint {i[j]}: target {p[j]:.6g} outside the soft/rate window '
                           f'[{f_lo[j]:.6g}, {f_hi[j]:.6g}]')
                continue
            forced = t_hi[j] < f_lo[j] or t_lo[j] > f_hi[j]
            endpoint = min(max(t_hi[j] if t_hi[j] < f_lo[j] else t_lo[j], p_lo[j]), p_hi[j])
            if not forced or abs(p[j] - endpoint) > 1e-7 + 1e-9 * abs(endpoint):
                bad.append(f'joint {i[j]}: target {p[j]:.6g} outside the soft/rate window '
                           f'[{f_lo[j]:.6g}, {f_hi[j]:.6g}] without the torque limit forcing it')
    return bad


def unchanged_when_within(limits, scale, cmd, out, q, dq, previous_target, dt):
    """Return a violation text when cmd already met every limit but out differs from it.

    "Met" is judged exactly: the rounding allowance is in the limited quantity's units, and a
    torque allowance of 1e-9 N*m is 1e-3 rad of position target for a kp of 1e-6 N*m/rad; a
    command that far past the torque window is rightly moved to its edge (the bench's property
    run found one such case in 24,637).
    """
    if limit_violations(limits, scale, cmd, cmd, q, dq, previous_target, dt, slack=0.0):
        return None
    for key in ('position', 'velocity', 'effort'):
        a, b = getattr(cmd, key), getattr(out, key)
        if a is not None and not np.allclose(a, b, rtol=1e-9, atol=1e-9):
            return f'{key} altered although the command was within every limit'
    return None

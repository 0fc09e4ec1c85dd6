"""Time series for plots: a line must not bridge a pause in a recording."""
import numpy as np

GAP_PERIODS = 5.0   # a time step this many nominal periods long is a pause, not jitter


def break_gaps(t, *columns, periods=GAP_PERIODS):
    """Return (t, *columns) with a NaN row inserted in every gap of `t`.

    A gap is a time step longer than `periods` times the nominal period (the median step), as
    when a session recording was paused: matplotlib does not join points across a NaN, so the
    line stops at the gap instead of drawing a straight segment over it. Each column has one
    row (axis 0) per time; an empty column (no efforts recorded) is returned as it is. The
    inserted time lies mid-gap, so `t` stays increasing.
    """
    t = np.asarray(t, dtype=float)
    cols = [np.asarray(c, dtype=float) for c in columns]
    for c in cols:
        if c.size and c.shape[0] != t.size:
            raise ValueError(f'break_gaps: a column has {c.shape[0]} rows for {t.size} times')
    if t.size < 3:
        return (t, *cols)
    steps = np.diff(t)
    nominal = float(np.median(steps))
    gaps = np.flatnonzero(steps > periods * nominal) if nominal > 0 else np.array([], int)
    if gaps.size == 0:
        return (t, *cols)
    at = gaps + 1
    out = [np.insert(t, at, t[gaps] + steps[gaps] / 2.0)]
    out += [np.insert(c, at, np.nan, axis=0) if c.size else c for c in cols]
    return tuple(out)

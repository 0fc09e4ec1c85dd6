"""Plots stop their lines where a recording paused (no process, no ROS)."""
import numpy as np
import pytest

from simreal_ros.core.series import break_gaps


def paused_recording():
    """500 Hz for 1 s, a 20 s pause (the demo's SysID step), 500 Hz for 1 s; jitter of 1.5x."""
    first = np.arange(500) * 0.002
    first[100] += 0.001                      # a late sample: jitter, not a pause
    second = 21.0 + np.arange(500) * 0.002
    t = np.concatenate([first, second])
    q = np.column_stack([np.sin(t), np.cos(t)])
    return t, q


def test_a_pause_gets_a_nan_row_and_nothing_else_does():
    t, q = paused_recording()
    tb, qb = break_gaps(t, q)
    assert len(tb) == len(t) + 1 and qb.shape == (len(t) + 1, 2)
    nan_rows = np.flatnonzero(np.isnan(qb).all(axis=1))
    assert nan_rows.tolist() == [500]                       # between the two parts only
    assert t[499] < tb[500] < t[500]                        # mid-pause, time still increasing
    assert np.all(np.diff(tb) > 0)
    assert np.array_equal(np.delete(qb, 500, axis=0), q)    # every sample kept, unchanged
    assert np.array_equal(np.delete(tb, 500), t)


def test_a_steady_series_and_an_empty_column_are_left_as_they_are():
    t = np.arange(100) * 0.01
    y = np.arange(100.0)
    empty = np.zeros((100, 0))
    tb, yb, eb = break_gaps(t, y, empty)
    assert np.array_equal(tb, t) and np.array_equal(yb, y) and eb.shape == (100, 0)
    with pytest.raises(ValueError, match='99 rows for 100 times'):
        break_gaps(t, y[:-1])


def test_the_demo_joint_plot_does_not_draw_across_the_pause():
    from simreal_ros.client import demo_report as demo
    t, q = paused_recording()
    tau = 2.0 * q
    fig = demo.joint_figure(t + 1000.0, ['a', 'b'], q, tau)
    try:
        for ax in fig.axes:
            for line in ax.get_lines():
                x = np.asarray(line.get_xdata(), float)
                y = np.asarray(line.get_ydata(), float)
                assert x[0] == 0.0                            # session time from the start
                # No drawn segment spans the pause: every step between two finite points
                # is short.
                ok = np.isfinite(y[:-1]) & np.isfinite(y[1:])
                assert ok.sum() == len(t) - 2
                assert np.max(np.diff(x)[ok]) < 0.01
    finally:
        import matplotlib.pyplot as plt
        plt.close(fig)

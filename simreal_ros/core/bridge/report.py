"""The HTML report a user looks at: trajectories, residuals, friction curves, estimates.

PNG plots (matplotlib, Agg backend) beside an `index.html` in the export folder:
- measured vs nominal vs identified position and velocity per joint that moved in the
  recording (held-out part);
- residuals (simulation - measurement) of both models, with the noise band;
- the friction torque curve (Coulomb + viscous) nominal vs identified, with the 95 % interval
  band, per joint that moved or has an identified interval;
- a table of estimates with intervals and the gap scores (every joint).

A joint held still is listed, not plotted: on a 12-joint G1 whose SysID recording moved one
knee, plotting all twelve took 23 s of an idle core (>60 s beside the running graph, the
`sim_bridge/export` call waiting on it); the moving knee alone, about 3 s.
"""
import html
import math
import os

import numpy as np

from simreal_ros.core.bridge.params import JOINT_KEYS, UNITS
from simreal_ros.core.bridge.refine import moving_joints
from simreal_ros.core.series import break_gaps


def _plt():
    try:
        import matplotlib
    except ModuleNotFoundError as exc:
        raise RuntimeError('the HTML report needs matplotlib (pip install matplotlib)') from exc
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    return plt


def write_report(out_dir, rec, sims, params, nominal, gaps, title='sim_bridge report',
                 extra_rows=None):
    """Write index.html and PNGs to out_dir; return the HTML path.

    sims: label -> (q, dq) replays of `rec`; gaps: label -> GapResult.
    """
    plt = _plt()
    os.makedirs(out_dir, exist_ok=True)
    names = list(params.names)
    moved = moving_joints(rec, names) or names
    shown = [i for i, name in enumerate(names) if name in moved]
    held = [name for name in names if name not in moved]
    idx = [rec.names.index(names[i]) for i in shown]
    t = np.asarray(rec.t)
    n = len(shown)
    colours = {'measured': 'k', 'nominal': 'tab:red', 'closed_form': 'tab:orange',
               'identified': 'tab:blue'}
    images = []
    for qi, (key, unit) in enumerate((('position', 'rad'), ('velocity', 'rad/s'))):
        meas = np.asarray(getattr(rec, key))[:, idx]
        # Lines stop at a pause of the recording instead of bridging it.
        tb, mb, *sb = break_gaps(t, meas, *(sim[qi] for sim in sims.values()))
        fig, axes = plt.subplots(n, 2, figsize=(12, 2.6 * n), squeeze=False)
        for j in range(n):
            ax, axr = axes[j]
            ax.plot(tb, mb[:, j], color='k', lw=1.2, label='measured')
            for label, sim in zip(sims, sb):
                ax.plot(tb, sim[:, shown[j]], lw=0.9, color=colours.get(label), label=label)
                axr.plot(tb, sim[:, shown[j]] - mb[:, j], lw=0.7, color=colours.get(label),
                         label=label)
            g = next(iter(gaps.values()))
            sigma = g.noise_floor['per_joint'][key][shown[j]] * float(np.std(meas[:, j]))
            axr.axhspan(-sigma, sigma, color='0.85', label='noise (1 sigma)')
            ax.set_ylabel(f'{names[shown[j]]}\n{key} ({unit})')
            axr.set_ylabel(f'residual ({unit})')
            if j == 0:
                ax.legend(fontsize=7, loc='upper right')
                axr.legend(fontsize=7, loc='upper right')
        axes[-1][0].set_xlabel('time (s)')
        axes[-1][1].set_xlabel('time (s)')
        fig.tight_layout()
        png = f'{key}.png'
        fig.savefig(os.path.join(out_dir, png), dpi=80)
        plt.close(fig)
        images.append((f'{key.capitalize()}: measured vs simulated, and residuals', png))
    # Friction curves: the joints shown above, and any with an identified interval.
    curves = [i for i in range(len(names)) if i in shown or any(
        math.isfinite(params.half_width(key)[i]) for key in ('frictionloss', 'damping'))]
    fig, axes = plt.subplots(1, len(curves), figsize=(4 * len(curves), 3.2), squeeze=False)
    v = np.linspace(-2.0, 2.0, 201)
    for ax, j in zip(axes[0], curves):
        for label, p, c in (('nominal', nominal, 'tab:red'), ('identified', params,
                                                                'tab:blue')):
            f = p.frictionloss[j] * np.sign(v) + p.damping[j] * v
            ax.plot(v, f, color=c, label=label)
        hf = params.half_width('frictionloss')[j]
        hd = params.half_width('damping')[j]
        if math.isfinite(hf) and math.isfinite(hd):
            f = params.frictionloss[j] * np.sign(v) + params.damping[j] * v
            band = hf + hd * np.abs(v)
            ax.fill_between(v, f - band, f + band, color='tab:blue', alpha=0.2,
                            label='95 % interval')
        ax.set_title(names[j])
        ax.set_xlabel('joint velocity (rad/s)')
        ax.set_ylabel('friction torque (N*m)')
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, 'friction.png'), dpi=80)
    plt.close(fig)
    images.append(('Friction torque: Coulomb (frictionloss) + viscous (damping)',
                   'friction.png'))
    # Estimates with intervals, every joint.
    n = len(names)
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
    for ax, key in zip(axes, JOINT_KEYS):
        val = getattr(params, key)
        half = np.nan_to_num(params.half_width(key))
        ax.errorbar(range(n), val, yerr=half, fmt='o', color='tab:blue', capsize=4,
                    label='identified (95 %)')
        ax.plot(range(n), getattr(nominal, key), 'x', color='tab:red', label='nominal')
        ax.set_xticks(range(n))
        ax.set_xticklabels(names, rotation=20, fontsize=8)
        ax.set_title(f'{key} ({UNITS[key]})')
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, 'estimates.png'), dpi=80)
    plt.close(fig)
    images.append(('Estimates with 95 % intervals', 'estimates.png'))
    if held:
        extra_rows = dict(extra_rows or {})
        extra_rows['held still in the recording (not plotted)'] = ', '.join(held)

    rows = []
    for i, joint in enumerate(names):
        for key in JOINT_KEYS:
            h = params.half_width(key)[i]
            rows.append((joint, key, f'{getattr(nominal, key)[i]:.5g}',
                         f'{getattr(params, key)[i]:.5g}',
                         f'&plusmn; {h:.2g}' if math.isfinite(h) else 'n/a', UNITS[key]))
    h = params.half_width('latency_s')
    rows.append(('(all)', 'latency_s', f'{nominal.latency_s:.5g}', f'{params.latency_s:.5g}',
                 f'&plusmn; {h:.2g}' if math.isfinite(h) else 'n/a', 's'))
    gap_rows = ''.join(
        f'<tr><td>{html.escape(label)}</td><td>{100 * g.value:.3f} %</td>'
        f'<td>{100 * g.overall["position"]:.3f} %</td><td>{100 * g.overall["velocity"]:.3f} %'
        f'</td><td>{100 * g.noise_floor["overall"]:.3f} %</td><td>{1e3 * g.shift_s:+.1f} ms</td>'
        f'<td>{"pass" if g.passed else "FAIL"} ({100 * g.threshold:.0f} %)</td></tr>'
        for label, g in gaps.items())
    extra = ''.join(f'<li>{html.escape(str(k))}: {html.escape(str(v))}</li>'
                    for k, v in (extra_rows or {}).items())
    page = [f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}'
            '</title><style>body{font-family:sans-serif;max-width:1250px;margin:auto}'
            'td,th{padding:2px 8px;border-bottom:1px solid #ddd}</style></head><body>',
            f'<h1>{html.escape(title)}</h1>',
            '<h2>Reality gap (NRMSE after cross-correlation alignment)</h2>',
            '<table><tr><th>model</th><th>gap</th><th>position</th><th>velocity</th>'
            f'<th>noise floor</th><th>shift</th><th>gate</th></tr>{gap_rows}</table>',
            f'<ul>{extra}</ul>',
            '<h2>Estimates</h2><table><tr><th>joint</th><th>parameter</th><th>nominal</th>'
            '<th>identified</th><th>95 % interval</th><th>units</th></tr>',
            ''.join('<tr>' + ''.join(f'<td>{c}</td>' for c in r) + '</tr>' for r in rows),
            '</table>']
    for caption, png in images:
        page.append(f'<h2>{html.escape(caption)}</h2><img src="{png}" style="max-width:100%">')
    page.append('</body></html>')
    path = os.path.join(out_dir, 'index.html')
    with open(path, 'w') as f:
        f.write('\n'.join(page))
    return path

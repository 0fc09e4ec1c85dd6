"""The SysID report: one self-contained HTML page a team pastes into a review.

`simreal sysid ...` and the demo both write it (`write_report`). It shows, from the SysID
results (the YAML mappings on `sysid/result`), sim_bridge's gap (`sim_bridge/gap`, its replay
traces file) and export (`sim_bridge/export`):

- per joint the identified parameters with their 95 % intervals against the nominal model (the
  MJCF's own values), the fit quality, and the failures;
- the fit plots: friction torque against speed with the fitted Coulomb + viscous line and the
  misfit per speed; the inertia fit (measured against model torque); the latency fit (measured
  velocity against the identified joint simulated at the found delay and at none);
- the reality gap: measured against nominal and identified replay on the held-out part;
- the robot time used and the export paths.

Plots are PNG (matplotlib, Agg) embedded as data: URIs, so the page is one file. The raw facts
stay in `summary.json` beside it, linked, not dumped into the page.
"""
import base64
from datetime import datetime, timezone
import html
import io
import json
import math
import os

import numpy as np

PARAMETER_ORDER = ('coulomb_friction', 'viscous_damping', 'armature', 'effective_inertia',
                   'latency')
COLOURS = {'measured': '#222222', 'nominal': '#d1495b', 'identified': '#2e6fdf',
           'no_delay': '#999999'}
CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#1d2430;
max-width:1180px;margin:24px auto;padding:0 20px;line-height:1.45;background:#fff}
h1{font-size:1.6em;margin-bottom:4px}h2{font-size:1.25em;margin-top:34px;
border-bottom:2px solid #e3e7ee;padding-bottom:4px}h3{font-size:1.05em;margin:18px 0 6px}
.sub{color:#5b6573;margin-top:0}
table{border-collapse:collapse;margin:8px 0 14px;font-size:.92em}
th{background:#f1f4f8;text-align:left;font-weight:600}
th,td{padding:4px 10px;border-bottom:1px solid #e3e7ee;vertical-align:top}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.joint td{border-top:2px solid #cfd6e0}
.ok{color:#177245;font-weight:600}.bad,.failed{color:#b3261e;font-weight:600}
.skipped{color:#6b7480}
.warn{color:#9a6700}.muted{color:#6b7480}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:14px 0}
.card{border:1px solid #e3e7ee;border-radius:8px;padding:10px 14px;min-width:150px}
.card b{display:block;font-size:1.3em}
figure{margin:10px 0 22px}figure img{max-width:100%;border:1px solid #eef0f4}
figcaption{color:#5b6573;font-size:.9em}
code{background:#f4f6f9;padding:1px 4px;border-radius:3px;font-size:.9em}
"""


def _plt():
    try:
        import matplotlib
    except ModuleNotFoundError as exc:
        raise RuntimeError('the SysID report needs matplotlib (pip install matplotlib)') \
            from exc
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    return plt


def _png(fig):
    """The figure as a data: URI (PNG), closed."""
    plt = _plt()
    buf = io.BytesIO()
    fig.savefig(buf, format='png', dpi=80)
    plt.close(fig)
    return 'data:image/png;base64,' + base64.b64encode(buf.getvalue()).decode('ascii')


def _grid(n, cols=4, width=3.6, height=2.7):
    plt = _plt()
    cols = max(1, min(cols, n))
    rows = int(math.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    for k in range(n, rows * cols):
        axes[k // cols][k % cols].set_visible(False)
    return fig, [axes[k // cols][k % cols] for k in range(n)]


def collect(runs):
    """Flatten SysID result mappings into {joint: {parameter: mapping}}, the fit curves
    {kind: {joint: curve}} and the failures [(experiment, mapping)], in run order."""
    params, curves, failures = {}, {}, []
    for run in runs or ():
        kind = run.get('experiment') or run.get('node', '?').replace('_id', '')
        for r in run.get('results') or ():
            params.setdefault(r.get('joint'), {})[r.get('parameter')] = r
            if isinstance(r.get('fit_curve'), dict):
                curves.setdefault(r['fit_curve'].get('kind', kind), {})[r['joint']] = \
                    r['fit_curve']
        for f in run.get('failures') or ():
            failures.append((kind, f))
        if not run.get('results') and not run.get('failures') and run.get('message'):
            failures.append((kind, {'joint': '(all)', 'reason': 'run failed',
                                    'detail': run['message']}))
    return params, curves, failures


def _fmt(v):
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return 'n/a'
    return f'{v:.4g}'


def parameter_table(params):
    """HTML table: joint, parameter, nominal, identified, 95 % interval, change, fit."""
    esc = html.escape
    rows = []
    for joint in params:
        entries = sorted(params[joint].items(),
                         key=lambda kv: (PARAMETER_ORDER.index(kv[0])
                                         if kv[0] in PARAMETER_ORDER else 99, kv[0]))
        for k, (name, r) in enumerate(entries):
            value = float(r.get('value', float('nan')))
            lo, hi = (r.get('interval') or (float('nan'), float('nan')))[:2]
            nominal = r.get('nominal')
            units = r.get('units', '')
            if name == 'latency':
                shown = [value * 1e3, float(lo) * 1e3, float(hi) * 1e3]
                units = 'ms'
                nominal = None if nominal is None else nominal * 1e3
            else:
                shown = [value, float(lo), float(hi)]
            change = ''
            if nominal:
                change = f'{100 * (value - r["nominal"]) / abs(r["nominal"]):+.0f} %'
            elif nominal == 0:
                change = '<span class="muted">nominal has none</span>'
            rel = (hi - lo) / 2 / abs(value) if value else float('nan')
            fit = r.get('fit') or {}
            quality = f'R² {fit["r_squared"]:.3f}' if 'r_squared' in fit else ''
            if r.get('model_misfit'):
                quality += ' <span class="warn" title="{}">misfit {:.1f}×</span>'.format(
                    esc(r['model_misfit']), fit.get('misfit_ratio', float('nan')))
            rows.append(
                f'<tr class="{"joint" if k == 0 else ""}"><td>{esc(joint) if k == 0 else ""}'
                f'</td><td>{esc(name)}</td><td class="num">{_fmt(nominal)}</td>'
                f'<td class="num"><b>{_fmt(shown[0])}</b></td>'
                f'<td class="num">[{_fmt(shown[1])}, {_fmt(shown[2])}]</td>'
                f'<td class="num">± {100 * rel:.1f} %</td><td class="num">{change}</td>'
                f'<td>{esc(units)}</td><td>{quality}</td></tr>')
    if not rows:
        return '<p class="bad">No parameter was identified.</p>'
    wide = [(joint, name, r['precision']) for joint in params
            for name, r in params[joint].items() if r.get('precision')]
    notes = ('<h3>Wide intervals, and why</h3><ul id="precision">' + ''.join(
        f'<li><b>{esc(joint)} {esc(name)}</b>: {esc(why)}</li>' for joint, name, why in wide)
        + '</ul>') if wide else ''
    return ('<table id="parameters"><tr><th>joint</th><th>parameter</th><th>nominal</th>'
            '<th>identified</th><th>95 % interval</th><th>half-width</th>'
            '<th>vs nominal</th><th>units</th><th>fit</th></tr>' + ''.join(rows) + '</table>'
            + notes)


def failure_table(failures):
    if not failures:
        return ''
    esc = html.escape
    rows = ''.join(f'<tr><td>{esc(kind)}</td><td>{esc(str(f.get("joint")))}</td>'
                   f'<td class="bad">{esc(str(f.get("reason")))}</td>'
                   f'<td>{esc(str(f.get("detail", "")))}</td></tr>' for kind, f in failures)
    return ('<h3>Not identified</h3><table id="failures"><tr><th>experiment</th><th>joint</th>'
            f'<th>reason</th><th>detail</th></tr>{rows}</table>')


def friction_figure(curves):
    """Friction torque against speed per joint: measured means, fitted line, misfit bars."""
    plt = _plt()
    joints = [j for j, c in curves.items() if c.get('speed')]
    if not joints:
        return None
    cols = min(4, len(joints))
    rows = int(math.ceil(len(joints) / cols))
    fig = plt.figure(figsize=(3.7 * cols, 3.6 * rows))
    grid = fig.add_gridspec(2 * rows, cols, height_ratios=[3, 1.1] * rows, hspace=0.08,
                            wspace=0.35)
    for k, joint in enumerate(joints):
        c = curves[joint]
        r, col = divmod(k, cols)
        ax = fig.add_subplot(grid[2 * r, col])
        axm = fig.add_subplot(grid[2 * r + 1, col], sharex=ax)
        v = np.asarray(c['speed'])
        span = max(np.max(np.abs(v)) * 1.1, 0.1)
        line_v = np.linspace(-span, span, 201)
        ax.plot(line_v, c['coulomb'] * np.sign(line_v) + c['viscous'] * line_v,
                color=COLOURS['identified'], lw=1.4, label='fit: Coulomb + viscous')
        ax.errorbar(v, c['torque'], yerr=c['torque_std'], fmt='o', ms=4, capsize=3,
                    color=COLOURS['measured'], label='measured (mean ± std)')
        ax.set_title(joint, fontsize=9)
        ax.tick_params(labelbottom=False, labelsize=7)
        ax.set_ylabel('friction torque (N·m)', fontsize=7)
        ax.grid(alpha=0.3)
        axm.bar(v, c['misfit'], width=span * 0.06, color=COLOURS['nominal'])
        axm.axhline(0.0, color='k', lw=0.6)
        axm.set_ylabel('misfit', fontsize=7)
        axm.set_xlabel('joint speed (rad/s)', fontsize=7)
        axm.tick_params(labelsize=7)
        if k == 0:
            ax.legend(fontsize=6, loc='upper left')
    fig.subplots_adjust(left=0.08, right=0.98, top=0.94, bottom=0.1)
    return fig


def inertia_figure(curves):
    joints = [j for j, c in curves.items() if c.get('measured')]
    if not joints:
        return None
    fig, axes = _grid(len(joints), height=3.0)
    for ax, joint in zip(axes, joints):
        c = curves[joint]
        m, p = np.asarray(c['measured']), np.asarray(c['model'])
        lim = float(max(np.max(np.abs(m)), np.max(np.abs(p)), 1e-6)) * 1.05
        ax.plot([-lim, lim], [-lim, lim], color='0.6', lw=0.8)
        ax.plot(p, m, '.', ms=2.5, color=COLOURS['identified'])
        ax.set_title(f'{joint}\narmature {c["armature"]:.4g} kg·m², R² {c["r_squared"]:.3f}',
                     fontsize=8)
        ax.set_xlabel('model torque (N·m)', fontsize=7)
        ax.set_ylabel('measured torque (N·m)', fontsize=7)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def latency_figure(curves):
    """Per joint: measured velocity and both simulations; below, each simulation's error."""
    plt = _plt()
    joints = [j for j, c in curves.items() if c.get('t')]
    if not joints:
        return None
    cols = min(4, len(joints))
    rows = int(math.ceil(len(joints) / cols))
    fig = plt.figure(figsize=(3.7 * cols, 3.8 * rows))
    grid = fig.add_gridspec(2 * rows, cols, height_ratios=[2.2, 1.3] * rows, hspace=0.1,
                            wspace=0.35)
    for k, joint in enumerate(joints):
        c = curves[joint]
        r, col = divmod(k, cols)
        ax = fig.add_subplot(grid[2 * r, col])
        axe = fig.add_subplot(grid[2 * r + 1, col], sharex=ax)
        t = 1e3 * np.asarray(c['t'])
        meas = np.asarray(c['measured'])
        delay = f'delay {1e3 * c["latency_s"]:.2f} ms'
        ax.plot(t, meas, color=COLOURS['measured'], lw=1.4, label='measured')
        ax.plot(t, c['identified'], color=COLOURS['identified'], lw=1.0,
                label=f'simulated, {delay}')
        ax.plot(t, c['no_delay'], color=COLOURS['no_delay'], lw=0.9, ls='--',
                label='simulated, no delay')
        axe.plot(t, np.asarray(c['identified']) - meas, color=COLOURS['identified'], lw=0.9)
        axe.plot(t, np.asarray(c['no_delay']) - meas, color=COLOURS['no_delay'], lw=0.9,
                 ls='--')
        axe.axhline(0.0, color='k', lw=0.5)
        ax.set_title(joint, fontsize=9)
        ax.tick_params(labelbottom=False, labelsize=7)
        ax.set_ylabel('velocity (rad/s)', fontsize=7)
        axe.set_ylabel('sim - measured', fontsize=7)
        axe.set_xlabel('time in the excitation (ms)', fontsize=7)
        axe.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        axe.grid(alpha=0.3)
        if k == 0:
            ax.legend(fontsize=6)
    fig.subplots_adjust(left=0.08, right=0.98, top=0.94, bottom=0.1)
    return fig


def load_traces(path):
    """The replay traces sim_bridge wrote for its gap (None when absent or unreadable)."""
    if not path:
        return None
    try:
        with np.load(os.path.expanduser(path)) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError, KeyError):
        return None


def gap_figure(traces, max_joints=12):
    """Measured vs nominal vs identified replay per moving joint (position, held-out part)."""
    plt = _plt()
    names = [str(n) for n in traces['names']]
    t = np.asarray(traces['t'], float)
    t = t - t[0]
    meas = traces['measured_position']
    moving = [k for k in range(len(names)) if np.ptp(meas[:, k]) > 1e-3] or \
        list(range(len(names)))
    moving = sorted(moving, key=lambda k: -np.ptp(meas[:, k]))[:max_joints]
    moving.sort()
    fig, axes = plt.subplots(len(moving), 1, figsize=(11, 1.9 * len(moving) + 0.6),
                             squeeze=False, sharex=True)
    for ax, k in zip(axes[:, 0], moving):
        ax.plot(t, meas[:, k], color=COLOURS['measured'], lw=1.4, label='measured')
        ax.plot(t, traces['nominal_position'][:, k], color=COLOURS['nominal'], lw=1.0,
                label='nominal replay')
        ax.plot(t, traces['identified_position'][:, k], color=COLOURS['identified'], lw=1.0,
                label='identified replay')
        ax.set_ylabel(f'{names[k]}\n(rad)', fontsize=7)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7, loc='upper right', ncol=3)
    axes[-1, 0].set_xlabel('time in the held-out part (s)', fontsize=8)
    fig.tight_layout()
    return fig


def _figure(caption, fig, ident):
    if fig is None:
        return ''
    return (f'<figure id="{ident}"><img alt="{html.escape(caption)}" src="{_png(fig)}">'
            f'<figcaption>{html.escape(caption)}</figcaption></figure>')


def gap_html(gap):
    """The gap section: the scores as cards, the plot from the traces when readable."""
    if not gap:
        return ('<h2>Reality gap</h2><p class="muted">No gap evaluated: sim_bridge was not on '
                'the graph (start it with <code>simreal up --sysid</code>), so the '
                'identified model was not replayed.</p>')
    if 'gap_nominal' not in gap:
        return (f'<h2>Reality gap</h2><p class="bad">sim_bridge did not score the gap: '
                f'{html.escape(str(gap.get("message")))}</p>')
    passed = gap.get('passed')
    cards = [('nominal model', f'{100 * gap["gap_nominal"]:.2f} %'),
             ('identified model', f'{100 * gap["gap_identified"]:.2f} %'),
             ('noise floor', f'{100 * float(gap.get("noise_floor", float("nan"))):.2f} %'),
             ('smaller by', f'× {gap.get("reduction_x", float("nan")):.2f}'),
             ('gate', f'{"PASS" if passed else "FAIL"} (< '
                      f'{100 * float(gap.get("threshold", float("nan"))):.0f} %)')]
    out = ['<h2>Reality gap</h2><p>NRMSE of position and velocity after alignment, replaying '
           'the recorded commands in the MuJoCo model, scored on the held-out part of '
           f'<code>{html.escape(os.path.basename(str(gap.get("recording", ""))))}</code> '
           '(the part the fit never saw).</p><div class="cards">']
    for label, value in cards:
        cls = '' if label != 'gate' else (' ok' if passed else ' bad')
        out.append(f'<div class="card">{label}<b class="{cls.strip()}">{value}</b></div>')
    out.append('</div>')
    traces = load_traces(gap.get('traces'))
    if traces is None:
        out.append('<p class="muted">No replay traces readable here '
                   f'({html.escape(str(gap.get("traces") or gap.get("traces_error")))}): '
                   'sim_bridge runs on another machine or wrote none.</p>')
    else:
        out.append(_figure('Measured vs nominal vs identified replay, joint position on the '
                           'held-out part', gap_figure(traces), 'gap-plot'))
    return ''.join(out)


def robot_time_html(params, failures, runs):
    """Robot time per experiment (the recordings' spans) and in all."""
    spent = {}
    for joint, by_param in params.items():
        for r in by_param.values():
            kind = _kind_of(r)
            if r.get('robot_time_s') is not None:
                spent.setdefault(kind, {})[joint] = float(r['robot_time_s'])
    if not spent:
        return ''
    rows = ''.join(f'<tr><td>{html.escape(k)}</td><td class="num">{len(v)}</td>'
                   f'<td class="num">{sum(v.values()):.1f} s</td></tr>'
                   for k, v in spent.items())
    total = sum(sum(v.values()) for v in spent.values())
    return ('<h2>Robot time</h2><table id="robot-time"><tr><th>experiment</th><th>joints</th>'
            f'<th>robot time</th></tr>{rows}<tr><td><b>total</b></td><td></td>'
            f'<td class="num"><b>{total:.1f} s ({total / 60:.1f} min)</b></td></tr></table>'
            + _extensions_html(params))


def _extensions_html(params):
    """The joints whose armature interval was wider than armature_goal after the first
    multi-sine, what the extension cost and what it gave (included in the times above)."""
    items = []
    for joint, by_param in params.items():
        r = by_param.get('armature') or {}
        ext = r.get('extension')
        if not ext:
            continue
        if ext.get('skipped'):
            # wanted one, but inertia_extend_budget_s went to wider intervals
            try:
                lo, hi = r['interval']
                width = f'armature +-{50.0 * (hi - lo) / abs(r["value"]):.1f} %: '
            except (KeyError, TypeError, ValueError, ZeroDivisionError):
                width = ''
            items.append(f'<li>{html.escape(joint)}: {width}{html.escape(ext["skipped"])}'
                         '</li>')
            continue
        try:
            lo, hi = ext['armature_interval_before']
            before = 50.0 * (hi - lo) / abs(0.5 * (hi + lo))
            lo, hi = r['interval']
            after = 50.0 * (hi - lo) / abs(r['value'])
            gave = f'armature +-{before:.1f} % -> +-{after:.1f} %'
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            gave = 'armature interval not readable'
        note = f'; {ext["error"]}' if ext.get('error') else ''
        items.append(f'<li>{html.escape(joint)}: +{float(ext.get("robot_time_s", 0.0)):.1f} s '
                     f'of multi-sine, {gave}{html.escape(note)}</li>')
    if not items:
        return ''
    return ('<p>Inertia extensions (the armature read less precisely than armature_goal '
            'after the first multi-sine; in the times above; inertia_extend_budget_s, when '
            'set, goes to the widest intervals first):</p><ul id="extensions">'
            + ''.join(items) + '</ul>')


def _kind_of(r):
    p = r.get('parameter')
    return {'coulomb_friction': 'friction', 'viscous_damping': 'friction',
            'armature': 'inertia', 'effective_inertia': 'inertia'}.get(p, 'latency')


def export_html(exports, out_dir):
    if not exports:
        return ('<h2>Exports</h2><p class="muted">Nothing exported (sim_bridge not on the '
                'graph, or its export failed).</p>')
    if not exports.get('ok', True):
        return (f'<h2>Exports</h2><p class="bad">export failed: '
                f'{html.escape(str(exports.get("message")))}</p>')
    rows = ''.join(f'<tr><td>{html.escape(str(k))}</td><td><code>{html.escape(str(v))}</code>'
                   '</td></tr>' for k, v in exports.items()
                   if k not in ('ok', 'message', 'response'))
    return ('<h2>Exports</h2><p>The identified model for training (sim_bridge/export):</p>'
            f'<table id="exports"><tr><th>file</th><th>path</th></tr>{rows}</table>')


def write_report(out_dir, robot, runs, gap=None, exports=None, title=None, extra_html='',
                 summary=None, summary_name='summary.json'):
    """Write `report.html` (and `summary_name` with the raw facts, unless summary is False)
    into out_dir; return the HTML path.

    runs: SysID result mappings (one per experiment run); gap: sim_bridge's gap JSON (with
    `traces`); exports: sim_bridge/export's paths; extra_html: a section put after the
    overview (the demo's steps); summary: extra facts for summary.json.
    """
    os.makedirs(out_dir, exist_ok=True)
    params, curves, failures = collect(runs)
    stamp = datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
    title = title or f'SysID report: {robot}'
    esc = html.escape
    n_params = sum(len(v) for v in params.values())
    body = [f'<h1>{esc(title)}</h1><p class="sub">{esc(stamp)} · {len(params)} joints, '
            f'{n_params} parameters identified, {len(failures)} not · raw facts: '
            f'<a href="{esc(summary_name)}">{esc(summary_name)}</a></p>', extra_html,
            '<h2>Identified parameters</h2><p>Each value with its 95 % interval, against the '
            'nominal model (the MJCF\'s own value). The half-width is relative to the value; '
            '"misfit" marks a joint whose friction the Coulomb + viscous model does not '
            'explain (its interval is widened).</p>', parameter_table(params),
            failure_table(failures), gap_html(gap), '<h2>Fits</h2>',
            _figure('Friction: mean friction torque per commanded speed (measured, ± its '
                    'spread) against the fitted Coulomb + viscous line; below, the misfit '
                    '(measured minus fit) per speed', friction_figure(curves.get('friction',
                                                                              {})),
                    'friction-plot'),
            _figure('Inertia: the filtered torque the regression explains against the torque '
                    'the fitted armature, friction and offset predict (on the line: a '
                    'perfect fit)', inertia_figure(curves.get('inertia', {})), 'inertia-plot'),
            _figure('Latency: measured joint velocity against the identified joint simulated '
                    'from the commands at the found delay and at none',
                    latency_figure(curves.get('latency', {})), 'latency-plot'),
            robot_time_html(params, failures, runs), export_html(exports, out_dir)]
    page = ('<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width"><title>{esc(title)}</title>'
            f'<style>{CSS}</style></head><body>' + ''.join(body) + '</body></html>')
    path = os.path.join(out_dir, 'report.html')
    with open(path, 'w') as f:
        f.write(page)
    if summary is not False:
        facts = {'robot': robot, 'written': stamp, 'runs': runs, 'gap': gap,
                 'exports': exports}
        facts.update(summary or {})
        with open(os.path.join(out_dir, summary_name), 'w') as f:
            json.dump(facts, f, indent=2, default=str)
    return path

"""The demo's results folder: summary.json, report.html, the joint plot, the printed summary."""
import html
import json


def stage_html(demo):
    """The policy stage's table: swing amplitude per stage and what was clipped, why."""
    if not demo.stage_amplitude and 'full_swing_at_lowest_stage' not in demo.facts:
        return ''
    esc = html.escape
    rows = ''
    for stage, amp in demo.stage_amplitude.items():
        joints = ', '.join(f'{j} {v:.3f}' for j, v in amp['joints'].items())
        rows += (f'<tr><td>{esc(stage)}</td><td>{esc(stage)} of the full swing</td>'
                 f'<td>{amp["amplitude_rad"]:.3f}</td><td>{esc(joints)}</td></tr>')
    text = ('<h2>policy stages: swing amplitude</h2><p>The policy swings the arm about '
            'the default pose; the operator (the demo) commands the fraction of the full '
            'reference swing each stage allows. A stage is earned only by running clean '
            '(a clip demotes), so the swing grows with the stage. Amplitude: half the '
            'peak-to-peak joint position over at least one period.</p><table><tr>'
            '<th>stage</th><th>commanded</th><th>amplitude (rad)</th><th>per joint</th>'
            f'</tr>{rows}</table>')
    full = demo.facts.get('full_swing_at_lowest_stage')
    if full:
        speeds = ', '.join(f'{n} {v:.2f} of {full["reference_peak_speed_rad_s"][n]:.2f}'
                           for n, v in full['peak_speed_rad_s'].items())
        text += (f'<p>The full reference swing (amplitude {full["reference_rad"]:.3f} rad) '
                 f'commanded at stage {full["stage"]:.2f}: {full["amplitude_rad"]:.3f} rad, '
                 f'peak speed {esc(speeds)} rad/s got through; '
                 f'{sum(full["clips"].values())} clips (joint and limit counted per '
                 f'supervisor tick): {esc(full["explanation"])}</p>')
    clips = (demo.facts.get('policy_clips') or {}).get('while_promoting')
    if clips is not None:
        why = (demo.facts['policy_clips'].get('explanation') or '') if clips else ''
        text += (f'<p>Clipped joint outputs while promoting: {sum(clips.values())}'
                 + (f': {esc(why)}' if why else '') + '</p>')
    return text

def write_report(demo):
    """Write summary.json (every fact) and report.html: the demo's steps, then the SysID report
    every `simreal sysid` run writes too (client/sysid_report)."""
    from simreal_ros.client.sysid_report import write_report as sysid_report
    plots = _plots(demo.out)
    summary = {'robot': demo.robot, 'results': str(demo.out),
               'steps': [{'step': s, 'status': st, 'detail': d, 'seconds': round(t, 1)}
                         for s, st, d, t in demo.rows],
               'stage_amplitude_rad': {k: v['amplitude_rad']
                                       for k, v in demo.stage_amplitude.items()},
               'clips': demo.facts.get('policy_clips', {}),
               'facts': _jsonable(demo.facts), 'plots': plots}
    (demo.out / 'summary.json').write_text(json.dumps(summary, indent=2))
    rows = ''.join(f'<tr><td>{html.escape(s)}</td><td class="{st}">{st}</td>'
                   f'<td>{html.escape(d)}</td><td class="num">{t:.1f}</td></tr>'
                   for s, st, d, t in demo.rows)
    imgs = ''.join(f'<figure><img alt="{html.escape(p)}" src="{html.escape(p)}">'
                   f'<figcaption>{html.escape(p)}: joint positions and applied torques over '
                   'the session</figcaption></figure>' for p in plots)
    steps = ('<h2>Demo steps</h2><table><tr><th>step</th><th>status</th><th>detail</th>'
             f'<th>s</th></tr>{rows}</table>{stage_html(demo)}{imgs}')
    runs = [r for r in (demo.facts.get('sysid') or {}).values() if isinstance(r, dict)]
    export = demo.facts.get('export')
    sysid_report(str(demo.out), demo.robot, runs, gap=demo.facts.get('gap'),
                 exports=export, title=f'simreal_ros demo: {demo.robot}', extra_html=steps,
                 summary=False)
    width = max(len(s) for s, *_ in demo.rows)
    print('\nsummary ' + '-' * 70)
    for s, st, d, t in demo.rows:
        print(f'{s:<{width}}  {st:<7} {t:6.1f} s  {d[:110]}')
    print('-' * 78)
    if demo.stage_amplitude:
        print('swing amplitude per stage (rad): ' + ', '.join(
            f'{k}: {v["amplitude_rad"]:.3f}' for k, v in demo.stage_amplitude.items()))
    print(f'results: {demo.out} (report.html, summary.json, session.mcap, sysid/, logs/)')


def joint_figure(t, names, q, tau):
    """Return the figure of joint positions and applied torques over the session.

    The lines stop where the recording paused (the SysID step): a straight segment across
    the pause would show motion that was never recorded.
    """
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    import numpy as np
    from simreal_ros.core.series import break_gaps
    t, q, tau = break_gaps(np.asarray(t) - t[0], q, tau)
    fig, axes = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for i, name in enumerate(names):
        axes[0].plot(t, q[:, i], label=name, lw=0.8)
        if tau.size:
            axes[1].plot(t, tau[:, i], label=name, lw=0.8)
    axes[0].set_ylabel('position (rad)')
    axes[1].set_ylabel('applied torque (N*m)')
    axes[1].set_xlabel('session time (s)')
    axes[0].legend(loc='upper right')
    fig.tight_layout()
    return fig


def _plots(out):
    """Joint positions and applied torques of the session (from the MCAP); [] without it."""
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
        from simreal_ros.client.record import read_joint_states
        t, names, q, _, tau = read_joint_states(out / 'session.mcap')
    except Exception:  # noqa: BLE001 - plots are optional; the MCAP is the data
        return []
    if len(t) < 2:
        return []
    fig = joint_figure(t, names, q, tau)
    fig.savefig(out / 'joint_states.png', dpi=90)
    plt.close(fig)
    return ['joint_states.png']


def _jsonable(value):
    return json.loads(json.dumps(value, default=str))

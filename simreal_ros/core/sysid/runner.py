"""Run SysID experiments on a SimPlant directly (the core path, faster than real time).

`record` drives the plant like the ROS nodes drive sim_robot: the robot is sampled at
`sample_rate_hz` and, at each sample, the command row active at that time is sent.
`identify_joint` runs friction, inertia and latency experiments on one joint in that order
(each later experiment uses what the earlier ones identified; the inertia run's friction terms
are combined with the sweeps', `combined_friction_fit`) and returns the fits, the seed
baselines on the same data and the robot time used.
"""
from dataclasses import dataclass, field

import numpy as np

from simreal_ros.core.sysid import baselines
from simreal_ros.core.config import ConfigError
from simreal_ros.core.sysid.design import (NODE_OF, Experiment, check_sample_rate,
                                          design_extension, design_for, extension_cost,
                                          limit_usage)
from simreal_ros.core.sysid.estimators import (IdentificationError, Recording,
                                               combined_friction_fit, estimate_friction,
                                               estimate_inertia, estimate_latency)


def record(plant, experiment, sample_rate_hz=500.0):
    """Drive `plant` with `experiment`; return the Recording (times from the first command).

    As on the robot, the sensors are read at `sample_rate_hz` and the commands are sent at the
    experiment's own rate with their exact arrival times (two independent clocks, as the
    sysid node's timer and the driver's loop).
    """
    dt = plant.dt
    sample_every = max(1, int(round(1.0 / (sample_rate_hz * dt))))
    n_steps = int(np.ceil(experiment.duration / dt - 1e-9)) + 1
    names = experiment.names
    t0 = plant.time
    t, q, qd, tau = [], [], [], []
    cmd_times = experiment.t
    next_cmd = 0
    for s in range(n_steps + 1):
        now = s * dt
        if s % sample_every == 0:
            m = plant.measure()
            t.append(m.time - t0)
            q.append(m.position)
            qd.append(m.velocity)
            tau.append(m.effort)
        while next_cmd < len(cmd_times) and cmd_times[next_cmd] < now + dt - 1e-12:
            j = next_cmd
            plant.submit(plant.make_command(names, experiment.position[j],
                                            experiment.velocity[j], experiment.effort[j]),
                         arrival_time=t0 + max(cmd_times[j], now))
            next_cmd += 1
        if s < n_steps:
            plant.step(1)
    return Recording(list(names), np.array(t), np.array(q), np.array(qd), np.array(tau),
                     np.maximum(cmd_times, 0.0), experiment.position, experiment.velocity,
                     experiment.effort)


def wants_extension(fit, settings):
    """True when `fit` (an inertia Fit) reads the armature less precisely than
    settings.armature_goal (its 95 % interval's half-width over the value) and
    settings.inertia_extend_s allows more multi-sine."""
    if settings.armature_goal <= 0 or settings.inertia_extend_s <= 0:
        return False
    a = fit.estimates['armature']
    lo, hi = a.interval
    return 0.5 * (hi - lo) > settings.armature_goal * max(abs(a.value), 1e-12)


def join_runs(first, second):
    """One (Experiment, Recording) of two runs of the same joint, (experiment, recording)
    each: the second's times follow the first's end by one sample period, its excitation
    segments numbered after the first's. Both runs start and end at rest at hold_position,
    so the filters of the fit see one recording with a pause in it."""
    (e1, r1), (e2, r2) = first, second
    step = float(np.median(np.diff(r1.t)))
    # (a run's samples may start before its first command: the node's clock is the command's)
    end1 = max(float(r1.t[-1]), float(e1.t[-1]), float(r1.cmd_t[-1]))
    start2 = min(float(r2.t[0]), float(e2.t[0]), float(r2.cmd_t[0]))
    shift = end1 + step - start2
    seg2 = np.where(e2.segment >= 0, e2.segment + int(max(e1.segment.max(), -1)) + 1, -1)
    exp = Experiment(e1.kind, e1.joint, e1.index, list(e1.names),
                     np.concatenate([e1.t, e2.t + shift]),
                     np.vstack([e1.position, e2.position]),
                     np.vstack([e1.velocity, e2.velocity]),
                     np.vstack([e1.effort, e2.effort]),
                     np.concatenate([e1.segment, seg2]),
                     np.concatenate([e1.steady, e2.steady]),
                     np.concatenate([e1.target_speed, e2.target_speed]),
                     list(e1.phases) + [(t + shift, name) for t, name in e2.phases],
                     e1.excitation_start, dict(e1.excitation), extension=True)
    rec = Recording(list(r1.names), np.concatenate([r1.t, r2.t + shift]),
                    np.vstack([r1.position, r2.position]),
                    np.vstack([r1.velocity, r2.velocity]),
                    np.vstack([r1.effort, r2.effort]),
                    np.concatenate([r1.cmd_t, r2.cmd_t + shift]),
                    np.vstack([r1.cmd_position, r2.cmd_position]),
                    np.vstack([r1.cmd_velocity, r2.cmd_velocity]),
                    np.vstack([r1.cmd_effort, r2.cmd_effort]))
    return exp, rec


@dataclass
class JointResult:
    joint: str
    fits: dict = field(default_factory=dict)        # kind -> Fit
    errors: dict = field(default_factory=dict)      # kind -> IdentificationError text
    baselines: dict = field(default_factory=dict)   # kind -> {parameter: value}
    robot_time: dict = field(default_factory=dict)  # kind -> seconds
    recordings: dict = field(default_factory=dict)  # kind -> (experiment, Recording)
    limits: dict = field(default_factory=dict)      # kind -> design.limit_usage()
    extended: dict = field(default_factory=dict)    # kind -> the extension's robot time, ...


def joint_params_from(result, index, n, prior=None):
    """Per-joint actuator parameters for the latency simulation (identified joint only)."""
    keys = ('armature', 'viscous_damping', 'coulomb_friction')
    params = {k: np.zeros(n) for k in keys + tuple(k + '_std' for k in keys)}
    if prior:
        for k, v in prior.items():
            params[k] = np.asarray(v, float).copy()
    fr = result.fits.get('friction')
    fi = result.fits.get('inertia')
    picks = []
    if fr is not None:
        picks += [(fr, 'coulomb_friction'), (fr, 'viscous_damping')]
    if fi is not None:
        picks += [(fi, 'armature')]
    for fit, key in picks:
        est = fit.estimates[key]
        params[key][index] = est.value
        params[key + '_std'][index] = (est.high - est.low) / (2 * 1.959964)
    if fr is None and fi is not None:
        params['coulomb_friction'][index] = fi.notes['coulomb_friction']
        params['viscous_damping'][index] = fi.notes['viscous_damping']
        params['coulomb_friction_std'][index] = fi.notes['coulomb_friction_std']
        params['viscous_damping_std'][index] = fi.notes['viscous_damping_std']
    return params


def armature_width(fit):
    """An inertia Fit's armature interval: its 95 % half-width over the value."""
    a = fit.estimates['armature']
    lo, hi = a.interval
    return 0.5 * (hi - lo) / max(abs(a.value), 1e-12)


def allot_extensions(candidates, budget_s):
    """Which joints get their extension: `candidates` are (joint, armature width, cost in s);
    the widest intervals first while the extensions' robot time stays within budget_s (0: no
    cap: every one). Returns (granted, skipped), joint names in the order granted/considered."""
    granted, skipped, spent = [], [], 0.0
    for joint, _, cost in sorted(candidates, key=lambda c: -c[1]):
        if budget_s <= 0 or spent + cost <= budget_s + 1e-9:
            granted.append(joint)
            spent += cost
        else:
            skipped.append(joint)
    return granted, skipped


def skipped_note(settings):
    """What a joint whose extension the budget did not reach says (result 'extension')."""
    return (f'not extended: inertia_extend_budget_s ({settings.inertia_extend_budget_s:g} s) '
            'went to wider armature intervals')


@dataclass
class _Pending:
    """A joint's first multi-sine, fit, waiting for its extension to be allotted."""
    exp: Experiment
    rec: Recording
    sweeps: object        # the friction Fit from the sweeps alone (None without)
    settings: object
    index: int


def _check_rates(per_kind, kinds, sample_rate_hz):
    """Raise ConfigError, as the nodes stop, where the command rate would put the held
    targets' ripple into the fits at this sample rate (design.check_sample_rate)."""
    for kind in kinds:
        problem = check_sample_rate(per_kind[kind], sample_rate_hz, NODE_OF[kind])
        if problem:
            raise ConfigError(problem)


def identify_joint(plant, settings, nominal, joint, kinds=('friction', 'inertia', 'latency'),
                   sample_rate_hz=500.0, keep_recordings=False):
    """Run the experiments on one joint of `plant`; return a JointResult.

    settings: one SysidSettings, or a mapping kind -> SysidSettings (one per node section).
    An inertia extension (armature_goal) runs right after the joint's first multi-sine.
    """
    out = JointResult(joint)
    per_kind = settings if isinstance(settings, dict) else {k: settings for k in kinds}
    _check_rates(per_kind, kinds, sample_rate_hz)
    for kind in kinds:
        _identify_kind(out, plant, per_kind[kind], nominal, kind, sample_rate_hz,
                       keep_recordings)
    return out


def identify_joints(plant, settings, nominal, joints, kinds=('friction', 'inertia', 'latency'),
                    sample_rate_hz=500.0, keep_recordings=False, after=None):
    """Run the experiments on several joints of `plant`; {joint: JointResult}.

    Each joint's friction and first multi-sine, then the inertia extensions as inertia_id
    queues them after its joints (`allot_extensions`: the widest armature intervals first
    within inertia_extend_budget_s, each fit with its joint's first run), then every joint's
    latency (it uses the identified friction and armature). after(joint, kind): called after
    each recording (a bench's accounting of the robot's state).
    """
    per_kind = settings if isinstance(settings, dict) else {k: settings for k in kinds}
    _check_rates(per_kind, kinds, sample_rate_hz)
    out = {j: JointResult(j) for j in joints}
    pending = {}
    first = [k for k in kinds if k != 'latency']
    for joint in joints:
        for kind in first:
            p = _identify_kind(out[joint], plant, per_kind[kind], nominal, kind,
                               sample_rate_hz, keep_recordings, defer=True)
            if p is not None:
                pending[joint] = p
            if after:
                after(joint, kind)
    if pending:
        s = per_kind['inertia']
        costs = extension_cost(s, nominal, list(pending))
        granted, skipped = allot_extensions(
            [(j, armature_width(out[j].fits['inertia']), costs[j]) for j in pending],
            s.inertia_extend_budget_s)
        for joint in skipped:
            out[joint].extended['inertia'] = {
                'robot_time_s': 0.0, 'skipped': skipped_note(s),
                'armature_interval_before': list(
                    out[joint].fits['inertia'].estimates['armature'].interval)}
        for joint in granted:
            _extend(out[joint], plant, pending[joint], nominal, sample_rate_hz,
                    keep_recordings)
            if after:
                after(joint, 'inertia')
    if 'latency' in kinds:
        for joint in joints:
            _identify_kind(out[joint], plant, per_kind['latency'], nominal, 'latency',
                           sample_rate_hz, keep_recordings)
            if after:
                after(joint, 'latency')
    return out


def _extend(out, plant, p, nominal, sample_rate_hz, keep_recordings):
    """Run joint `out.joint`'s inertia extension and fit it with its first run (`p`)."""
    kind, settings, joint = 'inertia', p.settings, out.joint
    ext = design_extension(joint, settings, nominal, plant.measure(with_noise=False).position)
    rec2 = record(plant, ext, sample_rate_hz)
    out.extended[kind] = {
        'robot_time_s': float(rec2.t[-1] - rec2.t[0]),
        'armature_interval_before': list(out.fits[kind].estimates['armature'].interval)}
    out.robot_time[kind] += out.extended[kind]['robot_time_s']
    use2 = limit_usage(settings, rec2)
    out.limits[kind] = {k: (v and use2[k] if k == 'position_inside' else max(v, use2[k]))
                        for k, v in out.limits[kind].items()}
    exp, rec = join_runs((p.exp, p.rec), (ext, rec2))
    if keep_recordings:
        out.recordings[kind] = (exp, rec)
    lim = settings.torque_limit[p.index]
    try:
        out.fits[kind] = estimate_inertia(rec, exp, nominal, lim, effort_lag_s=plant.dt)
    except IdentificationError as exc:
        # The first run's fit stands, and says why, in inertia_id's words.
        out.extended[kind]['error'] = f'the two runs fit together failed: {exc.detail}'
        return
    out.baselines[kind] = baselines.baseline_inertia(rec, exp, nominal)
    if p.sweeps is not None:    # the multi-sines' friction terms join the sweeps'
        out.fits['friction'] = combined_friction_fit(p.sweeps, out.fits[kind])


def _identify_kind(out, plant, settings, nominal, kind, sample_rate_hz, keep_recordings,
                   defer=False):
    """One experiment of `kind` on out.joint, its fit into `out`. An inertia run that wants
    its extension runs it now, or with `defer` returns a _Pending for identify_joints."""
    joint = out.joint
    i = settings.joint_names.index(joint)
    current = plant.measure(with_noise=False).position
    exp = design_for(kind, joint, settings, nominal, current)
    rec = record(plant, exp, sample_rate_hz)
    out.robot_time[kind] = float(rec.t[-1] - rec.t[0])
    out.limits[kind] = limit_usage(settings, rec)
    if keep_recordings:
        out.recordings[kind] = (exp, rec)
    lim = settings.torque_limit[i]
    try:
        if kind == 'friction':
            out.fits[kind] = estimate_friction(rec, exp, nominal, lim, effort_lag_s=plant.dt)
            out.baselines[kind] = baselines.baseline_friction(rec, exp)
        elif kind == 'inertia':
            out.fits[kind] = estimate_inertia(rec, exp, nominal, lim, effort_lag_s=plant.dt)
            out.baselines[kind] = baselines.baseline_inertia(rec, exp, nominal)
            sweeps = out.fits.get('friction')
            if sweeps is not None:   # the multi-sine's friction terms join the sweeps'
                out.fits['friction'] = combined_friction_fit(sweeps, out.fits[kind])
            if wants_extension(out.fits[kind], settings):
                p = _Pending(exp, rec, sweeps, settings, i)
                if defer:
                    return p
                _extend(out, plant, p, nominal, sample_rate_hz, keep_recordings)
        else:
            params = joint_params_from(out, i, len(settings.joint_names))
            if 'inertia' not in out.fits:   # identify the joint from this recording
                own = JointResult(joint, fits=dict(out.fits))
                own.fits['inertia'] = estimate_inertia(rec, exp, nominal, lim,
                                                       effort_lag_s=plant.dt)
                params = joint_params_from(own, i, len(settings.joint_names))
            out.fits[kind] = estimate_latency(rec, exp, nominal, params, settings.kp,
                                              settings.kd, plant.dt, settings.max_latency_s,
                                              lim)
            out.baselines[kind] = baselines.baseline_latency(rec, exp)
    except IdentificationError as exc:
        out.errors[kind] = str(exc)
    return None

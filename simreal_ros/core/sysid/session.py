"""One SysID run over several joints, as a node drives it (no ROS here).

The node calls `command(t)` on its timer and `add_sample(...)` for every joint_states message;
when a joint's experiment is over, `finish_joint()` hands back a closure that estimates (slow;
the node runs it in a worker thread while it keeps commanding). `results()` gathers everything
once all joints are done. Nothing is published unless the whole run completed.

Disturbances: the node reports commands it published late, a safety_supervisor that stopped
forwarding, or joint_states that arrived with a gap (`disturbed`). The next `command` then
repeats the excitation segment the disturbance touched: the segment's rows already sent are
relabelled as outside the excitation (never estimated from), a smooth approach from the
measured pose leads back to the segment's start and the schedule continues from there. Each
repeat is logged with its cause (`repeats`). Past `max_repeats` per joint a segment a
disturbance touches is not repeated but left out of the estimate (logged, `repeated` false),
and an estimate that then fails says why. A hold outside the excitation spends no repeat: the
target only starts again from where the robot stands. A joint still running past its budget
(its plan and `max_repeats` repeats of its longest segment, times `max_duration_factor`:
disturbances that never stop) is brought back to its end pose by a smooth approach from where
it stands and ends as a failure ('disturbed', cut short) with nothing estimated; the run goes
on to the next joint.
"""
import dataclasses
import os
import threading

import mujoco
import numpy as np

from simreal_ros.core.plant import load_model
from simreal_ros.core.sysid import baselines
from simreal_ros.core.sysid.design import (Experiment, _Builder, design_extension, design_for,
                                          extension_cost)
from simreal_ros.core.sysid.estimators import (FRICTION_KEYS, IdentificationError, Recording,
                                               combine_friction, combined_method,
                                               estimate_friction, estimate_inertia,
                                               estimate_latency, row_at)
from simreal_ros.core.sysid.fit_curves import fit_curve
from simreal_ros.core.sysid.model import NominalModel
from simreal_ros.core.sysid.records import (latest_documents, latest_parameters,
                                            precision_note, result_documents, run_basename,
                                            write_mcap)
from simreal_ros.core.sysid.runner import (JointResult, allot_extensions, armature_width,
                                           join_runs, joint_params_from, skipped_note,
                                           wants_extension)


class SysidSession:
    """Experiments of one kind on a list of joints, back to back."""

    def __init__(self, kind, settings, nominal, robot, joints, current_position, results_dir,
                 physics_dt=0.001, max_repeats=3, max_duration_factor=1.5):
        self.kind = kind
        self.settings = settings
        self.nominal = nominal
        self.robot = robot
        self.joints = list(joints)
        self.results_dir = os.path.expanduser(results_dir)
        self.physics_dt = physics_dt
        self.base = run_basename(robot, kind)
        # Every experiment ends at hold_position, so the later ones start there.
        start = np.asarray(current_position, float)
        self.experiments = []
        for joint in self.joints:
            exp = design_for(kind, joint, settings, nominal, start)
            self.experiments.append(exp)
            start = exp.position[-1]
        self.total = sum(e.duration for e in self.experiments)
        self.max_duration_factor = max_duration_factor
        # Robot time a joint may take: its plan with every repeat it may spend (each at most
        # its longest segment), times max_duration_factor for the approaches back.
        self.budget = [max_duration_factor * (e.duration + max_repeats * _longest_segment(e))
                       for e in self.experiments]
        self.planned = [e.duration for e in self.experiments]
        self._cut_short = None   # (robot time, planned, budget) of a joint cut short
        self.index = 0
        self.t0 = None
        self._reset_log()
        self.results = []
        self.failures = []
        self.max_repeats = int(max_repeats)
        self.repeats = []     # {'joint', 'segment', 'cause', 'at_s'} per repeated segment
        self._pending = None  # (since, cause, held) reported by the node, applied by command()
        # Re-planning runs in the command loop while estimates of earlier joints run in
        # workers: it gets its own copy of the model (MuJoCo data is not shared across threads).
        path = getattr(nominal, 'model_path', None)
        self._planner = NominalModel(path, nominal.names) if path else nominal
        self.model_values = mjcf_values(path, nominal.names) if path else {}
        self._lock = threading.Lock()
        self._first = {}     # joint -> (experiment, recording, t0, fit) awaiting its extension
        # With inertia_extend_budget_s, the joints that want an extension wait (joint ->
        # armature width) until every first run is settled (_base_left), then the widest go.
        self._deferred = {}
        self._base_left = len(self.experiments)

    def _reset_log(self):
        self.cmd_log = []     # (t, row)
        self.samples = []     # (t, q, qd, tau)

    @property
    def experiment(self):
        return self.experiments[min(self.index, len(self.experiments) - 1)]

    @property
    def commanding_done(self):
        return self.index >= len(self.experiments)

    def command(self, now):
        """Return (names, position, velocity, effort) to send at time `now` and log it."""
        exp = self.experiment
        if self.commanding_done:
            # Hold the last target while estimates finish (one may add an extension: it
            # starts from its first row when it comes).
            k = len(exp.t) - 1
        else:
            if self.t0 is None:
                self.t0 = now
            k = int(row_at(exp.t, np.array([now - self.t0]))[0])
            with self._lock:
                pending, self._pending = self._pending, None
            if self._cut_short is None and now - self.t0 > self.budget[self.index]:
                self._cut(now, k)
                pending = None
            if pending is not None:
                self._repeat(k, *pending)
            exp = self.experiment      # re-planned or not: the row now
            k = int(row_at(exp.t, np.array([now - self.t0]))[0])
            self.cmd_log.append((now - self.t0, k))
        return exp.names, exp.position[k], exp.velocity[k], exp.effort[k]

    def disturbed(self, since, cause, held=False):
        """Note that from `since` (command clock) the commands were late or held (`held`: the
        supervisor stopped forwarding them), or measurements missing; `command` repeats the
        excitation segment this touched (thread-safe: any callback may call it)."""
        if self.t0 is None or self.commanding_done or self._cut_short is not None:
            return      # (a joint cut short only goes back to its end pose: nothing re-planned)
        with self._lock:
            if self._pending is None:
                self._pending = (since, cause, held)
            else:
                first, causes, was_held = self._pending
                self._pending = (min(first, since), f'{causes}; {cause}', was_held or held)

    def _repeat(self, k, since, cause, held):
        """Re-plan the current experiment from row `k` after a disturbance; True if changed."""
        exp = self.experiment
        seg = exp.segment
        k_since = int(row_at(exp.t, np.array([max(since - self.t0, 0.0)]))[0])
        k_since = min(k_since, k)
        touched = np.nonzero(seg[k_since:k + 1] >= 0)[0]
        if touched.size:
            first = k_since + int(touched[0])
            s_id = seg[first]
            resume = first
            while resume > 0 and seg[resume - 1] == s_id:
                resume -= 1
        elif held:
            resume = k        # no excitation lost, but the target must start from the robot
        else:
            return False
        count = sum(1 for r in self.repeats if r['repeated'] and r['joint'] == exp.joint)
        if not touched.size:
            # Held outside the excitation: nothing to repeat or leave out (no repeat spent),
            # but the target must start again from where the robot stands.
            self.repeats.append({'joint': exp.joint, 'segment': -1, 'cause': cause,
                                 'at_s': round(float(exp.t[k]), 3), 'repeated': False})
        elif count >= self.max_repeats:
            # No repeat left: the segments the disturbance touched are left out of the
            # estimate (a late or held command is not the motion the schedule labels), and
            # a held robot is still brought back to the schedule from where it stands.
            touched_ids = np.unique(seg[k_since:k + 1][seg[k_since:k + 1] >= 0])
            self.repeats.append({'joint': exp.joint, 'segment': int(touched_ids[0]),
                                 'cause': cause, 'at_s': round(float(exp.t[k]), 3),
                                 'repeated': False})
            exp = self.experiments[self.index] = _without_segments(exp, touched_ids)
            if not held:
                return False
            resume = k
        else:
            self.repeats.append({'joint': exp.joint, 'segment': int(seg[resume]),
                                 'cause': cause, 'at_s': round(float(exp.t[k]), 3),
                                 'repeated': True})
        start = exp.position[k]
        if held and self.samples:
            start = np.asarray(self.samples[-1][1], float)
        repeated = self.repeats[-1]['repeated']
        self.experiments[self.index] = _replanned(
            exp, k, resume, start, self.settings, self._planner,
            f'repeat ({cause})' if repeated else f'back to the schedule ({cause})')
        self.total = sum(e.duration for e in self.experiments)
        return True

    def first_command(self):
        """The first row (the pose the robot is at), sent while the run waits to begin."""
        exp = self.experiments[0]
        return exp.names, exp.position[0], exp.velocity[0], exp.effort[0]

    def add_sample(self, stamp, q, qd, tau):
        """Log a measurement (joint order of the settings; stamp on the command clock)."""
        if self.t0 is not None and not self.commanding_done:
            self.samples.append((stamp - self.t0, q, qd, tau))

    def last_sample_time(self, default):
        """Time (command clock) of the newest sample of this joint, `default` when none."""
        if self.t0 is None or not self.samples:
            return default
        return self.samples[-1][0] + self.t0

    def _cut(self, now, k):
        """The joint has run past its budget (`budget`: the plan and `max_repeats` repeats
        of its longest segment, times `max_duration_factor`): disturbances that never stop (a
        supervisor holding the commands every few tens of ms) would re-plan it for ever. The
        rest of its schedule becomes a smooth approach from the measured pose to its end pose
        (never a jump), with no more re-planning; `finish_joint` then reports it cut short."""
        exp = self.experiment
        self._cut_short = (now - self.t0, self.planned[self.index], self.budget[self.index])
        start = np.asarray(self.samples[-1][1], float) if self.samples else exp.position[k]
        self.experiments[self.index] = _replanned(
            exp, k, len(exp.t) - 1, start, self.settings, self._planner,
            'cut short: back to the end pose')
        self.total = sum(e.duration for e in self.experiments)

    def joint_over(self, now):
        return (self.t0 is not None and not self.commanding_done
                and now - self.t0 > self.experiment.duration)

    def progress(self, now):
        done = sum(e.duration for e in self.experiments[:self.index])
        if self.t0 is not None and not self.commanding_done:
            elapsed = min(now - self.t0, self.experiment.duration)
            phase = self.experiment.phase_at(elapsed)
        else:
            elapsed = 0.0
            phase = 'estimating' if self.commanding_done else 'starting'
        spent = done + elapsed
        joint = self.experiment.joint
        out = {'experiment': self.kind, 'joint': joint, 'joint_index': self.index,
               'joints': self.joints, 'phase': phase,
               'percent': round(100.0 * spent / self.total, 1) if self.total else 100.0,
               'time_left_s': round(max(self.total - spent, 0.0), 1)}
        if self.repeats:
            out['repeats'] = len(self.repeats)
            out['last_repeat'] = f'{self.repeats[-1]["joint"]}: {self.repeats[-1]["cause"]}'
        return out

    def finish_joint(self):
        """Close the current joint's log; return a callable that estimates and stores results.

        Cheap: the log is handed to the callable, which makes it a recording (numpy arrays
        of some 20,000 samples: 43-55 ms, bench/policy_staleness.py's trace of friction_id)
        in the caller's worker thread, not in the command loop.
        """
        exp = self.experiment
        samples, cmd_log = self.samples, self.cmd_log
        t0 = self.t0
        cut, self._cut_short = self._cut_short, None
        self.index += 1
        self.t0 = None
        self._reset_log()
        if cut is not None:
            work = lambda: self._cut_short_failure(exp, *cut)  # noqa: E731
        else:
            work = lambda: self._identify_safely(exp, (samples, cmd_log), t0)  # noqa: E731
        if exp.extension:
            return work

        def first_run():
            try:
                work()
            finally:
                self._base_settled()
        return first_run

    def _budgeted(self):
        return self.kind == 'inertia' and self.settings.inertia_extend_budget_s > 0

    def _base_settled(self):
        """One joint's first run is estimated (or failed): after the last, the extensions
        that waited for inertia_extend_budget_s are allotted, the widest intervals first."""
        with self._lock:
            self._base_left -= 1
            if self._base_left > 0 or not self._deferred:
                return
            deferred, self._deferred = self._deferred, {}
        note = skipped_note(self.settings)
        try:
            costs = extension_cost(self.settings, self.nominal, list(deferred))
            granted, skipped = allot_extensions(
                [(j, w, costs[j]) for j, w in deferred.items()],
                self.settings.inertia_extend_budget_s)
        except Exception as exc:  # noqa: BLE001 - the first runs stand, and say why
            granted, skipped = [], list(deferred)
            note = f'not extended: the extensions could not be planned ({exc})'
        for joint in skipped:
            exp, rec, t0, fit = self._first.pop(joint)
            lo, hi = fit.estimates['armature'].interval
            self._publish(exp, rec, fit, self._data_file(joint), {
                'armature_interval_before': [float(lo), float(hi)], 'robot_time_s': 0.0,
                'skipped': note})
        for joint in granted:
            self._queue_extension(joint)

    def _disturbance_summary(self, joint):
        """This joint's repeats and ' (N disturbance(s) of this joint: ...)', or ''."""
        repeats = [r for r in self.repeats if r['joint'] == joint]
        if not repeats:
            return repeats, ''
        left_out = sum(not r['repeated'] and r['segment'] >= 0 for r in repeats)
        return repeats, (f' ({len(repeats)} disturbance(s) of this joint: '
                         f'{sum(r["repeated"] for r in repeats)} segment(s) repeated, '
                         f'{left_out} left out: '
                         + '; '.join(sorted({r['cause'] for r in repeats})) + ')')

    def _cut_short_failure(self, exp, elapsed, planned, budget):
        if exp.extension and exp.joint in self._first:
            # The first run stands, and says what became of its extension.
            self._identify(exp, None, self._first[exp.joint][2])
            for d in self.results:
                if d['joint'] == exp.joint and 'extension' in d:
                    d['extension']['robot_time_s'] = round(float(elapsed), 2)
                    d['extension']['error'] = (f'cut short after {elapsed:.1f} s (planned '
                                               f'{planned:.1f} s, budget {budget:.1f} s)')
            return
        repeats, summary = self._disturbance_summary(exp.joint)
        with self._lock:
            self.failures.append({
                'joint': exp.joint, 'reason': 'disturbed',
                'detail': (f'cut short after {elapsed:.1f} s of robot time (planned '
                           f'{planned:.1f} s; budget {budget:.1f} s with '
                           f'max_repeats {self.max_repeats} and max_duration_factor '
                           f'{self.max_duration_factor:g}) and brought back to its end pose, '
                           'nothing estimated' + summary),
                'repeats': repeats})

    def _extend(self, exp, rec, t0, fit):
        """Queue an inertia extension of `exp`'s joint (its armature interval is wider than
        armature_goal): the run goes on with it once the joints before it are done, and its
        recording is fit together with this one (`_identify`). With inertia_extend_budget_s
        it waits for the allotment (`_base_settled`). Called in a worker thread."""
        with self._lock:
            self._first[exp.joint] = (exp, rec, t0, fit)
            if self._budgeted():
                self._deferred[exp.joint] = armature_width(fit)
                return
        self._queue_extension(exp.joint)

    def _queue_extension(self, joint):
        # Designed outside the lock, which the command loop takes every command.
        start = self.experiments[-1].position[-1]   # where every experiment ends
        ext = design_extension(joint, self.settings, self.nominal, start)
        with self._lock:
            self.experiments.append(ext)
            self.planned.append(ext.duration)
            self.budget.append(self.max_duration_factor
                               * (ext.duration + self.max_repeats * _longest_segment(ext)))
            self.total = sum(e.duration for e in self.experiments)

    def _identify_safely(self, exp, log, t0):
        try:
            self._identify(exp, self._recording(exp, *log), t0)
        except Exception as exc:  # noqa: BLE001 - reported as this joint's failure
            with self._lock:
                self.failures.append({'joint': exp.joint, 'reason': 'internal error',
                                      'detail': f'{type(exc).__name__}: {exc}'})

    def _recording(self, exp, samples, cmd_log):
        cmd_t = np.array([c[0] for c in cmd_log])
        rows = np.array([c[1] for c in cmd_log], dtype=int)
        s = samples
        if len(s) < 10 or len(rows) < 2:
            return None
        t = np.array([x[0] for x in s])
        order = np.argsort(t, kind='stable')
        return Recording(exp.names, t[order], np.array([x[1] for x in s])[order],
                         np.array([x[2] for x in s])[order], np.array([x[3] for x in s])[order],
                         cmd_t, exp.position[rows], exp.velocity[rows], exp.effort[rows])

    def _data_file(self, joint):
        return os.path.join(self.results_dir, f'{self.base}_{joint}.mcap')

    def _identify(self, exp, rec, t0=0.0):
        joint = exp.joint
        extension = first = None
        if exp.extension and joint in self._first:
            # The extension's run joins the first (or, without samples, the first stands).
            first = self._first.pop(joint)
            e1, r1, t0, fit1 = first
            lo, hi = fit1.estimates['armature'].interval
            extension = {'armature_interval_before': [float(lo), float(hi)],
                         'robot_time_s': round(float(rec.t[-1] - rec.t[0]), 2)
                         if rec is not None else 0.0}
            if rec is None:
                extension['error'] = 'no joint_states were recorded in the extension'
                exp, rec = e1, r1
            else:
                exp, rec = join_runs((e1, r1), (exp, rec))
        if rec is None:
            with self._lock:
                self.failures.append({'joint': joint, 'reason': 'bad data',
                                      'detail': 'no joint_states were recorded'})
            return
        data_file = self._data_file(joint)
        write_mcap(data_file, rec, time_origin=t0 or 0.0)
        lim = self.settings.torque_limit[exp.index]
        try:
            if self.kind == 'friction':
                fit = estimate_friction(rec, exp, self.nominal, lim,
                                        effort_lag_s=self.physics_dt)
            elif self.kind == 'inertia':
                fit = estimate_inertia(rec, exp, self.nominal, lim,
                                       effort_lag_s=self.physics_dt)
                if extension is None and not exp.extension and wants_extension(
                        fit, self.settings):
                    self._extend(exp, rec, t0, fit)
                    return
            else:
                params = self._joint_params(exp, rec)
                fit = estimate_latency(rec, exp, self.nominal, params, self.settings.kp,
                                       self.settings.kd, self.physics_dt,
                                       self.settings.max_latency_s, lim)
        except IdentificationError as exc:
            if first is not None and extension is not None and 'error' not in extension:
                # The two runs together did not fit: the first run's estimate stands.
                extension['error'] = f'the two runs fit together failed: {exc.detail}'
                self._publish(e1, r1, fit1, data_file, extension)
                return
            repeats, summary = self._disturbance_summary(joint)
            detail = exc.detail + summary
            with self._lock:
                self.failures.append({'joint': joint, 'reason': exc.reason,
                                      'detail': detail, 'data_file': data_file,
                                      'repeats': repeats})
            return
        self._publish(exp, rec, fit, data_file, extension)

    def _publish(self, exp, rec, fit, data_file, extension=None):
        """A joint's fit as result documents (its seed baseline, fit curve, nominal values,
        combined friction, repeats and extension), added to the results."""
        joint = exp.joint
        lim = self.settings.torque_limit[exp.index]
        if self.kind == 'friction':
            base = baselines.baseline_friction(rec, exp)
        elif self.kind == 'inertia':
            base = baselines.baseline_inertia(rec, exp, self.nominal)
        else:
            base = baselines.baseline_latency(rec, exp)
        docs = result_documents(self.robot, fit, data_file)
        curve = self._fit_curve(exp, rec, fit, lim)
        if curve:
            docs[0]['fit_curve'] = curve   # one per fit: the report's plot of it
        for d in docs:
            d['robot_time_s'] = round(float(rec.t[-1] - rec.t[0]), 2)
            nominal = self.model_values.get(joint, {}).get(d['parameter'])
            if d['parameter'] == 'effective_inertia' and 'link_inertia' in fit.notes:
                nominal = fit.notes['link_inertia'] + self.model_values.get(joint, {}).get(
                    'armature', 0.0)
            if nominal is not None:
                d['nominal'] = nominal   # the MJCF's own value (what a simulator used so far)
        if self.kind == 'inertia':
            docs += self._combined_friction(joint, fit, data_file)
        repeats = [r for r in self.repeats if r['joint'] == joint]
        for d in docs:
            if extension is not None:
                d['extension'] = extension
            if d['parameter'] in base:
                d['seed_baseline'] = float(base[d['parameter']])
            if repeats:
                d['repeated_segments'] = repeats
        with self._lock:
            self.results.extend(docs)

    def _combined_friction(self, joint, fit, data_file):
        """The joint's newest sweep friction combined with this multi-sine's, as documents.

        The rule is estimators.combined_friction_fit's: inverse-variance weights, the Birge
        scale where the two disagree, nothing combined when the sweeps' model misfit was
        flagged or the joint has no sweep result yet (friction runs before inertia). A
        combined document keeps the sweeps' own value ('sweeps'), so a second inertia run
        combines with the sweeps again, not with the first run's multi-sine twice.
        """
        known = latest_documents(self.results_dir, self.robot)
        z = 1.959964
        out = []
        for key in FRICTION_KEYS:
            doc = known.get((joint, key))
            std2 = fit.notes.get(key + '_std')
            if doc is None or doc.get('model_misfit') or std2 is None:
                return []
            sweep = doc.get('sweeps') or doc
            try:
                lo, hi = (float(x) for x in sweep['interval'])
                v1 = float(sweep['value'])
            except (KeyError, TypeError, ValueError):
                return []
            c = combine_friction((v1, (hi - lo) / (2 * z), float(sweep.get('std_model', 0.0))),
                                 (fit.notes[key], std2, fit.notes.get(key + '_std_model', 0.0)))
            h = z * c['std']
            method = sweep.get('method', doc.get('method', ''))
            new = {k: v for k, v in doc.items()
                   if k not in ('fit_curve', 'sweeps', 'multisine', 'std_model')}
            new.update({
                'value': float(c['value']), 'interval': [float(c['value'] - h),
                                                         float(c['value'] + h)],
                'method': combined_method(method, c),
                'sweeps': {'value': v1, 'interval': [lo, hi], 'method': method,
                           'std_model': float(sweep.get('std_model', 0.0)),
                           'data_file': sweep.get('data_file')},
                'multisine': {'value': float(fit.notes[key]), 'std': float(std2),
                              'std_model': float(fit.notes.get(key + '_std_model', 0.0)),
                              'data_file': str(data_file)}})
            out.append(new)
        values = {d['parameter']: d['value'] for d in out}
        for d in out:   # the sweeps' share statement, for the combined value and interval
            precision_note(d, top_speed=d.get('top_speed_rad_s'), friction=values)
        return out

    def _fit_curve(self, exp, rec, fit, lim):
        """The fit's compact curve for the report, or None (a plot never fails a joint)."""
        try:
            return fit_curve(self.kind, rec, exp, self.nominal, fit, kp=self.settings.kp,
                             kd=self.settings.kd, physics_dt=self.physics_dt,
                             torque_limit=lim)
        except Exception as exc:  # noqa: BLE001 - the estimate stands without its plot
            return {'kind': self.kind, 'error': f'{type(exc).__name__}: {exc}'}

    def _joint_params(self, exp, rec):
        """Identified armature/friction of this joint: newest results, else this recording."""
        i = exp.index
        n = len(exp.names)
        known = latest_parameters(self.results_dir, self.robot)
        keys = ('armature', 'viscous_damping', 'coulomb_friction')
        if all((exp.joint, k) in known for k in keys):
            params = {k: np.zeros(n) for k in keys + tuple(k + '_std' for k in keys)}
            for k in keys:
                params[k][i], params[k + '_std'][i] = known[(exp.joint, k)]
            return params
        own = JointResult(exp.joint)
        own.fits['inertia'] = estimate_inertia(rec, exp, self.nominal,
                                               self.settings.torque_limit[i],
                                               effort_lag_s=self.physics_dt)
        return joint_params_from(own, i, n)


def mjcf_values(model_path, names):
    """The actuator values the MJCF itself gives each joint (the nominal model's), by the
    SysID parameter names; latency 0 (a simulator applies commands at once)."""
    model = load_model(model_path)
    out = {}
    for name in names:
        j = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
        if j < 0:
            continue
        dof = model.jnt_dofadr[j]
        out[name] = {'viscous_damping': float(model.dof_damping[dof]),
                     'coulomb_friction': float(model.dof_frictionloss[dof]),
                     'armature': float(model.dof_armature[dof]), 'latency': 0.0}
    return out


def _longest_segment(exp):
    """Duration (s) of the longest excitation segment of `exp` (0 without any)."""
    longest = 0.0
    for s_id in np.unique(exp.segment[exp.segment >= 0]):
        rows = np.nonzero(exp.segment == s_id)[0]
        longest = max(longest, float(exp.t[rows[-1]] - exp.t[rows[0]]))
    return longest


def _without_segments(exp, ids):
    """The experiment `exp` with the rows of excitation segments `ids` relabelled as outside
    the excitation (still commanded, never estimated from)."""
    lost = np.isin(exp.segment, ids) & (exp.segment >= 0)
    if not lost.any():
        return exp
    seg, steady, speed = exp.segment.copy(), exp.steady.copy(), exp.target_speed.copy()
    seg[lost], steady[lost], speed[lost] = -1, False, 0.0
    return dataclasses.replace(exp, segment=seg, steady=steady, target_speed=speed)


def _replanned(exp, k, resume, start, settings, nominal, label):
    """The experiment `exp` with rows after `k` replaced by an approach from `start` to row
    `resume` and the rows from `resume` on; excitation rows in [resume, k] relabelled."""
    b = _Builder(settings, exp.index, start)
    b.approach(exp.position[resume])
    b.hold(settings.settle_s)
    pos = np.concatenate(b.pos)
    vel = np.concatenate(b.vel)
    if settings.gravity_feedforward:
        eff = nominal.gravity(pos)
    else:
        eff = np.zeros_like(pos)
    dt = 1.0 / settings.command_rate_hz
    n_rec = len(pos)
    t_rec = exp.t[k] + dt * np.arange(1, n_rec + 1)
    shift = t_rec[-1] + dt - exp.t[resume]
    seg = exp.segment[:k + 1].copy()
    steady = exp.steady[:k + 1].copy()
    speed = exp.target_speed[:k + 1].copy()
    lost = np.arange(len(seg)) >= resume
    seg[lost], steady[lost], speed[lost] = -1, False, 0.0
    phases = [(s, n) for s, n in exp.phases if s <= exp.t[k]]
    phases.append((float(t_rec[0]), label))
    phases.append((float(exp.t[resume] + shift), exp.phase_at(exp.t[resume])))
    phases += [(s + shift, n) for s, n in exp.phases if s > exp.t[resume]]
    z = np.zeros(n_rec)
    return Experiment(
        exp.kind, exp.joint, exp.index, exp.names,
        np.concatenate([exp.t[:k + 1], t_rec, exp.t[resume:] + shift]),
        np.concatenate([exp.position[:k + 1], pos, exp.position[resume:]]),
        np.concatenate([exp.velocity[:k + 1], vel, exp.velocity[resume:]]),
        np.concatenate([exp.effort[:k + 1], eff, exp.effort[resume:]]),
        np.concatenate([seg, np.full(n_rec, -1), exp.segment[resume:]]),
        np.concatenate([steady, np.zeros(n_rec, bool), exp.steady[resume:]]),
        np.concatenate([speed, z, exp.target_speed[resume:]]),
        phases, exp.excitation_start, dict(exp.excitation), extension=exp.extension)

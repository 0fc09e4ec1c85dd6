"""One SysID run over several joints, as a node drives it (no ROS here).

The node calls `command(t)` on its timer and `add_sample(...)` for every joint_states message;
when a joint's experiment is over, `finish_joint()` hands back a closure that estimates (slow;
the node runs it in a worker thread while it keeps commanding). `results()` gathers everything
once all joints are done. Nothing is published unless the whole run completed.
"""
import os
import threading

import numpy as np

from simreal_ros.core.sysid import baselines
from simreal_ros.core.sysid.design import design_for
from simreal_ros.core.sysid.estimators import (IdentificationError, Recording,
                                               estimate_friction, estimate_inertia,
                                               estimate_latency, row_at)
from simreal_ros.core.sysid.records import (latest_parameters, result_documents,
                                            run_basename, write_mcap)
from simreal_ros.core.sysid.runner import JointResult, joint_params_from


class SysidSession:
    """Experiments of one kind on a list of joints, back to back."""

    def __init__(self, kind, settings, nominal, robot, joints, current_position, results_dir,
                 physics_dt=0.001):
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
        self.index = 0
        self.t0 = None
        self._reset_log()
        self.results = []
        self.failures = []
        self._lock = threading.Lock()

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
        if self.t0 is None:
            self.t0 = now
        exp = self.experiment
        if self.commanding_done:
            k = len(exp.t) - 1     # hold the last target while estimates finish
        else:
            k = int(row_at(exp.t, np.array([now - self.t0]))[0])
            self.cmd_log.append((now - self.t0, k))
        return exp.names, exp.position[k], exp.velocity[k], exp.effort[k]

    def first_command(self):
        """The first row (the pose the robot is at), sent while the run waits to begin."""
        exp = self.experiments[0]
        return exp.names, exp.position[0], exp.velocity[0], exp.effort[0]

    def add_sample(self, stamp, q, qd, tau):
        """Log a measurement (joint order of the settings; stamp on the command clock)."""
        if self.t0 is not None and not self.commanding_done:
            self.samples.append((stamp - self.t0, q, qd, tau))

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
        return {'experiment': self.kind, 'joint': joint, 'joint_index': self.index,
                'joints': self.joints, 'phase': phase,
                'percent': round(100.0 * spent / self.total, 1) if self.total else 100.0,
                'time_left_s': round(max(self.total - spent, 0.0), 1)}

    def finish_joint(self):
        """Close the current joint's log; return a callable that estimates and stores results."""
        exp = self.experiment
        rec = self._recording(exp)
        t0 = self.t0
        self.index += 1
        self.t0 = None
        self._reset_log()
        return lambda: self._identify_safely(exp, rec, t0)

    def _identify_safely(self, exp, rec, t0):
        try:
            self._identify(exp, rec, t0)
        except Exception as exc:  # noqa: BLE001 - reported as this joint's failure
            with self._lock:
                self.failures.append({'joint': exp.joint, 'reason': 'internal error',
                                      'detail': f'{type(exc).__name__}: {exc}'})

    def _recording(self, exp):
        cmd_t = np.array([c[0] for c in self.cmd_log])
        rows = np.array([c[1] for c in self.cmd_log], dtype=int)
        s = self.samples
        if len(s) < 10 or len(rows) < 2:
            return None
        t = np.array([x[0] for x in s])
        order = np.argsort(t, kind='stable')
        return Recording(exp.names, t[order], np.array([x[1] for x in s])[order],
                         np.array([x[2] for x in s])[order], np.array([x[3] for x in s])[order],
                         cmd_t, exp.position[rows], exp.velocity[rows], exp.effort[rows])

    def _identify(self, exp, rec, t0=0.0):
        joint = exp.joint
        if rec is None:
            with self._lock:
                self.failures.append({'joint': joint, 'reason': 'bad data',
                                      'detail': 'no joint_states were recorded'})
            return
        data_file = os.path.join(self.results_dir, f'{self.base}_{joint}.mcap')
        write_mcap(data_file, rec, time_origin=t0 or 0.0)
        lim = self.settings.torque_limit[exp.index]
        try:
            if self.kind == 'friction':
                fit = estimate_friction(rec, exp, self.nominal, lim)
                base = baselines.baseline_friction(rec, exp)
            elif self.kind == 'inertia':
                fit = estimate_inertia(rec, exp, self.nominal, lim)
                base = baselines.baseline_inertia(rec, exp, self.nominal)
            else:
                params = self._joint_params(exp, rec)
                fit = estimate_latency(rec, exp, self.nominal, params, self.settings.kp,
                                       self.settings.kd, self.physics_dt,
                                       self.settings.max_latency_s, lim)
                base = baselines.baseline_latency(rec, exp)
        except IdentificationError as exc:
            with self._lock:
                self.failures.append({'joint': joint, 'reason': exc.reason,
                                      'detail': exc.detail, 'data_file': data_file})
            return
        docs = result_documents(self.robot, fit, data_file)
        for d in docs:
            if d['parameter'] in base:
                d['seed_baseline'] = float(base[d['parameter']])
        with self._lock:
            self.results.extend(docs)

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
                                               self.settings.torque_limit[i])
        return joint_params_from(own, i, n)

"""Joint refinement: fit all actuator parameters together by matching recorded trajectories.

Starting from the closed-form SysID estimates, the replay of the recorded commands is made to
match the measured positions and velocities (residuals divided by each channel's sensor noise,
estimated from the data, after `skip_s` of initial transient):

1. CMA-ES (`cma`) over the non-smooth part of the problem: the command latency and each
   joint's dry friction (stick/slip and delay give a ragged error landscape with local minima a
   half period of the fastest motion apart), the other parameters held at their start values.
2. Gauss-Newton / Levenberg-Marquardt from there over every parameter of the chosen joints and
   the latency, with MuJoCo's own sysid toolbox (`mujoco.sysid` optimize, MuJoCo's
   least-squares backend, finite-difference Jacobian), and 95 % intervals from the Jacobian at
   the optimum (`mujoco.sysid` calculate_intervals). Those intervals treat the residuals as
   white; the sample-to-sample correlation of real residuals makes them optimistic.

Parameters are optimised in units of a per-parameter scale (their start value or a floor), so
finite differences and trust regions see numbers near 1.
"""
from dataclasses import dataclass, field
import io
import logging
import time

import numpy as np

from simreal_ros.core.bridge.gap import noise_std
from simreal_ros.core.bridge.params import JOINT_KEYS, RANGES

# Smallest scale per quantity; a start below it counts as 'no prior' and begins at it.
SCALE_FLOOR = {'damping': 0.05, 'frictionloss': 0.05, 'armature': 0.005, 'latency_s': 0.002}


MOVED_VELOCITY_STD = 0.02   # rad/s: a joint below this in a recording cannot be refined on it


def moving_joints(recording, names):
    """Return the joints of `names` that moved in `recording` (velocity std >= 0.02 rad/s)."""
    ridx = [recording.names.index(n) for n in names]
    moved = np.std(np.asarray(recording.velocity)[:, ridx], axis=0)
    return [n for n, m in zip(names, moved) if m >= MOVED_VELOCITY_STD]


class RefinementError(ValueError):
    """The recordings cannot support a refinement (too short, joint did not move...)."""


@dataclass
class Refinement:
    params: object                 # JointParams with intervals
    start: object                  # JointParams the refinement started from
    cost_start: float
    cost_cma: float
    cost_final: float
    evaluations: int
    wall_s: float
    layout: list = field(default_factory=list)     # (key, joint index or None) per x entry
    notes: dict = field(default_factory=dict)


def _import_sysid():
    """mujoco.sysid's public API (the `mujoco[sysid]` extra; the version is pinned in
    requirements/constraints.txt): ParameterDict, Parameter, optimize and calculate_intervals,
    re-exported at the package's top level. No private module is imported; a MuJoCo whose
    sysid lacks one of them is named in a clear error."""
    try:
        import mujoco.sysid as sysid
    except ModuleNotFoundError as exc:
        raise RefinementError(f'mujoco.sysid needs the mujoco[sysid] extra ({exc.name} is not '
                              'installed): pip install "mujoco[sysid]"') from exc
    missing = [n for n in ('ParameterDict', 'Parameter', 'optimize', 'calculate_intervals')
               if not hasattr(sysid, n)]
    if missing:
        import mujoco
        raise RefinementError(f'mujoco {mujoco.__version__}: mujoco.sysid lacks {missing}; '
                              'simreal_ros is tested with the version in '
                              'requirements/constraints.txt')
    return sysid


class _Problem:
    """Residuals of replays against recordings, as a function of a scaled parameter vector."""

    def __init__(self, replayer, recordings, start, joints, fit_latency, skip_s):
        self.replayer = replayer
        self.recordings = list(recordings)
        self.start = start.copy()
        names = replayer.names
        self.joint_idx = [names.index(j) for j in joints]
        self.layout = [(k, i) for i in self.joint_idx for k in JOINT_KEYS]
        if fit_latency:
            self.layout.append(('latency_s', None))
        self.scale = np.array([max(abs(self._get(start, k, i)), SCALE_FLOOR[k])
                               for k, i in self.layout])
        self.lower = np.array([RANGES[k][0] for k, _ in self.layout]) / self.scale
        self.upper = np.array([RANGES[k][1] for k, _ in self.layout]) / self.scale
        self.upper = np.minimum(self.upper, 100.0)   # x100 the scale: far beyond any prior
        self.evaluations = 0
        self.weights = []
        for rec in self.recordings:
            if len(rec.t) < 100:
                raise RefinementError(f'a recording has {len(rec.t)} samples; refinement '
                                      'needs >= 100')
            ridx = [rec.names.index(n) for n in names]
            first = int(np.searchsorted(rec.t, rec.t[0] + skip_s))
            sq = noise_std(np.asarray(rec.position)[:, ridx])
            sv = noise_std(np.asarray(rec.velocity)[:, ridx])
            moved = np.std(np.asarray(rec.velocity)[:, ridx], axis=0)
            self.weights.append((first, ridx, 1.0 / np.maximum(sq, 1e-9),
                                 1.0 / np.maximum(sv, 1e-9), moved))
        moved = np.max([w[4] for w in self.weights], axis=0)
        still = [names[i] for i in self.joint_idx if moved[i] < MOVED_VELOCITY_STD]
        if still:
            raise RefinementError(f'joint(s) {still} did not move in the recordings (velocity '
                                  'std < 0.02 rad/s): nothing to refine them on')

    @staticmethod
    def _get(params, key, i):
        return params.latency_s if key == 'latency_s' else getattr(params, key)[i]

    def params_at(self, x):
        p = self.start.copy()
        for value, (key, i) in zip(np.asarray(x, float) * self.scale, self.layout):
            value = float(max(value, 0.0))
            if key == 'latency_s':
                p.latency_s = value
            else:
                getattr(p, key)[i] = value
        p.interval = {}
        return p

    def x_of(self, params):
        return np.array([self._get(params, k, i) for k, i in self.layout]) / self.scale

    def residual_one(self, x):
        self.evaluations += 1
        p = self.params_at(x)
        out = []
        for rec, (first, ridx, wq, wv, _) in zip(self.recordings, self.weights):
            q, dq = self.replayer.rollout(rec, p)
            eq = (q - np.asarray(rec.position)[:, ridx])[first:] * wq
            ev = (dq - np.asarray(rec.velocity)[:, ridx])[first:] * wv
            r = np.concatenate([eq.ravel(), ev.ravel()])
            out.append(np.where(np.isfinite(r), r, 1e6))
        return np.concatenate(out)

    def cost(self, x):
        r = self.residual_one(x)
        return float(r @ r) / r.size

    def residual_fn(self, x, _params=None):
        """The (x, params) -> (residuals, ...) form `mujoco.sysid` optimize expects."""
        x = np.asarray(x, float)
        if x.ndim == 1:
            return [self.residual_one(x)], None, None
        return [np.column_stack([self.residual_one(c) for c in x.T])], None, None


def refine(replayer, recordings, start, joints=None, fit_latency=True, skip_s=0.2,
           cma_evaluations=48, max_iters=12, seed=0, log=None):
    """Refine `start` (JointParams) on `recordings`; return a Refinement.

    joints: the joints whose damping, frictionloss and armature are fitted (default: all);
    fit_latency: fit the command latency too.
    """
    import cma
    sysid = _import_sysid()
    log = log or (lambda msg: None)
    wall = time.monotonic()
    joints = list(replayer.names if joints is None else joints)
    prob = _Problem(replayer, recordings, start, joints, fit_latency, skip_s)
    x0 = np.clip(prob.x_of(start), prob.lower, prob.upper)
    # Starts at ~0 (no prior) begin at the floor scale instead, off the bound, and CMA-ES
    # searches them widely.
    no_prior = x0 < 0.05
    x0 = np.where(no_prior, 1.0, x0)
    cost_start = prob.cost(prob.x_of(start))
    log(f'refine: start cost {cost_start:.4g} (mean squared noise-normalised residual)')

    # 1. CMA-ES on latency and dry friction (the non-smooth part).
    sub = [k for k, (key, _) in enumerate(prob.layout)
           if key in ('latency_s', 'frictionloss')]
    x_cma = x0.copy()
    cost_cma = prob.cost(x0)
    if cma_evaluations > 0 and len(sub) >= 2:
        def objective(z):
            x = x0.copy()
            x[sub] = z
            return prob.cost(x)
        high = np.where(no_prior[sub], 50.0, np.minimum(prob.upper[sub], 5.0))
        opts = {'bounds': [list(prob.lower[sub]), list(high)],
                'maxfevals': int(cma_evaluations), 'seed': int(seed) + 1, 'verbose': -9,
                'popsize': max(6, 4 + int(3 * np.log(len(sub)))),
                'CMA_stds': list(np.where(no_prior[sub], 10.0, 1.0))}
        es = cma.CMAEvolutionStrategy(list(x0[sub]), 0.2, opts)
        es.optimize(objective)
        if es.result.fbest is not None and es.result.fbest < cost_cma:
            x_cma[sub] = es.result.xbest
            cost_cma = float(es.result.fbest)
        log(f'refine: CMA-ES {es.result.evaluations} evaluations -> cost {cost_cma:.4g}')

    # 2. Gauss-Newton (Levenberg-Marquardt) on everything with mujoco.sysid.
    pdict = sysid.ParameterDict()
    pdict.add(sysid.Parameter('x', x_cma, prob.lower, prob.upper))
    logging.getLogger('absl').setLevel(logging.ERROR)
    opt, result = sysid.optimize(pdict, prob.residual_fn, optimizer='mujoco',
                                          verbose=False, max_iters=max_iters, eps=1e-5,
                                          output=io.StringIO())
    x_opt = np.asarray(opt['x'].value, float).reshape(-1)
    from mujoco import minimize as mj_minimize
    r_opt = prob.residual_one(x_opt)
    jac, _ = mj_minimize.jacobian_fd(lambda x: prob.residual_fn(x)[0][0], x_opt[:, None],
                                     r_opt[:, None], 1e-5, 0,
                                     [prob.lower[:, None], prob.upper[:, None]])
    _, half = sysid.calculate_intervals([r_opt], np.asarray(jac))
    cost_final = float(r_opt @ r_opt) / r_opt.size
    if cost_final > cost_cma:       # never hand back something worse than the CMA point
        x_opt, cost_final = x_cma, cost_cma
    params = prob.params_at(x_opt)
    n = len(replayer.names)
    interval = {k: np.asarray(start.half_width(k), float).copy() for k in JOINT_KEYS}
    interval['latency_s'] = start.half_width('latency_s')
    for h, (key, i), s in zip(np.asarray(half, float), prob.layout, prob.scale):
        if key == 'latency_s':
            interval[key] = float(h * s)
        else:
            interval[key][i] = float(h * s)
    params.interval = interval
    params.source = {k: ['trajectory matching (CMA-ES + Gauss-Newton)'
                         if i in prob.joint_idx else 'closed form' for i in range(n)]
                     for k in JOINT_KEYS}
    log(f'refine: Gauss-Newton -> cost {cost_final:.4g}, {prob.evaluations} rollouts')
    return Refinement(params, start.copy(), cost_start, cost_cma, cost_final, prob.evaluations,
                      time.monotonic() - wall, prob.layout,
                      {'joints': joints, 'fit_latency': fit_latency, 'skip_s': skip_s})

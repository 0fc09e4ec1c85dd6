"""Replay a reference trace through the supervisor's own limit filter: does it pass untouched?

`replay(params, trace, scale=1.0)` feeds a `core/safety` `Supervisor`, built from a robot
file's `safety_supervisor` parameters, the reference's states and targets as the node would
see them (one target per policy step with the state of that step, ticks at the supervisor's
rate in between, the state moving linearly to the next step's as a driver's stream does) and
returns what the filter did: the policy steps whose forwarded target differs from the
reference's, the clips per kind and joint, the implausible states (measurement plausibility:
`state_position_margin`, `state_velocity_factor`), and the first safe output's reason. With
`jitter` (a fraction of the policy period) every other target arrives that much late and the
next one that much early, as a loaded real-time computer delivers them; limits proposed for
jitter pass that replay too.

A proposal that lets the trained motion through replays with zero clips at stage 1.00
(`simreal limits` and `simreal check` report it). Nothing here imports rclpy, and nothing here
re-implements the filter: it is `core/safety`'s.
"""
from dataclasses import dataclass, field

import numpy as np

from simreal_ros.core.config import ConfigError


@dataclass
class Replay:
    """What the supervisor's filter did to a reference."""

    steps: int = 0
    changed_steps: int = 0                       # forwarded target != the reference's
    clips: dict = field(default_factory=dict)    # kind -> {joint: count}
    implausible_states: int = 0
    last_implausible: str = ''
    safe_reason: str = ''                        # the first safe output's reason, or ''
    safe_at_step: int = None
    jitter: float = 0.0

    @property
    def clip_count(self):
        return int(sum(sum(v.values()) for v in self.clips.values()))

    @property
    def clean(self):
        return (self.changed_steps == 0 and self.clip_count == 0 and not self.safe_reason
                and self.implausible_states == 0)

    def summary(self):
        """One line for the operator."""
        if self.clean:
            return (f'the reference passes untouched: {self.steps} policy steps, 0 clips, 0 '
                    f'implausible states (jitter {self.jitter:g} of a period)')
        parts = [f'{self.changed_steps} of {self.steps} policy steps changed']
        for kind, joints in self.clips.items():
            if joints:
                parts.append(f'{kind} clips ' + ', '.join(f'{n} {c}' for n, c in
                                                          joints.items()))
        if self.implausible_states:
            parts.append(f'{self.implausible_states} implausible states ('
                         f'{self.last_implausible})')
        if self.safe_reason:
            parts.append(f'safe output from step {self.safe_at_step}: {self.safe_reason}')
        return '; '.join(parts) + f' (jitter {self.jitter:g} of a period)'

    def to_dict(self):
        return {'steps': self.steps, 'changed_steps': self.changed_steps,
                'clips': self.clips, 'clip_count': self.clip_count,
                'implausible_states': self.implausible_states,
                'last_implausible': self.last_implausible, 'safe_reason': self.safe_reason,
                'safe_at_step': self.safe_at_step, 'jitter': self.jitter, 'clean': self.clean}


def replay(params, trace, scale=1.0, jitter=0.0, source='safety_supervisor'):
    """Replay `trace` (core/trace.Trace with targets) through a Supervisor from `params`.

    `params`: the flattened safety_supervisor parameters of a robot file. The trace must
    cover every supervised joint (any order); a trace that lacks one is refused, named.
    """
    from simreal_ros.core.safety import Supervisor, SupervisorConfig
    if trace.target is None:
        raise ConfigError(f'{trace.path}: no targets (target_q or actions) to replay')
    p = dict(params)
    p.update(use_imu=False, stages=[float(scale)], stage_dwell_s=[1.0], resume_stage=False,
             stage_file='', demote_on=[], auto_advance=False)
    for key in list(p):
        if key.startswith('live_gap.'):
            p.pop(key)
    cfg = SupervisorConfig.from_params(p, source)
    names = list(cfg.limits.names)
    missing = [n for n in names if n not in trace.names]
    if missing:
        raise ConfigError(f'{trace.path}: the trace lacks the supervised joint(s) {missing}')
    cols = [trace.names.index(n) for n in names]
    q_all = trace.q[:, cols]
    dq_all = trace.velocity()[0][:, cols]
    tg_all = trace.target[:, cols]
    period = float(np.median(np.diff(trace.time))) if trace.n_samples > 1 else 0.02
    tick = 1.0 / float(p.get('rate_hz', 500.0))
    sup = Supervisor(cfg, 0.0)
    out = Replay(steps=trace.n_samples, jitter=float(jitter))
    t = 1.0
    # The start: the first state, its own pose commanded (the bring-up's hold) for a period.
    for _ in range(max(1, int(round(period / tick)))):
        sup.on_joint_state(names, q_all[0], np.zeros(len(names)), t, t)
        sup.on_command('policy', names, q_all[0], [], [], t, t)
        sup.tick(t)
        t += tick
    for k in range(trace.n_samples):
        shift = (jitter * period) * (1 if k % 2 else -1) if jitter else 0.0
        n_ticks = max(1, int(round((period + shift) / tick)))
        target = tg_all[k]
        # Between two policy steps the driver streams states at its own rate: the joints
        # move from this step's state towards the next one's, not all at once at the next
        # step (a held state that then jumps a period's motion in one tick looks implausible
        # to the supervisor's jump check, which a real stream never shows).
        step_q = q_all[k + 1] - q_all[k] if k + 1 < trace.n_samples else 0.0 * q_all[k]
        for i in range(n_ticks):
            q_now = q_all[k] + step_q * (i / n_ticks)
            sup.on_joint_state(names, q_now, dq_all[k], t, t)
            if i == 0:
                sup.on_command('policy', names, target, [], [], t, t)
            result = sup.tick(t)
            if result is not None and result.safe and not out.safe_reason:
                out.safe_reason = sup.status(t)['safe_reason'] or 'safe output'
                out.safe_at_step = k
            if i == 0 and result is not None and not result.safe and \
                    result.position is not None:
                out.changed_steps += int(not np.array_equal(result.position, target))
            t += tick
    status = sup.status(t)
    out.clips = {k: dict(v) for k, v in status['clips'].items()}
    out.implausible_states = int(status['implausible_states'])
    out.last_implausible = str(status.get('last_implausible') or '')
    return out

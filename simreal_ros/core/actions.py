"""Turn a raw policy action into joint commands: clip, scale, offset by the default pose.

- mode `position`: target = clip(action) * scale + default_position (position targets for the
  driver's PD, as in legged_gym / Isaac Lab `JointPositionAction`);
- mode `effort`: torque = clip(action) * scale (direct effort, no offset).

Clipped elements are counted (`clipped`), never silently changed. A non-finite action raises
ValueError: it must never become a command.
"""
import math

import numpy as np

from simreal_ros.core.config import ConfigError

MODES = ('position', 'effort')


class ActionProcessor:
    """Clip, scale and offset actions (policy joint order)."""

    def __init__(self, n_joints, mode='position', scale=1.0, clip=0.0, default_position=None,
                 source='policy_runner'):
        if mode not in MODES:
            raise ConfigError(f'{source}: action.mode must be one of {MODES}, got {mode!r}')
        self.n = int(n_joints)
        self.mode = mode
        scale = np.asarray(scale, dtype=float).reshape(-1)
        if scale.size == 1:
            scale = np.full(self.n, float(scale[0]))
        if scale.size != self.n or not np.all(np.isfinite(scale)):
            raise ConfigError(f'{source}: action.scale needs 1 or {self.n} finite values, got '
                              f'{scale.tolist()}')
        self.scale = scale
        self.clip = float(clip)
        if not math.isfinite(self.clip) or self.clip < 0:
            raise ConfigError(f'{source}: action.clip must be >= 0 (0 = no clip)')
        if default_position is None:
            default_position = np.zeros(self.n)
        self.offset = (np.asarray(default_position, dtype=float).reshape(-1)
                       if mode == 'position' else np.zeros(self.n))
        if self.offset.size != self.n:
            raise ConfigError(f'{source}: default_position has {self.offset.size} values for '
                              f'{self.n} policy joints')
        self.clipped = 0

    def process(self, action):
        """Return the joint targets (positions or efforts) for one raw action."""
        action = np.asarray(action, dtype=float).reshape(-1)
        if action.size != self.n:
            raise ValueError(f'the policy output has {action.size} values for {self.n} joints')
        if not np.all(np.isfinite(action)):
            raise ValueError('the policy output is not finite: '
                             f'{np.count_nonzero(~np.isfinite(action))} NaN/inf value(s)')
        if self.clip > 0:
            self.clipped += int(np.count_nonzero(np.abs(action) > self.clip))
            action = np.clip(action, -self.clip, self.clip)
        return action * self.scale + self.offset

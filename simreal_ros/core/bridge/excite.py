"""Whole-robot excitations for gap evaluation and joint refinement (every joint at once).

A deployment-like motion: every joint follows its own multi-sine around a centre pose, with
frequencies on disjoint grids per joint, faded in and out, and a gravity feed-forward from the
nominal model (links are known). `record_run` drives a SimPlant with it like a driver would
(commands at the sample rate) and returns a `Recording`.
"""
from dataclasses import dataclass

import numpy as np

from simreal_ros.core.sysid.runner import record


@dataclass
class RunSchedule:
    """Command rows for all joints (duck-types the SysID Experiment for runner.record)."""

    names: list
    t: np.ndarray
    position: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray

    @property
    def duration(self):
        return float(self.t[-1] - self.t[0])


def multisine_run(names, centre, amplitude, band_hz, duration_s, rate_hz=500.0, n_sines=6,
                  seed=0, nominal=None, fade_s=0.5):
    """Return a RunSchedule: per joint a random-phase multi-sine of peak `amplitude` (rad)."""
    rng = np.random.default_rng(seed)
    n = len(names)
    centre = np.broadcast_to(np.asarray(centre, float), (n,))
    amplitude = np.broadcast_to(np.asarray(amplitude, float), (n,))
    t = np.arange(int(round(duration_s * rate_hz)) + 1) / rate_hz
    lo, hi = band_hz
    freqs = np.geomspace(lo, hi, n_sines * n)
    ramp = np.clip(np.minimum(t, duration_s - t) / fade_s, 0.0, 1.0)
    env = ramp**2 * (3 - 2 * ramp)
    denv = np.gradient(env, t)
    pos = np.repeat(centre[None, :], len(t), 0)
    vel = np.zeros_like(pos)
    for j in range(n):
        f = freqs[j::n]
        w = 2 * np.pi * f
        a = 1.0 / w**0.5
        ph = rng.uniform(0, 2 * np.pi, len(f))
        x = np.sin(np.outer(t, w) + ph) @ a
        v = np.cos(np.outer(t, w) + ph) @ (a * w)
        scale = amplitude[j] / np.max(np.abs(x))
        pos[:, j] += scale * x * env
        vel[:, j] = scale * (v * env + x * denv)
    effort = nominal.gravity(pos) if nominal is not None else np.zeros_like(pos)
    return RunSchedule(list(names), t, pos, vel, effort)


def record_run(plant, schedule, sample_rate_hz=500.0):
    """Drive `plant` with `schedule`; return the Recording (the SysID runner's recorder)."""
    return record(plant, schedule, sample_rate_hz)

"""The G1 reference walk through the filter: untouched at stage 1.00, limited at 0.10."""
import numpy as np

from simreal_ros.core.config import load_node_params
from simreal_ros.core.safety import SupervisorConfig, filter_command, validate_command

from conftest import REPO

DEFAULT = np.array([-0.1, 0.0, 0.0, 0.3, -0.2, 0.0] * 2)


def replay(g1_dir, scale):
    """Filter every policy step of unitree's reference trace; return (changed, clip counts)."""
    p = load_node_params(REPO / 'config' / 'robots' / 'g1_12dof.yaml', 'safety_supervisor')
    cfg = SupervisorConfig.from_params(p)
    trace = np.load(g1_dir / 'reference_trace.npz')
    obs, actions = trace['obs'], trace['actions']
    names = list(cfg.limits.names)
    prev = np.full(12, np.nan)
    changed, clips = 0, {}
    for k in range(len(actions)):
        q = obs[k, 9:21] + DEFAULT          # joint_pos term (scale 1.0)
        dq = obs[k, 21:33] / 0.05           # joint_vel term (scale 0.05)
        target = actions[k] * 0.25 + DEFAULT
        cmd = validate_command(names, target, [], [], names)
        # One supervisor tick (2 ms) after the previous target: the strictest rate window.
        out, c = filter_command(cfg.limits, scale, cmd, q, dq, prev, 0.002)
        changed += int(not np.array_equal(out.position, target))
        for kind, mask in c.items():
            clips[kind] = clips.get(kind, 0) + int(mask.sum())
        prev = out.position
    return changed, clips, len(actions)


def test_g1_reference_walk_is_untouched_at_stage_one(g1_dir):
    changed, clips, n = replay(g1_dir, 1.0)
    assert n == 1000
    assert changed == 0, clips
    assert sum(clips.values()) == 0


def test_g1_reference_walk_is_visibly_limited_and_counted_at_stage_0_10(g1_dir):
    changed, clips, n = replay(g1_dir, 0.1)
    assert changed > n // 2, (changed, clips)
    assert clips['rate'] > 0 and clips['torque'] > 0

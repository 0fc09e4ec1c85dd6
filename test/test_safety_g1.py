"""The G1 reference walk through the filter: untouched at stage 1.00, limited at 0.10."""
import numpy as np

from simreal_ros.core.config import load_node_params
from simreal_ros.core.safety import Supervisor, SupervisorConfig

from conftest import REPO

DEFAULT = np.array([-0.1, 0.0, 0.0, 0.3, -0.2, 0.0] * 2)


def replay(g1_dir, scale):
    """Run unitree's reference trace through the supervisor (policy at 50 Hz, ticks at 500 Hz).

    Returns (policy steps whose forwarded target differs from the policy's, clip counts, n).
    """
    p = load_node_params(REPO / 'config' / 'robots' / 'g1_12dof.yaml', 'safety_supervisor')
    p.update(use_imu=False, stages=[scale], resume_stage=False, stage_file='',
             demote_on=[])
    cfg = SupervisorConfig.from_params(p)
    sup = Supervisor(cfg, 0.0)
    trace = np.load(g1_dir / 'reference_trace.npz')
    obs, actions = trace['obs'], trace['actions']
    names = list(cfg.limits.names)
    changed, t = 0, 1.0
    q0 = obs[0, 9:21] + DEFAULT
    for _ in range(10):   # 20 ms holding the start pose
        sup.on_joint_state(names, q0, np.zeros(12), t, t)
        sup.on_command('policy', names, q0, [], [], t, t)
        sup.tick(t)
        t += 0.002
    for k in range(len(actions)):
        q = obs[k, 9:21] + DEFAULT          # joint_pos term (scale 1.0)
        dq = obs[k, 21:33] / 0.05           # joint_vel term (scale 0.05)
        target = actions[k] * 0.25 + DEFAULT
        for tick in range(10):              # the state of the policy step, refreshed
            sup.on_joint_state(names, q, dq, t, t)
            if tick == 0:
                assert sup.on_command('policy', names, target, [], [], t, t)[0]
            out = sup.tick(t)
            assert out is not None and not out.safe, sup.status(t)['safe_reason']
            if tick == 0:                   # forwarded on arrival, as the node does
                changed += int(not np.array_equal(out.position, target))
            t += 0.002
    clips = {k: sum(v.values()) for k, v in sup.status(t)['clips'].items()}
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

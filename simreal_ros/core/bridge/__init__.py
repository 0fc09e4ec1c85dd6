"""The simulator bridge: identified actuator parameters in a MuJoCo model, the reality gap.

- params: JointParams (damping, frictionloss, armature per joint; latency_s) and MjSpec use;
- replay: Replayer rolls recorded commands out in the model through a command delay line;
- gap: NRMSE after cross-correlation alignment, noise floor from the data, pass/fail;
- refine: trajectory matching (CMA-ES + mujoco.sysid Gauss-Newton with intervals);
- recording: the Recording arrays from/to MCAP; export: MJCF, YAML, DR ranges; report: HTML.
"""
from simreal_ros.core.bridge.gap import DEFAULT_THRESHOLD, GapResult, evaluate
from simreal_ros.core.bridge.params import JOINT_KEYS, JointParams, build_model
from simreal_ros.core.bridge.replay import Replayer
from simreal_ros.core.bridge.session import BridgeSession

__all__ = ['DEFAULT_THRESHOLD', 'JOINT_KEYS', 'BridgeSession', 'GapResult', 'JointParams',
           'Replayer', 'build_model', 'evaluate']

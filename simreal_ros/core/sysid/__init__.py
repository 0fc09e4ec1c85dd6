"""System identification of joint actuators: experiment design, estimators, seed baselines."""
from simreal_ros.core.sysid.design import (KINDS, Experiment, SysidSettings, check_limits,
                                           design_for)
from simreal_ros.core.sysid.estimators import (REASONS, Estimate, Fit, IdentificationError,
                                               Recording, estimate_friction, estimate_inertia,
                                               estimate_latency)
from simreal_ros.core.sysid.model import NominalModel, simulate_joint

__all__ = ['KINDS', 'REASONS', 'Estimate', 'Experiment', 'Fit', 'IdentificationError',
           'NominalModel', 'Recording', 'SysidSettings', 'check_limits', 'design_for',
           'estimate_friction', 'estimate_inertia', 'estimate_latency', 'simulate_joint']

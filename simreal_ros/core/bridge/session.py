"""What sim_bridge does with a recording, without ROS: score the gap, export, report."""
from dataclasses import dataclass
import os

import numpy as np

from simreal_ros.core.bridge import export as export_mod
from simreal_ros.core.bridge.gap import DEFAULT_THRESHOLD, evaluate
from simreal_ros.core.bridge.params import JointParams
from simreal_ros.core.bridge.replay import Replayer
from simreal_ros.core.config import ConfigError, resolve_path


@dataclass
class GapReport:
    """Gap of the nominal and the identified model on one recording."""

    recording: str
    nominal: object      # GapResult
    identified: object   # GapResult
    sims: dict           # label -> (q, dq)

    def to_dict(self):
        return {'recording': self.recording, 'passed': self.identified.passed,
                'gap_nominal': self.nominal.value, 'gap_identified': self.identified.value,
                'noise_floor': self.identified.noise_floor['overall'],
                'threshold': self.identified.threshold,
                'reduction_x': (self.nominal.value / self.identified.value
                                if self.identified.value > 0 else float('inf')),
                'nominal': self.nominal.to_dict(), 'identified': self.identified.to_dict()}


class BridgeSession:
    """The robot's model (nominal MJCF + parameters) and the operations on recordings."""

    def __init__(self, model_path, names, kp, kd, physics_dt=0.001, torque_limit=np.inf,
                 threshold=DEFAULT_THRESHOLD, max_shift_s=0.05, skip_s=0.2, robot='robot',
                 gantry_lift=None):
        self.model_path = str(model_path)
        self.gantry_lift = gantry_lift
        self.replayer = Replayer(model_path, names, kp, kd, physics_dt, torque_limit,
                                 fixed_base_lift=gantry_lift)
        self.names = list(names)
        self.threshold = float(threshold)
        self.max_shift_s = float(max_shift_s)
        self.skip_s = float(skip_s)
        self.robot = robot
        self.nominal = self.replayer.nominal.copy()

    @classmethod
    def from_params(cls, params, config_dir=None):
        """Build from the flat sim_bridge node parameters; ConfigError names the parameter."""
        names = params.get('joint_names')
        if not names:
            raise ConfigError('sim_bridge.joint_names is missing (in /** or sim_bridge)')
        model = resolve_path(params.get('model_path', ''), 'sim_bridge.model_path',
                             relative_to=config_dir)
        for key in ('kp', 'kd'):
            if key not in params:
                raise ConfigError(f'sim_bridge.{key} is missing: the driver PD gains (as '
                                  'sim_robot), one per joint')
        return cls(model, names, params['kp'], params['kd'],
                   float(params.get('physics_dt', 0.001)),
                   params.get('torque_limit', np.inf),
                   float(params.get('gap_threshold', DEFAULT_THRESHOLD)),
                   float(params.get('max_shift_s', 0.05)), float(params.get('skip_s', 0.2)),
                   str(params.get('robot_name', 'robot')), _gantry_lift(params))

    def gap(self, rec, params, label='identified'):
        """GapResult of `params` (JointParams) replaying `rec`, and the replay (q, dq)."""
        q, dq = self.replayer.rollout(rec, params)
        return evaluate(rec, q, dq, self.names, self.threshold, self.max_shift_s, label,
                        self.skip_s), (q, dq)

    def evaluate(self, rec, params, name=''):
        """Gap of the nominal model and of `params` on `rec`: a GapReport."""
        nominal, sim_n = self.gap(rec, self.nominal, 'nominal')
        ident, sim_i = self.gap(rec, params, 'identified')
        return GapReport(name, nominal, ident, {'nominal': sim_n, 'identified': sim_i})

    def export(self, out_dir, params, report=None, rec=None):
        """Write MJCF, values YAML, DR YAML (and the HTML report when given a GapReport)."""
        gap = report.to_dict() if report is not None else None
        if gap:
            gap = {k: v for k, v in gap.items() if k not in ('nominal', 'identified')}
        paths = export_mod.export(out_dir, self.model_path, params, self.robot, gap,
                                  physics_dt=self.replayer.dt)
        if report is not None and rec is not None:
            from simreal_ros.core.bridge.report import write_report
            paths['report'] = write_report(out_dir, rec, report.sims, params, self.nominal,
                                           {'nominal': report.nominal,
                                            'identified': report.identified},
                                           title=f'{self.robot}: sim_bridge report')
        return {k: os.path.abspath(v) for k, v in paths.items()}


def _gantry_lift(params):
    """sim_bridge.gantry_lift: >= 0 replays with the floating base fixed that high (a robot
    identified hanging in its gantry); absent or < 0: the model as it is."""
    lift = params.get('gantry_lift')
    if lift is None:
        return None
    try:
        lift = float(lift)
    except (TypeError, ValueError):
        raise ConfigError(f'sim_bridge.gantry_lift: expected metres (a number), got {lift!r}') \
            from None
    return lift if lift >= 0 else None


def write_traces(out_dir, rec, report, names, recording=''):
    """Write what evaluate_gap compared (measured, nominal and identified replay of the scored
    part) as `gap_traces.npz` in out_dir, for a report's plot; return its absolute path."""
    idx = [list(rec.names).index(n) for n in names]
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.abspath(os.path.join(out_dir, 'gap_traces.npz'))
    tmp = path + '.tmp.npz'
    (qn, dqn), (qi, dqi) = report.sims['nominal'], report.sims['identified']
    np.savez_compressed(tmp, t=np.asarray(rec.t, float), names=np.array(list(names)),
                        measured_position=np.asarray(rec.position, float)[:, idx],
                        measured_velocity=np.asarray(rec.velocity, float)[:, idx],
                        nominal_position=qn, nominal_velocity=dqn,
                        identified_position=qi, identified_velocity=dqi,
                        shift_nominal_s=report.nominal.shift_s,
                        shift_identified_s=report.identified.shift_s,
                        recording=np.array(str(recording)))
    os.replace(tmp, path)
    return path


__all__ = ['BridgeSession', 'GapReport', 'JointParams', 'write_traces']

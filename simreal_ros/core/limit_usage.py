"""How much of each limit a joint uses, for the operator's markers (`simreal monitor`)."""
import numpy as np


def limit_usage(params, stage, names, position, velocity, effort):
    """Return {joint: {'position', 'velocity', 'torque'}} fractions of each limit in use.

    params: the safety_supervisor parameters (position_lower/upper, velocity_limit,
    torque_limit, joint_names); stage: the current stage scale (velocity and torque limits
    are scaled by it). Position usage is 0 at the middle of the soft range, 1 at either end.
    """
    order = list(params['joint_names'])
    lo = np.asarray(params['position_lower'], float)
    hi = np.asarray(params['position_upper'], float)
    vmax = np.asarray(params['velocity_limit'], float) * float(stage)
    tmax = np.asarray(params['torque_limit'], float) * float(stage)
    mid, half = (hi + lo) / 2.0, np.maximum((hi - lo) / 2.0, 1e-9)
    out = {}
    for k, name in enumerate(names):
        if name not in order:
            continue
        i = order.index(name)
        entry = {'position': abs(position[k] - mid[i]) / half[i]}
        if k < len(velocity):
            entry['velocity'] = abs(velocity[k]) / max(vmax[i], 1e-9)
        if k < len(effort):
            entry['torque'] = abs(effort[k]) / max(tmax[i], 1e-9)
        out[name] = {key: round(float(v), 3) for key, v in entry.items()}
    return out

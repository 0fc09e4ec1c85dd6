"""The one reading of a JointState-style command (hardware/command) by name, shared by
sim_robot's plant and the hardware adapters (unitree_bridge): no ROS, no MuJoCo."""
import numpy as np


def joint_indices(names, joints):
    """Indices of `names` among `joints`; ValueError naming unknown or repeated names."""
    names = list(names)
    lookup = {n: i for i, n in enumerate(joints)}
    unknown = [n for n in names if n not in lookup]
    if unknown:
        raise ValueError(f'unknown joint name(s) {unknown}; this robot has {list(joints)}')
    if len(set(names)) != len(names):
        raise ValueError(f'duplicate joint names in command: {names}')
    return np.array([lookup[n] for n in names], dtype=int)


def parse_joint_command(names, joints, position=(), velocity=(), effort=()):
    """A JointState-style command (by name) checked against `joints`: (indices, {'position',
    'velocity', 'effort': array or None}); ValueError with the reason when malformed. The one
    reading of hardware/command for sim_robot and the hardware adapters."""
    idx = joint_indices(names, joints)
    fields = {}
    for key, values in (('position', position), ('velocity', velocity), ('effort', effort)):
        arr = np.asarray(values, dtype=float).reshape(-1)
        if arr.size == 0:
            fields[key] = None
            continue
        if arr.size != idx.size:
            raise ValueError(f'{key} has {arr.size} values for {idx.size} names')
        if not np.all(np.isfinite(arr)):
            raise ValueError(f'{key} has non-finite values')
        fields[key] = arr
    if idx.size == 0:
        raise ValueError('command names no joints')
    if all(v is None for v in fields.values()):
        raise ValueError('command has no position, velocity or effort values')
    return idx, fields

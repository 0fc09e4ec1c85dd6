"""Recorded runs: the SysID `Recording` arrays, read from and written to MCAP (ROS 2 profile).

A recorded run is what was commanded (joint targets/efforts with their times) and what was
measured (joint states with their times), as `simreal_ros.core.sysid.Recording`:
`t, position, velocity, effort` (samples x joints) and `cmd_t, cmd_position, cmd_velocity,
cmd_effort` (command rows x joints; NaN = no such term, as the driver reads them).

MCAP files (as `ros2 bag record -s mcap` or the SysID nodes write them, readable by Foxglove)
hold sensor_msgs/JointState on a command topic (`hardware/command`, the supervisor's output;
else `sysid/command`) and on `joint_states`. Commands that name a subset of joints keep the
other joints' last command (the driver does the same); before a joint's first command it is
damped (velocity target 0, no position term). Times are header stamps (the robot's clock) unless
a message's stamp is zero, then the recorder's log time; both are made relative to the first
command.
"""
import os

import numpy as np

from simreal_ros.core.config import ConfigError
from simreal_ros.core.files import atomic_path
from simreal_ros.core.sysid.estimators import Recording
from simreal_ros.core.sysid.records import JOINT_STATE_DEF

COMMAND_TOPICS = ('hardware/command', 'sysid/command')
STATE_TOPIC = 'joint_states'

# One definition of the message schema for every MCAP file the package writes.
JOINT_STATE_MSGDEF = JOINT_STATE_DEF


def _stamp(ns):
    ns = int(ns)
    return {'sec': ns // 1_000_000_000, 'nanosec': ns % 1_000_000_000}


def _joint_state(ns, names, position=(), velocity=(), effort=()):
    return {'header': {'stamp': _stamp(ns), 'frame_id': ''}, 'name': list(names),
            'position': [float(v) for v in position], 'velocity': [float(v) for v in velocity],
            'effort': [float(v) for v in effort]}


def write_mcap(path, rec, command_topic=COMMAND_TOPICS[0], state_topic=STATE_TOPIC,
               start_ns=1_700_000_000_000_000_000):
    """Write `rec` to an MCAP file (commands and joint states as sensor_msgs/JointState)."""
    from mcap_ros2.writer import Writer
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    events = []
    for k, t in enumerate(rec.cmd_t):
        pos = np.asarray(rec.cmd_position[k], float)
        vel = np.asarray(rec.cmd_velocity[k], float)
        eff = np.asarray(rec.cmd_effort[k], float)
        has_p = bool(np.all(np.isfinite(pos)))
        has_v = bool(np.all(np.isfinite(vel)))
        msg = _joint_state(0, rec.names, pos if has_p else (), vel if has_v else (),
                           np.nan_to_num(eff))
        events.append((float(t), 1, command_topic, msg))
    for k, t in enumerate(rec.t):
        msg = _joint_state(0, rec.names, rec.position[k], rec.velocity[k], rec.effort[k])
        events.append((float(t), 0, state_topic, msg))
    events.sort(key=lambda e: (e[0], e[1]))
    with atomic_path(path) as tmp, open(tmp, 'wb') as f:
        writer = Writer(f)
        schema = writer.register_msgdef('sensor_msgs/msg/JointState', JOINT_STATE_MSGDEF)
        for t, _, topic, msg in events:
            ns = start_ns + int(round(t * 1e9))
            msg['header']['stamp'] = _stamp(ns)
            writer.write_message(topic, schema, msg, log_time=ns, publish_time=ns)
        writer.finish()
    return path


def _time_of(msg):
    stamp = msg.ros_msg.header.stamp
    ns = int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)
    return ns if ns > 0 else int(msg.log_time_ns)   # int ns: float s would lose ~0.3 us


def read_mcap(path, names=None, command_topics=COMMAND_TOPICS, state_topic=STATE_TOPIC):
    """Read a recorded run from an MCAP file; return a Recording (times from the first command).

    names: joint order of the result (default: the first joint_states message's order).
    Raises ConfigError naming the file and what is missing.
    """
    from mcap_ros2.reader import read_ros2_messages
    path = str(path)
    if not os.path.isfile(path):
        raise ConfigError(f'recording {path} does not exist')
    wanted = {t.lstrip('/') for t in command_topics} | {state_topic.lstrip('/')}
    commands = {}
    states = []
    try:
        for msg in read_ros2_messages(path):
            topic = msg.channel.topic.lstrip('/')
            if topic not in wanted:
                continue
            if topic == state_topic.lstrip('/'):
                states.append(msg)
            else:
                commands.setdefault(topic, []).append(msg)
    except Exception as exc:  # noqa: BLE001 - mcap raises several error types
        raise ConfigError(f'cannot read {path} as an MCAP ROS 2 recording: {exc}') from exc
    topic = next((t.lstrip('/') for t in command_topics if commands.get(t.lstrip('/'))), None)
    if not states or topic is None:
        raise ConfigError(f'{path}: needs sensor_msgs/JointState on {state_topic!r} and on one '
                          f'of {list(command_topics)}; found {len(states)} joint states and '
                          f'commands on {sorted(commands)}')
    if names is None:
        names = list(states[0].ros_msg.name)
    names = list(names)
    lookup = {n: i for i, n in enumerate(names)}
    n = len(names)
    # Measured states: every message must carry every joint (by name).
    t_s, q, dq, tau, skipped = [], [], [], [], 0
    for msg in states:
        m = msg.ros_msg
        idx = [lookup.get(nm) for nm in m.name]
        if sorted(i for i in idx if i is not None) != list(range(n)) \
                or len(m.position) != len(m.name) or len(m.velocity) != len(m.name):
            skipped += 1
            continue
        row = [np.full(n, np.nan) for _ in range(3)]
        for k, i in enumerate(idx):
            if i is None:
                continue
            row[0][i] = m.position[k]
            row[1][i] = m.velocity[k]
            row[2][i] = m.effort[k] if len(m.effort) == len(m.name) else np.nan
        t_s.append(_time_of(msg))
        q.append(row[0])
        dq.append(row[1])
        tau.append(row[2])
    if len(t_s) < 10:
        raise ConfigError(f'{path}: {len(t_s)} usable joint_states for joints {names} '
                          f'({skipped} lacked some of them)')
    # Commands: rows carry the last command of joints a message does not name.
    pos = np.full(n, np.nan)
    vel = np.zeros(n)
    eff = np.zeros(n)
    t_c, cp, cv, ce, rejected = [], [], [], [], 0
    for msg in commands[topic]:
        m = msg.ros_msg
        if any(nm not in lookup for nm in m.name) or not m.name:
            rejected += 1
            continue
        idx = [lookup[nm] for nm in m.name]
        k = len(idx)
        if any(len(a) not in (0, k) for a in (m.position, m.velocity, m.effort)):
            rejected += 1
            continue
        has_p, has_v = len(m.position) == k, len(m.velocity) == k
        pos[idx] = np.asarray(m.position, float) if has_p else np.nan
        vel[idx] = (np.asarray(m.velocity, float) if has_v
                    else (0.0 if has_p else np.nan))
        eff[idx] = np.asarray(m.effort, float) if len(m.effort) == k else 0.0
        t_c.append(_time_of(msg))
        cp.append(pos.copy())
        cv.append(vel.copy())
        ce.append(eff.copy())
    if not t_c:
        raise ConfigError(f'{path}: no usable command on {topic!r} for joints {names}')
    order_s = np.argsort(t_s, kind='stable')
    order_c = np.argsort(t_c, kind='stable')
    t0 = min(t_c[order_c[0]], t_s[order_s[0]])
    rel_s = (np.asarray(t_s, dtype=np.int64)[order_s] - t0) * 1e-9
    rel_c = (np.asarray(t_c, dtype=np.int64)[order_c] - t0) * 1e-9
    rec = Recording(names, rel_s, np.asarray(q)[order_s],
                    np.asarray(dq)[order_s], np.asarray(tau)[order_s],
                    rel_c, np.asarray(cp)[order_c],
                    np.asarray(cv)[order_c], np.asarray(ce)[order_c])
    rec.source = {'path': path, 'command_topic': topic, 'state_topic': state_topic,
                  'skipped_states': skipped, 'rejected_commands': rejected}
    return rec


def latest_recording(folder):
    """The newest complete .mcap file under `folder` (recursively), or None.

    Writers in this package write under a hidden temporary name and rename when complete
    (`simreal_ros.core.files`), so a file being written is never picked.
    """
    folder = os.path.expanduser(str(folder))
    best, best_m = None, -1.0
    for root, _, files in os.walk(folder):
        for f in files:
            if f.endswith('.mcap'):
                p = os.path.join(root, f)
                m = os.path.getmtime(p)
                if m > best_m:
                    best, best_m = p, m
    return best


def split(rec, holdout):
    """Split a recording in time: (fit part, held-out part), the held-out part its last
    `holdout` fraction (0 < holdout < 1). The fit (refine) never sees the held-out part, so a
    gap scored on it is not a score on data the parameters were fitted to. Each part keeps
    the commands it needs: the held-out part starts with the command active at its start.
    Sample and command times stay as in `rec`. ValueError names a bad fraction."""
    holdout = float(holdout)
    if not 0.0 < holdout < 1.0:
        raise ValueError(f'holdout must be in (0, 1), got {holdout}')
    t = np.asarray(rec.t, float)
    cmd_t = np.asarray(rec.cmd_t, float)
    t_split = t[0] + (1.0 - holdout) * (t[-1] - t[0])
    k = int(np.searchsorted(t, t_split))
    c = int(np.searchsorted(cmd_t, t_split, side='right'))

    def part(rows, cmds):
        out = Recording(list(rec.names), t[rows], np.asarray(rec.position)[rows],
                        np.asarray(rec.velocity)[rows], np.asarray(rec.effort)[rows],
                        cmd_t[cmds], np.asarray(rec.cmd_position)[cmds],
                        np.asarray(rec.cmd_velocity)[cmds], np.asarray(rec.cmd_effort)[cmds])
        out.source = dict(getattr(rec, 'source', {}))
        out.span_s = [float(t[rows][0]), float(t[rows][-1])]
        return out
    fit = part(slice(0, k), slice(0, c))
    held = part(slice(k, len(t)), slice(max(c - 1, 0), len(cmd_t)))
    fit.held_out, held.held_out = False, True
    return fit, held

"""What a SysID run leaves behind: raw signals as MCAP, results as YAML documents.

The MCAP files use the ros2 profile with sensor_msgs/msg/JointState on `/sysid/command` (what
was sent, stamped with the send time) and `/joint_states` (what was measured), so `ros2 bag
info/play`, Foxglove and PlotJuggler open them. Results are plain mappings (robot, joint,
parameter, value, interval, units, method, data file), published as YAML text and written as
a .yaml file beside the MCAP.
"""
from datetime import datetime, timezone
import glob
import os

import numpy as np
import yaml

from simreal_ros.core.files import atomic_path
from simreal_ros.core.sysid.estimators import Recording

JOINT_STATE_DEF = """std_msgs/Header header
string[] name
float64[] position
float64[] velocity
float64[] effort
================================================================================
MSG: std_msgs/Header
builtin_interfaces/Time stamp
string frame_id
================================================================================
MSG: builtin_interfaces/Time
int32 sec
uint32 nanosec
"""
COMMAND_TOPIC = '/sysid/command'
STATE_TOPIC = '/joint_states'


def _stamp(t):
    ns = int(round(t * 1e9))
    return ns, {'sec': ns // 1_000_000_000, 'nanosec': ns % 1_000_000_000}


def write_mcap(path, rec, time_origin=0.0):
    """Write a Recording (times from `time_origin` seconds) as a ros2-profile MCAP file."""
    from mcap_ros2.writer import Writer
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with atomic_path(path) as tmp, open(tmp, 'wb') as f:
        writer = Writer(f)
        schema = writer.register_msgdef('sensor_msgs/msg/JointState', JOINT_STATE_DEF)
        events = [(t, 0, k) for k, t in enumerate(rec.cmd_t)]
        events += [(t, 1, k) for k, t in enumerate(rec.t)]
        events.sort()
        for seq, (t, which, k) in enumerate(events):
            ns, stamp = _stamp(time_origin + t)
            if which == 0:
                msg = {'header': {'stamp': stamp, 'frame_id': ''}, 'name': list(rec.names),
                       'position': rec.cmd_position[k].tolist(),
                       'velocity': rec.cmd_velocity[k].tolist(),
                       'effort': rec.cmd_effort[k].tolist()}
                topic = COMMAND_TOPIC
            else:
                msg = {'header': {'stamp': stamp, 'frame_id': ''}, 'name': list(rec.names),
                       'position': rec.position[k].tolist(),
                       'velocity': rec.velocity[k].tolist(),
                       'effort': rec.effort[k].tolist()}
                topic = STATE_TOPIC
            writer.write_message(topic, schema, msg, log_time=ns, publish_time=ns,
                                 sequence=seq)
        writer.finish()
    return path


def read_mcap(path, time_origin=0.0):
    """Read a file written by write_mcap back into a Recording (times minus time_origin)."""
    from mcap_ros2.reader import read_ros2_messages
    cmd, state = [], []
    for m in read_ros2_messages(path):
        msg = m.ros_msg
        t = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9 - time_origin
        row = (t, list(msg.name), list(msg.position), list(msg.velocity), list(msg.effort))
        (cmd if m.channel.topic == COMMAND_TOPIC else state).append(row)
    names = (state or cmd)[0][1]

    def arr(rows, k):
        return np.array([r[k] for r in rows], dtype=float)

    return Recording(names, arr(state, 0), arr(state, 2), arr(state, 3), arr(state, 4),
                     arr(cmd, 0), arr(cmd, 2), arr(cmd, 3), arr(cmd, 4))


# A result whose 95 % half-width is above this fraction of its value, and whose share of the
# torque its experiment measures is below SMALL_SHARE, says so (`precision`): that is why.
PRECISION_NOTE_ABOVE = 0.05
SMALL_SHARE = 0.5


def precision_note(doc, link_inertia=None, top_speed=None, friction=None):
    """Add `signal_share` and, for a wide interval, `precision` (why, and what narrows it).

    The share is the parameter's part of the torque its experiment measures: the armature's
    of the joint's inertia (the model's link plus the armature: the multi-sine measures their
    sum, `effective_inertia`, far more tightly than the armature alone when the link dwarfs
    it), viscous (Coulomb) friction's of the friction torque at the fastest sweep. A small share
    is why an interval is wide however well the fit went: the data carry little of it. A wide
    interval with a large share has another cause (a light joint's friction drowning its
    inertia torque: the estimator's method and failure texts say that): no statement here.
    friction: {'coulomb_friction': value, 'viscous_damping': value} of the same joint.
    """
    doc.pop('precision', None)
    doc.pop('signal_share', None)
    p, value = doc['parameter'], float(doc['value'])
    lo, hi = (float(x) for x in doc['interval'])
    half = (hi - lo) / 2
    rel = half / abs(value) if value else float('inf')
    if p == 'armature' and link_inertia:
        total = max(value, 0.0) + float(link_inertia)
        share = max(value, 0.0) / total
        why = (f"the armature is {share:.1%} of this joint's inertia (the model's link "
               f"{float(link_inertia):.3g} kg*m^2): the multi-sine measures their sum "
               f"(effective_inertia) to +- {half / total:.1%}, the armature alone to "
               f"+- {rel:.0%}. A simulator adds the two, so the sum is what it needs; a longer "
               'multi-sine (inertia_duration_s) or a larger acceleration_limit narrows the '
               'armature')
    elif p in ('coulomb_friction', 'viscous_damping') and top_speed and friction:
        viscous = max(float(friction['viscous_damping']), 0.0) * float(top_speed)
        coulomb = max(float(friction['coulomb_friction']), 0.0)
        if viscous + coulomb <= 0:
            return doc
        mine = viscous if p == 'viscous_damping' else coulomb
        share = mine / (viscous + coulomb)
        name = 'viscous' if p == 'viscous_damping' else 'Coulomb'
        why = (f'{name} friction is {share:.0%} of the friction torque at the fastest sweep '
               f'({float(top_speed):.2g} rad/s)' + (
                   ': a faster top speed (friction_speeds, inside velocity_limit), a wider '
                   'sweep (sweep_half_range) or more settled time (friction_settled_s) '
                   'narrows it' if p == 'viscous_damping' else
                   ': more settled time at the slow speeds (friction_settled_s) narrows it'))
    else:
        return doc
    doc['signal_share'] = round(float(share), 4)
    if rel > PRECISION_NOTE_ABOVE and share < SMALL_SHARE:
        doc['precision'] = f'+- {rel:.0%} of the value: {why}'
    return doc


def result_documents(robot, fit, data_file):
    """Return one mapping per estimated parameter of a Fit (with `precision_note`'s fields)."""
    docs = []
    for est in fit.estimates.values():
        docs.append({'robot': robot, 'joint': fit.joint, 'parameter': est.parameter,
                     'value': float(est.value), 'interval': [float(est.low), float(est.high)],
                     'units': est.units, 'method': est.method, 'data_file': str(data_file),
                     'fit': {'residual_rms': round(fit.residual_rms, 6),
                             'r_squared': round(fit.r_squared, 6),
                             'condition': round(fit.condition, 2), 'samples': fit.samples}})
        model = (fit.notes.get('std_model_of') or {}) if isinstance(fit.notes, dict) else {}
        if est.parameter in model:   # the interval's model-error part (a std), not noise
            docs[-1]['std_model'] = float(model[est.parameter])
        misfit = fit.notes.get('misfit') if isinstance(fit.notes, dict) else None
        if misfit:
            docs[-1]['fit']['misfit_ratio'] = misfit['ratio']
            if misfit['flagged']:
                docs[-1]['model_misfit'] = (
                    f'{fit.joint}: the {fit.kind} model misses the measured torque by '
                    f'{misfit["ratio"]:.1f} x the noise floor (worst at '
                    f'{misfit["worst_speed"]:+.2f} rad/s: {misfit["worst_residual"]:+.3f} N*m); '
                    'the joint has dynamics outside the model (Stribeck, backlash, a '
                    'torque-speed limit): the interval is widened, do not trust the value alone')
    notes = fit.notes if isinstance(fit.notes, dict) else {}
    values = {d['parameter']: d['value'] for d in docs}
    top = max((abs(float(v)) for v in notes.get('speeds') or ()), default=None)
    for d in docs:
        if fit.kind == 'friction' and top:
            d['top_speed_rad_s'] = top   # kept: a combined result recomputes its share with it
            precision_note(d, top_speed=top, friction=values)
        elif d['parameter'] == 'armature':
            precision_note(d, link_inertia=notes.get('link_inertia'))
    return docs


def result_text(robot, experiment, results, failures, stamp=None):
    """YAML text of a finished run: results (list of mappings) and failures (joint, reason)."""
    stamp = stamp or datetime.now(timezone.utc).isoformat(timespec='seconds')
    return yaml.safe_dump({'robot': robot, 'experiment': experiment, 'finished': stamp,
                           'results': results, 'failures': failures}, sort_keys=False)


def run_basename(robot, experiment):
    return f'{robot}_{experiment}_{datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%f")}'


def latest_documents(results_dir, robot):
    """Newest result mapping per (joint, parameter) in a results folder (files by time)."""
    out = {}
    files = sorted(glob.glob(os.path.join(os.path.expanduser(results_dir), f'{robot}_*.yaml')),
                   key=os.path.getmtime)
    for path in files:
        try:
            with open(path) as f:
                data = yaml.safe_load(f) or {}
        except (OSError, yaml.YAMLError):
            continue
        for r in data.get('results') or []:
            if isinstance(r, dict) and 'joint' in r and 'parameter' in r:
                out[(r['joint'], r['parameter'])] = r
    return out


def latest_parameters(results_dir, robot):
    """Newest identified value and std per (joint, parameter) in a results folder."""
    out = {}
    for key, r in latest_documents(results_dir, robot).items():
        try:
            lo, hi = r['interval']
            out[key] = (float(r['value']), (float(hi) - float(lo)) / (2 * 1.959964))
        except (KeyError, TypeError, ValueError):
            continue
    return out

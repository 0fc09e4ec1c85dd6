"""Client side of the SysID nodes and sim_bridge, for the `simreal` CLI and the demo.

The interfaces used (relative to the graph's namespace; see simreal_ros.nodes.sysid_experiment):

- `<kind>_id/start`, `<kind>_id/abort` (std_srvs/Trigger); progress as JSON on
  `<kind>_id/progress` (`experiment`, `joint`, `phase`, `percent`, `time_left_s`; phase `done`
  or `aborted` at the end); the result as YAML text, latched, on `sysid/result` (shared by the
  three nodes; `experiment` tells which).
- safety_supervisor forwards one source and switches only while it forwards nothing: a SysID
  run is `policy_runner/enable false` (when a policy is forwarded), `safety/select_sysid
  true`, `<kind>_id/start`; forwarding starts with the node's first commands near the
  measured state. A latched e-stop is never released here: the run is refused until the
  operator resets it. This client never publishes commands itself.
- sim_bridge: per-joint parameters `joints.<joint>.damping|frictionloss|armature` (+
  `_half_width`) and `latency_s`; `sim_bridge/evaluate_gap` (Trigger; the result JSON latched on
  `sim_bridge/gap`, nominal and identified model); `sim_bridge/export` (Trigger, JSON paths).

A node or service that is not there raises `Missing` naming it: never a traceback.
"""
import json
import time

import yaml

from simreal_ros.client.ros import join_name, Missing, safety_state
from simreal_ros.core.bridge.params import bridge_parameters  # noqa: F401 (the client's API)

RESULT_TOPIC = 'sysid/result'
# Refusals of a SysID node's start that a node just started gives until it has seen
# joint_states, the latched safety/state and the new mode (run() retries them for 10 s). The
# first joint_states missing altogether was not among them: the demo's friction_id, started
# 2 s earlier, was refused once that way in CI and the whole demo failed.
TRANSIENT_START_REFUSALS = ('forwards the policy', 'no fresh joint_states',
                            'no joint_states with every joint', 'no safety_supervisor state',
                            'grants the SysID path')
PROGRESS_TOPIC = '{node}/progress'


def _missing(text):
    return Missing(text)


def _join(ros, name):
    return join_name(ros.namespace, name)


def _parse(text):
    try:
        out = json.loads(text)
    except (TypeError, ValueError):
        try:
            out = yaml.safe_load(text)
        except yaml.YAMLError:
            out = None
    return out if isinstance(out, dict) else {'message': text}


def reset_until(ros, timeout=15.0):
    """Call safety/reset until it succeeds (inputs fresh) or `timeout`; return (ok, message)."""
    deadline = time.monotonic() + timeout
    while True:
        resp = ros.trigger('safety/reset', 'safety_supervisor')
        if resp.success or time.monotonic() > deadline:
            return resp.success, resp.message
        time.sleep(0.2)   # the refusal names a stale input: give it a few ticks


def _state(ros):
    return safety_state(ros)


def select_source(ros, source, timeout=10.0):
    """Make safety_supervisor forward `source` ('policy'/'sysid'); return (ok, message).

    The supervisor switches only while it forwards nothing: for 'sysid' the policy is switched
    off first (when policy_runner runs) and its output allowed to go safe; for 'policy' the
    SysID source must be idle. An e-stop stays as it is (a reset is the operator's call).
    """
    state = _state(ros)
    if state.get('mode') == source:
        return True, f'already forwarding {source}'
    if state.get('output') == 'forwarding':
        if source == 'sysid':
            try:
                ros.set_bool('policy_runner/enable', False, 'policy_runner')
            except Missing:
                pass
        deadline = time.monotonic() + timeout
        while _state(ros).get('output') == 'forwarding' and time.monotonic() < deadline:
            time.sleep(0.05)   # the policy's commands go stale within its timeout
    resp = ros.set_bool('safety/select_sysid', source == 'sysid', 'safety_supervisor')
    return resp.success, resp.message


def run(ros, node, joints=None, timeout=900.0, progress=None):
    """Run `node`'s experiments through safety_supervisor; return the result mapping."""
    from std_msgs.msg import String
    from simreal_ros.nodes.common import LATCHED_QOS
    kind = node[:-len('_id')]
    results, updates = [], []
    if joints:
        set_joints(ros, node, joints)
    sub_r = ros.node.create_subscription(String, _join(ros, RESULT_TOPIC),
                                         lambda m: results.append((time.monotonic(), m.data)),
                                         LATCHED_QOS)
    sub_p = ros.node.create_subscription(String, _join(ros, PROGRESS_TOPIC.format(node=node)),
                                         lambda m: updates.append(m.data), 10)
    try:
        ros.wait_service(f'{node}/start', node)
        state = _state(ros)
        if state.get('estop'):
            return {'ok': False, 'node': node, 'message': (
                f'e-stop latched ({state.get("estop_cause")}): reset it first (simreal reset); '
                'a SysID run never releases an e-stop')}
        ok, message = select_source(ros, 'sysid')
        if not ok:
            return {'ok': False, 'node': node, 'message': f'safety_supervisor: {message}'}
        t_start = time.monotonic()
        # A node just started may not have seen joint_states or the latched safety/state yet,
        # and sees the new mode a moment later: those refusals are retried for 10 s.
        # The previous experiment's grant lapses `sysid_release_s` after its last command.
        while True:
            resp = ros.trigger(f'{node}/start', node, timeout=30.0)
            if resp.success or not any(t in resp.message for t in TRANSIENT_START_REFUSALS) \
                    or time.monotonic() - t_start > 10.0:
                break
            time.sleep(0.2)
        if not resp.success:
            return {'ok': False, 'node': node, 'message': resp.message}
        if progress:
            progress(0.0, resp.message)
        deadline = t_start + timeout
        while time.monotonic() < deadline:
            fresh = [_parse(d) for t, d in results if t > t_start]
            fresh = [d for d in fresh if d.get('experiment') == kind]
            if fresh:
                out = fresh[-1]
                out['ok'] = not out.get('failures')
                if progress:
                    progress(1.0, 'done')
                return out
            if updates:
                info = _parse(updates[-1])
                if info.get('phase') == 'aborted':
                    return {'ok': False, 'node': node,
                            'message': f'aborted: {info.get("reason")}'}
                if progress and info.get('percent') is not None:
                    progress(info['percent'] / 100.0,
                             f'{info.get("joint")} {info.get("phase")}, '
                             f'{info.get("time_left_s")} s left')
            time.sleep(0.1)   # polling for the result, bounded by the deadline
        ros.trigger(f'{node}/abort', node)
        raise _missing(f'{node}: no result on {RESULT_TOPIC} within {timeout:g} s (aborted)')
    finally:
        ros.node.destroy_subscription(sub_r)
        ros.node.destroy_subscription(sub_p)


def set_joints(ros, node, joints):
    """Set the `joints` parameter of a SysID node; a refusal is reported with its reason."""
    from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
    from rcl_interfaces.srv import SetParameters
    value = ParameterValue(type=ParameterType.PARAMETER_STRING_ARRAY,
                           string_array_value=list(joints))
    req = SetParameters.Request(parameters=[Parameter(name='joints', value=value)])
    resp = ros.call(SetParameters, f'{node}/set_parameters', req, node)
    result = resp.results[0]
    if not result.successful:
        raise _missing(f'{node} refused joints={list(joints)}: {result.reason}')


def format_result(result):
    """Return printable lines for a SysID result mapping."""
    lines = []
    for r in result.get('results') or []:
        lo, hi = r.get('interval', (float('nan'), float('nan')))
        lines.append(f'  {r.get("joint"):<16} {r.get("parameter"):<18} {r.get("value"):.5g} '
                     f'[{lo:.5g}, {hi:.5g}] {r.get("units", "")}')
    for f in result.get('failures') or []:
        lines.append(f'  {f.get("joint"):<16} FAILED: {f.get("reason")}: {f.get("detail")}')
    if not lines:
        lines.append('  ' + str(result.get('message', result)))
    return lines


def push_to_bridge(ros, values):
    """Set sim_bridge parameters; return (set names, {name: refusal reason})."""
    from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
    from rcl_interfaces.srv import SetParameters
    params = [Parameter(name=k, value=ParameterValue(type=ParameterType.PARAMETER_DOUBLE,
                                                     double_value=float(v)))
              for k, v in sorted(values.items())]
    resp = ros.call(SetParameters, 'sim_bridge/set_parameters',
                    SetParameters.Request(parameters=params), 'sim_bridge')
    done, refused = [], {}
    for p, r in zip(params, resp.results):
        if r.successful:
            done.append(p.name)
        else:
            refused[p.name] = r.reason
    return done, refused


def _trigger_and_read(ros, verb, topic, timeout, wait_s):
    """Call sim_bridge/<verb>; return the first JSON published on `topic` after the call
    (latched; waited for up to wait_s after a successful answer) with `ok` and `message`."""
    from std_msgs.msg import String
    from simreal_ros.nodes.common import LATCHED_QOS
    got = []
    sub = ros.node.create_subscription(String, _join(ros, topic),
                                       lambda m: got.append((time.monotonic(), m.data)),
                                       LATCHED_QOS)
    try:
        t0 = time.monotonic()
        resp = ros.trigger(f'sim_bridge/{verb}', 'sim_bridge', timeout=timeout)
        deadline = time.monotonic() + wait_s
        fresh = []
        while resp.success and time.monotonic() < deadline:
            fresh = [d for t, d in got if t >= t0]
            if fresh:
                break
            time.sleep(0.05)   # polling for the published result, bounded by the deadline
        out = _parse(fresh[-1]) if fresh else {}
        out['ok'] = bool(resp.success)
        out['response'] = resp.message
        out.setdefault('message', resp.message)   # the published result's own, when it has one
        if resp.success and not fresh:
            out['ok'] = False
            out['message'] = f'{resp.message}; nothing on {topic} within {wait_s:g} s'
        return out
    finally:
        ros.node.destroy_subscription(sub)


def evaluate_gap(ros, timeout=300.0):
    """Call sim_bridge/evaluate_gap; return the JSON it publishes on sim_bridge/gap."""
    return _trigger_and_read(ros, 'evaluate_gap', 'sim_bridge/gap', timeout, 10.0)


def refine(ros, timeout=900.0):
    """Call sim_bridge/refine and wait for its result on sim_bridge/refined."""
    out = _trigger_and_read(ros, 'refine', 'sim_bridge/refined', 30.0, timeout)
    if out.get('ok') and 'success' in out:
        out['ok'] = bool(out['success'])
    return out


def format_gap(gap):
    """Return printable lines for a sim_bridge gap result."""
    if 'gap_nominal' not in gap:
        return [f'  {gap.get("message")}']
    return [f'  recording       {gap.get("recording")}',
            f'  gap nominal     {100 * gap["gap_nominal"]:.2f} % NRMSE',
            f'  gap identified  {100 * gap["gap_identified"]:.2f} % NRMSE '
            f'(x{gap.get("reduction_x", float("nan")):.2f} smaller; noise floor '
            f'{100 * float(gap.get("noise_floor", float("nan"))):.2f} %)',
            f'  verdict         {gap.get("message")}']


def bridge_call(ros, verb, timeout=300.0):
    """Call `sim_bridge/<verb>` (Trigger) and return its answer as a dict."""
    resp = ros.trigger(f'sim_bridge/{verb}', 'sim_bridge', timeout=timeout)
    out = _parse(resp.message)
    out['ok'] = bool(resp.success)
    return out


def default_report_dir(robot):
    """Where `simreal sysid` writes a run's report when not told: one folder per run."""
    import os
    from datetime import datetime, timezone
    stamp = datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S')
    return os.path.expanduser(os.path.join('~/.ros/simreal_ros/sysid_reports',
                                           f'{robot}_{stamp}'))


def bridge_after_runs(ros, runs, say=print):
    """Push the runs' identified values to sim_bridge, score its gap and export; return
    (gap, exports), each None when sim_bridge is not on the graph (said, never raised)."""
    results = [r for r in runs if r.get('results')]
    if not results:
        return None, None
    try:
        ros.wait_service('sim_bridge/evaluate_gap', 'sim_bridge', wait=3.0)
    except Missing as exc:
        say(f'no reality gap: {exc} (start it with `simreal up --sysid`)')
        return None, None
    done, refused = push_to_bridge(ros, bridge_parameters(results))
    if refused:
        say(f'sim_bridge refused {refused}')
    gap = evaluate_gap(ros)
    for line in format_gap(gap):
        say(line)
    exports = bridge_call(ros, 'export')
    return gap, exports


def write_run_report(out_dir, runs, gap=None, exports=None):
    """Write the SysID report of `runs` (client/sysid_report) into out_dir; return its path."""
    from simreal_ros.client.sysid_report import write_report
    robot = next((r.get('robot') for r in runs if r.get('robot')), 'robot')
    return write_report(out_dir, robot, runs, gap=gap, exports=exports)


def runs_from_folder(folder, robot=None):
    """The newest result file of each experiment in a SysID results folder (what the nodes
    wrote: `<robot>_<experiment>_<time>.yaml`), as result mappings, friction first.

    Raises Missing naming the folder when it holds none (for `robot`, when given)."""
    import glob
    import os
    folder = os.path.expanduser(folder)
    newest = {}
    for path in sorted(glob.glob(os.path.join(folder, '*.yaml')), key=os.path.getmtime):
        try:
            with open(path) as f:
                doc = yaml.safe_load(f)
        except (OSError, yaml.YAMLError):
            continue
        if not isinstance(doc, dict) or doc.get('experiment') not in ('friction', 'inertia',
                                                                       'latency'):
            continue
        if robot and doc.get('robot') != robot:
            continue
        doc['result_file'] = path
        newest[doc['experiment']] = doc
    if not newest:
        raise _missing(f'no SysID result (<robot>_<experiment>_<time>.yaml) in {folder}'
                       + (f' for robot {robot}' if robot else '') + ': run `simreal sysid` '
                       'first, or give --results')
    return [newest[k] for k in ('friction', 'inertia', 'latency') if k in newest]


def latest_gap(ros, timeout=3.0):
    """The gap sim_bridge published last (latched on sim_bridge/gap), or None."""
    from std_msgs.msg import String
    from simreal_ros.nodes.common import LATCHED_QOS
    try:
        msg = ros.latest(String, 'sim_bridge/gap', LATCHED_QOS, timeout, 'sim_bridge')
    except Missing:
        return None
    return _parse(msg.data)

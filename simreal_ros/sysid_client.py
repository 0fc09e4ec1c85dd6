"""Client side of the SysID nodes and sim_bridge, for the `simreal` CLI and the demo.

The interfaces used (all relative to the graph's namespace; ARCHITECTURE.md):

- `<kind>_id/start`, `<kind>_id/abort` (std_srvs/Trigger); the result is published latched as
  JSON text (std_msgs/String) on `<kind>_id/result`; progress (when the node offers it) on
  `<kind>_id/progress` (JSON with `fraction`).
- `sim_bridge/<verb>` (std_srvs/Trigger) answers with a message that is JSON or a path.

A node or service that is not there raises `Missing` naming it: never a traceback.
"""
import json
import time

RESULT_TOPIC = '{node}/result'
PROGRESS_TOPIC = '{node}/progress'


def _missing(text):
    from simreal_ros.cli import Missing
    return Missing(text)


def _parse(text):
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return {'message': text}


def run(ros, node, joints=None, timeout=600.0, progress=None):
    """Start `node`'s experiments (optionally on `joints`) and wait for a new result."""
    from std_msgs.msg import String
    from simreal_ros.nodes.common import LATCHED_QOS
    results, updates = [], []
    ns_join = __import__('simreal_ros.cli', fromlist=['_join'])._join
    sub_r = ros.node.create_subscription(String, ns_join(ros.namespace,
                                                         RESULT_TOPIC.format(node=node)),
                                         lambda m: results.append((time.monotonic(), m.data)),
                                         LATCHED_QOS)
    sub_p = ros.node.create_subscription(String, ns_join(ros.namespace,
                                                         PROGRESS_TOPIC.format(node=node)),
                                         lambda m: updates.append(m.data), 10)
    try:
        if joints:
            set_joints(ros, node, joints)
        t_start = time.monotonic()
        resp = ros.trigger(f'{node}/start', node, timeout=30.0)
        if not resp.success:
            return {'ok': False, 'node': node, 'message': resp.message}
        deadline = t_start + timeout
        while time.monotonic() < deadline:
            fresh = [data for t, data in results if t > t_start]
            if fresh:
                out = _parse(fresh[-1])
                if isinstance(out, dict):
                    out.setdefault('ok', True)
                if progress:
                    progress(1.0, 'done')
                return out
            if progress and updates:
                info = _parse(updates[-1])
                progress(info.get('fraction', 0.0), str(info.get('message', '')))
            time.sleep(0.1)   # polling for a result, bounded by the deadline
        raise _missing(f'{node}: no result on {RESULT_TOPIC.format(node=node)} within '
                       f'{timeout:g} s')
    finally:
        ros.node.destroy_subscription(sub_r)
        ros.node.destroy_subscription(sub_p)


def set_joints(ros, node, joints):
    """Set the `joints` parameter of a SysID node (refused when the node makes it read-only)."""
    from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
    from rcl_interfaces.srv import SetParameters
    value = ParameterValue(type=ParameterType.PARAMETER_STRING_ARRAY,
                           string_array_value=list(joints))
    req = SetParameters.Request(parameters=[Parameter(name='joints', value=value)])
    resp = ros.call(SetParameters, f'{node}/set_parameters', req, node)
    result = resp.results[0]
    if not result.successful:
        raise _missing(f'{node} refused joints={list(joints)}: {result.reason}')


def bridge_call(ros, verb, timeout=300.0):
    """Call `sim_bridge/<verb>` (Trigger) and return its answer as a dict."""
    resp = ros.trigger(f'sim_bridge/{verb}', 'sim_bridge', timeout=timeout)
    out = _parse(resp.message)
    if not isinstance(out, dict):
        out = {'result': out}
    out['ok'] = bool(resp.success)
    return out

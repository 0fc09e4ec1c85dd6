"""The operator side's connection to a running graph (rclpy only, no ros2cli needed).

`Ros` is one short-lived rclpy node spun in a background thread, with the service and topic
helpers every client uses (the `simreal` verbs, the demo, the monitor, the SysID client, the
benches); a node or service that is not reachable raises `Missing` naming it. Set
ROS_DOMAIN_ID and ROS_AUTOMATIC_DISCOVERY_RANGE as for the graph you want to reach.
"""
import json
import os
import threading
import time

# A fresh CLI process discovers the graph's services in well under a second on an idle machine,
# but several seconds when the machine is busy: an e-stop that gives up too early is worse
# than one that lands late, so the CLI waits this long before saying a node is not running.
SERVICE_WAIT_S = 10.0
# How long a verb waits for rclpy's teardown (destroy the node, shut the context down) once
# its work is done. Seen once in CI on Jazzy (rclpy 7.1.6, Fast DDS 2.14.5): `simreal -n left
# estop` printed that the e-stop had latched, then did not exit within 60 s. An operator's
# command that has done its job must come back.
CLOSE_WAIT_S = 5.0


class Missing(RuntimeError):
    """A node or service the verb needs is not reachable."""


def dds_hint():
    """Return the DDS settings in use and how to start the graph, for a 'not found' message."""
    from simreal_ros.deploy.graph import env_summary
    env = env_summary()
    return (f'(ROS_DOMAIN_ID={env["ROS_DOMAIN_ID"]}, ROS_AUTOMATIC_DISCOVERY_RANGE='
            f'{env["ROS_AUTOMATIC_DISCOVERY_RANGE"]}; start the graph with `simreal up`)')


def join_name(namespace, name):
    """Return `name` resolved in `namespace` (absolute names are kept)."""
    if name.startswith('/'):
        return name
    ns = (namespace or '').strip('/')
    return f'/{ns}/{name}' if ns else f'/{name}'


class Ros:
    """One short-lived rclpy node for a CLI verb, spun in a background thread."""

    def __init__(self, namespace='', use_sim_time=False):
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.parameter import Parameter
        self.rclpy = rclpy
        self.namespace = namespace
        from simreal_ros.nodes.common import prefer_udp_transport
        prefer_udp_transport()   # the nodes' transport (see there)
        rclpy.init(args=[])
        self.node = rclpy.create_node(
            f'simreal_cli_{os.getpid()}',
            parameter_overrides=[Parameter('use_sim_time', value=bool(use_sim_time))])
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self):
        while not self._stop.is_set():
            try:
                self.executor.spin_once(timeout_sec=0.05)
            except Exception:  # noqa: BLE001 - shutdown races end the thread quietly
                if not self.rclpy.ok():
                    return

    def close(self, wait=CLOSE_WAIT_S):
        """Stop spinning and shut rclpy down; True when that finished within `wait` s.

        The teardown runs in a daemon thread: one that hangs in the middleware is left behind
        (the caller then ends the process, see client/cli.py main) instead of holding the
        verb that already answered.
        """
        self._stop.set()
        self._thread.join(timeout=2)
        done = threading.Event()

        def teardown():
            try:
                self.node.destroy_node()
                self.rclpy.try_shutdown()
            finally:
                done.set()

        threading.Thread(target=teardown, daemon=True).start()
        return done.wait(wait)

    def call(self, srv_type, name, request, owner, timeout=10.0, wait=SERVICE_WAIT_S):
        """Call a service; raise Missing with the node and service when it is not there."""
        fqn = join_name(self.namespace, name)
        client = self.node.create_client(srv_type, fqn)
        try:
            if not client.wait_for_service(timeout_sec=wait):
                raise Missing(f'{owner} is not running: service {fqn} not found within '
                              f'{wait:g} s {dds_hint()}')
            future = client.call_async(request)
            deadline = time.monotonic() + timeout
            while not future.done():
                if time.monotonic() > deadline:
                    raise Missing(f'{owner} did not answer {fqn} within {timeout:g} s')
                time.sleep(0.01)
            return future.result()
        finally:
            self.node.destroy_client(client)

    def wait_service(self, name, owner, wait=SERVICE_WAIT_S):
        """Raise Missing unless the service `name` of `owner` is offered."""
        from std_srvs.srv import Trigger
        fqn = join_name(self.namespace, name)
        client = self.node.create_client(Trigger, fqn)
        try:
            if not client.wait_for_service(timeout_sec=wait):
                raise Missing(f'{owner} is not running: service {fqn} not found within '
                              f'{wait:g} s {dds_hint()}')
        finally:
            self.node.destroy_client(client)
        return True

    def trigger(self, name, owner, timeout=10.0):
        from std_srvs.srv import Trigger
        return self.call(Trigger, name, Trigger.Request(), owner, timeout)

    def set_bool(self, name, value, owner, timeout=10.0):
        from std_srvs.srv import SetBool
        return self.call(SetBool, name, SetBool.Request(data=bool(value)), owner, timeout)

    def latest(self, msg_type, topic, qos, timeout, what, discover=SERVICE_WAIT_S):
        """Return the first message on `topic`, or raise Missing.

        Waits up to `discover` s (at least `timeout`) for the graph to show a publisher on
        the topic, then up to `timeout` s from then for its message: a fresh process on a busy
        graph can take more than a few seconds to discover it (ci51: `simreal status` beside
        two robots' eleven processes found nothing in 3 s while the supervisor ran). With no
        publisher the message is `what` (the owner is not running); with a publisher that
        sends nothing, the message names it.
        """
        got = []
        fqn = join_name(self.namespace, topic)
        sub = self.node.create_subscription(msg_type, fqn, got.append, qos)
        try:
            start = time.monotonic()
            found = None
            while not got:
                now = time.monotonic()
                if found is None and self.node.count_publishers(fqn) > 0:
                    found = now
                if found is None and now - start >= max(timeout, discover):
                    break
                if found is not None and now - found >= timeout:
                    break
                time.sleep(0.01)
        finally:
            self.node.destroy_subscription(sub)
        if got:
            return got[-1]
        if found is None:
            raise Missing(f'{what}: nothing on {fqn} within {max(timeout, discover):g} s '
                          f'{dds_hint()}')
        names = sorted({'/' + (i.node_namespace.strip('/') + '/' + i.node_name).strip('/')
                        for i in self.node.get_publishers_info_by_topic(fqn)})
        raise Missing(f'{", ".join(names) or "a publisher"} on {fqn} sent nothing within '
                      f'{timeout:g} s of being found {dds_hint()}')

    def collect(self, msg_type, topic, qos, duration):
        """Return every message on `topic` during `duration` s."""
        got = []
        sub = self.node.create_subscription(msg_type, join_name(self.namespace, topic),
                                            got.append, qos)
        time.sleep(duration)   # a sampling window, not synchronisation
        self.node.destroy_subscription(sub)
        return got

    def node_names(self):
        return {('/' + ns.strip('/') + '/' + n).replace('//', '/')
                for n, ns in self.node.get_node_names_and_namespaces()}


def graph_robots(ros):
    """Return {namespace: [node names]} for each namespace with a safety_supervisor."""
    found = find_supervisors(ros)   # waits for discovery to settle: then the node list
    nodes = ros.node.get_node_names_and_namespaces()
    return {ns: sorted({n for n, where in nodes if where == ns}) for ns in found}


def find_supervisors(ros, settle=3.0):
    """Return the namespaces ('/', '/left', ...) where a safety_supervisor publishes
    safety/state.

    Read from the topic endpoints the graph has discovered, until `settle` s pass without a
    new one once one is found (at most 15 s); with none found yet, up to SERVICE_WAIT_S: a
    fresh process on a large graph discovers it in more than `settle` s.
    """
    found, last_new = set(), time.monotonic()
    deadline = time.monotonic() + 15.0
    suffix = '/safety/state'
    while time.monotonic() < deadline:
        now = set()
        for topic, _ in ros.node.get_topic_names_and_types():
            if topic.endswith(suffix) and any(
                    i.node_name == 'safety_supervisor'
                    for i in ros.node.get_publishers_info_by_topic(topic)):
                now.add(topic[:-len(suffix)] or '/')
        if now - found:
            found |= now
            last_new = time.monotonic()
        quiet = time.monotonic() - last_new
        if (found and quiet >= settle) or (not found and quiet >= max(settle, SERVICE_WAIT_S)):
            break
        time.sleep(0.1)
    return sorted(found)


def safety_state(ros, timeout=3.0, namespace=None):
    """Return the supervisor's latched safety/state as a dict (of the robot in `namespace`,
    default the CLI's own)."""
    from std_msgs.msg import String
    from simreal_ros.nodes.common import LATCHED_QOS
    topic = join_name(namespace, 'safety/state') if namespace else 'safety/state'
    msg = ros.latest(String, topic, LATCHED_QOS, timeout, 'safety_supervisor is not running')
    return json.loads(msg.data)


def go_default(ros, wait=True, timeout=None, progress=None):
    """Call safety/go_default (the bring-up to the default pose); with `wait`, follow
    safety/state until the pose is reached and held. Return (ok, message, bringup state).

    `timeout` (s) defaults to the bring-up's own duration plus 15 s; `progress(fraction,
    text)` is called as it goes. A cancelled bring-up (an e-stop) or a latched e-stop is a
    failure naming the cause; a refusal is returned as the supervisor worded it.
    """
    resp = ros.trigger('safety/go_default', 'safety_supervisor')
    if not resp.success or not wait:
        return resp.success, resp.message, {}
    start = time.monotonic()
    bringup = {}
    while True:
        state = safety_state(ros)
        bringup = state.get('bringup') or {}
        phase = bringup.get('phase')
        if progress is not None and bringup.get('progress') is not None:
            progress(float(bringup['progress']), str(phase))
        if phase in ('holding', 'done'):
            return True, (f'{resp.message}; reached in {bringup.get("duration_s")} s, max error '
                          f'{bringup.get("max_error_rad")} rad, {phase}'), bringup
        if phase == 'cancelled' or state.get('estop'):
            return False, (f'bring-up {phase}: {bringup.get("cause") or state.get("estop_cause")}'
                           ), bringup
        limit = timeout if timeout is not None else float(bringup.get('duration_s') or 0) + 15
        if time.monotonic() - start > limit:
            return False, f'bring-up not at the default pose after {limit:g} s ({phase})', bringup
        time.sleep(0.1)   # polling the latched state, bounded by the limit




def describe_parameters(ros, node):
    """Return [(name, type, value, description, range, read_only)] of a running node."""
    from rcl_interfaces.srv import DescribeParameters, GetParameters, ListParameters
    from simreal_ros.nodes.common import PARAM_TYPES
    names = sorted(ros.call(ListParameters, f'{node}/list_parameters',
                            ListParameters.Request(), node).result.names)
    desc = ros.call(DescribeParameters, f'{node}/describe_parameters',
                    DescribeParameters.Request(names=names), node).descriptors
    values = ros.call(GetParameters, f'{node}/get_parameters',
                      GetParameters.Request(names=names), node).values
    if len(values) != len(names):   # one unreadable parameter empties the batch: one by one
        from rcl_interfaces.msg import ParameterValue
        values = []
        for name in names:
            got = ros.call(GetParameters, f'{node}/get_parameters',
                           GetParameters.Request(names=[name]), node).values
            values.append(got[0] if got else ParameterValue())
    rows = []
    for name, d, v in zip(names, desc, values):
        value = {1: v.bool_value, 2: v.integer_value, 3: v.double_value, 4: v.string_value,
                 6: list(v.bool_array_value), 7: list(v.integer_array_value),
                 8: list(v.double_array_value), 9: list(v.string_array_value)}.get(v.type)
        rng = ''
        if d.floating_point_range:
            r = d.floating_point_range[0]
            rng = f'[{r.from_value:g}, {r.to_value:g}]'
        elif d.integer_range:
            r = d.integer_range[0]
            rng = f'[{r.from_value}, {r.to_value}]'
        rows.append((name, PARAM_TYPES.get(v.type, 'unset'), value, d.description, rng,
                     d.read_only))
    return rows

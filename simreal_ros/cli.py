"""simreal: the operator's command line (rclpy only, no ros2cli needed).

    simreal up [--robot arm3] [--sysid] [--no-sim] [--policy p.onnx]   # Ctrl-C stops all
    simreal estop                      # always one command away
    simreal status
    simreal reset
    simreal stage next
    simreal enable | disable           # policy_runner on/off
    simreal sysid friction|inertia|latency|all [--joints a b]
    simreal gap
    simreal refine                     # sim_bridge/refine: all joints together, waits
    simreal export
    simreal monitor [--robot arm3]     # rviz markers on monitor/markers
    simreal params [node ...]          # parameters: value, range, meaning
    simreal demo

Every verb talks to the running graph over the same services and topics a `ros2 service call`
would use (`/safety/estop`, `/policy_runner/enable`, ...). A verb whose node is not running says
which node and service are missing and exits 1. Set ROS_DOMAIN_ID and
ROS_AUTOMATIC_DISCOVERY_RANGE as for the graph you want to reach.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

from simreal_ros.core.config import ConfigError

# A fresh CLI process discovers the graph's services in well under a second on an idle machine,
# but several seconds when the machine is busy: an e-stop that gives up too early is worse
# than one that lands late, so the CLI waits this long before saying a node is not running.
SERVICE_WAIT_S = 10.0
SYSID_KINDS = ('friction', 'inertia', 'latency')


class Missing(RuntimeError):
    """A node or service the verb needs is not reachable."""


def _dds_hint():
    from simreal_ros.graph import env_summary
    env = env_summary()
    return (f'(ROS_DOMAIN_ID={env["ROS_DOMAIN_ID"]}, ROS_AUTOMATIC_DISCOVERY_RANGE='
            f'{env["ROS_AUTOMATIC_DISCOVERY_RANGE"]}; start the graph with `simreal up`)')


def _join(namespace, name):
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

    def close(self):
        self._stop.set()
        self._thread.join(timeout=2)
        self.node.destroy_node()
        self.rclpy.try_shutdown()

    def call(self, srv_type, name, request, owner, timeout=10.0, wait=SERVICE_WAIT_S):
        """Call a service; raise Missing with the node and service when it is not there."""
        fqn = _join(self.namespace, name)
        client = self.node.create_client(srv_type, fqn)
        try:
            if not client.wait_for_service(timeout_sec=wait):
                raise Missing(f'{owner} is not running: service {fqn} not found within '
                              f'{wait:g} s {_dds_hint()}')
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
        fqn = _join(self.namespace, name)
        client = self.node.create_client(Trigger, fqn)
        try:
            if not client.wait_for_service(timeout_sec=wait):
                raise Missing(f'{owner} is not running: service {fqn} not found within '
                              f'{wait:g} s {_dds_hint()}')
        finally:
            self.node.destroy_client(client)
        return True

    def trigger(self, name, owner, timeout=10.0):
        from std_srvs.srv import Trigger
        return self.call(Trigger, name, Trigger.Request(), owner, timeout)

    def set_bool(self, name, value, owner, timeout=10.0):
        from std_srvs.srv import SetBool
        return self.call(SetBool, name, SetBool.Request(data=bool(value)), owner, timeout)

    def latest(self, msg_type, topic, qos, timeout, what):
        """Return the first message on `topic` within `timeout` s, or raise Missing."""
        got = []
        sub = self.node.create_subscription(msg_type, _join(self.namespace, topic),
                                            got.append, qos)
        try:
            deadline = time.monotonic() + timeout
            while not got and time.monotonic() < deadline:
                time.sleep(0.01)
        finally:
            self.node.destroy_subscription(sub)
        if not got:
            raise Missing(f'{what}: nothing on {_join(self.namespace, topic)} within '
                          f'{timeout:g} s {_dds_hint()}')
        return got[-1]

    def collect(self, msg_type, topic, qos, duration):
        """Return every message on `topic` during `duration` s."""
        got = []
        sub = self.node.create_subscription(msg_type, _join(self.namespace, topic),
                                            got.append, qos)
        time.sleep(duration)   # a sampling window, not synchronisation
        self.node.destroy_subscription(sub)
        return got

    def node_names(self):
        return {('/' + ns.strip('/') + '/' + n).replace('//', '/')
                for n, ns in self.node.get_node_names_and_namespaces()}


# -- verbs --------------------------------------------------------------------------------
def _print_response(verb, resp):
    print(f'{verb}: {"ok" if resp.success else "REFUSED"}: {resp.message}')
    return 0 if resp.success else 1


def cmd_estop(args, ros):
    return _print_response('estop', ros.trigger('safety/estop', 'safety_supervisor'))


def cmd_reset(args, ros):
    return _print_response('reset', ros.trigger('safety/reset', 'safety_supervisor'))


def cmd_stage(args, ros):
    return _print_response('stage next', ros.trigger('safety/advance_stage',
                                                     'safety_supervisor'))


def cmd_enable(args, ros, value=True):
    return _print_response('enable' if value else 'disable',
                           ros.set_bool('policy_runner/enable', value, 'policy_runner'))


def cmd_disable(args, ros):
    return cmd_enable(args, ros, False)


def safety_state(ros, timeout=3.0):
    """Return the supervisor's latched safety/state as a dict."""
    from std_msgs.msg import String
    from simreal_ros.nodes.common import LATCHED_QOS
    msg = ros.latest(String, 'safety/state', LATCHED_QOS, timeout,
                     'safety_supervisor is not running')
    return json.loads(msg.data)


def format_status(state, diags):
    """Return the status lines an operator reads: stage, e-stop, input ages, loop timing."""
    stage = state.get('stage', {})
    scales = stage.get('stages') or []
    idx = stage.get('stage_index', 0)
    estop = f'LATCHED ({state.get("estop_cause")})' if state.get('estop') else 'clear'
    lines = [
        f'e-stop      : {estop}',
        f'output      : {state.get("output")} ({state.get("safe_reason") or "forwarding"}), '
        f'mode {state.get("mode")}, safe mode {state.get("safe_mode")}',
        f'stage       : {stage.get("stage")} ({idx + 1 if scales else "?"}/{len(scales) or "?"}),'
        f' highest {stage.get("highest")}, clean for {stage.get("clean_for_s")} s of '
        f'{stage.get("dwell_needed_s")} s',
        f'clipped     : {state.get("clipped_outputs")} outputs; rejected {state.get("rejected")}',
    ]
    for name, info in (state.get('inputs') or {}).items():
        lines.append(f'input age   : {name:<13} arrival {info.get("arrival_age_ms")} ms, '
                     f'stamp {info.get("stamp_age_ms")} ms, received {info.get("received")}')
    for status in diags:
        values = {kv.key: kv.value for kv in status.values}
        keys = [k for k in ('rate_hz', 'period_err_ms_p99', 'inference_us_p99',
                            'e2e_latency_ms_p99', 'deadline_misses', 'publish_rate_hz',
                            'real_time_factor') if k in values]
        timing = ', '.join(f'{k} {values[k]}' for k in keys)
        lines.append(f'diagnostics : {status.name}: {status.message}'
                     + (f' [{timing}]' if timing else ''))
    return lines


def cmd_status(args, ros):
    from diagnostic_msgs.msg import DiagnosticArray
    state = safety_state(ros)
    msgs = ros.collect(DiagnosticArray, '/diagnostics', 10, 2.2)
    latest = {}
    for msg in msgs:
        for status in msg.status:
            latest[status.name] = status
    for line in format_status(state, [latest[k] for k in sorted(latest)]):
        print(line)
    return 0


def _sysid_nodes(kind):
    return [f'{k}_id' for k in (SYSID_KINDS if kind == 'all' else (kind,))]


def run_sysid(ros, node, joints=None, timeout=600.0, progress=None):
    """Start one SysID node's experiments and wait for its result (a dict)."""
    from simreal_ros import sysid_client
    return sysid_client.run(ros, node, joints=joints, timeout=timeout, progress=progress)


def cmd_sysid(args, ros):
    from simreal_ros import sysid_client
    code = 0
    for node in _sysid_nodes(args.kind):
        result = run_sysid(ros, node, joints=args.joints, progress=_progress_bar(node))
        print(f'\n{node}: {"ok" if result.get("ok") else "FAILED"}')
        for line in sysid_client.format_result(result):
            print(line)
        code |= 0 if result.get('ok') else 1
    ok, message = sysid_client.select_source(ros, 'policy')
    print(f'safety_supervisor: {message}' + ('; `simreal enable` starts the policy' if ok
                                             else ''))
    return code


def _progress_bar(label, width=30):
    def show(fraction, text=''):
        fraction = min(max(float(fraction), 0.0), 1.0)
        bar = '#' * int(round(width * fraction))
        sys.stdout.write(f'\r{label:<12} [{bar:<{width}}] {fraction * 100:5.1f}% {text[:40]}')
        sys.stdout.flush()
    return show


def cmd_gap(args, ros):
    from simreal_ros import sysid_client
    gap = sysid_client.evaluate_gap(ros)
    print('reality gap (sim_bridge, nominal vs identified model):')
    for line in sysid_client.format_gap(gap):
        print(line)
    return 0 if gap.get('ok') else 1


def cmd_refine(args, ros):
    from simreal_ros import sysid_client
    print('refining (sim_bridge: every joint that moved in the recording, with the latency; '
          'this takes a while) ...', flush=True)
    result = sysid_client.refine(ros)
    print('refine (sim_bridge): ' + ('ok' if result.get('ok') else 'FAILED'))
    print(f'  {result.get("message")}')
    for key, value in sorted((result.get('values') or {}).items()):
        if not key.endswith('_half_width'):
            half = result['values'].get(key + '_half_width', -1.0)
            print(f'  {key:<36} {value:.5g}' + (f' +- {half:.2g}' if half >= 0 else ''))
    return 0 if result.get('ok') else 1


def cmd_monitor(args, ros):
    from simreal_ros import monitor
    print(f'publishing {_join(ros.namespace, "monitor/markers")} (visualization_msgs/'
          'MarkerArray); view with rviz2 -d config/monitor.rviz; Ctrl-C stops', flush=True)
    try:
        monitor.run(ros, args.robot, duration=args.duration)
    except KeyboardInterrupt:
        pass
    return 0


PARAM_TYPES = {1: 'bool', 2: 'int', 3: 'double', 4: 'string', 5: 'bytes', 6: 'bool[]',
               7: 'int[]', 8: 'double[]', 9: 'string[]'}


def describe_parameters(ros, node):
    """Return [(name, type, value, description, range, read_only)] of a running node."""
    from rcl_interfaces.srv import DescribeParameters, GetParameters, ListParameters
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


def cmd_params(args, ros):
    from simreal_ros.graph import ALL_NODES
    nodes = args.nodes or list(ALL_NODES)
    deadline = time.monotonic() + 3.0   # discovery of a fresh CLI node takes a moment
    present = set()
    while time.monotonic() < deadline and not set(nodes) <= present:
        present |= {n.split('/')[-1] for n in ros.node_names()}
        time.sleep(0.2)
    for node in nodes:
        if node not in present:
            print(f'{node}: not running' + ('' if args.markdown else ' (skipped)'))
            continue
        rows = describe_parameters(ros, node)
        if not rows:   # a node that has only just been discovered may answer empty once
            rows = describe_parameters(ros, node)
        if args.markdown:
            print(f'\n### {node}\n\n| parameter | type | value ({args.robot_label}) | range | '
                  'meaning |\n| --- | --- | --- | --- | --- |')
            for name, kind, value, text, rng, _ in rows:
                if name in ('use_sim_time', 'start_type_description_service'):
                    continue
                shown = json.dumps(value) if value is not None else ''
                print(f'| `{name}` | {kind} | `{shown}` | {rng} | {text} |')
        else:
            print(f'{node}:')
            for name, kind, value, text, rng, ro in rows:
                print(f'  {name} ({kind}{", read-only" if ro else ""}) = {value!r} {rng}  '
                      f'# {text}')
    return 0


def cmd_export(args, ros):
    from simreal_ros import sysid_client
    result = sysid_client.bridge_call(ros, 'export')
    print('export (sim_bridge): ' + ('ok' if result.get('ok') else 'FAILED'))
    for key, value in result.items():
        if key != 'ok':
            print(f'  {key}: {value}')
    return 0 if result.get('ok') else 1


# -- up -----------------------------------------------------------------------------------
def start_graph(graph, log_dir=None, env=None, quiet=False, only=None):
    """Start the nodes of `graph` (those named in `only`, default all) as processes.

    The overlay file is written once per graph. Returns [(spec, Popen, log path)].
    """
    from simreal_ros.graph import write_overlay
    if graph.overlay_path is None:
        write_overlay(graph, log_dir)
    procs = []
    for spec in graph.nodes:
        if only is not None and spec.name not in only:
            continue
        log = None
        if log_dir:
            log = os.path.join(str(log_dir), f'{spec.name}.log')
            out = open(log, 'w')
        else:
            out = None
        proc = subprocess.Popen(graph.command(spec), stdout=out,
                                stderr=subprocess.STDOUT if out else None,
                                env=dict(env or os.environ, PYTHONUNBUFFERED='1'),
                                preexec_fn=_die_with_parent)   # own process group
        if out:
            out.close()
        procs.append((spec, proc, log))
        if not quiet:
            print(f'started {spec.name} (pid {proc.pid})', flush=True)
    return procs


def _die_with_parent():
    """In the child: leave the terminal's process group, get SIGTERM when the parent dies.

    The terminal's Ctrl-C then reaches only `simreal up`, which stops the nodes with SIGTERM:
    rclpy shuts a running node down cleanly on it, and a node still importing exits quietly
    (a SIGINT there would print a KeyboardInterrupt traceback).
    """
    os.setpgid(0, 0)
    try:
        import ctypes
        ctypes.CDLL('libc.so.6', use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def stop_graph(procs, timeout=15.0):
    """Stop the processes in reverse start order: SIGTERM (a clean rclpy shutdown), SIGKILL."""
    codes = {}
    for spec, proc, _ in reversed(procs):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for spec, proc, _ in reversed(procs):
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        codes[spec.name] = proc.returncode
    return codes


def graph_from_args(args, overrides=None):
    from simreal_ros.graph import build_graph
    return build_graph(args.robot, policy=args.policy or '', use_sim=not args.no_sim,
                       sysid=args.sysid, use_sim_time=args.use_sim_time,
                       namespace=args.namespace, overrides=overrides)


def cmd_up(args, _ros=None):
    graph = graph_from_args(args)
    for line in graph.describe():
        print(line)
    if not graph.node('safety_supervisor'):
        print('not starting: safety_supervisor is not available, and nothing may reach the '
              'hardware without it', file=sys.stderr)
        return 1
    if args.dry_run:
        for spec in graph.nodes:
            print(' '.join(graph.command(spec)))
        return 0
    # Ctrl-C and SIGTERM stop the graph the same way (even when started in the background).
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    procs = start_graph(graph)
    ros = recorder = None
    if args.record:
        from simreal_ros.record import SessionRecorder
        ros = Ros(graph.namespace, use_sim_time=graph.use_sim_time)
        recorder = SessionRecorder(ros.node, args.record, graph.namespace)
        print(f'recording the session to {args.record}', flush=True)
    rviz = None
    if args.rviz:
        import shutil
        from simreal_ros.graph import rviz_config
        if shutil.which('rviz2'):
            rviz = subprocess.Popen(['rviz2', '-d', str(rviz_config())])
        else:
            print('rviz2 not found on PATH (source a ROS 2 desktop install); continuing')
    print(f'graph up {_dds_hint()[1:-1].split("; start")[0]}; Ctrl-C stops every node. '
          'E-stop: `simreal estop`', flush=True)
    code = 0
    try:
        while True:
            dead = [(s, p) for s, p, _ in procs if p.poll() is not None]
            if dead:
                for spec, proc in dead:
                    print(f'{spec.name} exited with code {proc.returncode}: stopping the '
                          'graph', file=sys.stderr)
                code = 1
                break
            time.sleep(0.2)   # polling child processes, not synchronising with ROS
    except KeyboardInterrupt:
        print('\nCtrl-C: stopping the graph', flush=True)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # a second Ctrl-C must not orphan nodes
        codes = stop_graph(procs)
        if recorder is not None:
            counts = recorder.close()
            ros.close()
            print(f'recorded {sum(counts.values())} messages to {args.record}: '
                  + ', '.join(f'{t} {n}' for t, n in counts.items()))
        if rviz is not None and rviz.poll() is None:
            rviz.terminate()
            rviz.wait(timeout=5)
        print('stopped: ' + ', '.join(f'{n} ({c})' for n, c in codes.items()))
    return code


def cmd_demo(args, _ros=None):
    from simreal_ros import demo
    return demo.main(['--robot', args.robot, '--rtf', str(args.rtf)]
                     + (['--fast'] if args.fast else []))


# -- parser -------------------------------------------------------------------------------
def build_parser():
    parser = argparse.ArgumentParser(
        prog='simreal', description='Operate a simreal_ros deployment (E-stop: simreal estop).')
    parser.add_argument('-n', '--namespace', default='', help='namespace of the graph')
    sub = parser.add_subparsers(dest='verb', metavar='VERB', required=True)

    def graph_args(p):
        p.add_argument('--robot', default='arm3', help='robot config name or parameter file')
        p.add_argument('--policy', default='', help='ONNX policy path (overrides the file)')
        p.add_argument('--no-sim', action='store_true', help='do not start sim_robot')
        p.add_argument('--sysid', action='store_true', help='start SysID nodes and sim_bridge')
        p.add_argument('--use-sim-time', action='store_true', help='every node on /clock')

    p = sub.add_parser('up', help='start the graph (same as deploy.launch.py); Ctrl-C stops it')
    graph_args(p)
    p.add_argument('--rviz', action='store_true', help='also start rviz2 (monitor.rviz)')
    p.add_argument('--dry-run', action='store_true', help='print the commands, start nothing')
    p.add_argument('--record', default='', metavar='FILE.mcap', help='record the session '
                   '(supervisor inputs and output, joint_states, safety/state) to MCAP')
    sub.add_parser('status', help='stage, e-stop cause, input ages, loop timing')
    sub.add_parser('estop', help='latch the e-stop (safety_supervisor)')
    sub.add_parser('reset', help='reset a latched e-stop')
    p = sub.add_parser('stage', help='stage next: promote one speed stage')
    p.add_argument('action', choices=['next'])
    sub.add_parser('enable', help='enable policy_runner')
    sub.add_parser('disable', help='disable policy_runner')
    p = sub.add_parser('sysid', help='run SysID experiments and print the results')
    p.add_argument('kind', choices=SYSID_KINDS + ('all',))
    p.add_argument('--joints', nargs='+', default=None, help='joints to identify')
    p = sub.add_parser('monitor', help='publish rviz markers: stage, e-stop, limit usage')
    p.add_argument('--robot', default='arm3', help='robot config (for the limits)')
    p.add_argument('--duration', type=float, default=None, help='stop after this many s')
    p = sub.add_parser('params', help='parameters of the running nodes (description, range)')
    p.add_argument('nodes', nargs='*', help='nodes (default: every simreal_ros node)')
    p.add_argument('--markdown', action='store_true', help='as Markdown tables (docs)')
    p.add_argument('--robot-label', default='arm3', help='column label for the values')
    sub.add_parser('gap', help='reality gap, nominal vs identified (sim_bridge)')
    sub.add_parser('export', help='export the identified model (sim_bridge)')
    sub.add_parser('refine', help='refine every joint together on the recording by trajectory '
                   'matching (sim_bridge/refine), and wait for the result')
    p = sub.add_parser('demo', help='the end-to-end demo on the embedded robot')
    p.add_argument('--robot', default='arm3')
    p.add_argument('--fast', action='store_true', help='shorter experiments')
    p.add_argument('--rtf', type=float, default=1.0, help='sim real-time factor (loaded '
                   'machine: 0.5; every node then runs on /clock)')
    return parser


VERBS = {'status': cmd_status, 'estop': cmd_estop, 'reset': cmd_reset, 'stage': cmd_stage,
         'enable': cmd_enable, 'disable': cmd_disable, 'sysid': cmd_sysid, 'gap': cmd_gap,
         'export': cmd_export, 'refine': cmd_refine, 'monitor': cmd_monitor, 'params': cmd_params}


def main(argv=None):
    """Run one verb; exit 0 on success, 1 when refused or a node is missing, 2 on bad config."""
    args = build_parser().parse_args(argv)
    try:
        if args.verb == 'up':
            return cmd_up(args)
        if args.verb == 'demo':
            return cmd_demo(args)
        ros = Ros(args.namespace)
        try:
            return VERBS[args.verb](args, ros)
        finally:
            ros.close()
    except Missing as exc:
        print(f'simreal {args.verb}: {exc}', file=sys.stderr)
        return 1
    except ConfigError as exc:
        print(f'simreal {args.verb}: configuration error: {exc}', file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f'\nsimreal {args.verb}: interrupted', file=sys.stderr)
        return 130


if __name__ == '__main__':
    sys.exit(main())

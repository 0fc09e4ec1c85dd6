"""simreal: the operator's command line (rclpy only, no ros2cli needed).

    simreal up [--robot arm3] [--sysid] [--no-sim] [--policy p.onnx]   # Ctrl-C stops all
    simreal estop                      # always one command away
    simreal status
    simreal reset
    simreal go-default [--no-wait]     # bring-up: move slowly to the default pose, hold it
    simreal stage next
    simreal enable | disable           # policy_runner on/off
    simreal sysid friction|inertia|latency|all [--joints a b] [--report DIR]
    simreal sysid plan --robot g1_12dof [--json]   # the schedule and robot time, no motion
    simreal sysid report [--results DIR] [--report DIR]  # the report of the newest results
    simreal gap [--live [--seconds N]]  # offline (sim_bridge/evaluate_gap) or the running gap
    simreal refine                     # sim_bridge/refine: all joints together, waits
    simreal export
    simreal monitor [--robot arm3]     # rviz markers on monitor/markers
    simreal params [node ...]          # parameters: value, range, meaning
    simreal demo
    simreal limits --reference TRACE.npz --robot g1_12dof [--margin 0.1] [--yaml | --json]
    simreal import deploy.yaml --model scene.xml [--policy p.onnx] -o robot.yaml
    simreal check robot.yaml [--reference TRACE.npz | --rollout STEPS]
    simreal assets list | fetch [NAME ...] [--from DIR] | where NAME   # third-party files

Every verb talks to the running graph over the same services and topics a `ros2 service call`
would use (`/safety/estop`, `/policy_runner/enable`, ...). A verb whose node is not running says
which node and service are missing and exits 1. Set ROS_DOMAIN_ID and
ROS_AUTOMATIC_DISCOVERY_RANGE as for the graph you want to reach. `limits` is file work only
(no ROS): it proposes safety_supervisor limits from a reference trace (docs/traces.md).
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

from simreal_ros.client.processes import start_graph, stop_graph
from simreal_ros.client.ros import CLOSE_WAIT_S, describe_parameters, dds_hint, \
    find_supervisors, go_default, graph_robots, join_name, Missing, Ros, safety_state
from simreal_ros.core.config import ConfigError

SYSID_KINDS = ('friction', 'inertia', 'latency')

# -- verbs --------------------------------------------------------------------------------
def _print_response(verb, resp):
    print(f'{verb}: {"ok" if resp.success else "REFUSED"}: {resp.message}')
    return 0 if resp.success else 1


def cmd_estop(args, ros):
    if not getattr(args, 'all', False):
        return _print_response('estop', ros.trigger('safety/estop', 'safety_supervisor'))
    # Every supervisor on the domain, each named with its answer.
    found = find_supervisors(ros)
    if not found:
        print(f'estop --all: no safety_supervisor found {dds_hint()}')
        return 1
    failed = 0
    for ns in found:
        try:
            resp = ros.trigger(join_name(ns, 'safety/estop'), f'safety_supervisor in {ns}')
            print(f'estop {ns}: {"ok" if resp.success else "REFUSED"}: {resp.message}')
            failed += not resp.success
        except Missing as exc:
            print(f'estop {ns}: NO ANSWER: {exc}')
            failed += 1
    return 1 if failed else 0


def cmd_reset(args, ros):
    return _print_response('reset', ros.trigger('safety/reset', 'safety_supervisor'))


def cmd_go_default(args, ros):
    """The bring-up: safety/go_default, then (unless --no-wait) follow it to the held pose."""
    show = None if args.no_wait else _progress_bar('go-default')
    ok, message, bringup = go_default(ros, wait=not args.no_wait, timeout=args.timeout,
                                      progress=show)
    if show is not None and bringup:
        print()
    print(f'go-default: {"ok" if ok else "REFUSED" if not bringup else "FAILED"}: {message}')
    if ok and not args.no_wait:
        print('go-default: holding the default pose; `simreal enable` hands over to the policy')
    return 0 if ok else 1


def cmd_stage(args, ros):
    return _print_response('stage next', ros.trigger('safety/advance_stage',
                                                     'safety_supervisor'))


def cmd_enable(args, ros, value=True):
    return _print_response('enable' if value else 'disable',
                           ros.set_bool('policy_runner/enable', value, 'policy_runner'))


def cmd_disable(args, ros):
    return cmd_enable(args, ros, False)


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
    if stage.get('last_fault'):
        lines.append(f'last fault  : {stage["last_fault"]["cause"]} '
                     f'(at {stage["last_fault"]["time"]:.3f} s)')
    bringup = state.get('bringup') or {}
    if bringup.get('phase', 'idle') != 'idle':
        lines.append(f'bring-up    : {bringup["phase"]} ({100 * bringup.get("progress", 0):.0f} % '
                     f'of {bringup.get("duration_s")} s), max error '
                     f'{bringup.get("max_error_rad")} rad'
                     + (f', {bringup["cause"]}' if bringup.get('cause') else ''))
    for name, info in (state.get('inputs') or {}).items():
        lines.append(f'input age   : {name:<13} arrival {info.get("arrival_age_ms")} ms, '
                     f'stamp {info.get("stamp_age_ms")} ms, received {info.get("received")}')
    for status in diags:
        values = {kv.key: kv.value for kv in status.values}
        keys = [k for k in ('rate_hz', 'period_err_ms_p99', 'inference_us_p99',
                            'e2e_latency_ms_p99', 'deadline_misses', 'publish_rate_hz',
                            'real_time_factor', 'lowcmd_rate_hz') if k in values]
        timing = ', '.join(f'{k} {values[k]}' for k in keys)
        lines.append(f'diagnostics : {status.name}: {status.message}'
                     + (f' [{timing}]' if timing else ''))
    return lines


def diag_namespace(name):
    """The namespace of a /diagnostics status name ('left/sim_robot: physics' -> '/left')."""
    node = name.split(':')[0]
    return '/' + node.rsplit('/', 1)[0].strip('/') if '/' in node else '/'


def robot_line(ns, state):
    """One line for one robot (`simreal status` with several on the graph)."""
    stage = state.get('stage', {})
    estop = f'E-STOP ({state.get("estop_cause")})' if state.get('estop') else 'e-stop clear'
    return (f'{ns:<12} {estop}; output {state.get("output")}, mode {state.get("mode")}, '
            f'stage {stage.get("stage")} (highest {stage.get("highest")})')


def cmd_status(args, ros):
    from diagnostic_msgs.msg import DiagnosticArray
    if not args.namespace:
        found = find_supervisors(ros)
        if found and found != ['/']:
            # Several robots (or one under a namespace): one line each; -n NS for the rest.
            for ns in found:
                try:
                    print(robot_line(ns, safety_state(ros, namespace=ns)))
                except Missing as exc:
                    print(f'{ns:<12} no safety/state: {exc}')
            print('details of one robot: simreal -n <namespace> status')
            return 0
    state = safety_state(ros)
    msgs = ros.collect(DiagnosticArray, '/diagnostics', 10, 2.2)
    latest = {}
    mine = join_name(args.namespace, '').rstrip('/') or '/'
    for msg in msgs:
        for status in msg.status:
            if diag_namespace(status.name) == mine:   # this robot's nodes only
                latest[status.name] = status
    for line in format_status(state, [latest[k] for k in sorted(latest)]):
        print(line)
    return 0


def _sysid_nodes(kind):
    return [f'{k}_id' for k in (SYSID_KINDS if kind == 'all' else (kind,))]


def run_sysid(ros, node, joints=None, timeout=600.0, progress=None):
    """Start one SysID node's experiments and wait for its result (a dict)."""
    from simreal_ros.client import sysid as sysid_client
    return sysid_client.run(ros, node, joints=joints, timeout=timeout, progress=progress)


def cmd_sysid(args, ros):
    from simreal_ros.client import sysid as sysid_client
    code = 0
    runs = []
    if args.kind == 'report':
        return cmd_sysid_report(args, ros)
    for node in _sysid_nodes(args.kind):
        result = run_sysid(ros, node, joints=args.joints, progress=_progress_bar(node))
        print(f'\n{node}: {"ok" if result.get("ok") else "FAILED"}')
        for line in sysid_client.format_result(result):
            print(line)
        code |= 0 if result.get('ok') else 1
        runs.append(result)
    ok, message = sysid_client.select_source(ros, 'policy')
    print(f'safety_supervisor: {message}' + ('; `simreal enable` starts the policy' if ok
                                             else ''))
    gap, exports = (None, None) if args.no_gap else sysid_client.bridge_after_runs(
        ros, runs, say=lambda text: print(text, flush=True))
    robot = next((r.get('robot') for r in runs if r.get('robot')), 'robot')
    out = args.report or sysid_client.default_report_dir(robot)
    path = sysid_client.write_run_report(out, runs, gap, exports)
    print(f'report: {path} (raw facts: {out}/summary.json)')
    return code


def cmd_sysid_report(args, ros):
    """Write the SysID report of the newest run of each experiment in a results folder (a
    session driven by `ros2 service call`, say), with sim_bridge's last gap and its export."""
    from simreal_ros.client import sysid as sysid_client
    runs = sysid_client.runs_from_folder(args.results, args.robot if args.robot_given else None)
    for run in runs:
        print(f'{run["experiment"]}: {run["result_file"]}')
    gap = exports = None
    if not args.no_gap:
        gap = sysid_client.latest_gap(ros)
        if gap is None:
            print('no reality gap: nothing on sim_bridge/gap (sim_bridge not running, or '
                  'sim_bridge/evaluate_gap never called)')
        else:
            exports = sysid_client.bridge_call(ros, 'export')
    robot = runs[0].get('robot', 'robot')
    out = args.report or sysid_client.default_report_dir(robot)
    path = sysid_client.write_run_report(out, runs, gap, exports)
    print(f'report: {path} (raw facts: {out}/summary.json)')
    return 0


def cmd_sysid_plan(args, _ros=None):
    """Print every SysID experiment the robot file would run (files only, no ROS, no motion):
    per joint its range, speeds, torque, duration, and the total robot time; exit 1 when a
    command would leave the SysID limits."""
    import json
    from simreal_ros.core.config import robot_config_path
    from simreal_ros.core.sysid.design import plan
    path = robot_config_path(args.robot)
    result = plan(path, joints=args.joints)
    bad = [r for r in result['experiments'] if r['violations']]
    if args.json:
        print(json.dumps(result))
    else:
        print(f'SysID plan for {path} (each joint from hold_position, the others held there)')
        print(f'{"experiment":<10} {"joint":<26} {"range (rad)":>17} {"speed":>13} '
              f'{"torque (N*m)":>14} {"time":>7}')
        for r in result['experiments']:
            lo, hi = r['range_rad']
            speeds = (' '.join(f'{v:g}' for v in r['speeds']) if r['speeds']
                      else f'{r["peak_speed"]:.2f}')
            print(f'{r["kind"]:<10} {r["joint"]:<26} {lo:>8.3f} {hi:>8.3f} '
                  f'{r["peak_speed"]:>5.2f}/{r["velocity_limit"]:<5g}  '
                  f'{r["peak_torque"]:>6.1f}/{r["torque_limit"]:<6g} {r["duration_s"]:>6.1f}s'
                  + (f'  OUTSIDE: {"; ".join(r["violations"])}' if r['violations'] else ''))
            if r['kind'] == 'friction':
                passes = ', '.join(str(n) for n in r.get('passes') or ())
                print(f'{"":<37} sweeps at {speeds} rad/s, both directions ({passes} '
                      f'back and forth), settled {r["settle_s"]:g} s after each acceleration')
            elif r.get('excitation'):
                e = r['excitation']
                print(f'{"":<37} amplitude set by the {e["bound"]} limit '
                      f'({e["gain_over_still"]:.1f} x a still joint\'s); PD torque up to '
                      f'{e["predicted_torque"]:.2f} N*m ({e["torque_model"]})')
            if r.get('extension'):
                x = r['extension']
                print(f'{"":<37} + {x["duration_s"]:.1f} s more multi-sine if its armature '
                      f'interval is wider than +-{100 * x["armature_goal"]:g} %')
        extra = result.get('extensions_max_s', result.get('extensions_s')) or 0.0
        budget = result.get('extension_budget_s') or 0.0
        for joint, seconds in result['per_joint_s'].items():
            most = result['per_joint_max_s'][joint]
            print(f'{joint}: {seconds:.1f} s of robot time'
                  + (f' (up to {most:.1f} s with its extension)' if most > seconds else ''))
        minutes = result['total_s'] / 60.0
        if budget > 0 and extra:
            most = (f', up to {result["total_s"] + extra:.0f} s '
                    f'({(result["total_s"] + extra) / 60.0:.1f} min) with the extensions '
                    f'inertia_extend_budget_s allows ({budget:g} s, to the widest armature '
                    f'intervals first; {result["extensions_s"]:.0f} s if every joint had one)')
        elif extra:
            most = (f', up to {result["total_s"] + extra:.0f} s '
                    f'({(result["total_s"] + extra) / 60.0:.1f} min) if every armature needs '
                    'its extension')
        else:
            most = ''
        print(f'total robot time: {result["total_s"]:.0f} s ({minutes:.1f} min) for '
              f'{len({r["joint"] for r in result["experiments"]})} joints' + most
              + '; speed: peak/limit (rad/s), torque: nominal rigid-link peak/limit (friction '
              'comes on top)')
    if bad:
        print(f'simreal sysid plan: {len(bad)} experiment(s) would command outside the SysID '
              'limits: do not run them; fix the robot file (hold_position, sweep_half_range, '
              'speeds)', file=sys.stderr)
        return 1
    return 0


def _progress_bar(label, width=30):
    def show(fraction, text=''):
        fraction = min(max(float(fraction), 0.0), 1.0)
        bar = '#' * int(round(width * fraction))
        sys.stdout.write(f'\r{label:<12} [{bar:<{width}}] {fraction * 100:5.1f}% {text[:40]}')
        sys.stdout.flush()
    return show


def cmd_gap(args, ros):
    from simreal_ros.client import sysid as sysid_client
    if args.live:
        from simreal_ros.client.live_gap import follow, format_live_gap
        worst = 0
        for doc in follow(ros, args.seconds):
            print('\n'.join(format_live_gap(doc)), flush=True)
            worst = max(worst, {'ERROR': 1}.get(doc.get('status'), 0))
        return worst
    gap = sysid_client.evaluate_gap(ros)
    print('reality gap (sim_bridge, nominal vs identified model):')
    for line in sysid_client.format_gap(gap):
        print(line)
    return 0 if gap.get('ok') else 1


def cmd_refine(args, ros):
    from simreal_ros.client import sysid as sysid_client
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
    from simreal_ros.client import monitor
    from simreal_ros.deploy import monitor_files
    if args.write_config:
        robots = graph_robots(ros)
        if not robots:
            print('no safety_supervisor found on the graph: the analyzers cover this '
                  f'namespace with the default nodes {dds_hint()}')
            robots = {ros.namespace or '/': list(monitor_files.DIAGNOSING_NODES)}
        paths = monitor_files.write_configs(args.write_config, ros.namespace, robots)
        print(f'rviz2 -d {paths["rviz"]}')
        print(f'rqt --perspective-file {paths["perspective"]}')
        print('ros2 run diagnostic_aggregator aggregator_node --ros-args --params-file '
              f'{paths["analyzers"]}   # robots: {", ".join(sorted(robots))}')
        return 0
    print(f'publishing {join_name(ros.namespace, "monitor/markers")} (visualization_msgs/'
          'MarkerArray); view with rviz2 -d config/monitor.rviz; Ctrl-C stops', flush=True)
    try:
        monitor.run(ros, args.robot, duration=args.duration)
    except KeyboardInterrupt:
        pass
    return 0


def cmd_params(args, ros):
    from simreal_ros.deploy.graph import ALL_NODES
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
    from simreal_ros.client import sysid as sysid_client
    result = sysid_client.bridge_call(ros, 'export')
    print('export (sim_bridge): ' + ('ok' if result.get('ok') else 'FAILED'))
    for key, value in result.items():
        if key != 'ok':
            print(f'  {key}: {value}')
    return 0 if result.get('ok') else 1


# -- up -----------------------------------------------------------------------------------
def _interrupt(signum, frame):
    raise KeyboardInterrupt


def param_overrides(items, overrides=None):
    """{node: {name: value}} from --param NODE:NAME=VALUE items (values read as YAML)."""
    import yaml
    out = {k: dict(v) for k, v in (overrides or {}).items()}
    for item in items or ():
        target, eq, value = item.partition('=')
        node, colon, name = target.partition(':')
        if not (eq and colon and node and name and value):
            raise ConfigError(f'--param {item!r}: use NODE:NAME=VALUE, e.g. '
                             'safety_supervisor:rate_hz=250.0')
        out.setdefault(node, {})[name] = yaml.safe_load(value)
    return out


def graph_from_args(args, overrides=None):
    from simreal_ros.deploy.graph import build_graph
    given = param_overrides(getattr(args, 'param', None))
    graph = build_graph(args.robot, policy=args.policy or '', use_sim=not args.no_sim,
                        sysid=args.sysid, use_sim_time=args.use_sim_time,
                        namespace=args.namespace,
                        overrides=param_overrides(getattr(args, 'param', None), overrides) or None,
                        driver=getattr(args, 'driver', ''), markers=getattr(args, 'rviz', False))
    unknown = sorted(set(given) - set(graph.names()))
    if unknown:
        raise ConfigError(f'--param names {unknown}, not in this graph (its nodes: '
                          f'{", ".join(graph.names())})')
    return graph


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
    files = None
    if args.rviz:
        from simreal_ros.deploy.graph import monitor_configs
        files = monitor_configs(graph)
        print(f'monitoring files for this robot: rviz {files["rviz"]}, rqt '
              f'{files["perspective"]}, diagnostic_aggregator {files["analyzers"]}')
    ros = recorder = None
    if args.record:
        from simreal_ros.client.record import SessionRecorder
        ros = Ros(graph.namespace, use_sim_time=graph.use_sim_time)
        recorder = SessionRecorder(ros.node, args.record, graph.namespace)
        print(f'recording the session to {args.record}', flush=True)
    rviz = None
    if args.rviz:
        import shutil
        if shutil.which('rviz2'):
            ns = ['--ros-args', '-r', f'__ns:={graph.namespace}'] if graph.namespace else []
            rviz = subprocess.Popen(['rviz2', '-d', str(files['rviz'])] + ns)
        else:
            print('rviz2 not found on PATH (source a ROS 2 desktop install); status_markers '
                  'runs, rviz2 does not')
    print(f'graph up {dds_hint()[1:-1].split("; start")[0]}; Ctrl-C stops every node. '
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


def cmd_limits(args, _ros=None):
    """Propose supervisor limits from a reference trace (files only, no ROS)."""
    from simreal_ros.core.limits_proposal import propose_from_files
    proposal = propose_from_files(args.reference, args.robot, margin=args.margin,
                                  position_margin=args.position_margin,
                                  model=args.model or None, use_model=not args.no_model,
                                  jitter=args.jitter, replay=not args.no_replay,
                                  beyond_model=args.beyond_model)
    flagged = proposal.flagged
    dirty = [f'jitter {j:g}: {r.summary()}' for j, r in (proposal.replay or {}).items()
             if not r.clean]
    if args.json:
        print(proposal.to_json())
    elif args.yaml:
        print(proposal.yaml_snippet(), end='')
    else:
        for line in proposal.table():
            print(line)
        print('\npaste into the robot file (replaces these parameters of safety_supervisor):')
        print(proposal.yaml_snippet(), end='')
    if flagged and (args.json or args.yaml):   # the table shows them; never let them pass unseen
        joints = sorted({n for n, _ in flagged}, key=proposal.names.index)
        print(f'simreal limits: FLAGGED {len(joints)} joint(s), the reference needs more than '
              f'the model allows: {", ".join(joints)}', file=sys.stderr)
    if dirty and (args.json or args.yaml):
        print('simreal limits: the replay through the supervisor\'s filter is not clean: '
              + '; '.join(dirty), file=sys.stderr)
    if flagged and dirty and not args.beyond_model:
        print('simreal limits: the proposal stops at the model\'s bound where the reference '
              'passes it, so its replay is not clean; --beyond-model proposes limits that let '
              'the motion through (each flagged: confirm the hardware allows it)',
              file=sys.stderr)
    if (flagged or dirty) and args.strict:
        print('simreal limits: --strict: flagged joints or a replay with clips, exit code 1',
              file=sys.stderr)
        return 1
    return 0


def cmd_import(args, _ros=None):
    """Turn a training export into a robot file (files only, no ROS)."""
    from simreal_ros.tools.importer import import_export, write
    imp = import_export(args.file, args.model or None, args.policy or None,
                        args.format or None, args.output, args.name or None,
                        driver=args.driver or None, reference=args.reference or None,
                        reference_steps=args.reference_steps)
    for text in imp.notes:
        print(f'simreal import: not mapped or assumed: {text}')
    for text in imp.flags:
        print(f'simreal import: FLAGGED (confirm the hardware allows it): {text}',
              file=sys.stderr)
    for (jitter, _), result in imp.replays.items():
        if not result.clean:
            print(f'simreal import: {"WARNING" if jitter and not result.safe_reason else "ERROR"}'
                  f': the limits replay is not clean: {result.summary()}', file=sys.stderr)
    path = write(imp, args.output)
    runner = imp.sections['policy_runner']
    print(f'simreal import: wrote {path} ({imp.fmt}: {len(imp.shared["joint_names"])} joints, '
          f'{len(runner["observation"]["terms"])} observation terms, policy at '
          f'{runner["rate_hz"]:g} Hz); check it: simreal check {path}')
    return 0


def cmd_assets(args, _ros=None):
    """List, fetch or locate the third-party assets (files only, no ROS; docs/assets.md)."""
    from simreal_ros.core import assets
    if args.action == 'list':
        for i, name in enumerate(assets.BY_NAME):
            print(('\n' if i else '') + '\n'.join(assets.describe(name)))
        print(f'\nassets folder: {assets.assets_dir()} (${assets.DIR_ENV} sets it)')
        return 0
    if args.action == 'where':
        if len(args.names) != 1:
            print('simreal assets where: give one asset name', file=sys.stderr)
            return 2
        name = args.names[0]
        word, detail = assets.state(name)
        if word == 'missing':
            print(f'simreal assets where: {name} is not on this machine (would be '
                  f'{assets.folder(name)}); get it: {assets.fetch_command(name)} (offline: '
                  '--from DIR)', file=sys.stderr)
            return 1
        if word == 'incomplete':
            absent = [f for f in assets.missing_files(name) if not f.derived]
            print(f'simreal assets where: {name} in {assets.folder(name)} is incomplete, '
                  f'{detail}; '
                  + (f'get it: {assets.fetch_command(name)}' if absent else
                     'make the derived files (docs/assets.md)'), file=sys.stderr)
            if absent:
                return 1
        print(assets.folder(name))
        return 0
    try:
        todo = assets.fetch(args.names or None, from_dir=args.from_dir or None)
    except assets.AssetError as exc:
        print(f'simreal assets fetch: FAILED: {exc}', file=sys.stderr)
        return 1
    for name, entry in todo:
        print(f'simreal assets fetch: {name}/{entry.dest} still to make: {entry.make}')
    return 0


def cmd_demo(args, _ros=None):
    from simreal_ros.client import demo
    return demo.main(['--robot', args.robot, '--rtf', str(args.rtf)]
                     + (['--rate-hz', str(args.rate_hz)] if args.rate_hz is not None else [])
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
        p.add_argument('--driver', default='', choices=('', 'unitree'),
                       help="'unitree': start unitree_bridge between the supervisor and a "
                            'Unitree robot (with the simulator: sim_robot plays the robot '
                            'over loopback)')
        p.add_argument('--sysid', action='store_true', help='start SysID nodes and sim_bridge')
        p.add_argument('--use-sim-time', action='store_true', help='every node on /clock')
        p.add_argument('--param', action='append', default=[], metavar='NODE:NAME=VALUE',
                       help='set one node parameter over the robot file (YAML value), e.g. '
                       'safety_supervisor:rate_hz=250.0; repeatable')

    p = sub.add_parser('up', help='start the graph (same as deploy.launch.py); Ctrl-C stops it')
    graph_args(p)
    p.add_argument('--rviz', action='store_true', help='also start status_markers and rviz2 '
                   '(monitor.rviz, its topics in the namespace)')
    p.add_argument('--dry-run', action='store_true', help='print the commands, start nothing')
    p.add_argument('--record', default='', metavar='FILE.mcap', help='record the session '
                   '(supervisor inputs and output, joint_states, safety/state) to MCAP')
    sub.add_parser('status', help='stage, e-stop cause, input ages, loop timing')
    p = sub.add_parser('estop', help='latch the e-stop (safety_supervisor)')
    p.add_argument('--all', action='store_true',
                   help='every safety_supervisor on the domain, in any namespace')
    sub.add_parser('reset', help='reset a latched e-stop')
    p = sub.add_parser('go-default', help='bring-up: move slowly to the default pose and hold '
                       'it until the policy takes over (safety/go_default; e-stop cancels)')
    p.add_argument('--no-wait', action='store_true', help='return once accepted, do not '
                   'follow the motion')
    p.add_argument('--timeout', type=float, default=None, help='give up waiting after this '
                   'many s (default: the motion\'s duration + 15 s)')
    p = sub.add_parser('stage', help='stage next: promote one speed stage')
    p.add_argument('action', choices=['next'])
    sub.add_parser('enable', help='enable policy_runner')
    sub.add_parser('disable', help='disable policy_runner')
    p = sub.add_parser('sysid', help='run SysID experiments and print the results')
    p.add_argument('kind', choices=SYSID_KINDS + ('all', 'plan', 'report'),
                   help='plan: print the schedule and robot time from the robot file (no '
                   'motion, no ROS); report: write the report of the newest results in '
                   '--results (with sim_bridge\'s last gap and its export, when it runs)')
    p.add_argument('--joints', nargs='+', default=None, help='joints to identify')
    p.add_argument('--robot', default=None, help='with plan: robot file (config name or '
                   'path, default arm3); with report: only results of this robot name')
    p.add_argument('--results', default='~/.ros/simreal_ros/sysid', metavar='DIR',
                   help='with report: the SysID nodes\' results_dir')
    p.add_argument('--json', action='store_true', help='with plan: print JSON')
    p.add_argument('--report', default='', metavar='DIR', help='write the SysID report '
                   '(report.html, summary.json) here (default: '
                   '~/.ros/simreal_ros/sysid_reports/<robot>_<time>)')
    p.add_argument('--no-gap', action='store_true', help='do not push the results to '
                   'sim_bridge, score the gap and export (the report then has no gap)')
    p = sub.add_parser('monitor', help='publish rviz markers: stage, e-stop, limit usage')
    p.add_argument('--robot', default='arm3', help='robot config (for the limits)')
    p.add_argument('--duration', type=float, default=None, help='stop after this many s')
    p.add_argument('--write-config', default='', metavar='DIR', help='write monitor.rviz and '
                   'simreal.perspective for this namespace, and diagnostic_analyzers.yaml for '
                   'every robot on the graph, into DIR, then stop')
    p = sub.add_parser('params', help='parameters of the running nodes (description, range)')
    p.add_argument('nodes', nargs='*', help='nodes (default: every simreal_ros node)')
    p.add_argument('--markdown', action='store_true', help='as Markdown tables (docs)')
    p.add_argument('--robot-label', default='arm3', help='column label for the values')
    p = sub.add_parser('gap', help='reality gap, nominal vs identified (sim_bridge); --live: '
                       'the running per-joint gap of the shadow model')
    p.add_argument('--live', action='store_true', help='follow sim_bridge/live_gap')
    p.add_argument('--seconds', type=float, default=None, help='with --live: stop after this '
                   'many s (default: until Ctrl-C)')
    sub.add_parser('export', help='export the identified model (sim_bridge)')
    sub.add_parser('refine', help='refine every joint together on the recording by trajectory '
                   'matching (sim_bridge/refine), and wait for the result')
    p = sub.add_parser('limits', help='propose safety_supervisor limits from a reference '
                       'trace, within the model\'s ranges (files only, no ROS; docs/traces.md)')
    p.add_argument('--reference', required=True, metavar='TRACE.npz',
                   help='reference trace (NPZ, docs/traces.md)')
    p.add_argument('--robot', required=True, metavar='ROBOT',
                   help='robot file: config name (g1_12dof) or parameter file path')
    p.add_argument('--margin', type=float, default=0.10, metavar='FRACTION',
                   help='added to velocity, torque, target rate and acceleration needs '
                        '(default 0.10 = 10 %%)')
    p.add_argument('--position-margin', type=float, default=0.10, metavar='RAD',
                   help='added outside the positions and targets (default 0.10 rad)')
    p.add_argument('--model', default='', metavar='MJCF',
                   help='MuJoCo model for the joint and actuator ranges (default: the one the '
                        'robot file names, sim_robot.model_path)')
    p.add_argument('--no-model', action='store_true',
                   help='read no model: proposals are not checked against any range')
    p.add_argument('--jitter', type=float, default=0.5, metavar='FRACTION',
                   help='target rate and acceleration for policy steps arriving this fraction '
                        'of a period late or early (default 0.5)')
    p.add_argument('--no-replay', action='store_true',
                   help='do not replay the reference through the supervisor\'s filter with '
                        'the proposal (the check that it passes untouched)')
    p.add_argument('--beyond-model', action='store_true',
                   help='propose what the reference needs even past the model\'s joint range '
                        'or torque bound (each FLAGGED: confirm the hardware allows it), so '
                        'the replay is clean; default: stop at the model\'s bound')
    out = p.add_mutually_exclusive_group()
    out.add_argument('--yaml', action='store_true', help='print only the YAML snippet')
    out.add_argument('--json', action='store_true', help='print only JSON')
    p.add_argument('--strict', action='store_true',
                   help='exit 1 when a joint is flagged (the reference exceeds the model)')
    p = sub.add_parser('import', help='turn a training export (unitree_rl_lab deploy.yaml, '
                       'legged_gym deploy config) into a robot file (files only, no ROS; '
                       'docs/bring_your_own.md)')
    p.add_argument('file', metavar='FILE', help='the export (deploy.yaml, deploy config, or '
                   'an mjlab ONNX)')
    p.add_argument('--format', default='',
                   choices=('', 'unitree_rl_lab', 'legged_gym', 'mjlab'),
                   help='the export\'s format (default: told by its keys; an ONNX with '
                        'mjlab\'s metadata is mjlab)')
    p.add_argument('--model', default='', metavar='MJCF',
                   help='the robot\'s MuJoCo model: its actuators are the motors, in order')
    p.add_argument('--policy', default='', metavar='ONNX',
                   help='the policy (default: policy.onnx beside FILE or in ../exported/)')
    p.add_argument('--name', default='', help='robot_name (default: the output file\'s stem)')
    p.add_argument('--driver', default='', choices=('', 'unitree'),
                   help="'unitree': add a unitree_bridge section (motor indices, held motors)")
    p.add_argument('-o', '--output', required=True, metavar='ROBOT.yaml',
                   help='the robot file to write (nothing is written when the import fails)')
    p.add_argument('--reference', default='', metavar='TRACE.npz',
                   help='a trace of the training loop (docs/traces.md) the supervisor\'s limits '
                        'must let through (default: run the policy in MuJoCo, '
                        '--reference-steps)')
    p.add_argument('--reference-steps', type=int, default=1000, metavar='STEPS',
                   help='policy steps of the import\'s own reference run (default 1000; 0: '
                        'none, limits from the MJCF only)')
    p = sub.add_parser('check', help='check a robot file: sections, paths, sizes against the '
                       'model and the ONNX, declared parameters, the limits replay (no graph)')
    p.add_argument('file', metavar='FILE', help='robot file (path, or a name in config/robots)')
    p.add_argument('--reference', default='', metavar='TRACE.npz',
                   help='replay this reference through the supervisor\'s limit filter')
    p.add_argument('--rollout', type=int, default=0, metavar='STEPS',
                   help='replay STEPS policy steps of the package\'s MuJoCo loop instead')
    p.add_argument('--cmd-vel', type=float, nargs=3, metavar=('VX', 'VY', 'WZ'),
                   help='the velocity command of the rollout')
    p.add_argument('--no-nodes', action='store_true',
                   help='do not build the nodes to check the declared parameters')
    p.add_argument('--json', action='store_true', help='print JSON only')
    p = sub.add_parser('assets', help='third-party files (G1 models, unitree\'s policies, the '
                       'vendor simulator): list, fetch from upstream at pinned commits with '
                       'checksums (or --from DIR offline), where (files only, no ROS; '
                       'docs/assets.md)')
    p.add_argument('action', choices=('list', 'fetch', 'where'))
    p.add_argument('names', nargs='*', metavar='NAME', help='assets (fetch: default all; '
                   'where: one)')
    p.add_argument('--from', dest='from_dir', default='', metavar='DIR',
                   help='fetch: copy from DIR instead of downloading (DIR/robots/NAME, '
                        'DIR/vendor/NAME or DIR/NAME), checked against the same sha256')
    p = sub.add_parser('demo', help='the end-to-end demo on the embedded robot')
    p.add_argument('--robot', default='arm3')
    p.add_argument('--fast', action='store_true', help='shorter experiments')
    p.add_argument('--rtf', type=float, default=1.0, help='sim real-time factor (loaded '
                   'machine: 0.5; every node then runs on /clock)')
    p.add_argument('--rate-hz', type=float, default=None, help='joint_states and supervisor '
                   "tick rate (the demo's default 250; 0: the robot file's)")
    return parser


VERBS = {'status': cmd_status, 'estop': cmd_estop, 'reset': cmd_reset, 'stage': cmd_stage,
         'go-default': cmd_go_default,
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
        if args.verb == 'limits':
            return cmd_limits(args)
        if args.verb == 'import':
            return cmd_import(args)
        if args.verb == 'assets':
            return cmd_assets(args)
        if args.verb == 'check':
            from simreal_ros.tools.check import main_check
            return main_check(args)
        if args.verb == 'sysid':
            args.robot_given = args.robot is not None
            args.robot = args.robot or 'arm3'
        if args.verb == 'sysid' and args.kind == 'plan':
            return cmd_sysid_plan(args)
        ros = Ros(args.namespace)
        rc = 1
        try:
            rc = VERBS[args.verb](args, ros)
            return rc
        finally:
            if not ros.close():
                # The verb has answered; a middleware teardown that hangs must not hold the
                # operator's terminal (ros.py CLOSE_WAIT_S). Exit without the interpreter's
                # own teardown, which would wait on the same middleware.
                print(f'simreal {args.verb}: ROS teardown did not finish within '
                      f'{CLOSE_WAIT_S:g} s; exiting anyway', file=sys.stderr)
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(rc if isinstance(rc, int) else 1)
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

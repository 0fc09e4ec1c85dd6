"""The end-to-end demo on the embedded robot (the README's `make demo`).

    python -m simreal_ros.demo                 # arm3, a few minutes, results/demo-<time>/
    python -m simreal_ros.demo --fast          # fewer experiments (one joint per SysID node)
    simreal demo

Steps: bring up the graph (`simreal_ros.graph`, the same one `simreal up` and deploy.launch.py
start); run the SysID experiments through safety_supervisor; push the results to sim_bridge
and show the reality gap before and after; the bring-up (`safety/go_default`: slowly to the
default pose, held there); enable the policy, which takes over at the held pose, and promote
it through every speed stage (dwell times shortened for the demo); an e-stop and a reset; a
clean shutdown. A step whose node does not exist in this installation is reported as
`skipped: <node> not available`, never faked. The session is recorded to MCAP; the results
folder holds the summary (JSON, HTML), plots, recordings, SysID results and the node logs.

DDS stays on this machine (ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST) in a private domain
(ROS_DOMAIN_ID, default 71 unless set). Nothing is published on hardware/command but by
safety_supervisor.
"""
import argparse
from datetime import datetime
import html
import json
import os
from pathlib import Path
import sys
import time
import traceback

LATER = ('friction_id', 'inertia_id', 'latency_id', 'sim_bridge')
DEMO_DWELL_S = 1.5         # stage dwell for the demo (the robot files say 5 s)
DEFAULT_DOMAIN = '71'


RETRY_ON = ('e-stop', 'joint_states stale')   # SysID stops worth one more attempt


class Skip(Exception):
    """A step that cannot run here, with the reason shown in the summary."""


class Demo:
    """Run the steps in order, print progress, keep the summary rows."""

    def __init__(self, robot, out, fast=False, rtf=1.0):
        self.robot = robot
        self.rtf = rtf
        self.out = Path(out)
        self.fast = fast
        self.rows = []            # (step, status, detail, seconds)
        self.facts = {}
        self.procs = []
        self.ros = None
        self.recorder = None
        self.graph = None
        self.later = []
        self.t0 = time.monotonic()
        self.log = open(self.out / 'demo.log', 'w')

    # -- plumbing -----------------------------------------------------------------------
    def say(self, text):
        line = f'[{time.monotonic() - self.t0:6.1f} s] {text}'
        print(line, flush=True)
        self.log.write(line + '\n')
        self.log.flush()

    def step(self, number, total, title, func):
        from simreal_ros.client.ros import Missing
        self.say(f'({number}/{total}) {title} ...')
        start = time.monotonic()
        try:
            detail = func() or 'ok'
            status = 'ok'
        except Skip as exc:
            status, detail = 'skipped', str(exc)
        except Missing as exc:
            status, detail = 'failed', str(exc)
        except Exception as exc:  # noqa: BLE001 - the summary says it; the log has the trace
            status, detail = 'failed', f'{type(exc).__name__}: {exc}'
            self.log.write(traceback.format_exc())
        seconds = time.monotonic() - start
        self.rows.append((title, status, detail, seconds))
        self.say(f'    {status}: {detail} ({seconds:.1f} s)')
        return status == 'ok'

    def state(self, timeout=5.0):
        from simreal_ros.client.ros import safety_state
        return safety_state(self.ros, timeout)

    def wait(self, predicate, timeout, what):
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f'timed out after {timeout:g} s waiting for {what}')
            time.sleep(0.05)

    # -- steps --------------------------------------------------------------------------
    def bring_up(self):
        from simreal_ros.client.processes import start_graph
        from simreal_ros.client.ros import Ros
        from simreal_ros.graph import build_graph, load_node_params
        policy = self.make_policy()
        overrides = {
            'policy_runner': {'policy_path': str(policy)},
            'safety_supervisor': {'stage_dwell_s': [DEMO_DWELL_S], 'resume_stage': False,
                                  'stage_file': str(self.out / 'stages.json')},
        }
        probe = build_graph(self.robot, sysid=True, check_files=False)
        for name in ('friction_id', 'inertia_id', 'latency_id'):
            if name in probe.names():
                given = load_node_params(probe.config_path, name)
                over = {'results_dir': str(self.out / 'sysid')}
                if self.fast and given.get('joints'):
                    over['joints'] = list(given['joints'])[-1:]
                overrides[name] = over
        if 'sim_bridge' in probe.names():
            overrides['sim_bridge'] = {'recordings_dir': str(self.out / 'sysid'),
                                       'export_dir': str(self.out / 'export')}
        sim_time = self.rtf != 1.0
        if sim_time:   # every node on sim_robot's /clock: a slow machine slows the clock
            overrides.setdefault('sim_robot', {})['real_time_factor'] = self.rtf
        self.graph = build_graph(self.robot, sysid=True, overrides=overrides,
                                 use_sim_time=sim_time)
        for line in self.graph.describe():
            self.say('    ' + line)
        if not self.graph.node('safety_supervisor'):
            raise RuntimeError('safety_supervisor is not available: nothing may reach the robot '
                               'without it')
        logs = self.out / 'logs'
        logs.mkdir(exist_ok=True)
        # The SysID nodes and sim_bridge start when their step comes: on a 2-core machine
        # fewer processes during the stage promotion leave the control loops their CPU.
        self.later = [n for n in self.graph.names() if n in LATER]
        first = [n for n in self.graph.names() if n not in LATER]
        self.procs = start_graph(self.graph, log_dir=logs, quiet=True, only=first)
        self.ros = Ros(self.graph.namespace, use_sim_time=sim_time)
        from simreal_ros.record import SessionRecorder
        self.recorder = SessionRecorder(self.ros.node, self.out / 'session.mcap',
                                        self.graph.namespace)
        names = first
        self.wait(lambda: self._all_up(names), 120, f'nodes {names} to come up')
        self.wait(lambda: self.state(1.0).get('output') != 'waiting', 60,
                  'joint_states at safety_supervisor')
        later = f'; {", ".join(self.later)} start with the SysID step' if self.later else ''
        return (f'{len(names)} nodes up ({", ".join(names)}){later}; logs in {logs}; '
                f'recording {self.out / "session.mcap"}')

    def start_later(self):
        """Start the SysID nodes and sim_bridge (same graph, same overlay) and wait for them."""
        from simreal_ros.client.processes import start_graph
        if not self.later:
            return
        names, self.later = self.later, []
        self.procs += start_graph(self.graph, log_dir=self.out / 'logs', quiet=True, only=names)
        self.wait(lambda: self._all_up(names), 120, f'nodes {names} to come up')
        self.say(f'    started {", ".join(names)}')

    def _all_up(self, names):
        dead = [s.name for s, p, _ in self.procs if p.poll() is not None]
        if dead:
            raise RuntimeError(f'{dead} exited at start-up: see {self.out / "logs"}')
        present = {n.split('/')[-1] for n in self.ros.node_names()}
        return all(n in present for n in names)

    def make_policy(self):
        """The arm3 stand-in policy (generated: nothing binary ships), or the robot's own."""
        from simreal_ros.core.config import load_node_params, robot_config_path
        path = self.out / 'policy' / f'{self.robot}_policy.onnx'
        if Path(self.robot).stem != 'arm3':
            params = load_node_params(robot_config_path(self.robot), 'policy_runner')
            return params.get('policy_path', '')
        path.parent.mkdir(parents=True, exist_ok=True)
        generator = _onnx_policies()
        if generator is not None:
            return generator.arm3(str(path))
        return _arm3_policy(path)

    def sysid(self):
        nodes = [n for n in ('friction_id', 'inertia_id', 'latency_id')
                 if self.graph.node(n)]
        if not nodes:
            raise Skip('friction_id, inertia_id, latency_id not available')
        self.start_later()
        self.facts['sysid'] = {}
        if self.graph.node('policy_runner'):
            self.ros.set_bool('policy_runner/enable', False, 'policy_runner')
        # Each experiment writes its own raw MCAP; the session recording pauses meanwhile so
        # that its 500 Hz subscriptions do not take the CPU the experiments' timing needs.
        if self.recorder is not None:
            self.recorder.pause()
            self.say('    session recording paused (each experiment records its own MCAP)')
        try:
            return self._sysid_runs(nodes)
        finally:
            if self.recorder is not None:
                self.recorder.resume()

    def _sysid_runs(self, nodes):
        from simreal_ros.client import sysid as sysid_client
        lines, ok = [], True
        for node in nodes:
            result = None
            for attempt in (1, 2):
                result = sysid_client.run(self.ros, node, timeout=600,
                                          progress=_progress(self.say, node))
                # An interruption (an e-stop, or joint_states late because the machine was
                # busy) stops an experiment with no result; it is run once more. A result, good
                # or failed, stands.
                message = str(result.get('message', ''))
                if attempt == 2 or result.get('ok') or not any(k in message for k in RETRY_ON):
                    break
                self.say(f'    {node}: {message}; retrying once')
            self.facts['sysid'][node] = result
            ok &= bool(result.get('ok'))
            for line in sysid_client.format_result(result):
                self.say('   ' + line)
            lines.append(f'{node} {"ok" if result.get("ok") else "failed"}')
        missing = [n for n in ('friction_id', 'inertia_id', 'latency_id') if n not in nodes]
        if missing:
            lines.append(f'skipped: {", ".join(missing)} not available')
        detail = '; '.join(lines) + f'; results in {self.out / "sysid"}'
        if not ok:
            raise RuntimeError(detail)
        return detail

    def bridge_push(self):
        from simreal_ros.client import sysid as sysid_client
        if not self.graph.node('sim_bridge'):
            raise Skip('sim_bridge not available')
        self.start_later()
        results = [r for r in (self.facts.get('sysid') or {}).values() if r.get('results')]
        if not results:
            raise RuntimeError('no SysID results to push (see the SysID step)')
        values = sysid_client.bridge_parameters(results)
        done, refused = sysid_client.push_to_bridge(self.ros, values)
        self.facts['bridge_push'] = {'set': {k: values[k] for k in done}, 'refused': refused}
        for name in done:
            if not name.endswith('_half_width'):
                self.say(f'    sim_bridge {name} = {values[name]:.5g}')
        if refused:
            raise RuntimeError(f'sim_bridge refused {refused}')
        return f'{len(done)} parameters set on sim_bridge'

    def bridge_gap(self):
        from simreal_ros.client import sysid as sysid_client
        if not self.graph.node('sim_bridge'):
            raise Skip('sim_bridge not available')
        self.start_later()
        gap = sysid_client.evaluate_gap(self.ros)
        self.facts['gap'] = {k: v for k, v in gap.items() if k not in ('nominal', 'identified')}
        for line in sysid_client.format_gap(gap):
            self.say('   ' + line)
        if 'gap_nominal' not in gap:
            raise RuntimeError(gap.get('message', 'no gap result'))
        return (f'gap before {100 * gap["gap_nominal"]:.2f} % -> after '
                f'{100 * gap["gap_identified"]:.2f} % NRMSE ({gap.get("message")})')

    def bridge_export(self):
        from simreal_ros.client import sysid as sysid_client
        if not self.graph.node('sim_bridge'):
            raise Skip('sim_bridge not available')
        self.start_later()
        result = sysid_client.bridge_call(self.ros, 'export')
        self.facts['export'] = result
        if not result.get('ok'):
            raise RuntimeError(result.get('message', str(result)))
        return f'exported to {self.out / "export"}'

    def go_default(self):
        """The bring-up every deployment starts with: the policy source selected (nothing
        forwarded), then safety/go_default to the default pose, held until the policy comes."""
        from simreal_ros.client import sysid as sysid_client
        from simreal_ros.client.ros import go_default
        if self.graph.node('policy_runner'):
            self.ros.set_bool('policy_runner/enable', False, 'policy_runner')
        ok, message = sysid_client.select_source(self.ros, 'policy')
        if not ok:
            raise RuntimeError(f'safety_supervisor: {message}')
        ok, message, bringup = go_default(self.ros, progress=_progress(self.say, 'go_default'))
        self.facts['bringup'] = bringup
        if not ok:
            raise RuntimeError(message)
        peak = max((bringup.get('peak_speed_rad_s') or {0: 0.0}).values())
        return (f'at the default pose in {bringup.get("duration_s")} s (planned peak '
                f'{peak:.2f} rad/s, limit {min(bringup["speed_limit_rad_s"].values()):.2f} '
                f'rad/s), max error {bringup.get("max_error_rad")} rad; holding it for the '
                'policy')

    def policy_stages(self):
        from simreal_ros.client import sysid as sysid_client
        if not self.graph.node('policy_runner'):
            raise Skip(dict(self.graph.skipped).get('policy_runner', 'policy_runner not '
                                                    'available'))
        ok, message = sysid_client.select_source(self.ros, 'policy')
        if not ok:
            raise RuntimeError(f'safety_supervisor: {message}')
        # Held at the default pose by the bring-up (previous step), the policy is admitted
        # through the reset checks and takes over there.
        resp = self.ros.set_bool('policy_runner/enable', True, 'policy_runner')
        if not resp.success:
            raise RuntimeError(resp.message)
        scales = self.state()['stage']['stages']
        reached, trips, refused = [], 0, ''
        deadline = time.monotonic() + 30 + 10 * len(scales) * DEMO_DWELL_S
        while time.monotonic() < deadline:
            s = self.state()
            stage = s['stage']
            if stage['stage_index'] == len(scales) - 1:
                break
            if s['estop']:
                trips += 1
                self.say(f'    e-stop during promotion ({s["estop_cause"]}): resetting')
                sysid_client.reset_until(self.ros)
                continue
            if s['output'] == 'forwarding' and stage['clean_for_s'] >= stage['dwell_needed_s']:
                resp = self.ros.trigger('safety/advance_stage', 'safety_supervisor')
                if resp.success:
                    reached.append(self.state()['stage']['stage'])
                    self.say(f'    stage {reached[-1]:.2f}: {resp.message}')
                    continue
                refused = resp.message   # e.g. the live reality gap not fresh yet
            time.sleep(0.1)   # the dwell runs on the supervisor's clock
        final = self.state()
        self.facts['stages'] = final['stage']
        if final['stage']['stage_index'] != len(scales) - 1:
            raise RuntimeError(f'reached stage {final["stage"]["stage"]} of {scales[-1]} '
                               f'({final.get("estop_cause") or final.get("safe_reason")}'
                               + (f'; last refusal: {refused}' if refused else '') + ')')
        return (f'stages {" -> ".join(f"{x:.2f}" for x in [scales[0]] + reached)} with '
                f'{DEMO_DWELL_S:g} s dwell; clipped outputs {final["clipped_outputs"]}, '
                f'unplanned e-stops {trips}')

    def estop_and_reset(self):
        from simreal_ros.client import sysid as sysid_client
        t0 = time.monotonic()
        resp = self.ros.trigger('safety/estop', 'safety_supervisor')
        latency = time.monotonic() - t0
        s = self.state()
        if not (resp.success and s['estop']):
            raise RuntimeError(f'e-stop did not latch: {resp.message}')
        self.say(f'    e-stop latched in {latency * 1e3:.0f} ms (service round trip); output '
                 f'{s["output"]} ({s["safe_mode"]})')
        ok, message = sysid_client.reset_until(self.ros)
        if not ok:
            raise RuntimeError(message)
        after = self.state()
        self.facts['estop'] = {'service_round_trip_ms': round(latency * 1e3, 1),
                               'safe_mode': s['safe_mode'], 'reset': message}
        return (f'e-stop latched ({s["safe_mode"]}) in {latency * 1e3:.0f} ms round trip; '
                f'reset: {message}; stage after reset {after["stage"]["stage"]}')

    def shutdown(self):
        from simreal_ros.client.processes import stop_graph
        if self.ros is not None and self.graph.node('policy_runner'):
            try:
                self.ros.set_bool('policy_runner/enable', False, 'policy_runner')
                self.ros.trigger('safety/estop', 'safety_supervisor')
            except Exception as exc:  # noqa: BLE001 - shutting down regardless
                self.say(f'    (before shutdown: {exc})')
        counts = self.recorder.close() if self.recorder else {}
        self.recorder = None
        self.facts['recorded'] = counts
        if self.ros is not None:
            self.ros.close()
            self.ros = None
        codes = stop_graph(self.procs)
        self.procs = []
        self.facts['exit_codes'] = codes
        unclean = {n: c for n, c in codes.items() if c not in (0, -15)}
        detail = ('exit codes ' + ', '.join(f'{n} {c}' for n, c in codes.items())
                  + f'; recorded {sum(counts.values())} messages')
        if unclean:
            raise RuntimeError(f'not a clean exit: {unclean}; ' + detail)
        return detail

    # -- report -------------------------------------------------------------------------
    def report(self):
        plots = _plots(self.out)
        summary = {'robot': self.robot, 'results': str(self.out),
                   'steps': [{'step': s, 'status': st, 'detail': d, 'seconds': round(t, 1)}
                             for s, st, d, t in self.rows],
                   'facts': _jsonable(self.facts), 'plots': plots}
        (self.out / 'summary.json').write_text(json.dumps(summary, indent=2))
        rows = ''.join(f'<tr class="{st}"><td>{html.escape(s)}</td><td>{st}</td>'
                       f'<td>{html.escape(d)}</td><td>{t:.1f}</td></tr>'
                       for s, st, d, t in self.rows)
        imgs = ''.join(f'<h2>{html.escape(p)}</h2><img src="{html.escape(p)}">' for p in plots)
        (self.out / 'report.html').write_text(
            '<!doctype html><meta charset="utf-8"><title>simreal_ros demo</title>'
            '<style>td{padding:2px 8px;border-bottom:1px solid #ccc}.ok{color:#060}'
            '.failed{color:#a00}.skipped{color:#777}</style>'
            f'<h1>simreal_ros demo: {html.escape(self.robot)}</h1><table>'
            '<tr><th>step</th><th>status</th><th>detail</th><th>s</th></tr>'
            f'{rows}</table>{imgs}<h2>facts</h2><pre>'
            f'{html.escape(json.dumps(_jsonable(self.facts), indent=2))}</pre>')
        width = max(len(s) for s, *_ in self.rows)
        print('\nsummary ' + '-' * 70)
        for s, st, d, t in self.rows:
            print(f'{s:<{width}}  {st:<7} {t:6.1f} s  {d[:110]}')
        print('-' * 78)
        print(f'results: {self.out} (report.html, summary.json, session.mcap, sysid/, logs/)')


def _progress(say, node):
    last = [-1]

    def show(fraction, text=''):
        percent = int(fraction * 100)
        if percent >= last[0] + 10 or fraction >= 1.0 and last[0] < 100:
            last[0] = percent
            say(f'    {node}: {"#" * (percent // 10):<10} {percent:3d} % {text}')
    return show


def _onnx_policies():
    """scripts/onnx_policies.py of the source checkout, or None when installed without it."""
    import importlib.util
    from simreal_ros.core.config import source_root
    root = source_root()
    if root is None or not (root / 'scripts' / 'onnx_policies.py').is_file():
        return None
    spec = importlib.util.spec_from_file_location('onnx_policies',
                                                  root / 'scripts' / 'onnx_policies.py')
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _arm3_policy(path):
    """A deterministic 12 -> 3 tanh MLP with onnx.helper (ir_version 9), as in the scripts."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(3)
    w0 = (rng.standard_normal((12, 32)) / np.sqrt(12)).astype(np.float32)
    w1 = (rng.standard_normal((32, 3)) * 0.1 / np.sqrt(32)).astype(np.float32)
    inits = [numpy_helper.from_array(w0, 'w0'), numpy_helper.from_array(w1, 'w1'),
             numpy_helper.from_array(np.zeros(32, np.float32), 'b0'),
             numpy_helper.from_array(np.zeros(3, np.float32), 'b1')]
    nodes = [helper.make_node('Gemm', ['obs', 'w0', 'b0'], ['z0']),
             helper.make_node('Tanh', ['z0'], ['a0']),
             helper.make_node('Gemm', ['a0', 'w1', 'b1'], ['actions'])]
    graph = helper.make_graph(
        nodes, 'arm3', [helper.make_tensor_value_info('obs', TensorProto.FLOAT, [1, 12])],
        [helper.make_tensor_value_info('actions', TensorProto.FLOAT, [1, 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)])
    model.ir_version = 9
    for key, value in (('joint_names', 'shoulder_yaw,shoulder_pitch,elbow_pitch'),
                       ('action_scale', '0.5')):
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(model, str(path))
    return str(path)


def joint_figure(t, names, q, tau):
    """Return the figure of joint positions and applied torques over the session.

    The lines stop where the recording paused (the SysID step): a straight segment across
    the pause would show motion that was never recorded.
    """
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    import numpy as np
    from simreal_ros.core.series import break_gaps
    t, q, tau = break_gaps(np.asarray(t) - t[0], q, tau)
    fig, axes = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for i, name in enumerate(names):
        axes[0].plot(t, q[:, i], label=name, lw=0.8)
        if tau.size:
            axes[1].plot(t, tau[:, i], label=name, lw=0.8)
    axes[0].set_ylabel('position (rad)')
    axes[1].set_ylabel('applied torque (N*m)')
    axes[1].set_xlabel('session time (s)')
    axes[0].legend(loc='upper right')
    fig.tight_layout()
    return fig


def _plots(out):
    """Joint positions and applied torques of the session (from the MCAP); [] without it."""
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
        from simreal_ros.record import read_joint_states
        t, names, q, _, tau = read_joint_states(out / 'session.mcap')
    except Exception:  # noqa: BLE001 - plots are optional; the MCAP is the data
        return []
    if len(t) < 2:
        return []
    fig = joint_figure(t, names, q, tau)
    fig.savefig(out / 'joint_states.png', dpi=90)
    plt.close(fig)
    return ['joint_states.png']


def _jsonable(value):
    return json.loads(json.dumps(value, default=str))


def main(argv=None):
    """Run the demo; exit 0 when no step failed (skipped steps are not failures)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--robot', default='arm3', help='robot config (default: arm3)')
    parser.add_argument('--fast', action='store_true', help='one joint per SysID experiment')
    parser.add_argument('--rtf', type=float, default=1.0,
                        help='real-time factor of sim_robot; != 1 puts every node on /clock '
                        '(for a loaded machine, e.g. 0.5)')
    parser.add_argument('--out', default='', help='results folder (default results/demo-<time>)')
    args = parser.parse_args(argv)
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    os.environ.setdefault('ROS_DOMAIN_ID', DEFAULT_DOMAIN)
    out = Path(args.out or Path('results') / f'demo-{datetime.now():%Y%m%d-%H%M%S}')
    out.mkdir(parents=True, exist_ok=True)
    print(f'simreal_ros demo on {args.robot}: ROS_DOMAIN_ID={os.environ["ROS_DOMAIN_ID"]}, '
          f'discovery {os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"]}, results in {out}. '
          'E-stop at any time: simreal estop', flush=True)
    demo = Demo(args.robot, out, fast=args.fast, rtf=args.rtf)
    # SysID runs first, as on a real robot (suspended, before any policy motion): its commands
    # have their own limits, which the policy's stage does not scale.
    steps = [
        ('bring up the graph', demo.bring_up),
        ('system identification (friction, inertia, latency)', demo.sysid),
        ('push results to sim_bridge', demo.bridge_push),
        ('reality gap before/after (nominal vs identified)', demo.bridge_gap),
        ('export the identified model', demo.bridge_export),
        ('bring-up: slowly to the default pose, held (go_default)', demo.go_default),
        ('enable the policy, promote through every stage', demo.policy_stages),
        ('e-stop and reset', demo.estop_and_reset),
        ('shut down cleanly', demo.shutdown),
    ]
    try:
        for i, (title, func) in enumerate(steps, 1):
            if i == 1:
                if not demo.step(i, len(steps), title, func):
                    demo.step(len(steps), len(steps), steps[-1][0], steps[-1][1])
                    break
            else:
                demo.step(i, len(steps), title, func)
    except KeyboardInterrupt:
        print('\ninterrupted: stopping the graph', flush=True)
        demo.rows.append(('interrupted', 'failed', 'Ctrl-C', 0.0))
        if demo.procs:
            demo.step(len(steps), len(steps), steps[-1][0], steps[-1][1])
    finally:
        if demo.procs:   # never leave nodes behind
            from simreal_ros.client.processes import stop_graph
            stop_graph(demo.procs)
    demo.report()
    return 1 if any(st == 'failed' for _, st, _, _ in demo.rows) else 0


if __name__ == '__main__':
    sys.exit(main())

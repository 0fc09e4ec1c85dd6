"""Rehearse on the vendor's own simulator: unitree_mujoco behind unitree_bridge, the gantry
sequence of docs/real_robot.md, then a walk.

    python -m simreal_ros.client.rehearsal                       # the G1 29-dof, 20 s at 0.5 m/s
    python -m simreal_ros.client.rehearsal --robot my_g1.yaml --walk-s 10
    python -m simreal_ros.client.rehearsal --robot my_g1.yaml --simulator-peer  # a file
                                                   # written for the robot (simreal import)

One command: the vendor's simulator (simreal_ros/tools/vendor_rehearsal.py: headless, stepped
at a fixed real-time factor, publishing /clock) and the graph unitree_bridge +
safety_supervisor + policy_runner, every node on the simulator's clock (use_sim_time), the
robot side on a private CycloneDDS domain on loopback. Then the sequence users follow on the
robot (`GANTRY_STEPS`, written once here; docs/real_robot.md, the bench and the test use it):

1. hanging on the vendor's elastic band, wait for the bridge to accept LowState_ and the
   supervisor to receive joint_states;
2. `go-default` (safety/go_default): the bring-up to the policy's default pose, held;
3. lower the band until the feet carry most of the weight (gantry/lower);
4. enable the policy (policy_runner/enable): it stands;
5. release the band (gantry/release);
6. walk: cmd_vel for a span of simulated time; distance, falls, rates.

A robot file written for the robot (`simreal import --driver unitree`: `unitree.peer: robot`,
your network interface) rehearses unchanged with `--simulator-peer`: unitree_bridge is then
told the vendor simulator is on the other side (it fills no CRC), on `lo`, LowCmd_ at 250 Hz
(`SIMULATOR_PEER`). Without it such a file is refused before anything starts, with the reason.

The last line printed is a JSON summary.
"""
import argparse
import json
import os
from pathlib import Path
import signal
import subprocess
import sys
import threading
import time

from simreal_ros.client.rig import REPO, NodeProcess, loopback_udp_env, process_env, wait_for
from simreal_ros.core.config import ConfigError, load_node_params, robot_config_path

ROBOT = (REPO or Path('.')) / 'config' / 'robots' / 'g1_29dof_unitree.yaml'
GRAPH = ('unitree_bridge', 'safety_supervisor', 'policy_runner')
GANTRY_STEPS = ('hanging: LowState_ accepted, joint_states at the supervisor',
                'go-default on the band', 'lower until the feet carry the robot',
                'enable the policy', 'release the band')


# unitree_bridge's parameters for the vendor simulator, over a file written for the robot: the
# simulator fills no CRC (peer simulator accepts that, counted), it listens on loopback, and it
# decodes each LowCmd_ in Python (250 Hz, as config/robots/g1_29dof_unitree.yaml says why).
SIMULATOR_PEER = {'unitree.peer': 'simulator', 'unitree.network_interface': 'lo',
                  'rate_hz': 250.0}


def bridge_overrides(robot, simulator_peer=False):
    """Return unitree_bridge's overrides for a rehearsal of `robot`; refuse a file that cannot
    rehearse (ConfigError naming the file, the parameter and what to do)."""
    path = robot_config_path(robot)
    params = load_node_params(path, 'unitree_bridge')
    if not params.get('motor_indices'):
        raise ConfigError(f'{path}: no unitree_bridge section (motor_indices): the rehearsal '
                          'drives the vendor simulator through unitree_bridge; write it with '
                          '`simreal import ... --driver unitree`')
    peer = params.get('unitree.peer', 'robot')
    if peer != 'simulator' and not simulator_peer:
        raise ConfigError(f'{path}: unitree_bridge unitree.peer is {peer!r}: written for the '
                          'robot (the bridge refuses a LowState_ without CRC, which the vendor '
                          'simulator sends). Rehearse it unchanged with --simulator-peer')
    return dict(SIMULATOR_PEER) if simulator_peer else {}


def vendor_domain(environ=None):
    """The robot side's private CycloneDDS domain: the ROS domain + 100 (mod 233), as
    deploy.graph.rehearsal_wire (never the robot's 0)."""
    env = os.environ if environ is None else environ
    return (int(env.get('ROS_DOMAIN_ID', '0') or 0) + 100) % 233


class Rehearsal:
    """The vendor simulator and the graph as processes, an observer node in this process."""

    def __init__(self, robot=ROBOT, rtf=0.1, domain=None, fill_crc=False, band=True,
                 sim_args=(), node_params=None, log=print, graph=GRAPH):
        self.robot = robot_config_path(robot)
        self.domain = vendor_domain() if domain is None else int(domain)
        self.rtf = rtf
        self.log = log
        self.env = loopback_udp_env()
        cmd = [sys.executable, '-m', 'simreal_ros.tools.vendor_rehearsal', '--domain',
               str(self.domain), '--rtf', str(rtf)] + (['--fill-crc'] if fill_crc else [])
        cmd += [] if band else ['--no-band']
        cmd += list(sim_args)
        self.sim_log = f'/tmp/simreal-vendor-sim-{os.getpid()}-{time.time_ns()}.log'
        self._sim_out = open(self.sim_log, 'w+')
        self.sim = subprocess.Popen(cmd, stdout=self._sim_out, stderr=subprocess.STDOUT,
                                    cwd=REPO, env=process_env(dict(
                                        self.env, SDL_VIDEODRIVER='dummy',
                                        SDL_AUDIODRIVER='dummy')))
        self.procs = {}
        params = {'use_sim_time': True}
        extra = node_params or {}
        for name in graph:
            p = dict(params, **extra.get(name, {}))
            if name == 'unitree_bridge':
                p['unitree.domain_id'] = self.domain
                p.setdefault('command_publishers', ['safety_supervisor'])
            self.procs[name] = NodeProcess(name, self.robot, p, env=self.env)
        self._observe()

    # -- observation -------------------------------------------------------------------------
    def _observe(self):
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.parameter import Parameter
        from rclpy.qos import QoSDurabilityPolicy, QoSProfile
        from std_msgs.msg import String
        from geometry_msgs.msg import Twist
        self.node = rclpy.create_node(
            f'rehearsal_{os.getpid()}',
            parameter_overrides=[Parameter('use_sim_time', value=True)])
        latched = QoSProfile(depth=1, durability=QoSDurabilityPolicy.TRANSIENT_LOCAL)
        self.sim_state, self.safety, self.bridge_diag = {}, {}, {}
        self.trace = []
        self.driver = {}
        self.node.create_subscription(String, 'vendor_sim/state',
                                      lambda m: self._set('sim_state', m.data), latched)
        self.node.create_subscription(String, 'safety/state',
                                      lambda m: self._set('safety', m.data), latched)
        self.node.create_subscription(String, 'driver/state',
                                      lambda m: self._set('driver', m.data), latched)
        self.node.create_subscription(DiagnosticArray, '/diagnostics', self._on_diag, 50)
        self.pub_cmd_vel = self.node.create_publisher(Twist, 'cmd_vel', 10)
        self.pub_fault = self.node.create_publisher(String, 'vendor_sim/fault', 10)
        self.cmd_vel = None
        self._stop = threading.Event()
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        self._spin = threading.Thread(target=self._spin_loop, daemon=True)
        self._spin.start()
        self._teleop = threading.Thread(target=self._teleop_loop, daemon=True)
        self._teleop.start()

    def _set(self, key, data):
        setattr(self, key, json.loads(data))
        if key == 'sim_state' and self.trace is not None:
            self.trace.append(getattr(self, key))

    def _on_diag(self, msg):
        for status in msg.status:
            if 'unitree_bridge' in status.name:
                self.bridge_diag = dict({kv.key: kv.value for kv in status.values},
                                        message=status.message, level=int.from_bytes(
                                            bytes(status.level), 'little')
                                        if isinstance(status.level, bytes)
                                        else int(status.level))

    def _spin_loop(self):
        while not self._stop.is_set():
            self.executor.spin_once(timeout_sec=0.05)

    def _teleop_loop(self):
        from geometry_msgs.msg import Twist
        while not self._stop.is_set():
            if self.cmd_vel is not None:
                msg = Twist()
                msg.linear.x, msg.linear.y, msg.angular.z = self.cmd_vel
                self.pub_cmd_vel.publish(msg)
            self._stop.wait(0.1)   # an operator's teleop rate (cmd_vel_timeout_s 0.5 s)

    def call(self, srv_type, name, request, timeout=30.0):
        client = self.node.create_client(srv_type, name)
        try:
            if not client.wait_for_service(timeout_sec=timeout):
                raise RuntimeError(f'service {name} not found within {timeout:g} s')
            future = client.call_async(request)
            wait_for(future.done, timeout, what=f'an answer from {name}')
            return future.result()
        finally:
            self.node.destroy_client(client)

    def trigger(self, name, timeout=30.0):
        from std_srvs.srv import Trigger
        return self.call(Trigger, name, Trigger.Request(), timeout)

    def fault(self, text):
        from std_msgs.msg import String
        self.pub_fault.publish(String(data=text))

    def sim_time(self):
        return float(self.sim_state.get('sim_time') or 0.0)

    def wait_sim(self, seconds, timeout=None):
        """Wait until `seconds` of simulated time have passed (wall timeout from the rtf)."""
        end = self.sim_time() + seconds
        limit = timeout if timeout is not None else 30.0 + 4.0 * seconds / max(self.rtf, 0.05)
        wait_for(lambda: self.sim_time() >= end or self.sim.poll() is not None, limit,
                 interval=0.05, what=f'{seconds:g} s of simulated time')

    # -- the gantry sequence ------------------------------------------------------------------
    def gantry_sequence(self, timeout=240.0):
        """docs/real_robot.md's bring-up on the vendor simulator (GANTRY_STEPS); returns the
        simulated time each step finished. Raises RuntimeError naming the step that failed."""
        from std_srvs.srv import SetBool
        done = {}
        self.log(f'1/5 {GANTRY_STEPS[0]}')
        wait_for(lambda: self.sim_state.get('band') in ('holding', 'off')
                 or self.sim.poll() is not None, timeout, interval=0.1,
                 what='the vendor simulator (vendor_sim/state)')
        if self.sim.poll() is not None:
            raise RuntimeError('the vendor simulator did not start')
        wait_for(lambda: int(self.bridge_diag.get('lowstate', 0) or 0) > 0, timeout,
                 interval=0.1, what='unitree_bridge accepting LowState_ '
                 f'({self.bridge_diag.get("message", "no diagnostics yet")})')
        wait_for(lambda: self.safety.get('output') not in (None, 'waiting'), timeout,
                 interval=0.1, what='safety_supervisor receiving joint_states')
        # As on the robot: a limp robot swinging on its hoist may trip the supervisor before
        # the bring-up (a wrist past trip_velocity); the operator resets once, counted.
        self.wait_sim(0.5)
        self.resets = []
        if self.safety.get('estop'):
            self.resets.append(self.safety.get('estop_cause'))
            resp = self.trigger('safety/reset')
            self.log(f'   e-stop while hanging ({self.resets[-1]}): reset: {resp.message}')
            wait_for(lambda: not self.safety.get('estop'), timeout, interval=0.05,
                     what='the e-stop reset')
        done['hanging'] = self.sim_time()
        self.log(f'2/5 {GANTRY_STEPS[1]}')
        # Swinging on the band, damped, the arms need a moment to come to rest: the
        # supervisor refuses the bring-up while joints move; asked again, as an operator would.
        deadline = time.monotonic() + timeout
        self.go_default_refusals = []
        while True:
            resp = self.trigger('safety/go_default')
            if resp.success:
                break
            self.go_default_refusals.append(resp.message)
            if 'still move' not in resp.message or time.monotonic() > deadline:
                raise RuntimeError(f'go-default refused: {resp.message}')
            self.wait_sim(0.5)
        wait_for(lambda: (self.safety.get('bringup') or {}).get('phase') in ('holding', 'done')
                 or self.safety.get('estop'), timeout, interval=0.1,
                 what='the bring-up to the default pose')
        if self.safety.get('estop'):
            raise RuntimeError(f'e-stop during go-default: {self.safety.get("estop_cause")}')
        done['go_default'] = self.sim_time()
        self.log(f'3/5 {GANTRY_STEPS[2]}')
        resp = self.trigger('gantry/lower')
        if not resp.success:
            raise RuntimeError(f'gantry/lower: {resp.message}')
        wait_for(lambda: self.sim_state.get('band') == 'grounded', timeout, interval=0.1,
                 what='the feet carrying the robot')
        done['lowered'] = self.sim_time()
        self.log(f'4/5 {GANTRY_STEPS[3]}')
        resp = self.call(SetBool, 'policy_runner/enable', SetBool.Request(data=True))
        if not resp.success:
            raise RuntimeError(f'policy_runner/enable: {resp.message}')
        wait_for(lambda: self.safety.get('output') == 'forwarding' or self.safety.get('estop'),
                 timeout, interval=0.05, what='the supervisor forwarding the policy')
        if self.safety.get('estop'):
            raise RuntimeError(f'e-stop at enable: {self.safety.get("estop_cause")}')
        self.wait_sim(0.5)     # standing on the policy, still on the band
        done['enabled'] = self.sim_time()
        self.log(f'5/5 {GANTRY_STEPS[4]}')
        resp = self.trigger('gantry/release')
        if not resp.success:
            raise RuntimeError(f'gantry/release: {resp.message}')
        wait_for(lambda: self.sim_state.get('band') == 'released', timeout, interval=0.05,
                 what='the band released')
        done['released'] = self.sim_time()
        return done

    def walk(self, vx=0.5, seconds=20.0):
        """cmd_vel (vx, 0, 0) for `seconds` of simulated time; return the walk's figures."""
        start = dict(self.sim_state)
        t0, wall0, cmd0 = self.sim_time(), time.monotonic(), int(start.get('lowcmd') or 0)
        self.cmd_vel = (float(vx), 0.0, 0.0)
        fallen_at = None
        try:
            end = t0 + seconds
            limit = 60.0 + 4.0 * seconds / max(self.rtf, 0.05)
            wait_for(lambda: self.sim_time() >= end or self.sim_state.get('fallen')
                     or self.sim.poll() is not None, limit, interval=0.05,
                     what=f'{seconds:g} s of simulated walking')
            if self.sim_state.get('fallen'):
                fallen_at = self.sim_time() - t0
        finally:
            self.cmd_vel = (0.0, 0.0, 0.0)
        state = dict(self.sim_state)
        wall = time.monotonic() - wall0
        b0, b1 = start['base'], state['base']
        return {'distance_m': round(((b1[0] - b0[0]) ** 2 + (b1[1] - b0[1]) ** 2) ** 0.5, 3),
                'forward_m': round(b1[0] - b0[0], 3), 'sim_s': round(self.sim_time() - t0, 3),
                'wall_s': round(wall, 2), 'fell': bool(state.get('fallen')),
                'fell_after_sim_s': fallen_at,
                'rtf_achieved': round((self.sim_time() - t0) / max(wall, 1e-9), 3),
                'lowcmd_rate_hz': round((int(state.get('lowcmd') or 0) - cmd0)
                                        / max(wall, 1e-9), 1)}

    def bridge_counters(self):
        d = self.bridge_diag
        keys = ('lowstate', 'lowstate_bad_crc', 'lowstate_crc_unset',
                'lowstate_mode_machine_unset', 'lowstate_tick_unset', 'lowstate_malformed',
                'lowcmd_sent', 'damping_sent', 'lowstate_writers_matched', 'peer', 'wire')
        return {k: d.get(k) for k in keys}

    def close(self):
        self.cmd_vel = None
        for proc in reversed(list(self.procs.values())):
            proc.stop()
        if self.sim.poll() is None:
            self.sim.send_signal(signal.SIGTERM)
            try:
                self.sim.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.sim.kill()
                self.sim.wait()
        self._stop.set()
        self._spin.join(timeout=2)
        self.node.destroy_node()
        self._sim_out.close()

    def sim_output(self, lines=40):
        with open(self.sim_log) as f:
            return '\n'.join(f.read().splitlines()[-lines:])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def rehearse(robot=ROBOT, vx=0.5, walk_s=20.0, rtf=0.1, log=print, **kwargs):
    """Start everything, run the gantry sequence and the walk; return the summary dict."""
    with Rehearsal(robot, rtf=rtf, log=log, **kwargs) as r:
        summary = {'robot': str(robot), 'rtf_target': rtf}
        try:
            summary['gantry'] = r.gantry_sequence()
            summary['resets_before_bringup'] = r.resets
            summary['go_default_refusals'] = len(r.go_default_refusals)
            summary.update(r.walk(vx, walk_s))
        except (RuntimeError, AssertionError) as exc:   # wait_for's timeout: AssertionError
            summary['error'] = str(exc)
            if r.sim.poll() is not None:
                summary['error'] += (f'; the vendor simulator exited ({r.sim.returncode}): '
                                     + r.sim_output(8))
            summary['fell'] = bool(r.sim_state.get('fallen'))
        summary['rtf_achieved_sim'] = r.sim_state.get('rtf_achieved')
        summary['simulator'] = {k: r.sim_state.get(k) for k in (
            'sim_time', 'steps', 'unpaced_steps', 'lowcmd', 'lowstate_written', 'stalls',
            'fill_crc')}
        trace = f'/tmp/simreal-rehearsal-{os.getpid()}-{time.time_ns()}.jsonl'
        with open(trace, 'w') as f:
            f.writelines(json.dumps(s) + '\n' for s in r.trace)
        summary['trace_file'] = trace
        summary['bridge'] = r.bridge_counters()
        summary['safety'] = {k: r.safety.get(k) for k in ('output', 'estop', 'estop_cause')}
        return summary


def main(argv=None):
    """Rehearse on the vendor simulator (module doc); the last line is JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--robot', default=str(ROBOT), help='robot file (unitree_bridge, '
                        'safety_supervisor and policy_runner sections)')
    parser.add_argument('--vx', type=float, default=0.5, help='cmd_vel forward (m/s)')
    parser.add_argument('--walk-s', type=float, default=20.0, help='walk (s, simulated)')
    parser.add_argument('--rtf', type=float, default=0.1, help="the simulator's real-time "
                        'factor (the graph follows /clock; one the computer cannot keep starves '
                        'the policy in simulated time: at 0.25 on 2 busy cores, 0.12 achieved, '
                        '2 walks of 3 fell; at 0.1, 3 of 3 walked)')
    parser.add_argument('--domain', type=int, default=None, help="the robot side's CycloneDDS "
                        'domain (default: ROS_DOMAIN_ID + 100, mod 233; never a robot\'s 0)')
    parser.add_argument('--simulator-peer', action='store_true', help='rehearse a robot file '
                        'written for the robot (simreal import --driver unitree) unchanged: '
                        'unitree_bridge with unitree.peer simulator, network_interface lo, '
                        'LowCmd_ at 250 Hz')
    args = parser.parse_args(argv)
    try:
        overrides = bridge_overrides(args.robot, args.simulator_peer)
    except ConfigError as exc:
        print(f'rehearsal: {exc}', file=sys.stderr)
        return 2
    import rclpy
    from simreal_ros.client.rig import environment
    with environment(loopback_udp_env()):
        rclpy.init()
        try:
            summary = rehearse(args.robot, args.vx, args.walk_s, args.rtf, domain=args.domain,
                               node_params={'unitree_bridge': overrides} if overrides else None)
        finally:
            rclpy.try_shutdown()
    print(json.dumps(summary), flush=True)
    return 0 if 'error' not in summary and not summary.get('fell') else 1


if __name__ == '__main__':
    raise SystemExit(main())

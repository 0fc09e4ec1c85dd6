#!/usr/bin/env python3
"""sim2sim for any robot: its policy through the full ROS path against a reference run.

    .venv/bin/python bench/sim2sim.py --robot ROBOT_FILE --reference TRACE.npz \
        [--policy ONNX] [--mode lockstep|realtime] [--steps N] [--supervisor on|off] \
        [--fall-z Z] [--cmd-vel VX VY WZ] [--tol 1e-4] [--plant nominal|file] [--strict]

sim_robot (the robot file's MuJoCo model), policy_runner (the robot file's policy section,
`--policy` replacing its policy_path) and safety_supervisor run as separate processes; the
reference is an NPZ trace of your training-side loop (docs/traces.md, "sim2sim"), read with
simreal_ros/core/trace.py.

lockstep: sim_robot advances one control period (1 / policy_runner.rate_hz) at a time and waits
for the command computed from the state it just published; the policy's raw actions, recovered
from the position targets on `policy/command` through the robot file's action mapping
((target - default_position) / action.scale, by joint name), are compared with the
reference's `actions` (both clipped by action.clip): `max_action_err`, the largest difference
over all steps and joints, and `first_step_over_tol`. The reference's first sample says how
the run starts: at t = 0, the policy acts on the initial state at once (sim_robot starts at
the reference's first joint positions); at t = k periods, the default pose is held for k
periods first (stamped 0, ..., sent by this bench), as unitree's deploy_mujoco holds one.
realtime: every node on the wall clock; this bench holds the default pose until the runner is
enabled, then reports `distance_m`, `min_base_z`, `fell`, `deadline_misses` after
`--duration` s.

The path is policy_runner -> policy/command -> safety_supervisor (one stage, 1.00) ->
hardware/command -> sim_robot; with `--supervisor off` sim_robot listens to policy/command
directly (remap). sim_robot runs the nominal model (`plant_enabled: false`: no hidden actuator
truth, no sensor noise) unless `--plant file`. The velocity command the reference was recorded
with is published on cmd_vel: `--cmd-vel`, else the trace's `cmd_vel`, else decoded from its
observations' velocity_command term, else none (the robot file's default). A floating base's
pose comes from sim_robot's ground truth (`sim/base_pose`); a fixed-base robot has none, and
its distance and fall fields are null. The last line printed is a JSON summary.
"""
import argparse
import json
from pathlib import Path
import sys
import tempfile
import threading
import time

REPO = Path(__file__).resolve().parents[1]
BENCH_NODE = 'sim2sim_bench'   # this process's node (it publishes the hold)
from simreal_ros.nodes.common import localhost_discovery  # noqa: E402
localhost_discovery(keep_choice=True)   # and ROS_LOCALHOST_ONLY=1 on Humble


def write_overlay(folder, sections):
    import yaml
    path = Path(folder) / 'overlay.yaml'
    path.write_text(yaml.safe_dump({k: {'ros__parameters': v} for k, v in sections.items()
                                    if v}))
    return ['--params-file', str(path)]


def parse_args(argv=None):
    from simreal_ros.core.sim2sim import DEFAULT_TOLERANCE, FALL_FRACTION
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog='The G1 with unitree\'s reference: bench/g1_sim2sim.py (this tool with the G1 '
        'paths). docs/traces.md, "sim2sim", says how to record a reference.')
    parser.add_argument('--robot', required=True,
                        help='robot file (config/robots/<name>.yaml, or a name there)')
    parser.add_argument('--policy', help='ONNX policy: replaces policy_runner\'s policy_path '
                        '(default: the robot file\'s; a stand-in such as arm3\'s or pantilt\'s is '
                        'made on first use)')
    parser.add_argument('--reference', help='reference trace (.npz, docs/traces.md) with '
                        '`actions`, one sample per policy step; required for lockstep')
    parser.add_argument('--mode', choices=('lockstep', 'realtime'), default='lockstep')
    parser.add_argument('--steps', type=int, help='lockstep policy steps (default: every step '
                        'of the reference)')
    parser.add_argument('--duration', type=float, default=20.0, help='realtime seconds')
    parser.add_argument('--supervisor', choices=('on', 'off'), default='on',
                        help='route through safety_supervisor at full stage (default), or let '
                        'sim_robot take policy/command directly')
    parser.add_argument('--rtf', type=float, default=1.0,
                        help='realtime mode: real_time_factor of sim_robot; other than 1 runs '
                        'every node on its /clock (use_sim_time), for loaded machines')
    parser.add_argument('--fall-z', type=float,
                        help='base height (m) below which a floating-base robot has fallen. '
                        f'Default: {FALL_FRACTION:g} x the reference\'s first base height '
                        '(its base_qpos / qpos), else x the model\'s initial base height; a '
                        'fixed-base robot (no free joint in the model) has no fall (null)')
    parser.add_argument('--cmd-vel', type=float, nargs=3, metavar=('VX', 'VY', 'WZ'),
                        help='velocity command the reference was recorded with, published on '
                        'cmd_vel (default: the trace\'s cmd_vel, else decoded from its obs, '
                        'else none)')
    parser.add_argument('--start', choices=('reference', 'model'), default='reference',
                        help='lockstep: where sim_robot starts when the reference does not say '
                        '(no sample at t = 0, no initial_q): the robot file\'s initial_position '
                        '(reference, default), or the MJCF\'s own pose, qpos0 (model: where '
                        'unitree\'s deploy_mujoco starts its reference_trace.npz)')
    parser.add_argument('--tol', type=float, default=DEFAULT_TOLERANCE,
                        help=f'lockstep: largest acceptable action error (default '
                        f'{DEFAULT_TOLERANCE:g})')
    parser.add_argument('--plant', choices=('nominal', 'file'), default='nominal',
                        help='sim_robot\'s physics: the nominal model (plant_enabled false, '
                        'default: as the reference) or the robot file\'s plant section (the '
                        'hidden actuator truth and sensor noise, if enabled there)')
    parser.add_argument('--process-priority', type=int, metavar='NICE',
                        help='process_priority of the three nodes (0: as this bench was '
                        'started, e.g. under nice). Default: 0 in lockstep (its result does not '
                        'depend on timing), the robot file\'s (sim_robot -10, ...) in realtime')
    parser.add_argument('--strict', action='store_true', help='lockstep: exit code 1 when '
                        'max_action_err > --tol or the stamps differ from the reference\'s')
    parser.add_argument('--save', help='write the lockstep actions and stamps to this .npz')
    return parser.parse_args(argv)


def prepare(args):
    """Read the robot file and the reference; return (setup, trace, plan dict)."""
    from simreal_ros.core import sim2sim
    from simreal_ros.core.trace import load_trace
    from simreal_ros.tools.reference_rollout import resolve_policy

    setup = sim2sim.Setup.read(args.robot, resolve_policy(args.robot, args.policy))
    trace = None
    plan = {'notes': []}
    if args.reference:
        trace = load_trace(args.reference, robot=setup.robot)
    elif args.mode == 'lockstep':
        raise sim2sim.ConfigError('lockstep needs --reference (a trace with actions)')
    if trace is not None and args.mode == 'lockstep':
        if trace.actions is None:
            raise sim2sim.ConfigError(f'{trace.path}: no `actions` (N, P): the lockstep '
                                      'compares the policy\'s actions with them')
        plan['hold'] = sim2sim.check_timing(trace, setup.period)
        start, source, notes = sim2sim.initial_position(setup, trace, plan['hold'])
        if start is None and args.start == 'model':
            from simreal_ros.core.plant import load_model
            model = load_model(setup.model_path)
            names = [str(n) for n in setup.sim.get('joint_names') or setup.joint_names]
            start = [float(model.qpos0[model.jnt_qposadr[model.joint(n).id]]) for n in names]
            source = 'the model\'s own pose (qpos0, --start model)'
        plan['initial_position'], plan['initial_source'] = start, source
        plan['notes'] += notes
        if args.supervisor == 'on':
            plan['notes'] += start_far_from_default(setup, start, plan['hold'])
    cmd, cmd_source = (sim2sim.reference_command(trace, setup.robot, args.cmd_vel)
                       if trace is not None else
                       (None if args.cmd_vel is None else list(args.cmd_vel),
                        '--cmd-vel' if args.cmd_vel is not None else 'none'))
    plan['cmd_vel'] = None if cmd is None else [float(v) for v in cmd]
    if cmd is not None:
        import numpy as np
        low = np.asarray(setup.runner.get('cmd_vel_min') or [-1.0] * 3, dtype=float)
        high = np.asarray(setup.runner.get('cmd_vel_max') or [1.0] * 3, dtype=float)
        if np.any(np.asarray(cmd) < low) or np.any(np.asarray(cmd) > high):
            plan['notes'].append(f'cmd_vel {plan["cmd_vel"]} is outside policy_runner\'s '
                                 f'cmd_vel_min/max {low.tolist()} / {high.tolist()}: it is '
                                 'clipped there')
    plan['cmd_vel_source'] = cmd_source
    plan['fall_z'], plan['fall_z_source'] = sim2sim.fall_height(setup, trace, args.fall_z)
    return setup, trace, plan


def start_far_from_default(setup, start, hold_periods):
    """Return a note when the first command (the held default pose) is further from the
    robot's starting pose than safety_supervisor's reset_tolerance: the supervisor then does
    not start forwarding, its safe output advances the lockstep without the policy and every
    later step differs (seen with pantilt: initial_position 0, default tilt 0.2 rad)."""
    import numpy as np
    from simreal_ros.core.config import load_node_params
    if hold_periods == 0 or setup.mode != 'position':
        return []
    names = [str(n) for n in setup.sim.get('joint_names') or setup.joint_names]
    if start is None:
        start = setup.sim.get('initial_position')
    if start is None or len(start) != len(names):
        return []
    at = dict(zip(names, np.asarray(start, dtype=float)))
    tol = float(load_node_params(setup.robot, 'safety_supervisor').get('reset_tolerance', 0.1))
    far = {n: round(float(abs(v - at[n])), 4) for n, v in zip(setup.command_names,
                                                             setup.hold_values()) if n in at
           and abs(float(v) - at[n]) > tol}
    if not far:
        return []
    return [f'the reference starts {far} rad from the default pose it holds first, more than '
            f'safety_supervisor reset_tolerance {tol:g}: the supervisor will not forward that '
            'hold, the lockstep runs on its safe output and the actions differ from the first '
            'step. Record the reference from the default pose (reference_rollout '
            '--initial-position, in sim_robot joint_names order) or run --supervisor off']


def main(argv=None):
    args = parse_args(argv)
    from simreal_ros.core.config import ConfigError
    try:
        setup, trace, plan = prepare(args)
    except ConfigError as exc:
        print(f'sim2sim: {exc}', file=sys.stderr)
        print(json.dumps({'error': str(exc)}))
        return 2

    import numpy as np
    import rclpy
    from builtin_interfaces.msg import Time as TimeMsg
    from geometry_msgs.msg import PoseStamped, Twist
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState
    from std_srvs.srv import SetBool

    from simreal_ros.client.rig import NodeProcess, wait_for
    from simreal_ros.nodes.common import COMMAND_QOS, SENSOR_SUB_QOS, stamp_to_sec

    lockstep = args.mode == 'lockstep'
    config = setup.robot
    period = setup.period
    steps = None
    if lockstep:
        steps = trace.n_samples if args.steps is None else min(args.steps, trace.n_samples)
        if args.steps is not None and args.steps > trace.n_samples:
            plan['notes'].append(f'--steps {args.steps}: the reference has '
                                 f'{trace.n_samples} steps')
    fall_z = args.fall_z_used = plan['fall_z']
    hold_names = list(setup.command_names)
    hold_values = setup.hold_values().tolist()
    hold_field = 'position' if setup.mode == 'position' else 'effort'

    supervisor = args.supervisor == 'on'
    if supervisor and not (REPO / 'simreal_ros' / 'nodes' / 'safety_supervisor.py').is_file():
        print('safety_supervisor not found: running without it', file=sys.stderr)
        supervisor = False
    tmp = tempfile.mkdtemp(prefix='sim2sim_')
    overlay_sections = {'sim_robot': {}, 'policy_runner': {'policy_path': str(setup.policy)},
                        'safety_supervisor': {}}
    if args.plant == 'nominal':
        overlay_sections['sim_robot']['plant_enabled'] = False
    # Two policy sources by design: this bench holds the default pose before policy_runner
    # takes over (see hold_topic), so both may publish it (docs/security.md).
    sources = ['policy_runner', BENCH_NODE]
    if supervisor:
        overlay_sections['safety_supervisor']['policy_publishers'] = sources
    else:
        overlay_sections['sim_robot']['command_publishers'] = sources
    if supervisor:   # full stage only, its stage record kept out of the user's ROS_HOME
        overlay_sections['safety_supervisor'].update(stages=[1.0], resume_stage=False,
                                                     stage_file=str(Path(tmp) / 'stages.json'))
    if lockstep:
        # command_timeout_s is also sim_robot's wall-clock watchdog on the supervisor's
        # heartbeat: a loaded machine that delays one heartbeat by 0.1 s made sim_robot drop
        # the command it waited for, and the lockstep stalled for ever (nothing re-sends it).
        overlay_sections['sim_robot'].update(lockstep=True, lockstep_period_s=period,
                                             lockstep_timeout_s=0.0, publish_clock=True,
                                             command_timeout_s=10.0)
        if plan.get('initial_position') is not None:
            overlay_sections['sim_robot']['initial_position'] = [
                float(v) for v in plan['initial_position']]
        # The reference holds one command: a lockstep run on a loaded machine may not see a
        # cmd_vel for cmd_vel_timeout_s (wall), which would zero it mid-run.
        overlay_sections['policy_runner'].update(lockstep=True, use_sim_time=True,
                                                 cmd_vel_timeout_s=3600.0)
        # On sim_robot's /clock, the supervisor forwards each command as it arrives (with its
        # stamp, which is what the lockstep waits for); its ticks re-send older stamps only.
        overlay_sections['safety_supervisor'].update(use_sim_time=True)
    else:
        # A gait phase starts at enable, as the reference's starts at t = 0.
        terms = setup.runner.get('observation.terms') or []
        phases = {term: {'origin': 'reset'} for term in terms
                  if str(setup.runner.get(f'observation.{term}.kind') or term) == 'gait_phase'}
        if phases:
            overlay_sections['policy_runner']['observation'] = phases
        if args.rtf != 1.0:
            overlay_sections['sim_robot'].update(real_time_factor=args.rtf, publish_clock=True)
            for name in ('policy_runner', 'safety_supervisor'):
                overlay_sections[name]['use_sim_time'] = True
    priority = args.process_priority
    if priority is None and lockstep:
        priority = 0   # timing does not matter in lockstep: the nodes run as this bench runs
    if priority is not None:
        for name in overlay_sections:
            overlay_sections[name]['process_priority'] = priority
    # Without the supervisor sim_robot takes policy/command itself.
    sim_remap = [] if supervisor else ['-r', 'hardware/command:=policy/command']
    hold_topic = 'policy/command'   # the hold goes the policy's way (through the supervisor)

    overlay = write_overlay(tmp, overlay_sections)
    from simreal_ros.nodes.common import prefer_udp_transport
    prefer_udp_transport()   # the nodes' transport (see there)
    rclpy.init()
    node = rclpy.create_node(BENCH_NODE)
    lock = threading.Lock()
    commands, poses, states = [], [], []
    # Every command is recorded: reliable and deep (COMMAND_QOS keeps only the last one).
    record_qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
    pose_qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.BEST_EFFORT)
    node.create_subscription(JointState, 'policy/command',
                             lambda m: commands.append(m), record_qos)
    node.create_subscription(PoseStamped, 'sim/base_pose', lambda m: poses.append(
        (stamp_to_sec(m.header.stamp), m.pose.position.x, m.pose.position.y,
         m.pose.position.z)), pose_qos)
    positions = {}   # joint_states stamp (ns) -> (names, positions): the states compared

    def on_state(msg):
        states.append(msg.header.stamp)
        if lockstep:
            positions[msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec] = (
                list(msg.name), list(msg.position))
    node.create_subscription(JointState, 'joint_states', on_state, SENSOR_SUB_QOS)
    hold = node.create_publisher(JointState, hold_topic, COMMAND_QOS)
    cmd_vel_pub = node.create_publisher(Twist, 'cmd_vel', 10)
    diag = {}   # policy_runner's diagnostics: cmd_vel_received before the enable

    sim_diag = {}   # sim_robot's counters: commands refused without the heartbeat, ...

    def on_diag(msg):
        for status in msg.status:
            if status.name == 'policy_runner: loop':
                diag.update({kv.key: kv.value for kv in status.values})
            elif status.name == 'sim_robot: physics':
                sim_diag.update({kv.key: kv.value for kv in status.values})
    from diagnostic_msgs.msg import DiagnosticArray
    node.create_subscription(DiagnosticArray, '/diagnostics', on_diag, 10)
    safety = []   # the supervisor's latched JSON state: its events explain a safe stop
    from std_msgs.msg import String
    from simreal_ros.nodes.common import LATCHED_QOS
    node.create_subscription(String, 'safety/state', lambda m: safety.append(m.data),
                             LATCHED_QOS)
    enable = node.create_client(SetBool, 'policy_runner/enable')
    from simreal_ros.client.rig import Spinner
    spinner = Spinner(node)

    def stamp_times():
        return [s.sec + s.nanosec * 1e-9 for s in list(states)]

    summary = {'mode': args.mode, 'supervisor': bool(supervisor),
               'robot': str(setup.robot), 'policy': str(setup.policy),
               'reference': str(trace.path) if trace is not None else None,
               'floating_base': setup.floating_base, 'plant': args.plant,
               'cmd_vel': plan['cmd_vel'], 'cmd_vel_source': plan['cmd_vel_source'],
               'fall_z': fall_z, 'fall_z_source': plan['fall_z_source']}
    procs = []
    code = 0
    try:
        stop_hold = threading.Event()
        stop_teleop = threading.Event()
        cmd = plan['cmd_vel']

        def teleop():
            # The reference's command, re-sent at 10 Hz as a teleop does: policy_runner takes
            # a cmd_vel older than cmd_vel_timeout_s as zero.
            while not stop_teleop.is_set():
                msg = Twist()
                msg.linear.x, msg.linear.y, msg.angular.z = cmd
                cmd_vel_pub.publish(msg)
                stop_teleop.wait(0.1)
        if cmd is not None:
            threading.Thread(target=teleop, daemon=True).start()
        # A robot that waits for its first command (hold_until_command, a legged robot) is
        # started by the policy's first command, not by a hold: a held pose topples it while
        # the bench waits to enable the policy.
        waits = bool(setup.sim.get('hold_until_command', False))
        summary['started_by'] = ('hold' if not lockstep and not supervisor and not waits
                                 else 'first command')
        if not lockstep and not supervisor and not waits:
            # Hold the default pose from before the robot exists, as the reference starts.

            def hold_loop():
                while not stop_hold.is_set():
                    # Stamped: the supervisor's watchdog takes an unstamped command as stale.
                    msg = JointState(name=hold_names, **{hold_field: hold_values})
                    msg.header.stamp = node.get_clock().now().to_msg()
                    hold.publish(msg)
                    stop_hold.wait(0.005)
            threading.Thread(target=hold_loop, daemon=True).start()
        procs.append(NodeProcess('sim_robot', params_file=config,
                                 extra_args=sim_remap + overlay))
        procs.append(NodeProcess('policy_runner', params_file=config, extra_args=overlay))
        if supervisor:
            procs.append(NodeProcess('safety_supervisor', params_file=config,
                                     extra_args=overlay))
        assert enable.wait_for_service(timeout_sec=60), procs[1].output()
        wait_for(lambda: states, 60, what='joint_states from sim_robot')
        if cmd is not None:
            wait_for(lambda: diag.get('cmd_vel_received', '0') != '0', 10,
                     what='policy_runner receiving cmd_vel')
        if not lockstep:
            summary['real_time_factor'] = args.rtf
        if lockstep:
            summary['hold_periods'] = plan['hold']
            summary['initial_position'] = plan['initial_source']
            t_first = float(trace.time[0])
            for k in range(plan['hold']):
                # The reference's first periods: hold the default pose, stamped with the state
                # it answers (t = k periods).
                msg = JointState(name=hold_names, **{hold_field: hold_values})
                if k:
                    msg.header.stamp = [s for s in list(states)
                                        if abs(s.sec + s.nanosec * 1e-9 - k * period) < 1e-6][0]
                else:
                    msg.header.stamp = TimeMsg()

                def stepped(k=k, msg=msg):
                    # Sent until the simulator steps: a reliable message reaches only the
                    # readers matched when it is sent, and one sent before the supervisor (or
                    # sim_robot) had matched this publisher was lost, the lockstep waiting for
                    # ever (seen in CI). Stamped with the state it answers, a repeat after the
                    # step does not advance the simulation.
                    if any(abs(t - (k + 1) * period) < 1e-6 for t in stamp_times()):
                        return True
                    hold.publish(msg)
                    return False
                try:
                    wait_for(stepped, 30, interval=0.1,
                             what=f'sim_robot to step to t = {(k + 1) * period:g}')
                except AssertionError:
                    for p in procs:
                        print(p.output()[-1500:], file=sys.stderr)
                    raise
            t0 = time.monotonic()
            future = enable.call_async(SetBool.Request(data=True))
            wait_for(future.done, 10, what='enable')
            t_last = float(trace.time[steps - 1])
            try:
                sim_t = run_lockstep(procs, stamp_times, t_last + period)
            except AssertionError as exc:
                summary['error'] = str(exc)
                code = 1
                sim_t = max(stamp_times())
                for p in procs:   # what each node said while it stalled
                    print(p.output()[-1500:], file=sys.stderr)
            wall = time.monotonic() - t0
            # sim_robot stepped past every step it ran: each of their commands reached it.
            ran = int(np.sum(trace.time[:steps] + period <= sim_t + 1e-6))

            def recorded():   # without the supervisor the hold went out on policy/command
                return [c for c in list(commands)
                        if t_first - 1e-6 <= stamp_to_sec(c.header.stamp) <= t_last + 1e-6]
            # This process records policy/command beside the path; on a loaded machine it may
            # lag (policy_runner keeps one sample per reader): a few seconds to catch up.
            deadline = time.monotonic() + 5.0
            while len(recorded()) < ran and time.monotonic() < deadline:
                time.sleep(0.05)
            cmds = recorded()
            if cmds and ran:
                summary.update(compare(setup, trace, cmds, poses, args, wall, ran, positions))
            else:   # the run's own error (run_lockstep's), else what is missing
                summary.setdefault('error', 'no policy command recorded' if not cmds else
                                   f'sim_robot ran no policy step (its time {sim_t:.3f} s)')
                code = 1
            if not cmds or (args.strict and (
                    summary['max_action_err'] > args.tol or ran < steps
                    or not summary['stamps_match_reference'])):
                code = 1
        else:
            if setup.floating_base:
                wait_for(lambda: len(poses) > 100, 30, what='base pose')
            else:
                wait_for(lambda: len(states) > 100, 30, what='joint_states')
            if supervisor:
                # sim_robot (hold_until_command) starts with the first forwarded command; a
                # held default pose alone topples a legged robot, so the policy's first command
                # is the one that starts it (the supervisor slews from the measured pose), as
                # the reference starts its policy at t = 0.
                wait_for(lambda: safety and json.loads(safety[-1]).get('output') != 'waiting',
                         30, what='safety_supervisor receiving joint_states')
            future = enable.call_async(SetBool.Request(data=True))
            wait_for(future.done, 10, what='enable')
            stop_hold.set()
            wait_for(lambda: commands, 10, what='first policy command')

            def clock():   # the robot's time: the base pose's stamps, else joint_states'
                return poses[-1][0] if setup.floating_base else stamp_times()[-1]
            start_t = clock()
            start_pose = poses[-1] if setup.floating_base else None
            try:
                wait_for(lambda: clock() - start_t > args.duration or any(
                    p.proc.poll() is not None for p in procs), args.duration / args.rtf + 60,
                    what='realtime run')
            except AssertionError:   # a frozen clock: the robot's time never ran the duration
                summary['error'] = (f'the robot\'s time advanced {clock() - start_t:.3g} s of '
                                    f'{args.duration:g} s (sim_robot waits for a forwarded '
                                    'command with hold_until_command)')
            summary.update(duration_s=args.duration, base_z_at_enable=None, distance_m=None,
                           min_base_z=None, fell=None)
            if setup.floating_base:
                with lock:
                    run = [p for p in poses if p[0] >= start_pose[0]]
                z = [p[3] for p in run]
                summary.update(
                    base_z_at_enable=float(start_pose[3]),
                    distance_m=float(np.hypot(run[-1][1] - start_pose[1],
                                              run[-1][2] - start_pose[2])),
                    min_base_z=float(min(z)),
                    fell=bool(min(z) < fall_z) if fall_z is not None else None)
            diag = read_runner_diagnostics(node, procs[1])
            summary.update(
                commands=len(commands),
                deadline_misses=int(diag.get('deadline_misses', -1)),
                stale_ticks=int(diag.get('stale_ticks', -1)),
                period_err_ms_p99=float(diag.get('period_err_ms_p99', 'nan')),
                inference_us_p99=float(diag.get('inference_us_p99', 'nan')))
        if plan['notes']:
            summary['notes'] = plan['notes']
        refused = {k: int(sim_diag[k]) for k in ('commands_rejected', 'commands_without_heartbeat',
                                                 'heartbeat_losses', 'lockstep_timeouts')
                   if sim_diag.get(k, '0') not in ('0', '')}
        if refused:   # (sim_robot's last diagnostics, once a second)
            summary['sim_robot_counters'] = refused
        if supervisor and safety:
            try:
                state = json.loads(safety[-1])
                summary['supervisor_state'] = {k: state.get(k) for k in (
                    'estop', 'estop_cause', 'output', 'safe_reason', 'clips')}
                summary['supervisor_state']['log'] = [
                    line[-160:] for line in procs[2].output().splitlines()
                    if 'E-STOP' in line or 'output:' in line][-6:]
            except ValueError:
                summary['supervisor_state'] = safety[-1][-500:]
        for p in procs:
            if p.proc.poll() is not None:
                summary.setdefault('exited', []).append(p.cmd[2])
        if not lockstep:
            summary['failures'] = realtime_failures(summary, supervisor, safety)
            if summary['failures']:
                code = 1
    finally:
        stop_teleop.set()
        spinner.stop()
        for p in procs:
            p.stop()
        rclpy.try_shutdown()
    print(json.dumps(summary))
    return code


def realtime_failures(summary, supervisor, safety):
    """Return why a realtime run did not do its job (empty: it did). A run whose policy
    never ran, whose supervisor never forwarded it, that e-stopped, fell or lost a process is
    a failure, never a result of zeros."""
    reasons = []
    if summary.get('error'):
        reasons.append(summary['error'])
    if not summary.get('commands'):
        reasons.append('the policy never ran: no policy/command')
    if supervisor:
        state = {}
        try:
            state = json.loads(safety[-1]) if safety else {}
        except ValueError:
            pass
        forwarded = state.get('outputs_forwarded')
        summary.setdefault('supervisor_state', {})
        if isinstance(summary['supervisor_state'], dict):
            summary['supervisor_state']['outputs_forwarded'] = forwarded
        if not safety:
            reasons.append('no safety/state from safety_supervisor')
        elif not forwarded:
            reasons.append('safety_supervisor never forwarded the policy (outputs_forwarded '
                           f'0; safe_reason: {state.get("safe_reason")!r})')
        if state.get('estop'):
            reasons.append(f'e-stop: {state.get("estop_cause")}')
    if summary.get('fell'):
        reasons.append(f'fell: base height {summary.get("min_base_z")} m < fall_z '
                       f'{summary.get("fall_z")} m')
    if summary.get('exited'):
        reasons.append(f'exited: {", ".join(summary["exited"])}')
    return reasons


def run_lockstep(procs, stamp_times, t_end, stall_s=60.0):
    """Wait until sim_robot's time reaches t_end (it applied the last step's command); raise
    AssertionError when it stops advancing for stall_s (wall) or a process exits."""
    last, since = None, time.monotonic()
    while True:
        times = stamp_times()
        now_t = max(times) if times else 0.0
        if now_t >= t_end - 1e-6:
            return now_t
        exited = [p.cmd[2] for p in procs if p.proc.poll() is not None]
        if exited:
            raise AssertionError(f'{", ".join(exited)} exited at t = {now_t:g} s')
        if now_t != last:
            last, since = now_t, time.monotonic()
        elif time.monotonic() - since > stall_s:
            raise AssertionError(f'the lockstep stalled at t = {now_t:g} s (no step for '
                                 f'{stall_s:g} s; waiting for the command of that state)')
        time.sleep(0.05)


def compare(setup, trace, cmds, poses, args, wall, ran, positions):
    """The lockstep summary: the actions recovered from the commands, matched to the
    reference's steps by stamp, against the reference's actions."""
    import numpy as np
    from simreal_ros.core.sim2sim import action_errors, reference_distance
    from simreal_ros.nodes.common import stamp_to_sec
    field = 'position' if setup.mode == 'position' else 'effort'
    stamps = np.array([stamp_to_sec(c.header.stamp) for c in cmds])
    index = np.rint((stamps - trace.time[0]) / setup.period).astype(int)
    inside = (index >= 0) & (index < trace.n_samples)
    on_grid = inside & (np.abs(stamps - trace.time[np.clip(index, 0, trace.n_samples - 1)])
                        <= 2e-9)
    first = {}
    for k, i in enumerate(index):   # one command per state (the first, as sim_robot used)
        if on_grid[k] and i not in first:
            first[int(i)] = k
    steps_idx = np.array(sorted(first))
    chosen = [cmds[first[i]] for i in steps_idx]
    actions = np.array([setup.recover_actions(c.name, getattr(c, field)) for c in chosen])
    err = action_errors(actions, trace.actions[steps_idx], setup.processor.clip)
    if args.save:
        np.savez(args.save, actions=actions, stamps=stamps[[first[i] for i in steps_idx]],
                 step=steps_idx, err=err, reference=trace.actions[steps_idx])
    tol = args.tol
    over = np.flatnonzero(err > tol)
    missed = sorted(set(range(ran)) - set(first))
    out = dict(
        steps=int(ran), max_action_err=float(err.max()),
        first_step_over_tol=int(steps_idx[over[0]]) if over.size else None,
        tolerance=tol,
        # every command is stamped with a reference step's time, one per step
        stamps_match_reference=bool(on_grid.all() and len(first) == len(cmds)),
        max_abs_action=float(np.abs(trace.actions[:ran]).max()),
        distance_m=None, min_base_z=None, fell=None,
        ref_distance_m=reference_distance(setup, trace, ran),
        wall_s=round(wall, 2), steps_per_s=round(ran / wall, 1))
    if missed:
        out['unrecorded_steps'] = len(missed)   # run, but not seen by this bench's recorder
    # The states the actions were computed from against the reference's (joint positions).
    q_err = []
    ns = {int(round(t * 1e9)): i for i, t in enumerate(trace.time[:ran])}
    for stamp_ns, (names, q) in list(positions.items()):
        i = ns.get(stamp_ns, ns.get(stamp_ns + 1, ns.get(stamp_ns - 1)))
        if i is None:
            continue
        cols = [(names.index(n), j) for j, n in enumerate(trace.names) if n in names]
        q_err.append(max(abs(q[c] - trace.q[i, j]) for c, j in cols))
    out['max_q_err'] = float(max(q_err)) if q_err else None   # rad, over the states seen
    out['states_compared'] = len(q_err)
    t_end = float(trace.time[ran - 1]) if ran else float(stamps.max())
    if setup.floating_base and poses:
        end = [p for p in poses if abs(p[0] - t_end) < 1e-6]
        z = [p[3] for p in poses if p[0] <= t_end + 1e-9]
        fall_z = args.fall_z_used
        out.update(
            distance_m=(float(np.hypot(end[-1][1] - setup.base0[0],
                                       end[-1][2] - setup.base0[1])) if end else None),
            min_base_z=float(min(z)) if z else None,
            fell=bool(min(z) < fall_z) if z and fall_z is not None else None)
    return out


def read_runner_diagnostics(node, proc, timeout=5.0):
    """Return the next policy_runner diagnostics key/values."""
    from diagnostic_msgs.msg import DiagnosticArray
    from simreal_ros.client.rig import wait_for
    got = {}

    def on_diag(msg):
        for status in msg.status:
            if status.name == 'policy_runner: loop':
                got.update({kv.key: kv.value for kv in status.values})
    sub = node.create_subscription(DiagnosticArray, '/diagnostics', on_diag, 10)
    wait_for(lambda: got, timeout, what='policy_runner diagnostics')
    node.destroy_subscription(sub)
    return got


if __name__ == '__main__':
    sys.exit(main())

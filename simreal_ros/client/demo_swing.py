"""arm3's swing, commanded per stage by the demo: cmd_vel as the operator's knob, the amplitude
measured per stage, and the supervisor's clips explained in a line."""

TRACKING_TOLERANCE = 0.15  # the last stage's swing amplitude vs the reference's (fraction)


class SwingCommand:
    """The operator's side of arm3's swing: cmd_vel linear.x (the commanded fraction of the
    full reference swing) published at 50 Hz and ramped, and joint_states kept for the
    amplitudes.

    The fraction moves by at most `rate` per second in 50 steps a second: one step moves the
    policy's targets by at most 0.003 x the swing amplitude, well inside what the target-rate
    limit allows per policy period at the lowest stage, so a command change is never what
    the supervisor clips. cmd_vel is republished every step: policy_runner drops a command
    older than its cmd_vel_timeout_s to zero.
    """

    RATE = 0.15      # commanded fraction per second
    HZ = 50.0

    def __init__(self, ros, graph):
        import collections
        import threading
        from geometry_msgs.msg import Twist
        from rclpy.clock import Clock, ClockType
        from sensor_msgs.msg import JointState
        from simreal_ros.client.ros import join_name
        from simreal_ros.deploy.graph import node_parameters
        from simreal_ros.nodes.common import SENSOR_SUB_QOS
        from simreal_ros.core.onnx_policies import ARM3_SWING_AMPLITUDE, ARM3_SWING_PERIOD_S
        import numpy as np
        runner = node_parameters(graph, graph.node('policy_runner'))
        self.names = list(runner.get('policy_joint_names') or runner['joint_names'])
        self.reference_amplitude = np.asarray(ARM3_SWING_AMPLITUDE, float)
        self.period = float(ARM3_SWING_PERIOD_S)
        self.fraction = 0.0
        self._goal = 0.0
        self._step = self.RATE / self.HZ
        self._lock = threading.Lock()
        self._arrived = threading.Event()
        self._arrived.set()
        self._samples = collections.deque(maxlen=int(500 * 300))
        self._twist = Twist
        self._node = ros.node
        remaps = dict(graph.node('policy_runner').remaps)
        topic = join_name(ros.namespace, remaps.get('joint_states', 'joint_states'))
        self.pub = ros.node.create_publisher(Twist, join_name(ros.namespace, 'cmd_vel'), 10)
        self.sub = ros.node.create_subscription(JointState, topic, self._on_joint_states,
                                                SENSOR_SUB_QOS)
        self.timer = ros.node.create_timer(1.0 / self.HZ, self._tick,
                                           clock=Clock(clock_type=ClockType.STEADY_TIME))
        # policy_runner's restarts (a stall made the supervisor stop admitting it: it eases
        # to the default pose and starts the swing again), from its /diagnostics at 1 Hz:
        # (stamp, eases started, start phase).
        from diagnostic_msgs.msg import DiagnosticArray
        self._loop_name = (join_name(ros.namespace, 'policy_runner').lstrip('/')
                           + ': loop')
        self._handovers = collections.deque(maxlen=3600)   # (stamp, handovers)
        self.diag = ros.node.create_subscription(DiagnosticArray, '/diagnostics',
                                                 self._on_diagnostics, 10)

    def _on_joint_states(self, msg):
        try:
            index = [list(msg.name).index(n) for n in self.names]
        except ValueError:
            return
        velocity = list(msg.velocity)
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        self._samples.append((stamp, [msg.position[i] for i in index],
                              [velocity[i] if len(velocity) == len(msg.name) else float('nan')
                               for i in index]))

    def _on_diagnostics(self, msg):
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        for status in msg.status:
            if status.name == self._loop_name:
                values = {kv.key: kv.value for kv in status.values}
                if 'eases' in values:
                    self._handovers.append((stamp, int(values['eases']),
                                            values.get('start_phase')))

    def undisturbed(self, t0, t1):
        """True when policy_runner ran the policy all along between ROS times t0 and t1 (no
        spell without the supervisor's admission, no ease back to the default pose), False
        when not, None until its diagnostics after t1 have arrived."""
        seen = list(self._handovers)
        before = [(n, phase) for t, n, phase in seen if t <= t0]
        after = [(n, phase) for t, n, phase in seen if t >= t1]
        if not after or not before:
            return None
        return before[-1][0] == after[0][0] and before[-1][1] == after[0][1] == 'policy'

    def _tick(self):
        with self._lock:
            delta = self._goal - self.fraction
            self.fraction = (self._goal if abs(delta) <= self._step
                             else self.fraction + self._step * (1 if delta > 0 else -1))
            if self.fraction == self._goal:
                self._arrived.set()
            value = self.fraction
        msg = self._twist()
        msg.linear.x = float(value)
        self.pub.publish(msg)

    def ramp_to(self, fraction, rate=None):
        """Ramp the commanded fraction to `fraction`; return once it is published."""
        with self._lock:
            self._step = (rate or self.RATE) / self.HZ
            self._goal = float(fraction)
            self._arrived.clear()
            span = abs(self._goal - self.fraction)
        if not self._arrived.wait(span / (rate or self.RATE) + 10.0):
            raise RuntimeError(f'the swing command did not reach {fraction:g} (cmd_vel timer '
                               'not running)')

    def stop(self):
        """Command no swing at once (after an e-stop: the policy starts again from rest)."""
        with self._lock:
            self._goal = self.fraction = 0.0
            self._arrived.set()

    def now(self):
        """ROS time (simulated with --rtf), the time of the joint_states stamps."""
        return self._node.get_clock().now().nanoseconds * 1e-9

    def amplitude(self, t0, t1):
        """Half the peak-to-peak joint position between ROS times t0 and t1 (joint_states
        stamps), per joint, and the peak speed; 'amplitude_rad' is the largest."""
        import numpy as np
        rows = [(p, v) for t, p, v in list(self._samples) if t0 <= t <= t1]
        if len(rows) < 50:
            raise RuntimeError(f'only {len(rows)} joint_states messages in {t1 - t0:.1f} s')
        q = np.array([p for p, _ in rows])
        dq = np.abs(np.array([v for _, v in rows]))
        amp = (q.max(axis=0) - q.min(axis=0)) / 2
        return amplitudes(self.names, amp, samples=len(q), peak_speed_rad_s={
            n: round(float(v), 3) for n, v in zip(self.names, np.nanmax(dq, axis=0))})

    def reference(self, fraction):
        """The reference swing's amplitude at the commanded fraction."""
        return amplitudes(self.names, abs(fraction) * self.reference_amplitude)

    def peak_rate(self, fraction):
        """The reference's peak speed per joint (rad/s) at the commanded fraction."""
        import numpy as np
        return dict(zip(self.names, (abs(fraction) * self.reference_amplitude * 2 * np.pi
                                     / self.period).tolist()))

    def close(self):
        self._node.destroy_timer(self.timer)
        self._node.destroy_subscription(self.diag)
        self.pub.publish(self._twist())      # no swing
        self._node.destroy_subscription(self.sub)
        self._node.destroy_publisher(self.pub)


def swing_period(swing):
    """The swing's period, the shortest stretch a stage's amplitude is measured over (0 when
    the robot has no swing policy: the dwell alone counts)."""
    return swing.period if swing is not None else 0.0


def amplitudes(names, values, **extra):
    values = [float(v) for v in values]
    big = max(range(len(values)), key=lambda i: values[i])
    return dict({'amplitude_rad': round(values[big], 4), 'joint': names[big],
                 'joints': {n: round(v, 4) for n, v in zip(names, values)}}, **extra)


def amp_text(amp, ref):
    return (f'{amp["amplitude_rad"]:.3f} rad ({amp["joint"]}; reference '
            f'{ref["joints"][amp["joint"]]:.3f})')


def clip_counts(state):
    """safety/state's clip counters as {'kind/joint': count}."""
    return {f'{kind}/{joint}': int(n) for kind, joints in (state.get('clips') or {}).items()
            for joint, n in joints.items()}


def clip_diff(before, after):
    """The clips counted between two clip_counts(), non-zero ones only."""
    return {k: after[k] - before.get(k, 0) for k in sorted(after)
            if after[k] - before.get(k, 0) > 0}


def explain_clips(clips, limits, scale=None, peak_rate=None):
    """Say which limit each kind of clip met, and why, in one line ('' without clips).

    `clips` {'kind/joint': count}; `limits` the supervisor's stage-1.00 limits (`names` and
    the per-joint lists); `scale` the stage (None: the stage each clip happened at);
    `peak_rate` {joint: rad/s} the motion asked for, when known.
    """
    if not clips:
        return ''
    names = limits.get('names') or []
    kinds = {}
    for key, n in clips.items():
        kind, joint = key.split('/', 1)
        kinds.setdefault(kind, {})[joint] = n

    def bound(key, joint):
        values = limits.get(key) or []
        if joint not in names or not values:
            return '?'
        value = values[names.index(joint)] if len(values) > 1 else values[0]
        return f'{value * scale:.2f}' if scale is not None else f'{value:g} x stage'
    at = f'stage {scale:.2f}' if scale is not None else 'its stage'
    parts = []
    for kind, joints in sorted(kinds.items()):
        who = ', '.join(f'{j} {n}' for j, n in sorted(joints.items()))
        if kind == 'rate':
            text = ('the position target moved faster than max_target_rate at ' + at + ' ('
                    + ', '.join(f'{j} {bound("max_target_rate", j)} rad/s' for j in joints)
                    + ')')
            if peak_rate:
                text += ('; the swing asks for up to '
                         + ', '.join(f'{j} {peak_rate[j]:.2f}' for j in joints
                                     if j in peak_rate) + ' rad/s')
        elif kind == 'torque':
            text = ('the target implied more than torque_limit at ' + at + ' ('
                    + ', '.join(f'{j} {bound("torque_limit", j)} N*m' for j in joints)
                    + ') as kp*(q_t - q) - kd*dq: the joint lagged its target')
        elif kind == 'acceleration':
            text = ('the target\'s rate changed faster than max_target_accel at ' + at + ' ('
                    + ', '.join(f'{j} {bound("max_target_accel", j)} rad/s^2' for j in joints)
                    + ')')
        elif kind == 'velocity':
            text = ('a joint moved faster than velocity_limit at ' + at + ' ('
                    + ', '.join(f'{j} {bound("velocity_limit", j)} rad/s' for j in joints)
                    + '): only braking torque was let through')
        elif kind == 'position':
            text = 'a target outside the soft position limits was moved inside them'
        else:
            text = 'limit ' + kind
        parts.append(f'{kind} ({who}): {text}')
    return '; '.join(parts)


def amplitude_problems(scales, amps, full):
    """What is wrong with the per-stage swing amplitudes ([] when nothing): each stage
    measured, rising with the stage, and the last stage tracking the full reference
    (`full`: SwingCommand.reference(1.0)) within TRACKING_TOLERANCE."""
    problems = []
    missing = [f'{s:.2f}' for s, a in zip(scales, amps) if a is None]
    if missing:
        return [f'no swing amplitude measured at stage(s) {", ".join(missing)}']
    for (s0, a0), (s1, a1) in zip(zip(scales, amps), zip(scales[1:], amps[1:])):
        if not a1 > a0:
            problems.append(f'the swing amplitude does not rise from stage {s0:.2f} '
                            f'({a0:.3f} rad) to {s1:.2f} ({a1:.3f} rad)')
    ref = full['amplitude_rad']
    if abs(amps[-1] - ref) > TRACKING_TOLERANCE * ref:
        problems.append(f'stage {scales[-1]:.2f} does not track the reference swing: '
                        f'amplitude {amps[-1]:.3f} rad, reference {ref:.3f} rad '
                        f'(tolerance {100 * TRACKING_TOLERANCE:.0f} %)')
    return problems

"""Record a deployment session to MCAP (ros2 bag / Foxglove readable), from any rclpy node.

    rec = SessionRecorder(node, 'results/session.mcap', namespace='')
    ...                      # the node spins elsewhere
    rec.close()              # returns {topic: message count}

The recorded topics are the supervisor's inputs and output, what the driver applied, the joint
states and the safety events: `policy/command`, `sysid/command`, `hardware/command`,
`driver/applied_command`, `joint_states`, `safety/state`, `/diagnostics`, `sysid/result`.
Messages are stored as received (CDR), with the schema text `ros2 bag` writes, so `sim_bridge`
can replay a session for its gap score.
"""
import os
from pathlib import Path
import sys
import threading
import time

from simreal_ros.core.files import temporary_name

# topic -> (type name, qos name in simreal_ros.nodes.common or a depth)
SESSION_TOPICS = {
    'policy/command': ('sensor_msgs/msg/JointState', 'RECORD'),
    'sysid/command': ('sensor_msgs/msg/JointState', 'RECORD'),
    'hardware/command': ('sensor_msgs/msg/JointState', 'RECORD'),
    # what the driver handed to the actuators, stamped on the robot's clock when it did: the
    # live gap replays it (sim_bridge's shadow), so a session can be replayed as it was
    'driver/applied_command': ('sensor_msgs/msg/JointState', 'RECORD'),
    'joint_states': ('sensor_msgs/msg/JointState', 'SENSOR_SUB_QOS'),
    'safety/state': ('std_msgs/msg/String', 'LATCHED_QOS'),
    'sysid/result': ('std_msgs/msg/String', 'LATCHED_QOS'),
    '/diagnostics': ('diagnostic_msgs/msg/DiagnosticArray', 'RECORD'),
}
PRIMITIVES = {'bool', 'byte', 'char', 'float32', 'float64', 'int8', 'uint8', 'int16', 'uint16',
              'int32', 'uint32', 'int64', 'uint64', 'string', 'wstring'}


def _share_dirs():
    dirs = [Path(sys.prefix) / 'share']
    for prefix in os.environ.get('AMENT_PREFIX_PATH', '').split(os.pathsep):
        if prefix:
            dirs.append(Path(prefix) / 'share')
    return dirs


def _msg_file(pkg, name):
    for share in _share_dirs():
        path = share / pkg / 'msg' / f'{name}.msg'
        if path.is_file():
            return path
    raise FileNotFoundError(f'{pkg}/msg/{name}.msg not found in {[str(d) for d in _share_dirs()]}')


def msg_definition(type_name):
    """Return the ros2msg schema text of `pkg/msg/Type` with its dependencies (as ros2 bag)."""
    pkg, _, name = type_name.split('/')
    order, seen = [], set()

    def visit(p, n):
        text = _msg_file(p, n).read_text()
        for line in text.splitlines():
            line = line.split('#', 1)[0].strip()
            if not line:
                continue
            ftype = line.split()[0]
            if '=' in line.split()[1 if len(line.split()) > 1 else 0]:
                continue   # a constant
            base = ftype.split('[')[0].split('<=')[0]
            if base in PRIMITIVES:
                continue
            dp, dn = (base.split('/')[0], base.split('/')[-1]) if '/' in base else (
                ('std_msgs', 'Header') if base == 'Header' else (p, base))
            if (dp, dn) not in seen:
                seen.add((dp, dn))
                visit(dp, dn)
                order.append((dp, dn))
        return text

    main = visit(pkg, name)
    parts = [main.rstrip('\n')]
    for dp, dn in order:
        parts.append('=' * 80 + f'\nMSG: {dp}/{dn}\n' + _msg_file(dp, dn).read_text().rstrip('\n'))
    return '\n'.join(parts) + '\n'


class SessionRecorder:
    """Subscribe (raw CDR) to the session topics of `node` and write them to an MCAP file.

    The file is written under a hidden temporary name beside `path` and renamed to `path` when
    the recording is closed complete: a reader (sim_bridge looking for the newest recording)
    never sees half a file.
    """

    def __init__(self, node, path, namespace='', topics=None):
        from mcap.writer import Writer
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from simreal_ros.nodes import common
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = temporary_name(self.path)
        self._file = open(self._tmp, 'wb')
        self._writer = Writer(self._file)
        self._writer.start(profile='ros2', library='simreal_ros')
        self._lock = threading.Lock()
        self.counts = {}
        self._subs = []
        self._specs = []    # (type, topic, MCAP channel, QoS) of each session topic
        self._node = node
        record_qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        ns = (namespace or '').strip('/')
        for topic, (type_name, qos_name) in (topics or SESSION_TOPICS).items():
            fqn = topic if topic.startswith('/') else (f'/{ns}/{topic}' if ns else f'/{topic}')
            schema = self._writer.register_schema(name=type_name, encoding='ros2msg',
                                                  data=msg_definition(type_name).encode())
            channel = self._writer.register_channel(topic=fqn, message_encoding='cdr',
                                                    schema_id=schema)
            qos = record_qos if qos_name == 'RECORD' else getattr(common, qos_name)
            msg_type = _import_type(type_name)
            self.counts[fqn] = 0
            self._specs.append((msg_type, fqn, channel, qos))
        self.resume()

    def resume(self):
        """Subscribe to the session topics (again, after pause())."""
        if self._subs or self._writer is None:
            return
        for msg_type, fqn, channel, qos in self._specs:
            self._subs.append(self._node.create_subscription(
                msg_type, fqn, lambda data, c=channel, t=fqn: self._write(c, t, data), qos,
                raw=True))

    def pause(self):
        """Stop listening (no CPU spent on the session topics) until resume()."""
        for sub in self._subs:
            self._node.destroy_subscription(sub)
        self._subs = []

    def _write(self, channel, topic, data):
        now = time.time_ns()
        with self._lock:
            if self._writer is None:
                return
            self._writer.add_message(channel_id=channel, log_time=now, publish_time=now,
                                     data=bytes(data), sequence=self.counts[topic])
            self.counts[topic] += 1

    def close(self):
        """Stop recording; return {topic: messages written}."""
        self.pause()
        with self._lock:
            if self._writer is not None:
                self._writer.finish()
                self._file.flush()
                os.fsync(self._file.fileno())
                self._file.close()
                os.replace(self._tmp, self.path)
                self._writer = None
        return dict(self.counts)


def _import_type(type_name):
    import importlib
    pkg, sub, name = type_name.split('/')
    return getattr(importlib.import_module(f'{pkg}.{sub}'), name)


def read_joint_states(path, topic='/joint_states'):
    """Return (t, names, positions, velocities, efforts) arrays from a session MCAP."""
    import numpy as np
    from mcap_ros2.reader import read_ros2_messages
    t, pos, vel, eff, names = [], [], [], [], None
    for m in read_ros2_messages(str(path), topics=[topic]):
        msg = m.ros_msg
        names = names or list(msg.name)
        t.append(m.log_time_ns * 1e-9)
        pos.append(list(msg.position))
        vel.append(list(msg.velocity))
        eff.append(list(msg.effort))
    return (np.array(t), names or [], np.array(pos), np.array(vel), np.array(eff))

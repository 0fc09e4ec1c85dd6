"""CDR bytes of the 500 Hz messages, made without building ROS message objects.

The hot publishers (safety_supervisor's `hardware/command`, sim_robot's `joint_states` and
`imu`) send a message every 2 ms. rclpy's `publish(msg)` converts the Python message into a C
struct, field by field, and the message's own setters check every element in Python first:
in bench/cpu_budget.py's profile (py-spy) `Publisher.publish` alone was 21 % of the
supervisor's samples and 28 % of sim_robot's. rclpy also publishes bytes that are already
serialized (`publish(bytes)` -> `publish_raw`), and the layout of these messages is small and
fixed: this module writes it directly. The names (and frame_id) of a stream do not change, so
their bytes are made once; a message is the stamp, those bytes and the arrays.

Layout: the ROS 2 serialization (XCDR1, little endian, as rmw_fastrtps and rmw_cyclonedds
write it): a 4-byte encapsulation header (0x00 0x01 0x00 0x00), then the fields in order,
each aligned to its size from the start of the data after that header; strings as a uint32
length counting a terminating NUL, the bytes and the NUL; sequences as a uint32 count and the
elements. test/test_cdr.py checks every byte against rclpy's own serialize_message, for
empty and non-empty arrays, names and frame_ids of every length modulo the alignment.

Nothing here imports rclpy: it is the byte layout only.
"""
import struct

import numpy as np

ENCAPSULATION = b'\x00\x01\x00\x00'   # CDR_LE, no options
_STAMP = struct.Struct('<iI')


def _pad(size, align):
    return (-size) % align


class _Buffer:
    """Bytes being laid out, with the position counted from after the encapsulation."""

    def __init__(self):
        self.parts = []
        self.size = 0

    def align(self, n):
        pad = _pad(self.size, n)
        if pad:
            self.parts.append(b'\x00' * pad)
            self.size += pad

    def raw(self, data):
        self.parts.append(data)
        self.size += len(data)

    def uint32(self, value):
        self.align(4)
        self.raw(struct.pack('<I', value))

    def string(self, text):
        data = text.encode('utf-8') + b'\x00'
        self.uint32(len(data))
        self.raw(data)

    def bytes(self):
        return b''.join(self.parts)


def split_stamp(seconds):
    """(sec, nanosec) of a time in seconds, as builtin_interfaces/Time holds it."""
    sec, nanosec = divmod(int(round(seconds * 1e9)), 1_000_000_000)
    return sec, nanosec


class JointStateEncoder:
    """sensor_msgs/JointState bytes for one stream: fixed names and frame_id.

        enc = JointStateEncoder(['j1', 'j2'])
        data = enc.encode(sec, nanosec, position, velocity, effort)   # any of them None = []
        publisher.publish(data)

    Each array is either None/empty or has one value per name (a JointState with another
    length is legal ROS, but not what these streams send: it raises ValueError).
    """

    def __init__(self, names, frame_id=''):
        self.names = list(names)
        head = _Buffer()
        head.raw(b'\x00' * 8)             # the stamp, written per message
        head.string(frame_id)
        head.uint32(len(self.names))
        for name in self.names:
            head.string(name)
        self._head = head.bytes()[8:]     # after the stamp
        self._n = len(self.names)
        # Where each of the three sequences starts depends only on which are empty, so the
        # padding is worked out per combination, once.
        self._layouts = {}

    def _layout(self, present):
        layout = self._layouts.get(present)
        if layout is None:
            size = 8 + len(self._head)
            pads = []
            for there in present:
                pad_count = _pad(size, 4)
                size += pad_count + 4
                pad_values = _pad(size, 8) if there else 0
                size += pad_values + (8 * self._n if there else 0)
                pads.append((b'\x00' * pad_count, struct.pack('<I', self._n if there else 0),
                             b'\x00' * pad_values))
            layout = self._layouts[present] = pads
        return layout

    def encode(self, sec, nanosec, position=None, velocity=None, effort=None):
        arrays = (position, velocity, effort)
        present = tuple(a is not None and len(a) > 0 for a in arrays)
        parts = [ENCAPSULATION, _STAMP.pack(sec, nanosec), self._head]
        for there, values, (pad_count, count, pad_values) in zip(present, arrays,
                                                                  self._layout(present)):
            parts.append(pad_count)
            parts.append(count)
            if there:
                values = np.asarray(values, dtype='<f8')
                if values.shape != (self._n,):
                    raise ValueError(f'JointState array of shape {values.shape} for '
                                     f'{self._n} names')
                parts.append(pad_values)
                parts.append(values.tobytes())
        return b''.join(parts)


class ImuEncoder:
    """sensor_msgs/Imu bytes for one stream: a fixed frame_id and covariances.

    Orientation (w, x, y, z), angular velocity and linear acceleration per message; the three
    covariance matrices (9 values each, row-major) are fixed for the stream (zeros: unknown
    covariance, as REP 145 reads all zeros; -1 in [0] marks a field not provided).
    """

    def __init__(self, frame_id='', orientation_covariance=None,
                 angular_velocity_covariance=None, linear_acceleration_covariance=None):
        def cov(values):
            values = np.zeros(9) if values is None else np.asarray(values, dtype='<f8')
            if values.shape != (9,):
                raise ValueError(f'Imu covariance of shape {values.shape}, not (9,)')
            return values.astype('<f8').tobytes()
        head = _Buffer()
        head.raw(b'\x00' * 8)
        head.string(frame_id)
        head.align(8)
        self._head = head.bytes()[8:]
        self._cov = [cov(orientation_covariance), cov(angular_velocity_covariance),
                     cov(linear_acceleration_covariance)]

    def encode(self, sec, nanosec, orientation_wxyz, angular_velocity, linear_acceleration):
        w, x, y, z = orientation_wxyz
        return b''.join((
            ENCAPSULATION, _STAMP.pack(sec, nanosec), self._head,
            struct.pack('<4d', x, y, z, w), self._cov[0],
            struct.pack('<3d', *angular_velocity), self._cov[1],
            struct.pack('<3d', *linear_acceleration), self._cov[2]))


_U32 = struct.Struct('<I')
_ORIENTATION = struct.Struct('<4d')


class _Reader:
    """Reads XCDR1 little-endian fields from `data`, positions counted after the header."""

    __slots__ = ('data', 'pos')

    def __init__(self, data, pos=4):
        self.data = data
        self.pos = pos

    def align(self, n):
        self.pos += (-(self.pos - 4)) % n

    def uint32(self):
        self.align(4)
        if self.pos + 4 > len(self.data):
            raise ValueError('CDR data ends inside a length')
        (value,) = _U32.unpack_from(self.data, self.pos)
        self.pos += 4
        return value

    def string(self):
        size = self.uint32()
        end = self.pos + size
        if size == 0 or end > len(self.data) or self.data[end - 1] != 0:
            raise ValueError('CDR string without its terminating NUL')
        text = bytes(self.data[self.pos:end - 1]).decode('utf-8')
        self.pos = end
        return text

    def doubles(self):
        count = self.uint32()
        if not count:
            return np.empty(0)
        self.align(8)
        end = self.pos + 8 * count
        if end > len(self.data):
            raise ValueError('CDR data ends inside a double sequence')
        values = np.frombuffer(self.data, dtype='<f8', count=count, offset=self.pos)
        self.pos = end
        return values


def _check_header(data):
    if len(data) < 12 or data[0:2] != ENCAPSULATION[0:2]:
        raise ValueError(f'not XCDR1 little-endian data (header {bytes(data[0:4]).hex()})')


class JointStateDecoder:
    """sensor_msgs/JointState fields from the bytes rclpy takes raw, for the 500 Hz inputs.

        dec = JointStateDecoder()
        sec, nanosec, frame_id, names, position, velocity, effort = dec.decode(data)

    `names` is a tuple; the arrays are read-only float64 views of `data` (empty when absent).
    A stream's frame_id and names do not change, so their bytes are kept from the last message
    and, when the next message starts with the same bytes, its strings are not read again
    (the same bytes from the same start parse to the same strings and end at the same place).
    Data that is not little-endian XCDR1 (another middleware's representation), or that ends
    early, raises ValueError: the caller then deserializes it with rclpy.
    """

    def __init__(self):
        self._head = None     # the frame_id and names bytes of the last message
        self._strings = None  # (frame_id, names) parsed from them

    def decode(self, data):
        _check_header(data)
        sec, nanosec = _STAMP.unpack_from(data, 4)
        head = self._head
        if head is not None and data[12:12 + len(head)] == head:
            frame_id, names = self._strings
            reader = _Reader(data, 12 + len(head))
        else:
            reader = _Reader(data, 12)
            frame_id = reader.string()
            names = tuple(reader.string() for _ in range(reader.uint32()))
            self._head, self._strings = bytes(data[12:reader.pos]), (frame_id, names)
        position = reader.doubles()
        velocity = reader.doubles()
        effort = reader.doubles()
        return sec, nanosec, frame_id, names, position, velocity, effort


def decode_imu_orientation(data):
    """(sec, nanosec, (w, x, y, z)) of sensor_msgs/Imu bytes (ValueError as above)."""
    _check_header(data)
    sec, nanosec = _STAMP.unpack_from(data, 4)
    reader = _Reader(data, 12)
    reader.string()              # frame_id
    reader.align(8)
    if reader.pos + 32 > len(data):
        raise ValueError('CDR data ends inside the orientation')
    x, y, z, w = _ORIENTATION.unpack_from(data, reader.pos)
    return sec, nanosec, (w, x, y, z)


class _Stamp:
    __slots__ = ('sec', 'nanosec')

    def __init__(self, sec, nanosec):
        self.sec, self.nanosec = sec, nanosec


class _Header:
    __slots__ = ('stamp', 'frame_id')

    def __init__(self, stamp, frame_id):
        self.stamp, self.frame_id = stamp, frame_id


class JointStateSample:
    """A decoded joint_states message with the fields a JointState has (read-only use):
    `header.stamp.sec`, `header.stamp.nanosec`, `header.frame_id`, `name` (a tuple),
    `position`, `velocity`, `effort` (float64 arrays, empty when absent)."""

    __slots__ = ('header', 'name', 'position', 'velocity', 'effort')

    def __init__(self, decoded):
        sec, nanosec, frame_id, names, position, velocity, effort = decoded
        self.header = _Header(_Stamp(sec, nanosec), frame_id)
        self.name, self.position, self.velocity, self.effort = names, position, velocity, effort

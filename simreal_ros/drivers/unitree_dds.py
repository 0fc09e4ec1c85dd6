"""Unitree's low-level DDS types, written from the vendor's IDL, and their conversion to the
C layouts of `simreal_ros.core.unitree` (where the CRC is computed).

The robot speaks CycloneDDS with its own IDL types (type names such as
`unitree_hg::msg::dds_::LowCmd_`), not ROS messages. These classes carry the same type names,
field names, field types and order as the vendor's IDL (unitreerobotics/unitree_sdk2_python
idl/, read there; `@final`, sequential ids), so a robot or the vendor's SDK reads what they
write: test/test_unitree_dds.py encodes with these and decodes with the vendor SDK's types, and
the other way round, CRC included.

Needs the `cyclonedds` Python binding (PyPI, 11.x; installed by `make setup`); importing this
module without it raises ImportError with the command that installs it.
"""
from dataclasses import dataclass

import numpy as np

try:
    import cyclonedds.idl as idl
    import cyclonedds.idl.annotations as annotate
    import cyclonedds.idl.types as types
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError('the Unitree interface needs the cyclonedds Python binding: '
                      "pip install 'cyclonedds>=11,<12' (make setup installs it)") from exc

from simreal_ros.core import unitree as layouts

u8, u16, u32, i16, i32, f32 = (types.uint8, types.uint16, types.uint32, types.int16,
                               types.int32, types.float32)
A = types.array


# -- unitree_hg (G1, H1_2) ------------------------------------------------------------------
@dataclass
@annotate.final
@annotate.autoid('sequential')
class HgMotorCmd(idl.IdlStruct, typename='unitree_hg.msg.dds_.MotorCmd_'):
    mode: u8
    q: f32
    dq: f32
    tau: f32
    kp: f32
    kd: f32
    reserve: u32


@dataclass
@annotate.final
@annotate.autoid('sequential')
class HgLowCmd(idl.IdlStruct, typename='unitree_hg.msg.dds_.LowCmd_'):
    mode_pr: u8
    mode_machine: u8
    motor_cmd: A[HgMotorCmd, layouts.HG_MOTORS]
    reserve: A[u32, 4]
    crc: u32


@dataclass
@annotate.final
@annotate.autoid('sequential')
class HgImuState(idl.IdlStruct, typename='unitree_hg.msg.dds_.IMUState_'):
    quaternion: A[f32, 4]
    gyroscope: A[f32, 3]
    accelerometer: A[f32, 3]
    rpy: A[f32, 3]
    temperature: i16


@dataclass
@annotate.final
@annotate.autoid('sequential')
class HgMotorState(idl.IdlStruct, typename='unitree_hg.msg.dds_.MotorState_'):
    mode: u8
    q: f32
    dq: f32
    ddq: f32
    tau_est: f32
    temperature: A[i16, 2]
    vol: f32
    sensor: A[u32, 2]
    motorstate: u32
    reserve: A[u32, 4]


@dataclass
@annotate.final
@annotate.autoid('sequential')
class HgLowState(idl.IdlStruct, typename='unitree_hg.msg.dds_.LowState_'):
    version: A[u32, 2]
    mode_pr: u8
    mode_machine: u8
    tick: u32
    imu_state: HgImuState
    motor_state: A[HgMotorState, layouts.HG_MOTORS]
    wireless_remote: A[u8, 40]
    reserve: A[u32, 4]
    crc: u32


# -- unitree_go (Go2, H1) -------------------------------------------------------------------
@dataclass
@annotate.final
@annotate.autoid('sequential')
class GoMotorCmd(idl.IdlStruct, typename='unitree_go.msg.dds_.MotorCmd_'):
    mode: u8
    q: f32
    dq: f32
    tau: f32
    kp: f32
    kd: f32
    reserve: A[u32, 3]


@dataclass
@annotate.final
@annotate.autoid('sequential')
class GoBmsCmd(idl.IdlStruct, typename='unitree_go.msg.dds_.BmsCmd_'):
    off: u8
    reserve: A[u8, 3]


@dataclass
@annotate.final
@annotate.autoid('sequential')
class GoLowCmd(idl.IdlStruct, typename='unitree_go.msg.dds_.LowCmd_'):
    head: A[u8, 2]
    level_flag: u8
    frame_reserve: u8
    sn: A[u32, 2]
    version: A[u32, 2]
    bandwidth: u16
    motor_cmd: A[GoMotorCmd, layouts.GO_MOTORS]
    bms_cmd: GoBmsCmd
    wireless_remote: A[u8, 40]
    led: A[u8, 12]
    fan: A[u8, 2]
    gpio: u8
    reserve: u32
    crc: u32


@dataclass
@annotate.final
@annotate.autoid('sequential')
class GoImuState(idl.IdlStruct, typename='unitree_go.msg.dds_.IMUState_'):
    quaternion: A[f32, 4]
    gyroscope: A[f32, 3]
    accelerometer: A[f32, 3]
    rpy: A[f32, 3]
    temperature: u8


@dataclass
@annotate.final
@annotate.autoid('sequential')
class GoMotorState(idl.IdlStruct, typename='unitree_go.msg.dds_.MotorState_'):
    mode: u8
    q: f32
    dq: f32
    ddq: f32
    tau_est: f32
    q_raw: f32
    dq_raw: f32
    ddq_raw: f32
    temperature: u8
    lost: u32
    reserve: A[u32, 2]


@dataclass
@annotate.final
@annotate.autoid('sequential')
class GoBmsState(idl.IdlStruct, typename='unitree_go.msg.dds_.BmsState_'):
    version_high: u8
    version_low: u8
    status: u8
    soc: u8
    current: i32
    cycle: u16
    bq_ntc: A[u8, 2]
    mcu_ntc: A[u8, 2]
    cell_vol: A[u16, 15]


@dataclass
@annotate.final
@annotate.autoid('sequential')
class GoLowState(idl.IdlStruct, typename='unitree_go.msg.dds_.LowState_'):
    head: A[u8, 2]
    level_flag: u8
    frame_reserve: u8
    sn: A[u32, 2]
    version: A[u32, 2]
    bandwidth: u16
    imu_state: GoImuState
    motor_state: A[GoMotorState, layouts.GO_MOTORS]
    bms_state: GoBmsState
    foot_force: A[i16, 4]
    foot_force_est: A[i16, 4]
    tick: u32
    wireless_remote: A[u8, 40]
    bit_flag: u8
    adc_reel: f32
    temperature_ntc1: u8
    temperature_ntc2: u8
    power_v: f32
    power_a: f32
    fan_frequency: A[u16, 4]
    reserve: u32
    crc: u32


TYPES = {('unitree_hg', 'LowCmd_'): HgLowCmd, ('unitree_hg', 'LowState_'): HgLowState,
         ('unitree_go', 'LowCmd_'): GoLowCmd, ('unitree_go', 'LowState_'): GoLowState}
TOPIC_CMD = 'rt/lowcmd'
TOPIC_STATE = 'rt/lowstate'


def idl_type(interface, message):
    try:
        return TYPES[(interface, message)]
    except KeyError:
        known = ', '.join(f'{i}/{m}' for i, m in TYPES)
        raise ValueError(f'no DDS type for {interface}/{message} (known: {known})') from None


def _struct_fields(cls):
    return [(name, cls.__dataclass_fields__[name].type) for name in cls.__dataclass_fields__]


def _nested(annotation):
    """The IdlStruct class an annotation holds (directly or as an array's element), or None."""
    if isinstance(annotation, type) and issubclass(annotation, idl.IdlStruct):
        return annotation
    meta = getattr(annotation, '__metadata__', None)
    if meta:
        sub = getattr(meta[0], 'subtype', None)
        if isinstance(sub, type) and issubclass(sub, idl.IdlStruct):
            return sub
    return None


def to_sample(record, cls):
    """A numpy record (core.unitree layout) -> an instance of the IDL class `cls`."""
    kwargs = {}
    for name, annotation in _struct_fields(cls):
        value = record[name]
        sub = _nested(annotation)
        if sub is None:
            kwargs[name] = value.tolist()
        elif value.shape == ():
            kwargs[name] = to_sample(value, sub)
        else:
            kwargs[name] = [to_sample(v, sub) for v in value]
    return cls(**kwargs)


def from_sample(sample, record):
    """Fill the numpy record `record` (core.unitree layout) from an IDL sample; returns it."""
    for name, annotation in _struct_fields(type(sample)):
        value = getattr(sample, name)
        sub = _nested(annotation)
        if sub is None:
            record[name] = value
        elif isinstance(value, idl.IdlStruct):
            from_sample(value, record[name])
        else:
            target = record[name]
            for i, item in enumerate(value):
                from_sample(item, target[i])
    return record


def new_record(interface, message):
    """A zeroed numpy record of the message (the vendor's defaults for a unitree_go LowCmd_)."""
    return layouts.new(interface, message)


def record_of(sample, interface, message):
    """The numpy record (core.unitree layout) of an IDL sample."""
    return from_sample(sample, np.zeros((), dtype=layouts.layout(interface, message)))


# -- the wire, fast: CDR straight from and to the C layouts ---------------------------------
# Building and serialising a 35-motor IdlStruct costs about a millisecond and a half in Python
# (measured here), most of a 2 ms period. The types are fixed, so the CDR encoding of a message
# is a fixed rearrangement of its C layout's bytes: CDR aligns each primitive to its size
# relative to the start of the body and, unlike C, pads no struct to its alignment at the end.
# `Codec` computes that rearrangement once per type (a byte index) and then encodes or decodes
# a message with one numpy gather. test/test_unitree_dds.py checks its bytes against
# cyclonedds' own serialisation and the vendor SDK's decoding, for every type.
def _leaves(dtype, base=0):
    """(C offset, size) of every primitive in `dtype`, in declaration (= CDR) order."""
    out = []
    for name in dtype.names:
        sub, offset = dtype.fields[name][:2]
        count = 1
        if sub.subdtype is not None:
            sub, shape = sub.subdtype
            count = int(np.prod(shape))
        for k in range(count):
            start = base + offset + k * sub.itemsize
            if sub.names:
                out.extend(_leaves(sub, start))
            else:
                out.append((start, sub.itemsize))
    return out


class Codec:
    """CDR (XCDR1, little-endian, as cyclonedds writes these @final types) <-> C layout."""

    HEADER = b'\x00\x01\x00\x00'

    def __init__(self, interface, message):
        self.interface, self.message = interface, message
        self.dtype = layouts.layout(interface, message)
        pad = self.dtype.itemsize   # index of a zero byte appended to the C bytes
        gather, position = [], 0
        for c_offset, size in _leaves(self.dtype):
            aligned = -(-position // size) * size
            gather.extend([pad] * (aligned - position))
            gather.extend(range(c_offset, c_offset + size))
            position = aligned + size
        gather.extend([pad] * (-position % 4))      # the writer pads the whole to 4 bytes
        self.gather = np.asarray(gather, dtype=np.intp)
        real = self.gather != pad
        self._body_at = np.flatnonzero(real)        # CDR body positions holding data
        self._c_at = self.gather[real]              # ... and their C offsets
        self.size = len(self.HEADER) + self.gather.size

    def encode(self, record):
        """The serialised sample (header + body) of a numpy record of this layout."""
        raw = np.frombuffer(record.tobytes() + b'\x00', dtype=np.uint8)
        return self.HEADER + raw[self.gather].tobytes()

    def decode(self, data, record=None):
        """Fill (or make) a numpy record from a serialised sample; ValueError when malformed."""
        if len(data) < self.size or data[:2] != self.HEADER[:2]:
            raise ValueError(f'{self.interface}/{self.message}: {len(data)} bytes with header '
                             f'{bytes(data[:4]).hex()} (expected {self.size}, '
                             f'{self.HEADER.hex()})')
        body = np.frombuffer(data, dtype=np.uint8, count=self.gather.size, offset=4)
        raw = np.zeros(self.dtype.itemsize, dtype=np.uint8)
        raw[self._c_at] = body[self._body_at]
        out = raw.view(self.dtype)[0] if record is None else record
        if record is not None:
            record[...] = raw.view(self.dtype)[0]
        return out


# -- DDS: one participant on the robot's domain and network interface ------------------------
def cyclone_config(network_interface='', multicast=True, peers=()):
    """CycloneDDS configuration of the robot side (core.unitree_bridge.WireSettings says what
    each setting means and checks it).

    network_interface: the interface to the robot (e.g. 'eth0'; '' lets CycloneDDS choose).
    multicast: discovery and data by multicast, as the robot and the vendor's SDK do; on `lo`
    (which Linux does not flag multicast-capable) it is switched on explicitly, else CycloneDDS
    would go unicast-only there and never hear the vendor's participants. peers: unicast
    addresses to announce this participant to as well (with fixed participant ports), for
    networks that drop multicast; with multicast off they are the only way to be found.
    """
    parts = ['<CycloneDDS><Domain Id="any"><General>']
    if network_interface:
        flag = 'true' if multicast else 'false'
        parts.append(f'<Interfaces><NetworkInterface name="{network_interface}" '
                     f'priority="default" multicast="{flag}"/></Interfaces>')
    parts.append(f'<AllowMulticast>{"true" if multicast else "false"}</AllowMulticast>')
    parts.append('</General>')
    if peers:
        parts.append('<Discovery><ParticipantIndex>auto</ParticipantIndex>'
                     '<MaxAutoParticipantIndex>50</MaxAutoParticipantIndex><Peers>'
                     + ''.join(f'<Peer address="{a}"/>' for a in peers)
                     + '</Peers></Discovery>')
    parts.append('</Domain></CycloneDDS>')
    return ''.join(parts)


def _raw_io():
    """cyclonedds' byte-level write and take (what DataWriter.write / DataReader.take call
    after and before their Python (de)serialisation): imported in this one place, checked."""
    try:
        from cyclonedds._clayer import ddspy_take, ddspy_write
    except ImportError as exc:  # pragma: no cover - a cyclonedds without them
        import cyclonedds
        raise ImportError(f'cyclonedds {getattr(cyclonedds, "__version__", "?")} lacks '
                          'ddspy_write/ddspy_take; the Unitree interface is tested with 11.0.x'
                          ) from exc
    return ddspy_write, ddspy_take


class Wire:
    """A CycloneDDS participant for the robot's low-level topics, in this process.

    Beside rclpy on rmw_fastrtps_cpp (the PyPI wheels' middleware) both work in one process on
    the same domain. With rmw_cyclonedds_cpp, users report a participant clash on one domain in
    one process (docs/real_robot.md): give ROS another domain than the robot's.
    """

    def __init__(self, domain_id=0, network_interface='', multicast=True, peers=None):
        from cyclonedds.domain import Domain, DomainParticipant
        if peers is None:   # on loopback: this machine's own address as well
            peers = ['127.0.0.1'] if network_interface == 'lo' else []
        self.domain_id = int(domain_id)
        self.network_interface = network_interface
        self.multicast = bool(multicast)
        self.peers = list(peers)
        self._domain = Domain(self.domain_id,
                              cyclone_config(network_interface, self.multicast, self.peers))
        self.participant = DomainParticipant(self.domain_id)
        self._write, self._take = _raw_io()

    def close(self):
        """Delete the participant and the domain now (and with them every reader and writer
        made here). Left to the garbage collector, a domain outlives a failed test, whose
        traceback holds it, and the next `Wire` on the same domain id in this process is
        refused (DDS_RETCODE_PRECONDITION_NOT_MET: one configuration per domain)."""
        for entity in (getattr(self, 'participant', None), getattr(self, '_domain', None)):
            if entity is not None:
                entity.__del__()   # cyclonedds' own delete; idempotent (its GC call returns)
        self.participant = self._domain = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def writer(self, interface, message, topic):
        return RawWriter(self, interface, message, topic)

    def reader(self, interface, message, topic, depth=1):
        return RawReader(self, interface, message, topic, depth)


class RawWriter:
    """Writes numpy records (core.unitree layouts) as the vendor's IDL type."""

    def __init__(self, wire, interface, message, topic):
        from cyclonedds.pub import DataWriter
        from cyclonedds.topic import Topic
        self.codec = Codec(interface, message)
        self.topic = Topic(wire.participant, topic, idl_type(interface, message))
        self.writer = DataWriter(wire.participant, self.topic)
        self._write = wire._write
        self.written = 0

    def write(self, record):
        ret = self._write(self.writer._ref, self.codec.encode(record))
        if ret < 0:
            raise RuntimeError(f'DDS write on {self.topic.name} failed ({ret})')
        self.written += 1

    def write_bytes(self, data):
        """Write an already serialised sample (tests: a corrupted command)."""
        ret = self._write(self.writer._ref, bytes(data))
        if ret < 0:
            raise RuntimeError(f'DDS write on {self.topic.name} failed ({ret})')

    def matched(self):
        return len(self.writer.get_matched_subscriptions())


class RawReader:
    """Takes the vendor's IDL type as numpy records (core.unitree layouts)."""

    def __init__(self, wire, interface, message, topic, depth=1):
        from cyclonedds.core import InstanceState, Policy, Qos, SampleState, ViewState
        from cyclonedds.sub import DataReader
        from cyclonedds.topic import Topic
        self.codec = Codec(interface, message)
        self.topic = Topic(wire.participant, topic, idl_type(interface, message))
        qos = Qos(Policy.Reliability.BestEffort, Policy.History.KeepLast(int(depth)))
        self.reader = DataReader(wire.participant, self.topic, qos=qos)
        self._take = wire._take
        self._mask = SampleState.Any | ViewState.Any | InstanceState.Any
        self.malformed = 0

    def take(self, n=64):
        """The samples received since the last take (oldest first), decoded; a sample that
        does not decode is counted in `malformed` and skipped."""
        ret = self._take(self.reader._ref, self._mask, int(n))
        if isinstance(ret, int):
            raise RuntimeError(f'DDS take on {self.topic.name} failed ({ret})')
        out = []
        for data, info in ret:
            if not info.valid_data:
                continue
            try:
                out.append(self.codec.decode(data))
            except ValueError:
                self.malformed += 1
        return out

    def matched(self):
        return len(self.reader.get_matched_publications())

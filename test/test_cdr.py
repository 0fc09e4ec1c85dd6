"""core/cdr.py against rclpy's own serialization, in every alignment case.

The bytes are compared through rclpy's deserializer (the code a subscriber runs): Fast CDR
leaves padding bytes uninitialised and its serialized length carries a few bytes of slack,
so byte equality with serialize_message cannot hold; every field must come back exact, and
the message must be no longer than rclpy's.
"""
import itertools
import random

import numpy as np
import pytest
from rclpy.serialization import deserialize_message, serialize_message
from sensor_msgs.msg import Imu, JointState

from simreal_ros.core.cdr import (ImuEncoder, JointStateDecoder, JointStateEncoder,
                                  decode_imu_orientation, split_stamp)

# Names and frame_ids of every length modulo 8 move the arrays across the alignment cases.
NAME_SETS = [[], ['a'], ['ab', 'abc'], ['shoulder_yaw', 'shoulder_pitch', 'elbow_pitch'],
             [f'j{"x" * k}' for k in range(12)], ['jöint_ü', 'b']]
FRAMES = ['', 'b', 'base', 'pelvis_', 'imu_link_frame']


def _reference(names, frame, sec, nanosec, arrays):
    msg = JointState(name=list(names))
    msg.header.frame_id = frame
    msg.header.stamp.sec, msg.header.stamp.nanosec = sec, nanosec
    for field, values in zip(('position', 'velocity', 'effort'), arrays):
        if values is not None:
            setattr(msg, field, [float(v) for v in values])
    return serialize_message(msg)


@pytest.mark.parametrize('names', NAME_SETS, ids=lambda n: f'{len(n)}names')
def test_joint_state_bytes_are_rclpys(names):
    rng = random.Random(len(names))
    for frame in FRAMES:
        enc = JointStateEncoder(names, frame_id=frame)
        for present in itertools.product((False, True), repeat=3):
            arrays = [np.array([rng.uniform(-1e3, 1e3) for _ in names]) if p and names else None
                      for p in present]
            sec, nanosec = rng.randrange(-2**31, 2**31), rng.randrange(0, 10**9)
            ours = enc.encode(sec, nanosec, *arrays)
            reference = _reference(names, frame, sec, nanosec, arrays)
            assert len(ours) <= len(reference), (names, frame, present)
            assert ours[:12] == reference[:12]       # encapsulation and stamp
            back = deserialize_message(ours, JointState)
            assert list(back.name) == names and back.header.frame_id == frame
            assert (back.header.stamp.sec, back.header.stamp.nanosec) == (sec, nanosec)
            for field, values in zip(('position', 'velocity', 'effort'), arrays):
                got = list(getattr(back, field))
                assert got == ([] if values is None else values.tolist())


def test_special_values_and_wrong_lengths():
    enc = JointStateEncoder(['a', 'b'])
    values = np.array([np.nan, -np.inf])
    back = deserialize_message(enc.encode(1, 2, values, None, [0.0, 5e-324]), JointState)
    assert np.isnan(back.position[0]) and back.position[1] == -np.inf
    assert list(back.effort) == [0.0, 5e-324] and list(back.velocity) == []
    with pytest.raises(ValueError, match='shape'):
        enc.encode(0, 0, [1.0, 2.0, 3.0])
    # An empty array is sent as an empty sequence, as the message would be.
    assert enc.encode(0, 0, [], None, None) == enc.encode(0, 0, None, None, None)


def test_imu_bytes_are_rclpys():
    rng = random.Random(7)
    for frame in FRAMES:
        cov = [rng.uniform(-1, 1) for _ in range(9)]
        enc = ImuEncoder(frame, orientation_covariance=cov)
        q = [rng.uniform(-1, 1) for _ in range(4)]
        w = [rng.uniform(-9, 9) for _ in range(3)]
        a = [rng.uniform(-20, 20) for _ in range(3)]
        sec, nanosec = 1795468000, 123456789
        msg = Imu()
        msg.header.frame_id = frame
        msg.header.stamp.sec, msg.header.stamp.nanosec = sec, nanosec
        msg.orientation.w, msg.orientation.x, msg.orientation.y, msg.orientation.z = q
        msg.orientation_covariance = cov
        msg.angular_velocity.x, msg.angular_velocity.y, msg.angular_velocity.z = w
        msg.linear_acceleration.x, msg.linear_acceleration.y, msg.linear_acceleration.z = a
        ours = enc.encode(sec, nanosec, q, w, a)
        assert len(ours) == len(serialize_message(msg)), frame
        back = deserialize_message(ours, Imu)
        assert back.header.frame_id == frame
        assert (back.header.stamp.sec, back.header.stamp.nanosec) == (sec, nanosec)
        o = back.orientation
        assert [o.w, o.x, o.y, o.z] == q
        assert list(back.orientation_covariance) == cov
        assert list(back.angular_velocity_covariance) == [0.0] * 9
        v = back.angular_velocity
        assert [v.x, v.y, v.z] == w
        v = back.linear_acceleration
        assert [v.x, v.y, v.z] == a


def test_split_stamp():
    assert split_stamp(1.5) == (1, 500_000_000)
    assert split_stamp(1795468000.000000001) == (1795468000, 0)   # a double's resolution
    assert split_stamp(0.0) == (0, 0)


def test_joint_state_decoder_reads_rclpys_bytes_in_every_alignment_case():
    """The supervisor's input path: rclpy's own serialization read back field by field, one
    decoder across streams whose frame_id and names change (the cached strings must not
    outlive them)."""
    rng = random.Random(11)
    dec = JointStateDecoder()
    for names in NAME_SETS:
        for frame in FRAMES:
            for present in itertools.product((False, True), repeat=3):
                arrays = [np.array([rng.uniform(-1e3, 1e3) for _ in names])
                          if p and names else None for p in present]
                sec, nanosec = rng.randrange(-2**31, 2**31), rng.randrange(0, 10**9)
                data = _reference(names, frame, sec, nanosec, arrays)
                for _ in range(2):       # a new stream, then its cached strings
                    got = dec.decode(data)
                    assert got[:4] == (sec, nanosec, frame, tuple(names)), (names, frame)
                    for values, back in zip(arrays, got[4:]):
                        assert back.tolist() == ([] if values is None else values.tolist())


def test_joint_state_decoder_same_length_other_names_and_bad_data():
    dec = JointStateDecoder()
    a = _reference(['ab', 'cd'], '', 1, 2, [np.array([1.0, 2.0]), None, None])
    b = _reference(['ab', 'ce'], '', 1, 2, [np.array([3.0, 4.0]), None, None])
    assert dec.decode(a)[3] == ('ab', 'cd')
    assert dec.decode(b)[3] == ('ab', 'ce')      # same size, other bytes: read anew
    assert dec.decode(a)[4].tolist() == [1.0, 2.0]
    for bad in (a[:20], a[:-9], b'\x00\x00\x00\x00' + a[4:], b'\x00\x07\x00\x00' + a[4:],
                b''):
        with pytest.raises(ValueError):
            JointStateDecoder().decode(bad)
    # A truncated message whose strings match the cached ones is still refused.
    with pytest.raises(ValueError):
        dec.decode(a[:-9])


def test_imu_orientation_decoder_reads_rclpys_bytes():
    rng = random.Random(5)
    for frame in FRAMES:
        msg = Imu()
        msg.header.frame_id = frame
        msg.header.stamp.sec, msg.header.stamp.nanosec = 17, 42
        q = [rng.uniform(-1, 1) for _ in range(4)]
        msg.orientation.w, msg.orientation.x, msg.orientation.y, msg.orientation.z = q
        data = serialize_message(msg)
        assert decode_imu_orientation(data) == (17, 42, tuple(q)), frame
        with pytest.raises(ValueError):
            decode_imu_orientation(data[:12 + 4 + len(frame) + 1 + 8])

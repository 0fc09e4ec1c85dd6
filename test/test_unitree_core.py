"""Unitree low-level layouts and CRC (simreal_ros/core/unitree.py), checked independently.

The layouts against the vendor's sizes and against a struct-module packing written here from C
alignment rules; the CRC against a bitwise implementation written here from the algorithm's
definition and against the CRC-32/MPEG-2 check value.
"""
import struct

import numpy as np
import pytest

from simreal_ros.core import unitree


def crc_bitwise(words):
    """The robot's CRC, one bit at a time, from its definition (not from the module)."""
    crc = 0xFFFFFFFF
    for word in words:
        for bit in range(31, -1, -1):
            top = (crc >> 31) & 1
            crc = (crc << 1) & 0xFFFFFFFF
            if top ^ ((int(word) >> bit) & 1):
                crc ^= 0x04C11DB7
    return crc


def test_layout_sizes_are_the_vendors():
    assert unitree.layout('unitree_hg', 'LowCmd_').itemsize == 1004
    assert unitree.layout('unitree_hg', 'LowState_').itemsize == 2092
    assert unitree.layout('unitree_go', 'LowCmd_').itemsize == 812
    assert unitree.layout('unitree_go', 'LowState_').itemsize == 1180
    with pytest.raises(ValueError, match='unitree_go/HighState_'):
        unitree.layout('unitree_go', 'HighState_')


def test_crc_matches_its_definition_and_the_check_value():
    assert unitree.crc32_mpeg2(b'123456789') == 0x0376E6E7      # CRC-32/MPEG-2 check value
    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 250):
        words = rng.integers(0, 2**32, size=n, dtype=np.uint64)
        assert unitree.crc32_words(words) == crc_bitwise(words)


def hg_cmd_struct(msg):
    """hg LowCmd_ packed with struct from C rules: u8 u8, 2 pad to the 4-aligned motor array;
    a motor is u8 + 3 pad + 5 f32 + u32 (24 B); reserve u32[4]; crc u32."""
    values = [int(msg['mode_pr']), int(msg['mode_machine'])]
    for m in msg['motor_cmd']:
        values += [int(m['mode']), *(float(m[k]) for k in ('q', 'dq', 'tau', 'kp', 'kd')),
                   int(m['reserve'])]
    values += [int(v) for v in msg['reserve']] + [int(msg['crc'])]
    return struct.pack('<BB2x' + 'B3x5fI' * 35 + '4II', *values)


def test_hg_command_bytes_are_the_c_layout_with_zero_padding():
    msg = unitree.new('unitree_hg', 'LowCmd_')
    rng = np.random.default_rng(1)
    msg['mode_pr'], msg['mode_machine'] = 1, 6
    cmd = msg['motor_cmd']
    cmd['mode'] = 1
    for k in ('q', 'dq', 'tau', 'kp', 'kd'):
        cmd[k] = rng.normal(size=35)
    cmd['reserve'] = rng.integers(0, 2**32, size=35, dtype=np.uint64)
    msg['reserve'] = [1, 2, 3, 4]
    unitree.stamp_crc(msg)
    raw = msg.tobytes()
    assert raw == hg_cmd_struct(msg)                  # every padding byte zero, fields in place
    words = np.frombuffer(raw[:-4], dtype='<u4')
    assert int(msg['crc']) == crc_bitwise(words)
    assert unitree.crc_ok(msg)


@pytest.mark.parametrize('interface,message', sorted(unitree.LAYOUTS))
def test_a_changed_field_fails_the_crc(interface, message):
    msg = unitree.new(interface, message)
    unitree.stamp_crc(msg)
    assert unitree.crc_ok(msg)
    raw = bytearray(msg.tobytes())
    names = [n for n in msg.dtype.names if n != 'crc']
    for name in names:                          # one bit of each top-level field
        offset = msg.dtype.fields[name][1]
        bad = bytearray(raw)
        bad[offset] ^= 0x01
        corrupted = np.frombuffer(bytes(bad), dtype=msg.dtype)[0]
        assert not unitree.crc_ok(corrupted), name


def test_go_command_starts_as_the_vendor_initialises_it():
    msg = unitree.new('unitree_go', 'LowCmd_')
    assert tuple(msg['head']) == (0xFE, 0xEF) and int(msg['level_flag']) == 0xFF
    assert np.all(msg['motor_cmd']['q'] == np.float32(unitree.GO_POS_STOP))
    assert np.all(msg['motor_cmd']['dq'] == np.float32(unitree.GO_VEL_STOP))
    assert np.all(msg['motor_cmd']['kp'] == 0) and np.all(msg['motor_cmd']['kd'] == 0)
    assert unitree.TYPE_NAMES[('unitree_go', 'LowCmd_')] == 'unitree_go.msg.dds_.LowCmd_'

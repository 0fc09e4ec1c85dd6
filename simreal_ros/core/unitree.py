"""Unitree low-level messages as the robot checks them: the C layout and the CRC over it.

Unitree robots take `LowCmd_` on `rt/lowcmd` and report `LowState_` on `rt/lowstate` (CycloneDDS,
the vendor's IDL types: `unitree_hg` for G1 and H1_2, `unitree_go` for Go2 and H1). DDS carries
them as CDR; the robot, though, checks a CRC-32 computed over the message laid out as a C struct
(little-endian, natural alignment, padding bytes zero), and drops a command whose CRC does not
match. This module is that layout and that CRC, with no ROS and no DDS in it: the adapter
(issue 14) fills a message here, stamps its CRC, and hands the fields to its DDS types.

Each layout is a numpy structured dtype built with C alignment (`align=True`) from the vendor's
field list (read from unitreerobotics/unitree_sdk2_python idl/; the sizes are the vendor's: hg
LowCmd 1004 B, hg LowState 2092 B, go LowCmd 812 B, go LowState 1180 B). A message made by `new()` starts as zeros,
and its padding can never be written through a field, so it stays zero: the field failure where
stale padding in a reused buffer made a robot drop commands now and then (rl_sar #147) cannot
happen here.

The CRC: the message's bytes read as little-endian u32 words, every word but the last (the crc
field itself), each fed most significant bit first through CRC-32 with polynomial 0x04C11DB7,
initial value 0xFFFFFFFF, no reflection, no final XOR (CRC-32/MPEG-2 over the words'
big-endian bytes). It is computed with zlib (C speed, 500 Hz): CRC-32/MPEG-2 equals the
bit-reflected zlib CRC-32 of the bit-reflected bytes, with the final XOR undone.
"""
import zlib

import numpy as np

HG_MOTORS = 35
GO_MOTORS = 20


def _dtype(fields):
    return np.dtype(fields, align=True)


HG_MOTOR_CMD = _dtype([('mode', 'u1'), ('q', '<f4'), ('dq', '<f4'), ('tau', '<f4'),
                       ('kp', '<f4'), ('kd', '<f4'), ('reserve', '<u4')])
HG_LOW_CMD = _dtype([('mode_pr', 'u1'), ('mode_machine', 'u1'),
                     ('motor_cmd', HG_MOTOR_CMD, (HG_MOTORS,)), ('reserve', '<u4', (4,)),
                     ('crc', '<u4')])
HG_IMU_STATE = _dtype([('quaternion', '<f4', (4,)), ('gyroscope', '<f4', (3,)),
                       ('accelerometer', '<f4', (3,)), ('rpy', '<f4', (3,)),
                       ('temperature', '<i2')])
HG_MOTOR_STATE = _dtype([('mode', 'u1'), ('q', '<f4'), ('dq', '<f4'), ('ddq', '<f4'),
                         ('tau_est', '<f4'), ('temperature', '<i2', (2,)), ('vol', '<f4'),
                         ('sensor', '<u4', (2,)), ('motorstate', '<u4'),
                         ('reserve', '<u4', (4,))])
HG_LOW_STATE = _dtype([('version', '<u4', (2,)), ('mode_pr', 'u1'), ('mode_machine', 'u1'),
                       ('tick', '<u4'), ('imu_state', HG_IMU_STATE),
                       ('motor_state', HG_MOTOR_STATE, (HG_MOTORS,)),
                       ('wireless_remote', 'u1', (40,)), ('reserve', '<u4', (4,)),
                       ('crc', '<u4')])
GO_MOTOR_CMD = _dtype([('mode', 'u1'), ('q', '<f4'), ('dq', '<f4'), ('tau', '<f4'),
                       ('kp', '<f4'), ('kd', '<f4'), ('reserve', '<u4', (3,))])
GO_BMS_CMD = _dtype([('off', 'u1'), ('reserve', 'u1', (3,))])
GO_LOW_CMD = _dtype([('head', 'u1', (2,)), ('level_flag', 'u1'), ('frame_reserve', 'u1'),
                     ('sn', '<u4', (2,)), ('version', '<u4', (2,)), ('bandwidth', '<u2'),
                     ('motor_cmd', GO_MOTOR_CMD, (GO_MOTORS,)), ('bms_cmd', GO_BMS_CMD),
                     ('wireless_remote', 'u1', (40,)), ('led', 'u1', (12,)),
                     ('fan', 'u1', (2,)), ('gpio', 'u1'), ('reserve', '<u4'), ('crc', '<u4')])

GO_IMU_STATE = _dtype([('quaternion', '<f4', (4,)), ('gyroscope', '<f4', (3,)),
                       ('accelerometer', '<f4', (3,)), ('rpy', '<f4', (3,)),
                       ('temperature', 'u1')])
GO_MOTOR_STATE = _dtype([('mode', 'u1'), ('q', '<f4'), ('dq', '<f4'), ('ddq', '<f4'),
                         ('tau_est', '<f4'), ('q_raw', '<f4'), ('dq_raw', '<f4'),
                         ('ddq_raw', '<f4'), ('temperature', 'u1'), ('lost', '<u4'),
                         ('reserve', '<u4', (2,))])
GO_BMS_STATE = _dtype([('version_high', 'u1'), ('version_low', 'u1'), ('status', 'u1'),
                       ('soc', 'u1'), ('current', '<i4'), ('cycle', '<u2'),
                       ('bq_ntc', 'u1', (2,)), ('mcu_ntc', 'u1', (2,)),
                       ('cell_vol', '<u2', (15,))])
GO_LOW_STATE = _dtype([('head', 'u1', (2,)), ('level_flag', 'u1'), ('frame_reserve', 'u1'),
                       ('sn', '<u4', (2,)), ('version', '<u4', (2,)), ('bandwidth', '<u2'),
                       ('imu_state', GO_IMU_STATE),
                       ('motor_state', GO_MOTOR_STATE, (GO_MOTORS,)),
                       ('bms_state', GO_BMS_STATE), ('foot_force', '<i2', (4,)),
                       ('foot_force_est', '<i2', (4,)), ('tick', '<u4'),
                       ('wireless_remote', 'u1', (40,)), ('bit_flag', 'u1'),
                       ('adc_reel', '<f4'), ('temperature_ntc1', 'u1'),
                       ('temperature_ntc2', 'u1'), ('power_v', '<f4'), ('power_a', '<f4'),
                       ('fan_frequency', '<u2', (4,)), ('reserve', '<u4'), ('crc', '<u4')])

# (interface, message) -> layout; the DDS type name of each is TYPE_NAMES[...].
LAYOUTS = {('unitree_hg', 'LowCmd_'): HG_LOW_CMD, ('unitree_hg', 'LowState_'): HG_LOW_STATE,
           ('unitree_go', 'LowCmd_'): GO_LOW_CMD, ('unitree_go', 'LowState_'): GO_LOW_STATE}
TYPE_NAMES = {key: f'{key[0]}.msg.dds_.{key[1]}' for key in LAYOUTS}
INTERFACES = ('unitree_hg', 'unitree_go')

# The vendor's markers for a unitree_go motor that is not commanded ("PosStopF", "VelStopF"),
# and the head and level flag its examples set on every LowCmd_.
GO_POS_STOP = 2.146e9
GO_VEL_STOP = 16000.0
GO_HEAD = (0xFE, 0xEF)
GO_LEVEL_LOW = 0xFF


def layout(interface, message):
    """Return the layout (numpy dtype) of `message` ('LowCmd_' or 'LowState_') of `interface`."""
    try:
        return LAYOUTS[(interface, message)]
    except KeyError:
        known = ', '.join(f'{i}/{m}' for i, m in LAYOUTS)
        raise ValueError(f'no layout for {interface}/{message} (known: {known})') from None


def new(interface, message):
    """Return one zeroed message (a numpy record; fields by name, e.g. m['motor_cmd']['q'])."""
    msg = np.zeros((), dtype=layout(interface, message))
    if (interface, message) == ('unitree_go', 'LowCmd_'):
        msg['head'] = GO_HEAD
        msg['level_flag'] = GO_LEVEL_LOW
        msg['motor_cmd']['q'] = GO_POS_STOP
        msg['motor_cmd']['dq'] = GO_VEL_STOP
    return msg


_REVERSED_BITS = bytes(int(f'{b:08b}'[::-1], 2) for b in range(256))


def _reflect32(value):
    return int(f'{value:032b}'[::-1], 2)


def crc32_mpeg2(data):
    """CRC-32/MPEG-2 of `data` (bytes): polynomial 0x04C11DB7, init 0xFFFFFFFF, MSB first, no
    reflection, no final XOR. zlib computes the reflected CRC-32 (with a final XOR): fed the
    bit-reversed bytes, its result bit-reversed and the XOR undone is this one."""
    return _reflect32(zlib.crc32(bytes(data).translate(_REVERSED_BITS))) ^ 0xFFFFFFFF


def crc32_words(words):
    """CRC-32 of u32 `words` as the robot computes it: each word fed most significant bit
    first, i.e. CRC-32/MPEG-2 over the words' big-endian bytes."""
    return crc32_mpeg2(np.asarray(words, dtype='>u4').tobytes())


def crc_of(msg):
    """The CRC a robot expects in `msg`'s crc field (over every 32-bit word before it)."""
    raw = msg.tobytes()
    if len(raw) % 4:
        raise ValueError(f'a {len(raw)}-byte message is not whole 32-bit words')
    return crc32_words(np.frombuffer(raw[:-4], dtype='<u4'))


def stamp_crc(msg):
    """Set `msg`'s crc field; return the CRC."""
    msg['crc'] = crc = crc_of(msg)
    return crc


def crc_ok(msg):
    """True when `msg` carries the CRC of its content (the robot's check on a command)."""
    return int(msg['crc']) == crc_of(msg)


# -- the wireless remote (LowState_.wireless_remote, 40 bytes) -------------------------------
# Bytes 2-3 hold the buttons as a little-endian u16, one bit each, in this order (the vendor's
# key map, read in unitree_rl_gym deploy_real/common/remote_controller.py); the sticks follow
# as float32 (lx at 4, rx at 8, ry at 12, ly at 20), unused here.
REMOTE_BUTTONS = ('R1', 'L1', 'start', 'select', 'R2', 'L2', 'F1', 'F2',
                  'A', 'B', 'X', 'Y', 'up', 'right', 'down', 'left')


def check_buttons(names, what='remote buttons'):
    """Validate button names (ValueError naming the unknown ones); returns them as a tuple."""
    unknown = [n for n in names if n not in REMOTE_BUTTONS]
    if unknown:
        raise ValueError(f'{what}: unknown button(s) {unknown}; known: {list(REMOTE_BUTTONS)}')
    return tuple(names)


def buttons_pressed(wireless_remote):
    """The set of button names pressed in a 40-byte wireless_remote field."""
    raw = np.asarray(wireless_remote, dtype=np.uint8)
    keys = int(raw[2]) | (int(raw[3]) << 8)
    return {name for bit, name in enumerate(REMOTE_BUTTONS) if keys >> bit & 1}


def remote_bytes(pressed=()):
    """A 40-byte wireless_remote field with `pressed` buttons down (the simulated remote)."""
    out = np.zeros(40, dtype=np.uint8)
    keys = 0
    for name in check_buttons(list(pressed)):
        keys |= 1 << REMOTE_BUTTONS.index(name)
    out[2], out[3] = keys & 0xFF, keys >> 8
    return out

"""Unitree low-level messages on the wire: our encoding against independent implementations.

- Our fast codec (C layout -> CDR by a byte index, simreal_ros/drivers/unitree_dds.py) against
  cyclonedds' own serialisation of our IDL classes, byte for byte, for every type.
- Our bytes decoded by the vendor's SDK types (unitree_sdk2py, as packaged on PyPI:
  unitree-sdk2py-dimos, installed --no-deps by scripts/bootstrap.sh), and the vendor's bytes
  decoded by ours; our CRC against the vendor's CRC (its compiled crc32_core) on the same
  message.
- A sample written and taken through CycloneDDS on loopback.
"""
import os
import time

import numpy as np
import pytest

from simreal_ros.core import unitree

dds = pytest.importorskip('simreal_ros.drivers.unitree_dds', reason='cyclonedds not installed')


def vendor():
    """The vendor SDK's IDL types and CRC; in CI their absence is a failure, not a skip."""
    try:
        from unitree_sdk2py.idl.unitree_go.msg import dds_ as go
        from unitree_sdk2py.idl.unitree_hg.msg import dds_ as hg
        from unitree_sdk2py.utils.crc import CRC
    except ImportError as exc:
        if os.environ.get('CI'):
            raise
        pytest.skip(f'vendor SDK not installed ({exc}); make setup installs it')
    return {('unitree_hg', 'LowCmd_'): hg.LowCmd_, ('unitree_hg', 'LowState_'): hg.LowState_,
            ('unitree_go', 'LowCmd_'): go.LowCmd_, ('unitree_go', 'LowState_'): go.LowState_}, \
        CRC()


KEYS = sorted(unitree.LAYOUTS)


def random_record(key, seed):
    """A message with every field random (floats finite) and the CRC stamped."""
    rng = np.random.default_rng(seed)
    rec = unitree.new(*key)
    raw = rng.integers(0, 256, rec.dtype.itemsize, dtype=np.uint8).tobytes()
    rec = dds.record_of(dds.to_sample(np.frombuffer(raw, dtype=rec.dtype)[0], dds.TYPES[key]),
                        *key)           # through the IDL class: padding bytes are zero
    for path in _float_fields(rec.dtype):
        target = rec
        for name in path[:-1]:
            target = target[name]
        target[path[-1]] = rng.uniform(-50, 50, np.shape(target[path[-1]]))
    if key == ('unitree_go', 'LowState_'):
        # The vendor's CRC packs these u8 fields as signed bytes ('b') and fan_frequency as
        # signed shorts: same bits, but its packer refuses values over 127 (32767).
        rec['fan_frequency'] = rec['fan_frequency'] % 32768
        for target, name in ((rec, 'temperature_ntc1'), (rec, 'temperature_ntc2'),
                             (rec['imu_state'], 'temperature'),
                             (rec['motor_state'], 'temperature'),
                             (rec['bms_state'], 'bq_ntc'), (rec['bms_state'], 'mcu_ntc')):
            target[name] = target[name] % 128
    unitree.stamp_crc(rec)
    return rec


def _float_fields(dtype, prefix=()):
    out = []
    for name in dtype.names:
        sub = dtype.fields[name][0]
        base = sub.subdtype[0] if sub.subdtype else sub
        if base.names:
            if sub.subdtype:
                continue   # arrays of structs: their floats via the parent view below
            out += _float_fields(base, prefix + (name,))
        elif base.kind == 'f':
            out.append(prefix + (name,))
    # floats inside arrays of structs (motor_cmd, motor_state): set per field on the array
    for name in dtype.names:
        sub = dtype.fields[name][0]
        if sub.subdtype and sub.subdtype[0].names:
            out += [prefix + (name, f) for f in sub.subdtype[0].names
                    if sub.subdtype[0].fields[f][0].kind == 'f']
    return out


@pytest.mark.parametrize('key', KEYS, ids=['/'.join(k) for k in KEYS])
def test_our_codec_matches_cyclonedds_serialisation(key):
    codec = dds.Codec(*key)
    for seed in range(3):
        rec = random_record(key, seed)
        ref = dds.to_sample(rec, dds.TYPES[key]).serialize()
        ref = ref.ljust((len(ref) + 3) & ~3, b'\0')     # as DataWriter.write pads it
        assert codec.encode(rec) == ref
        assert codec.decode(ref).tobytes() == rec.tobytes()


@pytest.mark.parametrize('key', KEYS, ids=['/'.join(k) for k in KEYS])
def test_the_vendor_sdk_reads_ours_and_we_read_the_vendors(key):
    types, crc = vendor()
    codec = dds.Codec(*key)
    rec = random_record(key, 7)
    theirs = types[key].deserialize(codec.encode(rec))
    # Field by field, as the vendor's code reads them.
    items = 'motor_cmd' if 'LowCmd_' in key else 'motor_state'
    for i in (0, 5, len(getattr(theirs, items)) - 1):
        for field in ('q', 'dq', 'kp', 'kd', 'tau', 'tau_est', 'mode'):
            if hasattr(getattr(theirs, items)[i], field):
                assert getattr(getattr(theirs, items)[i], field) == pytest.approx(
                    float(rec[items][field][i]), rel=1e-6), (items, i, field)
    assert theirs.crc == int(rec['crc'])
    # The vendor's CRC over its decoded message equals ours (its packing, its C code).
    assert crc.Crc(theirs) == unitree.crc_of(rec)
    # And back: the vendor's serialisation decodes to the same record.
    back = codec.decode(theirs.serialize().ljust(codec.size, b'\0'))
    assert back.tobytes() == rec.tobytes()


def test_a_flipped_bit_fails_the_crc_for_the_vendor_too():
    types, crc = vendor()
    key = ('unitree_hg', 'LowCmd_')
    rec = random_record(key, 3)
    rec['motor_cmd']['kp'][4] += 1.0        # content changed, CRC not restamped
    assert not unitree.crc_ok(rec)
    theirs = types[key].deserialize(dds.Codec(*key).encode(rec))
    assert crc.Crc(theirs) != theirs.crc


def test_a_short_or_foreign_sample_is_refused_by_the_decoder():
    codec = dds.Codec('unitree_hg', 'LowState_')
    good = codec.encode(random_record(('unitree_hg', 'LowState_'), 1))
    with pytest.raises(ValueError, match='bytes'):
        codec.decode(good[:-8])
    with pytest.raises(ValueError, match='header'):
        codec.decode(b'\x00\x07' + good[2:])


def test_the_remote_buttons_round_trip_and_unknown_names_are_refused():
    raw = unitree.remote_bytes(['L2', 'R2'])
    assert unitree.buttons_pressed(raw) == {'L2', 'R2'}
    # The vendor's layout: a u16 at bytes 2-3, R1 = bit 0 ... left = bit 15.
    assert int(raw[2]) | int(raw[3]) << 8 == (1 << 5) | (1 << 4)
    assert unitree.buttons_pressed(unitree.remote_bytes()) == set()
    with pytest.raises(ValueError, match='unknown button'):
        unitree.remote_bytes(['L3'])


def test_a_sample_crosses_cyclonedds_on_loopback():
    domain = (int(os.environ.get('ROS_DOMAIN_ID', '0')) + 150) % 233
    with dds.Wire(domain, 'lo') as wire:
        key = ('unitree_hg', 'LowState_')
        reader = wire.reader(*key, dds.TOPIC_STATE, depth=4)
        writer = wire.writer(*key, dds.TOPIC_STATE)
        rec = random_record(key, 11)
        got, deadline = [], time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            writer.write(rec)
            time.sleep(0.05)
            got = reader.take()
    assert got, 'no sample taken within 10 s'
    assert got[-1].tobytes() == rec.tobytes() and unitree.crc_ok(got[-1])


def test_a_closed_wire_frees_its_domain_for_the_next_one_in_this_process():
    # A domain id takes one configuration per process while its domain lives; a failed test's
    # traceback kept one alive, and the next test's Wire on that id was refused.
    domain = (int(os.environ.get('ROS_DOMAIN_ID', '0')) + 151) % 233
    first = dds.Wire(domain, 'lo')
    try:
        with pytest.raises(Exception, match='PRECONDITION_NOT_MET'):
            dds.Wire(domain, 'lo', multicast=False)
    finally:
        first.close()
    first.close()   # twice is harmless
    with dds.Wire(domain, 'lo', multicast=False) as second:
        assert second.writer('unitree_hg', 'LowCmd_', dds.TOPIC_CMD).matched() == 0

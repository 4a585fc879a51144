"""TensorBoard event files from kolo.report (python/kolo/tensorboard.py): two ranks under
kolorun report five steps with $KOLO_TENSORBOARD_DIR set; the folder then holds one event
file (rank 0's), read back here by a reader written from the format's description alone
(TFRecord framing with its masked CRC-32C computed bit by bit, the protobuf wire format
decoded by hand), not with the writer's code or python3-protobuf."""
import os
import struct

import pytest

import kolotest

MASK_DELTA = 0xA282EAD8


def crc32c_bitwise(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def masked(data: bytes) -> int:
    crc = crc32c_bitwise(data)
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF


def records(blob: bytes):
    """TFRecord: uint64 length, uint32 masked crc of the length, data, uint32 masked crc."""
    at = 0
    while at < len(blob):
        header = blob[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", blob[at + 8:at + 12])
        assert header_crc == masked(header), "length crc"
        data = blob[at + 12:at + 12 + length]
        (data_crc,) = struct.unpack("<I", blob[at + 12 + length:at + 16 + length])
        assert len(data) == length and data_crc == masked(data), "data crc"
        yield data
        at += 16 + length


def varint(data: bytes, at: int):
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def fields(data: bytes):
    """(field number, value) pairs of one message: varint, fixed64, bytes, fixed32."""
    at = 0
    while at < len(data):
        key, at = varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = varint(data, at)
        elif wire == 1:
            value, at = data[at:at + 8], at + 8
        elif wire == 2:
            length, at = varint(data, at)
            value, at = data[at:at + length], at + length
        elif wire == 5:
            value, at = data[at:at + 4], at + 4
        else:
            raise AssertionError("wire type %d" % wire)
        yield number, value


def event(data: bytes) -> dict:
    """tensorflow.Event: 1 wall_time (double), 2 step, 3 file_version, 5 summary; Summary:
    1 value; Summary.Value: 1 tag, 2 simple_value (float)."""
    out = {"scalars": {}, "step": 0}  # proto3: a zero step is not written
    for number, value in fields(data):
        if number == 1:
            out["wall_time"] = struct.unpack("<d", value)[0]
        elif number == 2:
            out["step"] = value
        elif number == 3:
            out["file_version"] = value.decode()
        elif number == 5:
            for n, item in fields(value):
                assert n == 1
                entry = dict(fields(item))
                out["scalars"][entry[1].decode()] = struct.unpack("<f", entry[2])[0]
    return out


def test_rank_zero_s_reports_become_a_tensorboard_event_file(tmp_path):
    folder = tmp_path / "tb"
    kolotest.kolorun(2, kolotest.worker("tensorboard_report.py"), timeout=120,
                     extra_env={"KOLO_TENSORBOARD_DIR": str(folder)})
    files = os.listdir(folder)
    assert len(files) == 1 and files[0].startswith("events.out.tfevents."), files
    events = [event(r) for r in records((folder / files[0]).read_bytes())]
    assert events[0]["file_version"] == "brain.Event:2"
    assert [e["step"] for e in events[1:]] == [0, 1, 2, 3, 4]
    for e in events[1:]:
        step = e["step"]
        assert e["scalars"] == {"loss": pytest.approx(1 / (step + 1)),
                                "accuracy": pytest.approx(0.5 + step / 10)}  # rank 0's; strings, bools left out
        assert e["wall_time"] > 1.6e9


def test_the_reader_refuses_a_damaged_record():
    from kolo import tensorboard
    record = bytearray(tensorboard.tfrecord(b"\x1a\x04abcd"))
    assert list(records(bytes(record))) == [b"\x1a\x04abcd"]
    record[13] ^= 1
    with pytest.raises(AssertionError, match="data crc"):
        list(records(bytes(record)))

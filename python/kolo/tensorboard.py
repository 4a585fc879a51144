"""TensorBoard event files for what a job reports, written without TensorBoard.

kolo.report(step=..., loss=..., ...) (kolo.torch.report too) shows a job's metrics on the
dashboard; when the job asks for it, rank 0 also appends them as scalars to a TensorBoard
event file, so `tensorboard --logdir <dir>` works as it did for HorovodRunner users:

- KOLO_TENSORBOARD_DIR=<folder> in the job's environment (exec.env, Runner(env=...)), or
- kolo.tensorboard.open_writer(folder) in the program.

The format is TensorBoard's own: a file `events.out.tfevents.<seconds>.<host>.<pid>.kolo`
holding TFRecords (little-endian uint64 length, its masked CRC32C, the bytes, their
masked CRC32C) around `tensorflow.Event` protobufs: first one with file_version
"brain.Event:2", then one per report with wall_time, step and a Summary of
{tag, simple_value} per numeric field. The messages are built with python3-protobuf from
descriptors made here (field numbers of tensorflow/core/util/event.proto and
framework/summary.proto), so neither TensorFlow nor protoc is needed.
"""
from __future__ import annotations

import math
import os
import socket
import struct
import threading
import time
from typing import Any, Mapping, Optional

from google.protobuf import descriptor_pb2, descriptor_pool

try:  # protobuf >= 4.21
    from google.protobuf.message_factory import GetMessageClass as _message_class
except ImportError:  # pragma: no cover - older python3-protobuf
    from google.protobuf import message_factory as _mf

    def _message_class(descriptor: Any) -> Any:
        return _mf.MessageFactory().GetPrototype(descriptor)


ENV = "KOLO_TENSORBOARD_DIR"
FILE_VERSION = "brain.Event:2"
STEP_KEYS = ("step", "global_step")


def _crc32c_table() -> list:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as TFRecord uses."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC: rotate right by 15 and add 0xa282ead8."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord(data: bytes) -> bytes:
    """One TFRecord around data."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


def _messages() -> Any:
    """The Event and Summary classes, from descriptors with TensorFlow's field numbers."""
    f = descriptor_pb2.FileDescriptorProto(name="kolo_tensorboard_event.proto", package="tensorflow", syntax="proto3")
    T = descriptor_pb2.FieldDescriptorProto
    value = f.message_type.add(name="SummaryValue")
    value.field.add(name="tag", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=T.TYPE_FLOAT, label=T.LABEL_OPTIONAL)
    summary = f.message_type.add(name="Summary")
    summary.field.add(
        name="value", number=1, type=T.TYPE_MESSAGE, label=T.LABEL_REPEATED, type_name=".tensorflow.SummaryValue"
    )
    event = f.message_type.add(name="Event")
    event.field.add(name="wall_time", number=1, type=T.TYPE_DOUBLE, label=T.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=T.TYPE_INT64, label=T.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL, oneof_index=0)
    event.field.add(
        name="summary",
        number=5,
        type=T.TYPE_MESSAGE,
        label=T.LABEL_OPTIONAL,
        type_name=".tensorflow.Summary",
        oneof_index=0,
    )
    event.oneof_decl.add(name="what")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return (
        _message_class(pool.FindMessageTypeByName("tensorflow.Event")),
        _message_class(pool.FindMessageTypeByName("tensorflow.Summary")),
    )


class EventWriter:
    """Appends scalar events to one new event file in folder (created if needed)."""

    def __init__(self, folder: str, suffix: str = ".kolo"):
        os.makedirs(folder, exist_ok=True)
        self.Event, self.Summary = _messages()
        name = "events.out.tfevents.%010d.%s.%d%s" % (int(time.time()), socket.gethostname(), os.getpid(), suffix)
        self.path = os.path.join(folder, name)
        self._lock = threading.Lock()
        self._file = open(self.path, "ab")
        self._step = 0
        self._write(self.Event(wall_time=time.time(), file_version=FILE_VERSION))

    def _write(self, event: Any) -> None:
        with self._lock:
            self._file.write(tfrecord(event.SerializeToString()))
            self._file.flush()

    def add_scalars(
        self, values: Mapping[str, Any], step: Optional[int] = None, wall_time: Optional[float] = None
    ) -> int:
        """Writes one event with every finite number of values as a scalar (bools and
        the step itself left out); returns how many scalars it held."""
        if step is None:
            step = next(
                (
                    int(values[k])
                    for k in STEP_KEYS
                    if isinstance(values.get(k), (int, float)) and not isinstance(values.get(k), bool)
                ),
                self._step,
            )
        self._step = step + 1
        summary = self.Summary()
        for tag, value in values.items():
            if tag in STEP_KEYS or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if not math.isfinite(float(value)):
                continue
            summary.value.add(tag=str(tag), simple_value=float(value))
        if summary.value:
            self._write(
                self.Event(wall_time=time.time() if wall_time is None else wall_time, step=step, summary=summary)
            )
        return len(summary.value)

    def close(self) -> None:
        with self._lock:
            self._file.close()


_writer: Optional[EventWriter] = None
_writer_lock = threading.Lock()


def open_writer(folder: Optional[str] = None) -> Optional[EventWriter]:
    """This process's writer for folder (default $KOLO_TENSORBOARD_DIR); None if neither."""
    global _writer
    folder = folder or os.environ.get(ENV)
    if not folder:
        return None
    with _writer_lock:
        if _writer is None or os.path.dirname(_writer.path) != os.path.abspath(folder):
            _writer = EventWriter(os.path.abspath(folder))
        return _writer


def on_report(progress: Mapping[str, Any], rank: int) -> None:
    """kolo.report's hook: rank 0 writes the report's numbers when a folder is asked for."""
    if rank != 0:
        return
    writer = _writer if _writer is not None else open_writer()
    if writer is not None:
        writer.add_scalars(progress)


__all__ = ["EventWriter", "open_writer", "on_report", "tfrecord", "crc32c", "masked_crc32c", "ENV"]

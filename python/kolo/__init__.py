"""kolo: distributed data-parallel training on kolo's C data plane (libkolo).

This package is framework-free (numpy arrays and raw buffers); `kolo.torch` is
the PyTorch module (Horovod's horovod.torch API) and `kolo.elastic` keeps a
training function alive across ring changes in a kolo job. Run a script with
`kolorun -np N python3 train.py`, or submit it as a kolo `exec` job.

    import kolo
    kolo.init()
    total = kolo.allreduce(numpy_array, op=kolo.Sum)
"""
from __future__ import annotations

import ctypes
import json
import os
import pkgutil
import sys
from typing import Any, Callable, Dict, List

# kolo.v1 (protoc's Python stubs of proto/kolo/v1) may live in another sys.path entry
__path__ = pkgutil.extend_path(__path__, __name__)  # noqa: F821

from . import _core, _lib  # noqa: E402
from ._core import Handle  # noqa: E402
from ._runtime import RUNTIME  # noqa: E402
from .collectives import (
    allgather,
    allgather_async,
    allreduce,
    allreduce_,
    allreduce_async,  # noqa: E402
    allreduce_async_,
    alltoall,
    alltoall_async,
    barrier,
    broadcast,
    broadcast_,
    broadcast_async,
    broadcast_async_,
    grouped_allreduce,
    join,
    poll,
    reducescatter,
    reducescatter_async,
    synchronize,
)
from .errors import (
    AbortedError,
    ForkedProcessError,
    JobStoppedError,
    KoloError,
    KoloTimeoutError,  # noqa: E402
    MismatchError,
    NotInitializedError,
    PeerLostError,
    RingChangedError,
    StalledError,
)
from .objects import allgather_object, broadcast_object  # noqa: E402
from . import elastic  # noqa: E402,F401

__version__ = "0.1.0"

# reduction ops (horovod names)
Sum = _core.SUM
Average = _core.AVG
Min = _core.MIN
Max = _core.MAX
Product = _core.PROD


def init() -> None:
    """Joins this process's ring: the kolo agent's (an `exec` job), kolorun's
    (KOLO_SIZE set), or a ring of one. Calling it again does nothing."""
    RUNTIME.init()


def shutdown() -> None:
    """Waits for pending operations, leaves the ring and frees it."""
    RUNTIME.shutdown()


def is_initialized() -> bool:
    return RUNTIME.is_initialized()


def rank() -> int:
    """This process's rank in the ring, 0 <= rank < size (in a process set's collectives too)."""
    return RUNTIME.global_rank()


def size() -> int:
    """Number of ranks in the ring (it may change in an elastic job)."""
    return RUNTIME.global_size()


def local_rank() -> int:
    """Rank among the ranks on this host."""
    return RUNTIME.local_rank()


def local_size() -> int:
    """Number of ranks on this host."""
    return RUNTIME.local_size()


def cross_rank() -> int:
    """This host's index among hosts (ranks on one host are consecutive)."""
    return RUNTIME.rank() // max(RUNTIME.local_size(), 1)


def cross_size() -> int:
    """Number of hosts (assuming the same number of ranks on each)."""
    return max(RUNTIME.size() // max(RUNTIME.local_size(), 1), 1)


def is_homogeneous() -> bool:
    return RUNTIME.size() % max(RUNTIME.local_size(), 1) == 0


# functions returning more REPORT keys (kolo.torch.modes registers its statistics)
REPORT_EXTRAS: List[Callable[[], Dict[str, Any]]] = []


def report(**progress: Any) -> None:
    """Sends progress (step, total_steps, loss, accuracy, samples_per_sec, ...)
    to the kolo agent, which shows it in the job's status (no-op outside a job); with
    $KOLO_TENSORBOARD_DIR set (or kolo.tensorboard.open_writer called), rank 0 also
    writes its numbers to a TensorBoard event file there (kolo/tensorboard.py)."""
    RUNTIME.require()
    for extra in REPORT_EXTRAS:  # e.g. kolo.torch.modes: rounds, bytes_sent, staleness, ...
        progress = dict(extra(), **progress)
    RUNTIME.report(json.dumps(progress, separators=(",", ":"), allow_nan=False))
    if os.environ.get("KOLO_TENSORBOARD_DIR") or "kolo.tensorboard" in sys.modules:
        from . import tensorboard

        tensorboard.on_report(progress, RUNTIME.rank())


def engine_available() -> bool:
    """Whether this libkolo has the named-operation engine (engine.h): always, since
    every operation goes through its one route (kept for callers that ask)."""
    return True


def engine_stats() -> dict:
    """What libkolo's engine did on this rank since the ring formed: negotiation
    cycles and time, names sent in full or as cache bits, fused batches and the
    tensors in them (kolo_engine_stats_get); {} with an older libkolo."""
    comm = RUNTIME.require()
    _lib.lib.load()
    if not _lib.lib.stats:
        return {}
    stats = _lib.EngineStats()
    RUNTIME.check(_lib.lib.kolo_engine_stats_get(comm, ctypes.byref(stats)), "kolo.engine_stats")
    return {name: getattr(stats, name) for name, _ in _lib.EngineStats._fields_}


def library_path() -> str:
    """The libkolo.so this package uses."""
    return _lib.library_path()


def __getattr__(name: str) -> Any:
    """kolo.Runner (kolo/runner.py) is imported on first use: `import kolo` stays light."""
    if name in ("Runner", "RunnerError"):
        from . import runner

        return getattr(runner, name)
    raise AttributeError("module 'kolo' has no attribute %r" % name)


__all__ = [
    "init",
    "shutdown",
    "is_initialized",
    "rank",
    "size",
    "local_rank",
    "local_size",
    "cross_rank",
    "cross_size",
    "is_homogeneous",
    "report",
    "engine_available",
    "engine_stats",
    "library_path",
    "allreduce",
    "allreduce_",
    "allreduce_async",
    "allreduce_async_",
    "grouped_allreduce",
    "allgather",
    "allgather_async",
    "broadcast",
    "broadcast_",
    "broadcast_async",
    "broadcast_async_",
    "reducescatter",
    "reducescatter_async",
    "alltoall",
    "alltoall_async",
    "barrier",
    "join",
    "synchronize",
    "poll",
    "Handle",
    "broadcast_object",
    "allgather_object",
    "Sum",
    "Average",
    "Min",
    "Max",
    "Product",
    "KoloError",
    "PeerLostError",
    "KoloTimeoutError",
    "AbortedError",
    "RingChangedError",
    "MismatchError",
    "StalledError",
    "JobStoppedError",
    "NotInitializedError",
    "ForkedProcessError",
    "elastic",
    "Runner",
    "RunnerError",
]

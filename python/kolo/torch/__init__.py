"""kolo.torch: Horovod's horovod.torch API on kolo's C data plane.

A Horovod script switches by changing one line:

    import kolo.torch as hvd          # was: import horovod.torch as hvd
    hvd.init()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

No part of it is compiled against PyTorch: tensors go to libkolo by pointer,
so it works with any torch version. See docs/PYTHON.md."""
from __future__ import annotations

from .. import (AbortedError, ForkedProcessError, JobStoppedError, KoloError, KoloTimeoutError, MismatchError,  # noqa: F401
                NotInitializedError, PeerLostError, RingChangedError, StalledError, cross_rank, cross_size,
                engine_available, engine_stats, init, is_homogeneous, is_initialized, library_path, local_rank, local_size,
                rank, report, shutdown, size)
from .checkpoint import Checkpointer  # noqa: F401
from .compression import Compression, Compressor  # noqa: F401
from .functions import (allgather_object, broadcast_object, broadcast_optimizer_state,  # noqa: F401
                        broadcast_parameters)
from .ops import (Average, Max, Min, Product, Sum, allgather, allgather_async, allreduce, allreduce_,  # noqa: F401
                  allreduce_async, allreduce_async_, alltoall, alltoall_async, barrier, broadcast, broadcast_,
                  broadcast_async, broadcast_async_, global_process_set, grouped_allreduce,
                  grouped_allreduce_, grouped_allreduce_async, grouped_allreduce_async_, join, poll,
                  reducescatter, reducescatter_async, synchronize)
from .optimizer import DistributedOptimizer  # noqa: F401
from .modes import BoundedAsync, DiLoCo, LocalSGD, Rounds, join  # noqa: F401,F811 (join: ends a mode's rounds too)
from . import elastic  # noqa: E402,F401

# horovod's name for a failed collective
HorovodInternalError = KoloError


def mpi_threads_supported() -> bool:
    """horovod compatibility: kolo has no MPI; every thread may call kolo."""
    return True


def gloo_enabled() -> bool:
    return False


def mpi_enabled() -> bool:
    return False


__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size", "cross_rank", "cross_size",
    "is_homogeneous", "report", "engine_available", "engine_stats", "library_path", "mpi_threads_supported", "gloo_enabled",
    "mpi_enabled",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "grouped_allreduce", "grouped_allreduce_",
    "grouped_allreduce_async", "grouped_allreduce_async_", "allgather", "allgather_async", "broadcast",
    "broadcast_", "broadcast_async", "broadcast_async_", "reducescatter", "reducescatter_async", "alltoall",
    "alltoall_async", "barrier", "join", "synchronize", "poll", "global_process_set",
    "Average", "Sum", "Min", "Max", "Product", "Compression", "Compressor",
    "broadcast_parameters", "broadcast_optimizer_state", "broadcast_object", "allgather_object",
    "DistributedOptimizer", "elastic", "Checkpointer", "LocalSGD", "DiLoCo", "BoundedAsync", "Rounds",
    "KoloError", "HorovodInternalError", "PeerLostError", "KoloTimeoutError", "AbortedError", "RingChangedError",
    "MismatchError", "StalledError", "JobStoppedError", "NotInitializedError", "ForkedProcessError",
]

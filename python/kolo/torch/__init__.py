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

from typing import Any

from .. import (
    AbortedError,
    ForkedProcessError,
    JobStoppedError,
    KoloError,
    KoloTimeoutError,  # noqa: F401
    MismatchError,
    NotInitializedError,
    PeerLostError,
    RingChangedError,
    StalledError,
    cross_rank,
    cross_size,
    engine_available,
    engine_stats,
    is_homogeneous,
    is_initialized,
    library_path,
    local_rank,
    local_size,
    rank,
    report,
    shutdown,
    size,
)
from .. import init as _kolo_init
from ..process_sets import (
    ProcessSet,
    ProcessSetLostError,
    add_process_set,  # noqa: F401
    init_process_sets as _init_process_sets,
    remove_process_set,
)
from .checkpoint import Checkpointer  # noqa: F401
from .compression import Compression, Compressor  # noqa: F401
from .functions import allgather_object, broadcast_object, broadcast_optimizer_state, broadcast_parameters  # noqa: F401
from .ops import (
    Adasum,
    Average,
    Max,
    Min,
    Product,
    Sum,
    allgather,
    allgather_async,  # noqa: F401
    allreduce,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    alltoall,
    alltoall_async,
    barrier,
    broadcast,
    broadcast_,
    broadcast_async,
    broadcast_async_,
    global_process_set,
    grouped_allreduce,
    grouped_allreduce_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
    join,
    poll,
    reducescatter,
    reducescatter_async,
    synchronize,
)
from .grouped import (
    grouped_allgather,
    grouped_allgather_async,
    grouped_reducescatter,  # noqa: F401
    grouped_reducescatter_async,
)
from .optimizer import DistributedOptimizer  # noqa: F401
from .mode_optimizer import lr_scale  # noqa: F401
from .sparse import sparse_allreduce_async  # noqa: F401
from .sync_batch_norm import SyncBatchNorm  # noqa: F401
from .modes import BoundedAsync, DiLoCo, LocalSGD, Rounds, join  # noqa: F401,F811 (join: ends a mode's rounds too)
from . import elastic  # noqa: E402,F401

from .basics import (
    ccl_built,
    cuda_built,
    ddl_built,
    gloo_built,
    gloo_enabled,
    mpi_built,  # noqa: F401,E402
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rocm_built,
)
from ..elastic import RingChangedInterrupt  # noqa: E402
from ..errors import ArgumentError, DuplicateNameError  # noqa: E402,F401


def init(comm: Any = None, process_sets: Any = None) -> None:
    """Joins the ring (kolo.init) and adds process_sets (Horovod's static process sets:
    a list of ProcessSet or rank lists, the same on every rank; "dynamic" or None: none
    now, add_process_set later). comm (an MPI communicator in Horovod) is refused: kolo's
    ring is its own."""
    if comm is not None:
        raise ValueError(
            "kolo: init(comm=...) takes an MPI communicator in Horovod; kolo has no MPI (its ring "
            "comes from kolorun or the kolo agent); use process_sets= for a subset of ranks"
        )
    _kolo_init()
    global_process_set.ranks = list(range(size()))
    _init_process_sets(process_sets)


# horovod's names: a failed collective (every kolo failure), and the interrupt
# elastic training raises when the ring is about to change
HorovodInternalError = KoloError
HostsUpdatedInterrupt = RingChangedInterrupt


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
    "mpi_threads_supported",
    "gloo_enabled",
    "mpi_enabled",
    "mpi_built",
    "gloo_built",
    "nccl_built",
    "ccl_built",
    "cuda_built",
    "rocm_built",
    "ddl_built",
    "allreduce",
    "allreduce_",
    "allreduce_async",
    "allreduce_async_",
    "grouped_allreduce",
    "grouped_allreduce_",
    "grouped_allreduce_async",
    "grouped_allreduce_async_",
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
    "grouped_allgather",
    "grouped_allgather_async",
    "grouped_reducescatter",
    "grouped_reducescatter_async",
    "sparse_allreduce_async",
    "barrier",
    "join",
    "synchronize",
    "poll",
    "global_process_set",
    "ProcessSet",
    "ProcessSetLostError",
    "add_process_set",
    "remove_process_set",
    "Average",
    "Sum",
    "Min",
    "Max",
    "Product",
    "Adasum",
    "Compression",
    "Compressor",
    "broadcast_parameters",
    "broadcast_optimizer_state",
    "broadcast_object",
    "allgather_object",
    "DistributedOptimizer",
    "SyncBatchNorm",
    "elastic",
    "Checkpointer",
    "LocalSGD",
    "DiLoCo",
    "BoundedAsync",
    "lr_scale",
    "Rounds",
    "KoloError",
    "HorovodInternalError",
    "HostsUpdatedInterrupt",
    "DuplicateNameError",
    "ArgumentError",
    "PeerLostError",
    "KoloTimeoutError",
    "AbortedError",
    "RingChangedError",
    "MismatchError",
    "StalledError",
    "JobStoppedError",
    "NotInitializedError",
    "ForkedProcessError",
]

"""horovod.torch's build and controller queries, answered for kolo: scripts
branch on them (`if hvd.nccl_built(): ...`), so each says what this libkolo
really has. kolo has its own controller and data plane (no MPI, Gloo, oneCCL,
ROCm or DDL); CUDA tensors go over NCCL when libkolo was built with CUDA and
NCCL, which libkolo itself reports (kolo_nccl_version)."""
from __future__ import annotations

import ctypes

from .. import _lib


def nccl_built() -> int:
    """NCCL's version code (e.g. 22403) when libkolo was built with CUDA and
    NCCL, else 0 (Horovod returns the same: truthy exactly when NCCL is in)."""
    cdll = _lib.lib.load()
    try:
        function = cdll.kolo_nccl_version
    except AttributeError:  # a libkolo from before the query: built without it
        return 0
    function.restype = ctypes.c_int
    function.argtypes = []
    return int(function())


def cuda_built() -> bool:
    """Whether libkolo runs CUDA tensors on the GPU (its CUDA path is NCCL's)."""
    return nccl_built() > 0


def rocm_built() -> bool:
    return False


def mpi_built() -> bool:
    """kolo's controller and ring are its own: no MPI."""
    return False


def gloo_built() -> bool:
    return False


def ccl_built() -> bool:
    return False


def ddl_built() -> bool:
    return False


def mpi_enabled() -> bool:
    return False


def gloo_enabled() -> bool:
    return False


def mpi_threads_supported() -> bool:
    """False: there is no MPI to mix with (mpi4py). Every thread may call kolo."""
    return False


__all__ = [
    "nccl_built",
    "cuda_built",
    "rocm_built",
    "mpi_built",
    "gloo_built",
    "ccl_built",
    "ddl_built",
    "mpi_enabled",
    "gloo_enabled",
    "mpi_threads_supported",
]

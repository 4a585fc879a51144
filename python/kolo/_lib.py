"""The ctypes binding to libkolo: finds the shared library, declares the C
signatures of include/kolo/kolo.h, elastic.h, engine.h and process_set.h, and nothing else.

ctypes releases the GIL for the whole of every foreign call, so Python threads
keep running while kolo waits on the ring or moves data. Tensor memory is passed
by pointer; no PyTorch header is compiled against, so one build works with any
torch version.

Where libkolo is looked for, first match wins (the way a packaged library is found):
  1. $KOLO_LIBRARY (a path to libkolo.so; an error if it names no file);
  2. next to this package: kolo/lib/libkolo.so, then kolo/libkolo.so (a copy installed
     or put in the wheel with the package);
  3. the system loader: libkolo.so.0, then libkolo.so (LD_LIBRARY_PATH, ld.so.cache,
     /usr/lib...; ctypes.util.find_library("kolo") names it in the error);
  4. development fallback, only when this package is a source checkout's python/kolo
     (<checkout>/include/kolo/kolo.h exists): <checkout>/build/lib/libkolo.so.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from ctypes import POINTER, c_char_p, c_double, c_int, c_size_t, c_uint, c_uint8, c_uint64, c_void_p
from typing import List, Optional

from . import _abi

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(_HERE))
SYSTEM_NAMES = ("libkolo.so.0", "libkolo.so")


def package_paths() -> List[str]:
    """libkolo next to this package (an installed copy)."""
    return [os.path.join(_HERE, "lib", "libkolo.so"), os.path.join(_HERE, "libkolo.so")]


def checkout_root() -> Optional[str]:
    """The source checkout this package is the python/kolo of (it has include/kolo/kolo.h), if any."""
    return _REPO if os.path.exists(os.path.join(_REPO, "include", "kolo", "kolo.h")) else None


def checkout_paths() -> List[str]:
    """The development fallback: the build/ of the source checkout this package is in, if any."""
    root = checkout_root()
    return [os.path.join(root, "build", "lib", "libkolo.so")] if root else []


def candidate_paths() -> List[str]:
    """Every place libkolo is looked for, in order (system names as given to dlopen)."""
    explicit = os.environ.get("KOLO_LIBRARY")
    return ([explicit] if explicit else []) + package_paths() + list(SYSTEM_NAMES) + checkout_paths()


def _load() -> ctypes.CDLL:
    explicit = os.environ.get("KOLO_LIBRARY")
    if explicit:
        if not os.path.exists(explicit):
            raise ImportError("KOLO_LIBRARY=%s: no such file" % explicit)
        return ctypes.CDLL(explicit)
    for path in package_paths():
        if os.path.exists(path):
            return ctypes.CDLL(path)
    for name in SYSTEM_NAMES:
        try:
            return ctypes.CDLL(name)
        except OSError:
            pass
    for path in checkout_paths():
        if os.path.exists(path):
            return ctypes.CDLL(path)
    raise ImportError(
        "libkolo.so not found (looked in %s; find_library('kolo'): %s); build kolo "
        "(cmake -S . -B build && cmake --build build), install it, or set KOLO_LIBRARY"
        % (", ".join(candidate_paths()), ctypes.util.find_library("kolo"))
    )


class RingSpec(ctypes.Structure):
    """kolo_ring_spec (kolo.h)."""

    _fields_ = [
        ("epoch", c_uint64),
        ("rank", c_int),
        ("size", c_int),
        ("local_rank", c_int),
        ("local_size", c_int),
        ("peers", POINTER(c_char_p)),
        ("secret", c_char_p),
        ("timeout_ms", c_int),
        ("nccl_id", POINTER(c_uint8)),
    ]


RESULT_MESSAGE_BYTES = _abi.KOLO_RESULT_MESSAGE_BYTES


class Result(ctypes.Structure):
    """kolo_result (engine.h)."""

    _fields_ = [
        ("status", c_int),
        ("message", ctypes.c_char * RESULT_MESSAGE_BYTES),
        ("output", c_void_p),
        ("output_count", c_size_t),
        ("last_rank", c_int),
    ]


ALLOC_FN = ctypes.CFUNCTYPE(c_void_p, c_void_p, c_size_t)
"""kolo_op_options.alloc: (context, element count) -> address of the output, or NULL."""


class OpOptions(ctypes.Structure):
    """kolo_op_options (kolo.h): how one operation runs (name, stream, flags, scale
    factors, who allocates an output whose size only the ring learns)."""

    _fields_ = [
        ("name", c_char_p),
        ("cuda_stream", c_void_p),
        ("flags", c_uint),
        ("prescale", c_double),
        ("postscale", c_double),
        ("process_set", c_int),
        ("alloc", ALLOC_FN),
        ("alloc_context", c_void_p),
    ]


_P = c_void_p
_PP = POINTER(c_void_p)
_OPT = POINTER(OpOptions)
_SZ = c_size_t
_SZP = POINTER(c_size_t)

# name: (restype, argtypes); None restype = void
_SIGNATURES = {
    "kolo_strerror": (c_char_p, [c_int]),
    "kolo_status_name": (c_char_p, [c_int]),
    "kolo_dtype_size": (_SZ, [c_int]),
    # communicators
    "kolo_comm_create": (c_int, [POINTER(RingSpec), _P, _PP]),
    "kolo_comm_rank": (c_int, [_P]),
    "kolo_comm_size": (c_int, [_P]),
    "kolo_comm_local_rank": (c_int, [_P]),
    "kolo_comm_local_size": (c_int, [_P]),
    "kolo_comm_epoch": (c_uint64, [_P]),
    "kolo_comm_abort": (None, [_P]),
    "kolo_comm_error": (c_int, [_P, POINTER(c_int)]),
    "kolo_comm_error_message": (None, [_P, c_char_p, _SZ]),
    "kolo_comm_use_cuda": (c_int, [_P, c_int]),
    "kolo_comm_destroy": (None, [_P]),
    "kolo_listener_create": (c_int, [c_char_p, _PP]),
    "kolo_listener_address": (c_int, [_P, c_char_p, _SZ]),
    "kolo_listener_destroy": (None, [_P]),
    # the single route: one submit per operation (kolo.h, engine.h), and the request set
    "kolo_allreduce_submit": (c_int, [_P, _P, _P, _SZ, c_int, c_int, _OPT, _PP]),
    "kolo_allgather_submit": (c_int, [_P, _P, _SZ, _P, _SZ, _SZP, c_int, _OPT, _PP]),
    "kolo_broadcast_submit": (c_int, [_P, _P, _SZ, c_int, c_int, _OPT, _PP]),
    "kolo_reducescatter_submit": (c_int, [_P, _P, _P, _SZ, _SZP, c_int, c_int, _OPT, _PP]),
    "kolo_alltoall_submit": (c_int, [_P, _P, _SZP, _P, _SZ, _SZP, c_int, _OPT, _PP]),
    "kolo_grouped_allreduce_submit": (
        c_int,
        [_P, c_int, POINTER(c_char_p), _PP, _PP, _SZP, c_int, c_int, _OPT, _PP],
    ),
    "kolo_barrier_submit": (c_int, [_P, _OPT, _PP]),
    "kolo_join_submit": (c_int, [_P, _OPT, _PP]),
    "kolo_wait": (c_int, [_P]),
    "kolo_free": (None, [_P]),
    # elastic (elastic.h)
    "kolo_elastic_create": (c_int, [_PP]),
    "kolo_elastic_comm": (_P, [_P]),
    "kolo_elastic_commit": (c_int, [_P]),
    "kolo_elastic_reform": (c_int, [_P]),
    "kolo_elastic_report": (c_int, [_P, c_char_p]),
    "kolo_elastic_should_stop": (c_int, [_P]),
    "kolo_elastic_reconfigurations": (c_int, [_P]),
    "kolo_elastic_destroy": (None, [_P]),
    "kolo_sync_buffers": (c_int, [_P, _PP, _SZP, c_int, POINTER(c_uint8)]),
    "kolo_wait_result": (c_int, [_P, POINTER(Result)]),
    "kolo_test_result": (c_int, [_P, POINTER(c_int), POINTER(Result)]),
}


class EngineStats(ctypes.Structure):
    """kolo_engine_stats (engine.h)."""

    _fields_ = [
        (name, c_uint64)
        for name in (
            "cycles",
            "negotiation_ns",
            "negotiation_bytes",
            "announced",
            "cached",
            "batches",
            "fused_tensors",
            "negotiation_work_ns",
        )
    ]


_STATS_SIGNATURES = {"kolo_engine_stats_get": (c_int, [_P, POINTER(EngineStats)])}


class SplitOptions(ctypes.Structure):
    """kolo_split_options (process_set.h)."""

    _fields_ = [("ranks", POINTER(c_int)), ("n_ranks", c_int), ("id", c_int), ("timeout_ms", c_int)]


# process_set.h: declared when this libkolo has process sets
_SET_SIGNATURES = {"kolo_comm_split": (c_int, [_P, POINTER(SplitOptions), _PP])}


def _declare(library: ctypes.CDLL, signatures: dict, required: bool) -> bool:
    complete = True
    for name, (restype, argtypes) in signatures.items():
        try:
            function = getattr(library, name)
        except AttributeError:
            if required:
                raise ImportError("%s has no %s: rebuild kolo" % (library._name, name))
            complete = False
            continue
        function.restype = restype
        function.argtypes = argtypes
    return complete


class _Library:
    """libkolo, loaded and declared on first use, so `import kolo` (and kolo.client,
    which needs no libkolo) works before kolo is built."""

    def __init__(self) -> None:
        self._cdll: Optional[ctypes.CDLL] = None
        self.stats = False
        self.sets = False

    def load(self) -> ctypes.CDLL:
        if self._cdll is None:
            cdll = _load()
            _declare(cdll, _SIGNATURES, True)
            self.stats = _declare(cdll, _STATS_SIGNATURES, False)
            self.sets = _declare(cdll, _SET_SIGNATURES, False)
            self._cdll = cdll
        return self._cdll

    def __getattr__(self, name: str):
        return getattr(self.load(), name)


lib = _Library()


def library_path() -> str:
    return lib.load()._name


def status_name(code: int) -> str:
    """'KOLO_ERR_PEER_LOST' for 5."""
    return lib.kolo_status_name(code).decode()


def strerror(code: int) -> str:
    """kolo_strerror's fixed text for a code."""
    return lib.kolo_strerror(code).decode()


def comm_error_message(comm: int) -> str:
    """kolo_comm_error_message: why the communicator failed, '' if it has not."""
    buffer = ctypes.create_string_buffer(512)
    lib.kolo_comm_error_message(comm, buffer, len(buffer))
    return buffer.value.decode(errors="replace")


def comm_error(comm: int) -> "tuple[int, int]":
    """(status, failed rank or -1) of the communicator's failure; (0, -1) if none."""
    rank = c_int(-1)
    code = lib.kolo_comm_error(comm, ctypes.byref(rank))
    return code, rank.value


def new_request() -> c_void_p:
    return c_void_p()


def as_pointer(value: Optional[int]) -> c_void_p:
    return c_void_p(value) if value else c_void_p()

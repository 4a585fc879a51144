"""Framework-free collectives over raw memory: a View is (pointer, element count,
kolo dtype) plus the object that keeps the memory alive; every submit_* function
hands one operation to libkolo and returns a Request. kolo (numpy) and kolo.torch
turn their arrays and tensors into Views and build their results from Requests.

Every operation goes to libkolo's one route for it (kolo_<op>_submit with a
kolo_op_options): host operations are named, so ranks may submit them in any
order and libkolo negotiates, fuses and reports mismatches; operations on CUDA
memory are stream-ordered and unnamed (in submission order on every rank, as
NCCL's)."""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import _abi, _lib
from ._runtime import RUNTIME, Runtime, current_scope, in_scope
from .errors import KoloError

lib = _lib.lib

# kolo_dtype and kolo_op (include/kolo/kolo.h, through the generated _abi; the sizes are
# checked against libkolo's kolo_dtype_size by tests/python/workers/api_parity.py)
UINT8, INT32, INT64 = _abi.KOLO_UINT8, _abi.KOLO_INT32, _abi.KOLO_INT64
FLOAT16, BFLOAT16, FLOAT32, FLOAT64 = _abi.KOLO_FLOAT16, _abi.KOLO_BFLOAT16, _abi.KOLO_FLOAT32, _abi.KOLO_FLOAT64
INT8, INT16, BOOL = _abi.KOLO_INT8, _abi.KOLO_INT16, _abi.KOLO_BOOL
DTYPE_NAMES = {
    UINT8: "uint8",
    INT32: "int32",
    INT64: "int64",
    FLOAT16: "float16",
    BFLOAT16: "bfloat16",
    FLOAT32: "float32",
    FLOAT64: "float64",
    INT8: "int8",
    INT16: "int16",
    BOOL: "bool",
}
DTYPE_SIZES = {
    UINT8: 1,
    INT32: 4,
    INT64: 8,
    FLOAT16: 2,
    BFLOAT16: 2,
    FLOAT32: 4,
    FLOAT64: 8,
    INT8: 1,
    INT16: 2,
    BOOL: 1,
}
FLOATING = {FLOAT16, BFLOAT16, FLOAT32, FLOAT64}

SUM, AVG, MIN, MAX, PROD = _abi.KOLO_SUM, _abi.KOLO_AVG, _abi.KOLO_MIN, _abi.KOLO_MAX, _abi.KOLO_PROD
ADASUM = _abi.KOLO_OP_COUNT  # kolo.torch's own op (adasum.py), numbered after libkolo's
OP_NAMES = {SUM: "Sum", AVG: "Average", MIN: "Min", MAX: "Max", PROD: "Product", ADASUM: "Adasum"}

NAME_MAX = _abi.KOLO_NAME_MAX


@dataclass
class View:
    """count elements of dtype at ptr; keep holds what owns the memory. stream
    is None for host memory; for CUDA device memory it is the cudaStream_t (as an
    int, 0 = the legacy default stream) whose earlier work writes the data: such
    views go to libkolo's stream-ordered calls (NCCL), unnamed and unscaled."""

    ptr: int
    count: int
    dtype: int
    keep: Any = None
    stream: Optional[int] = None

    @property
    def on_device(self) -> bool:
        return self.stream is not None


Allocator = Callable[[int], Tuple[Any, int]]
"""count -> (the object that owns the memory, its address): an output of count
elements of the operation's dtype in host memory (a numpy array, a tensor)."""


def _options(
    name: Optional[bytes], *views: "View", prescale: float = 1.0, postscale: float = 1.0, alloc: Any = None
) -> Any:
    """The kolo_op_options of one operation on views: named on the host; on CUDA
    memory stream-ordered (KOLO_OP_STREAM, after the views' stream) and unnamed.
    Every view of one operation lives on the same side. alloc: an _lib.ALLOC_FN
    giving the output (all-gather, all-to-all into memory Python allocates)."""
    devices = {v.on_device for v in views}
    if len(devices) != 1:
        raise ValueError("kolo: an operation's tensors must all be on the host or all on the GPU")
    options = _lib.OpOptions(prescale=float(prescale), postscale=float(postscale))
    if alloc is not None:
        options.alloc = alloc
    if views[0].on_device:
        options.flags = _abi.KOLO_OP_STREAM
        options.cuda_stream = views[0].stream or None
    else:
        options.name = name
    return ctypes.byref(options)


def check_op(op: Any) -> int:
    if not isinstance(op, int) or isinstance(op, bool) or op not in range(_abi.KOLO_OP_COUNT):
        raise ValueError("kolo: unknown reduction op %r (use kolo.Average, Sum, Min, Max or Product)" % (op,))
    return op


def op_for_dtype(op: int, dtype: int) -> int:
    """The op libkolo runs for op on dtype: bool reduces as logic (Sum and Max
    are "any", Min and Product "all", which is what the GPU path can do too);
    an average of bools means nothing and is refused."""
    if dtype != BOOL:
        return op
    if op == AVG:
        raise ValueError("kolo: bool tensors reduce with Sum or Max (any) and Min or Product (all), not Average")
    return {SUM: MAX, PROD: MIN}.get(op, op)


def check_name(name: Optional[str]) -> Optional[bytes]:
    if name is None:
        return None
    if not isinstance(name, str):
        raise TypeError("kolo: an operation's name must be a str, not %s" % type(name).__name__)
    raw = name.encode()
    if not 1 <= len(raw) <= NAME_MAX or b"\0" in raw:
        raise ValueError("kolo: an operation's name must be 1..%d bytes without NUL: %r" % (NAME_MAX, name))
    return raw


def check_root(root: Any, size: int) -> int:
    if not isinstance(root, int) or isinstance(root, bool) or not 0 <= root < size:
        raise ValueError("kolo: root_rank %r is not a rank of this ring (size %d)" % (root, size))
    return root


class Names:
    """Automatic names ('allreduce.noname.7'), counted per kind and communicator (the
    ring, each process set) and reset at every ring change, so every rank of a ring
    or set gives its n-th unnamed call the same name."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.generation = -1
        self.counters: Dict[Any, int] = {}

    def next(self, kind: str, runtime: Runtime) -> bytes:
        key = (runtime.resolved().names_key(), kind)
        with self.lock:
            if self.generation != runtime.generation:
                self.generation = runtime.generation
                self.counters = {}
            n = self.counters.get(key, 0)
            self.counters[key] = n + 1
        return ("%s.noname.%d" % (kind, n)).encode()


NAMES = Names()


def op_name(kind: str, name: Optional[str], runtime: Runtime = RUNTIME) -> bytes:
    raw = check_name(name)
    return raw if raw is not None else NAMES.next(kind, runtime)


class Request:
    """One kolo_request in flight. settle() waits for it exactly once and keeps
    the outcome (error, engine-allocated output, last joined rank)."""

    def __init__(self, what: str, keep: Any, runtime: Runtime = RUNTIME) -> None:
        self.what = what
        self.keep = keep
        self.runtime = runtime.resolved()  # the process set it runs on, for its errors
        self.handle = ctypes.c_void_p()
        self.lock = threading.Lock()
        self.done = False
        self.error: Optional[KoloError] = None
        self.output: Any = None  # libkolo's output as a bytearray, or what an Allocator made
        self.output_count = 0
        self.output_dtype = UINT8
        self.last_rank = -1
        self.alloc_error: Optional[BaseException] = None

    def allocator(self, allocate: "Allocator") -> Any:
        """A kolo_op_options.alloc that calls allocate(count) on libkolo's thread
        once the output's element count is known and keeps what it made as
        self.output. An exception cannot cross into C: it fails the operation
        (NULL) and becomes the cause of the request's error."""

        def call(_context: Any, count: int) -> Optional[int]:
            try:
                owner, address = allocate(count)
            except BaseException as error:  # noqa: B902 (re-raised by result())
                self.alloc_error = error
                return None
            self.output, self.output_count = owner, count
            return address or None

        return _lib.ALLOC_FN(call)

    def submitted(self, code: int) -> "Request":
        """Takes the submit call's status; raises if it failed."""
        if code != 0:
            self.done = True
            self.runtime.check(code, self.what)
        self.runtime.inflight[id(self)] = self
        return self

    def _finish(self, code: int, result: Optional[_lib.Result]) -> None:
        self.done = True
        self.runtime.inflight.pop(id(self), None)
        message = ""
        if result is not None:
            message = result.message.decode(errors="replace")
            self.last_rank = result.last_rank
            if result.output:
                nbytes = result.output_count * DTYPE_SIZES[self.output_dtype]
                self.output = bytearray(nbytes)
                if nbytes:
                    ctypes.memmove((ctypes.c_char * nbytes).from_buffer(self.output), result.output, nbytes)
                self.output_count = result.output_count
                lib.kolo_free(result.output)
        if code != 0:
            try:
                self.runtime.check(code, self.what, message)
            except KoloError as error:
                error.__cause__ = self.alloc_error
                self.error = error
        self.keep = None

    def settle(self) -> None:
        """Blocks until the request completes (GIL released while it waits)."""
        if not self.done:
            self.runtime.own(self.what)  # a forked child never waits on its parent's requests
        with self.lock:
            if self.done:
                return
            result = _lib.Result()
            code = lib.kolo_wait_result(self.handle, ctypes.byref(result))
            self._finish(code, result)

    def poll(self) -> bool:
        """Never blocks; True once complete."""
        if not self.done:
            self.runtime.own(self.what)
        with self.lock:
            if self.done:
                return True
            done = ctypes.c_int(0)
            result = _lib.Result()
            lib.kolo_test_result(self.handle, ctypes.byref(done), ctypes.byref(result))
            if done.value:
                self._finish(result.status, result)
            return self.done

    def result(self) -> "Request":
        self.settle()
        if self.error is not None:
            raise self.error
        return self


class Handle:
    """What the *_async calls return: one or more requests and a function that
    builds the output once they are done. kolo.synchronize(handle) waits and
    returns the output; kolo.poll(handle) tells whether it is ready."""

    def __init__(self, requests: Sequence[Request], finish: Optional[Callable[[], Any]] = None, what: str = "") -> None:
        self.requests = list(requests)
        self.finish = finish
        self.what = what
        self.lock = threading.Lock()
        self.finished = False
        self.value: Any = None
        self.scope = current_scope()  # finish() runs on the process set the operation was started on

    def poll(self) -> bool:
        return all(request.poll() for request in self.requests)

    def wait(self) -> Any:
        with self.lock:
            if self.finished:
                return self.value
            for request in self.requests:
                request.settle()
            for request in self.requests:
                if request.error is not None:
                    raise request.error
            with in_scope(self.scope):
                self.value = self.finish() if self.finish is not None else None
            self.finished = True
            self.requests = []
            self.finish = None
            return self.value

    def __repr__(self) -> str:
        return "<kolo.Handle %s%s>" % (self.what, " done" if self.finished else "")


# ---- submitting operations ----


def _ptr(value: int) -> ctypes.c_void_p:
    return ctypes.c_void_p(value or None)


def submit_allreduce(
    name: bytes,
    send: View,
    recv: View,
    op: int,
    prescale: float = 1.0,
    postscale: float = 1.0,
    runtime: Runtime = RUNTIME,
) -> Request:
    """recv = op over ranks of (send * prescale) * postscale (libkolo scales host
    floating-point buffers; kolo.torch scales CUDA and integer tensors itself)."""
    op = op_for_dtype(op, send.dtype)
    comm = runtime.require()
    request = Request("allreduce %s" % name.decode(errors="replace"), (send.keep, recv.keep), runtime)
    options = _options(name, send, recv, prescale=prescale, postscale=postscale)
    code = lib.kolo_allreduce_submit(
        comm, _ptr(send.ptr), _ptr(recv.ptr), send.count, send.dtype, op, options, ctypes.byref(request.handle)
    )
    return request.submitted(code)


def submit_grouped_allreduce(
    group: bytes,
    names: List[bytes],
    sends: List[View],
    recvs: List[View],
    op: int,
    prescale: float = 1.0,
    postscale: float = 1.0,
    runtime: Runtime = RUNTIME,
) -> List[Request]:
    """All members of one dtype on the host, negotiated and fused as one unit; one
    request per member on CUDA memory (libkolo groups host buffers only)."""
    if sends:
        op = op_for_dtype(op, sends[0].dtype)
    if any(v.on_device for v in sends):
        return [submit_allreduce(n, s, r, op, prescale, postscale, runtime) for n, s, r in zip(names, sends, recvs)]
    comm = runtime.require()
    n = len(sends)
    c_names = (ctypes.c_char_p * n)(*names)
    c_sends = (ctypes.c_void_p * n)(*[s.ptr or None for s in sends])
    c_recvs = (ctypes.c_void_p * n)(*[r.ptr or None for r in recvs])
    c_counts = (ctypes.c_size_t * n)(*[s.count for s in sends])
    keep = ([s.keep for s in sends], [r.keep for r in recvs], c_names, c_sends, c_recvs, c_counts)
    request = Request("grouped allreduce %s" % group.decode(errors="replace"), keep, runtime)
    options = _options(group, *sends, prescale=prescale, postscale=postscale)
    code = lib.kolo_grouped_allreduce_submit(
        comm, n, c_names, c_sends, c_recvs, c_counts, sends[0].dtype, op, options, ctypes.byref(request.handle)
    )
    return [request.submitted(code)]


def submit_allgather(
    name: bytes,
    send: View,
    recv: Optional[View],
    recv_counts: Any,
    runtime: Runtime = RUNTIME,
    *,
    allocate: Optional[Allocator] = None,
) -> Request:
    """recv None: the output is allocated once its size is known (host memory
    only), by allocate when given (Request.output is what it returned), else by
    libkolo and copied into a bytearray. recv_counts: a ctypes size_t array of size
    entries, or None."""
    comm = runtime.require()
    request = Request("allgather %s" % name.decode(errors="replace"), None, runtime)
    alloc = request.allocator(allocate) if allocate is not None and recv is None else None
    request.keep = (send.keep, recv.keep if recv else None, recv_counts, alloc)
    request.output_dtype = send.dtype
    options = _options(name, send, recv) if recv is not None else _options(name, send, alloc=alloc)
    code = lib.kolo_allgather_submit(
        comm,
        _ptr(send.ptr),
        send.count,
        _ptr(recv.ptr if recv else 0),
        recv.count if recv else 0,
        recv_counts,
        send.dtype,
        options,
        ctypes.byref(request.handle),
    )
    return request.submitted(code)


def submit_broadcast(name: bytes, buffer: View, root: int, runtime: Runtime = RUNTIME) -> Request:
    comm = runtime.require()
    request = Request("broadcast %s" % name.decode(errors="replace"), buffer.keep, runtime)
    code = lib.kolo_broadcast_submit(
        comm, _ptr(buffer.ptr), buffer.count, buffer.dtype, root, _options(name, buffer), ctypes.byref(request.handle)
    )
    return request.submitted(code)


def submit_reducescatter(
    name: bytes, send: View, recv: View, counts: List[int], op: int, runtime: Runtime = RUNTIME
) -> Request:
    """counts[r] elements of the reduction go to rank r (send holds their sum)."""
    op = op_for_dtype(op, send.dtype)
    comm = runtime.require()
    c_counts = (ctypes.c_size_t * len(counts))(*counts)
    request = Request("reducescatter %s" % name.decode(errors="replace"), (send.keep, recv.keep, c_counts), runtime)
    code = lib.kolo_reducescatter_submit(
        comm,
        _ptr(send.ptr),
        _ptr(recv.ptr),
        sum(counts),
        c_counts,
        send.dtype,
        op,
        _options(name, send, recv),
        ctypes.byref(request.handle),
    )
    return request.submitted(code)


def submit_alltoall(
    name: bytes,
    send: View,
    send_counts: List[int],
    recv_counts: Any,
    runtime: Runtime = RUNTIME,
    *,
    allocate: Optional[Allocator] = None,
) -> Request:
    """send_counts[r] elements go to rank r; the output (host memory only) is
    allocated once its size is known, by allocate when given, else by libkolo (as
    submit_allgather's)."""
    comm = runtime.require()
    c_send_counts = (ctypes.c_size_t * len(send_counts))(*send_counts)
    request = Request("alltoall %s" % name.decode(errors="replace"), None, runtime)
    alloc = request.allocator(allocate) if allocate is not None else None
    request.keep = (send.keep, c_send_counts, recv_counts, alloc)
    request.output_dtype = send.dtype
    code = lib.kolo_alltoall_submit(
        comm,
        _ptr(send.ptr),
        c_send_counts,
        None,
        0,
        recv_counts,
        send.dtype,
        _options(name, send, alloc=alloc),
        ctypes.byref(request.handle),
    )
    return request.submitted(code)


def submit_barrier(runtime: Runtime = RUNTIME) -> Request:
    comm = runtime.require()
    request = Request("barrier", None, runtime)
    return request.submitted(lib.kolo_barrier_submit(comm, None, ctypes.byref(request.handle)))


def submit_join(runtime: Runtime = RUNTIME) -> Request:
    comm = runtime.require()
    request = Request("join", None, runtime)
    return request.submitted(lib.kolo_join_submit(comm, None, ctypes.byref(request.handle)))


def broadcast_blocking(comm: int, pointer: Any, nbytes: int, root: int) -> int:
    """An unnamed blocking broadcast of nbytes bytes on comm (submit + wait): the
    status. For setup before the runtime has a communicator."""
    options = _lib.OpOptions(flags=_abi.KOLO_OP_BLOCKING)
    handle = ctypes.c_void_p()
    code = lib.kolo_broadcast_submit(comm, pointer, nbytes, UINT8, root, ctypes.byref(options), ctypes.byref(handle))
    return code if code != 0 else lib.kolo_wait(handle)


def size_array(n: int) -> Any:
    """A zeroed ctypes size_t[n] (for recv_counts)."""
    return (ctypes.c_size_t * n)()


def split_counts(first_dim: int, size: int) -> List[int]:
    """Horovod's default split of a first dimension over ranks: the first
    first_dim % size ranks get one more row."""
    base, extra = divmod(first_dim, size)
    return [base + (1 if r < extra else 0) for r in range(size)]

"""kolo.torch's collectives on torch tensors, with horovod.torch's names and
arguments. A tensor goes to libkolo by pointer (data_ptr); the `_` forms work in
place and need a contiguous tensor; the out-of-place forms return new tensors
and are differentiable where Horovod's are (allreduce, grouped_allreduce,
allgather, broadcast, reducescatter, alltoall; their autograd functions live in
autograd.py). CUDA tensors put the ring in CUDA mode (NCCL) on first use."""
from __future__ import annotations

import functools
import inspect
import math
from typing import Any, Callable, List, Optional, Sequence, Tuple, TypeVar, Union

import torch

from .. import _core, _shapes
from .._core import Handle, View
from .._runtime import RUNTIME, current_scope
from ..process_sets import ProcessSet, entered, global_process_set, root_in_set  # noqa: F401
from . import adasum as _adasum
from .compression import Compression, Compressor

Average = _core.AVG
Sum = _core.SUM
Min = _core.MIN
Max = _core.MAX
Product = _core.PROD
Adasum = _adasum.ADASUM  # Python-side (adasum.py), never handed to libkolo

_DTYPES = {
    torch.uint8: _core.UINT8,
    torch.int32: _core.INT32,
    torch.int64: _core.INT64,
    torch.float16: _core.FLOAT16,
    torch.bfloat16: _core.BFLOAT16,
    torch.float32: _core.FLOAT32,
    torch.float64: _core.FLOAT64,
    torch.int8: _core.INT8,
    torch.int16: _core.INT16,
    torch.bool: _core.BOOL,
}
_TORCH = {code: dtype for dtype, code in _DTYPES.items()}


_F = TypeVar("_F", bound=Callable[..., Any])


def on_process_set(function: _F) -> _F:
    """Runs function's collectives on its process_set argument (kolo/process_sets.py):
    a set's own communicator, where RUNTIME's rank() and size() are the set's.
    None (the default) keeps the caller's: the whole ring, or the set an outer call
    entered. A non-member, or a set not added, raises ValueError before anything is sent."""
    index = list(inspect.signature(function).parameters).index("process_set")

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        process_set = kwargs.get("process_set", args[index] if len(args) > index else None)
        if process_set is None:
            return function(*args, **kwargs)
        with entered(process_set):
            return function(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


# ---- tensors to views ----


def check_tensor(tensor: Any) -> torch.Tensor:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("kolo: expected a torch.Tensor, not %s" % type(tensor).__name__)
    if tensor.dim() > _shapes.MAX_DIMS:
        raise ValueError("kolo: tensors of more than %d dimensions are not supported" % _shapes.MAX_DIMS)
    if tensor.layout != torch.strided:
        raise TypeError("kolo: %s tensors are not supported (convert with .to_dense())" % tensor.layout)
    if tensor.dtype not in _DTYPES:
        raise TypeError(
            "kolo: dtype %s is not supported (bool, uint8, int8, int16, int32, int64, float16, "
            "bfloat16, float32, float64)" % tensor.dtype
        )
    if tensor.device.type not in ("cpu", "cuda"):
        raise TypeError("kolo: tensors on %s are not supported (cpu or cuda)" % tensor.device)
    return tensor


def _prepare_device(tensor: torch.Tensor) -> Optional[int]:
    """For a CUDA tensor: the ring in CUDA mode on its device, and the stream
    libkolo must order after (torch's current stream there, whose kernels write
    the tensor). None for a host tensor."""
    if tensor.device.type != "cuda":
        return None
    RUNTIME.use_cuda(tensor.device.index if tensor.device.index is not None else torch.cuda.current_device())
    return int(torch.cuda.current_stream(tensor.device).cuda_stream)


def _view(tensor: torch.Tensor, what: str = "an in-place operation") -> View:
    if not tensor.is_contiguous():
        raise ValueError("kolo: %s needs a contiguous tensor (call .contiguous() first)" % what)
    stream = _prepare_device(tensor)
    return View(tensor.data_ptr() if tensor.numel() else 0, tensor.numel(), _DTYPES[tensor.dtype], tensor, stream)


def _resolve_op(average: Optional[bool], op: Optional[int]) -> int:
    if op is not None and average is not None:
        raise ValueError("kolo: give op or the deprecated average, not both")
    if op is None:
        return Sum if average is False else Average
    if isinstance(op, int) and not isinstance(op, bool) and op == Adasum:
        return Adasum
    return _core.check_op(op)


def _check_scales(tensor: torch.Tensor, prescale: float, postscale: float) -> Tuple[float, float]:
    try:
        prescale, postscale = float(prescale), float(postscale)
    except (TypeError, ValueError):
        raise ValueError(
            "kolo: prescale/postscale factors must be numbers, not %r, %r" % (prescale, postscale)
        ) from None
    if not (math.isfinite(prescale) and math.isfinite(postscale)):
        raise ValueError("kolo: prescale/postscale factors must be finite, not %s, %s" % (prescale, postscale))
    if tensor.dtype == torch.bool and (prescale != 1.0 or postscale != 1.0):
        raise ValueError("kolo: bool tensors take no prescale/postscale factors")
    return prescale, postscale


def _integer_scaled(tensor: torch.Tensor, prescale: float, postscale: float) -> bool:
    """Integer tensors with factors are scaled here, as Horovod does it (the
    factor times each element in double precision, truncated to the type);
    libkolo scales floating-point tensors only."""
    return not tensor.dtype.is_floating_point and (prescale != 1.0 or postscale != 1.0)


def _scale_(tensor: torch.Tensor, factor: float) -> torch.Tensor:
    """tensor *= factor in place; integers as Horovod's ScaleBuffer: the
    product in double, truncated toward zero."""
    if factor == 1.0:
        return tensor
    if tensor.dtype.is_floating_point:
        return tensor.mul_(factor)
    return tensor.copy_((tensor.double() * factor).trunc())


def _shape_checked(handle: Handle, raw: bytes, tensor: torch.Tensor, kind: str) -> Handle:
    """handle, plus an exchange of the tensor's shape (`<name>.shape`, negotiated
    with it): its output raises MismatchError, naming the tensor, on every rank
    when ranks gave equally many elements in different shapes."""
    shape_request, gathered = _shapes.submit(raw, tuple(tensor.shape), _DTYPES[tensor.dtype])
    size, inner = RUNTIME.size(), handle.finish
    what = "%s: tensor '%s'" % (kind, raw.decode(errors="replace"))

    def finish() -> Any:
        _shapes.check_equal(what, _shapes.decode(gathered, size))
        return inner() if inner is not None else None

    return Handle([shape_request] + handle.requests, finish, handle.what)


def _allocate_flat(dtype: torch.dtype) -> _core.Allocator:
    """An output of count elements that libkolo writes into directly (host memory:
    the all-gather and all-to-all of CPU tensors), made once the ring knows count."""

    def allocate(count: int) -> Tuple[torch.Tensor, int]:
        flat = torch.empty(count, dtype=dtype)
        return flat, flat.data_ptr()

    return allocate


def _output(request: _core.Request, dtype: torch.dtype) -> torch.Tensor:
    """What _allocate_flat made for request (nothing was asked for an empty output)."""
    return request.output if request.output is not None else torch.empty(0, dtype=dtype)


# ---- all-reduce ----


def allreduce_into(
    source: torch.Tensor, target: torch.Tensor, name: bytes, op: int, prescale: float, postscale: float
) -> Handle:
    """target = op(source * prescale) * postscale; source may be target. One
    submission either way: libkolo scales host floating-point tensors itself (in
    its fused all-reduce); CUDA tensors and integer tensors (Horovod's integer
    scaling: an Average is a Sum times postscale / size, truncated) are scaled
    here, on the tensor's stream, before and after."""
    if op == Adasum:
        return _adasum.allreduce_into(source, target, name, prescale, postscale)
    integer = _integer_scaled(source, prescale, postscale)
    scaled_by_kolo = source.device.type == "cpu" and not integer
    divisor = RUNTIME.size() if integer and op == Average else 1
    after = 1.0
    if not scaled_by_kolo:
        if source is not target:
            target.copy_(source)
        _scale_(target, prescale)
        source, prescale, postscale, after = target, 1.0, 1.0, postscale / divisor
    request = _core.submit_allreduce(
        name, _view(source), _view(target), Sum if divisor > 1 else op, prescale, postscale
    )

    def finish() -> torch.Tensor:
        return _scale_(target, after)

    return Handle([request], finish, "allreduce")


@on_process_set
def allreduce_async_(
    tensor: torch.Tensor,
    average: Optional[bool] = None,
    name: Optional[str] = None,
    op: Optional[int] = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: Any = None,
) -> Handle:
    """Starts an in-place all-reduce (default op Average); synchronize(handle)
    returns the tensor."""
    tensor = check_tensor(tensor)
    op = _resolve_op(average, op)
    prescale, postscale = _check_scales(tensor, prescale_factor, postscale_factor)
    _view(tensor)
    raw = _core.op_name("allreduce", name)
    return _shape_checked(allreduce_into(tensor, tensor, raw, op, prescale, postscale), raw, tensor, "allreduce")


@on_process_set
def allreduce_(
    tensor: torch.Tensor,
    average: Optional[bool] = None,
    name: Optional[str] = None,
    op: Optional[int] = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: Any = None,
) -> torch.Tensor:
    """In-place all-reduce; returns the tensor."""
    return allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set).wait()


@on_process_set
def allreduce_async(
    tensor: torch.Tensor,
    average: Optional[bool] = None,
    name: Optional[str] = None,
    op: Optional[int] = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: Any = None,
) -> Handle:
    """Starts an all-reduce into a new tensor (the input is not modified)."""
    tensor = check_tensor(tensor)
    op = _resolve_op(average, op)
    prescale, postscale = _check_scales(tensor, prescale_factor, postscale_factor)
    source = tensor.detach().contiguous()
    output = torch.empty_like(source, memory_format=torch.contiguous_format)
    raw = _core.op_name("allreduce", name)
    return _shape_checked(allreduce_into(source, output, raw, op, prescale, postscale), raw, source, "allreduce")


@on_process_set
def allreduce(
    tensor: torch.Tensor,
    average: Optional[bool] = None,
    name: Optional[str] = None,
    compression: Compressor = Compression.none,
    op: Optional[int] = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: Any = None,
) -> torch.Tensor:
    """All-reduces tensor over every rank into a new tensor (default op Average);
    differentiable for Sum and Average."""
    tensor = check_tensor(tensor)
    op = _resolve_op(average, op)
    compressed, ctx = compression.compress(tensor)
    if compressed.requires_grad and torch.is_grad_enabled():
        reduced = autograd.Allreduce.apply(compressed, name, op, prescale_factor, postscale_factor)
    else:
        reduced = allreduce_async(compressed, None, name, op, prescale_factor, postscale_factor).wait()
    return compression.decompress(reduced, ctx)


def _grouped(
    tensors: Sequence[torch.Tensor],
    in_place: bool,
    average: Optional[bool],
    name: Optional[str],
    op: Optional[int],
    prescale_factor: float,
    postscale_factor: float,
) -> Handle:
    tensors = [check_tensor(t) for t in tensors]
    op = _resolve_op(average, op)
    if not tensors:
        return Handle([], lambda: [], "grouped_allreduce")
    group = _core.op_name("grouped_allreduce", name)
    sources: List[torch.Tensor] = []
    targets: List[torch.Tensor] = []
    by_dtype: dict = {}
    prescale_factor, postscale_factor = _check_scales(tensors[0], prescale_factor, postscale_factor)
    for index, tensor in enumerate(tensors):
        source = tensor if in_place else tensor.detach().contiguous()
        target = tensor if in_place else torch.empty_like(source, memory_format=torch.contiguous_format)
        _view(target)
        sources.append(source)
        targets.append(target)
        by_dtype.setdefault(tensor.dtype, []).append((index, source, target))
    return _group_shape_checked(
        _grouped_submit(group, sources, targets, by_dtype, op, prescale_factor, postscale_factor), group, tensors
    )


def _group_shape_checked(handle: Handle, group: bytes, tensors: List[torch.Tensor]) -> Handle:
    """handle, plus one exchange of every member's shape digest (see _shape_checked)."""
    shapes = [tuple(t.shape) for t in tensors]
    shape_request, gathered = _shapes.submit_digests(group, shapes)
    size, inner = RUNTIME.size(), handle.finish
    names = ["%s.%d" % (group.decode(errors="replace"), i) for i in range(len(tensors))]

    def finish() -> Any:
        _shapes.check_digests("grouped_allreduce", gathered, size, shapes, names)
        return inner() if inner is not None else None

    return Handle([shape_request] + handle.requests, finish, handle.what)


def _grouped_submit(
    group: bytes,
    sources: List[torch.Tensor],
    targets: List[torch.Tensor],
    by_dtype: dict,
    op: int,
    prescale_factor: float,
    postscale_factor: float,
) -> Handle:
    if op != Adasum and all(
        t.device.type == "cpu" and not _integer_scaled(t, prescale_factor, postscale_factor) for t in sources
    ):
        requests = []
        for dtype, members in by_dtype.items():
            suffix = b"" if len(by_dtype) == 1 else b"." + str(dtype).encode()
            names = [group + b".%d" % index for index, _, _ in members]
            requests += _core.submit_grouped_allreduce(
                group + suffix,
                names,
                [_view(s) for _, s, _ in members],
                [_view(t) for _, _, t in members],
                op,
                float(prescale_factor),
                float(postscale_factor),
            )
        return Handle(requests, lambda: targets, "grouped_allreduce")
    handles: List[Handle] = []
    for index, (source, target) in enumerate(zip(sources, targets)):
        handles.append(
            allreduce_into(source, target, group + b".%d" % index, op, float(prescale_factor), float(postscale_factor))
        )
    requests = [r for h in handles for r in h.requests]

    def finish() -> List[torch.Tensor]:
        for h in handles:
            h.wait()
        return targets

    return Handle(requests, finish, "grouped_allreduce")


@on_process_set
def grouped_allreduce_async(
    tensors: Sequence[torch.Tensor],
    average: Optional[bool] = None,
    name: Optional[str] = None,
    op: Optional[int] = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: Any = None,
) -> Handle:
    """Starts an all-reduce of a list of tensors as one negotiated, fused unit."""
    return _grouped(tensors, False, average, name, op, prescale_factor, postscale_factor)


@on_process_set
def grouped_allreduce(
    tensors: Sequence[torch.Tensor],
    average: Optional[bool] = None,
    name: Optional[str] = None,
    compression: Compressor = Compression.none,
    op: Optional[int] = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: Any = None,
) -> List[torch.Tensor]:
    """All-reduces a list of tensors into new tensors, as one unit;
    differentiable for Sum and Average (each gradient all-reduced the same way)."""
    compressed = [compression.compress(t) for t in tensors]
    inputs = [c for c, _ in compressed]
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs):
        op = _resolve_op(average, op)
        reduced = list(autograd.GroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, *inputs))
    else:
        reduced = _grouped(inputs, False, average, name, op, prescale_factor, postscale_factor).wait()
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(reduced, compressed)]


@on_process_set
def grouped_allreduce_async_(
    tensors: Sequence[torch.Tensor],
    average: Optional[bool] = None,
    name: Optional[str] = None,
    op: Optional[int] = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: Any = None,
) -> Handle:
    return _grouped(tensors, True, average, name, op, prescale_factor, postscale_factor)


@on_process_set
def grouped_allreduce_(
    tensors: Sequence[torch.Tensor],
    average: Optional[bool] = None,
    name: Optional[str] = None,
    op: Optional[int] = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
    process_set: Any = None,
) -> List[torch.Tensor]:
    return _grouped(tensors, True, average, name, op, prescale_factor, postscale_factor).wait()


# ---- all-gather ----


@on_process_set
def allgather_async(tensor: torch.Tensor, name: Optional[str] = None, process_set: Any = None) -> Handle:
    """Starts a concatenation of every rank's tensor along the first dimension
    (which may differ by rank; the others must match)."""
    tensor = check_tensor(tensor)
    source = tensor.detach().contiguous()
    if source.dim() == 0:
        source = source.reshape(1)
    raw = _core.op_name("allgather", name)
    size = RUNTIME.size()
    _prepare_device(source)
    shape_request, gathered = _shapes.submit(raw, tuple(source.shape), _DTYPES[source.dtype])
    what = "allgather %s" % raw.decode()
    rest = tuple(source.shape[1:])

    def shape_out() -> Tuple[int, ...]:
        records = _shapes.decode(gathered, size)
        _shapes.check_compatible(what, records)
        return (sum(_shapes.rows(records)),) + rest

    if source.device.type == "cpu":
        data = _core.submit_allgather(
            raw, _view(source), None, _core.size_array(size), allocate=_allocate_flat(source.dtype)
        )
        return Handle([shape_request, data], lambda: _output(data, source.dtype).reshape(shape_out()), what)

    def two_stage() -> torch.Tensor:
        output = torch.empty(shape_out(), dtype=source.dtype, device=source.device)
        _core.submit_allgather(raw, _view(source), _view(output), None).result()
        return output

    return Handle([shape_request], two_stage, what)


@on_process_set
def allgather(tensor: torch.Tensor, name: Optional[str] = None, process_set: Any = None) -> torch.Tensor:
    """Concatenates every rank's tensor along the first dimension; differentiable."""
    tensor = check_tensor(tensor)
    if tensor.requires_grad and torch.is_grad_enabled():
        return autograd.Allgather.apply(tensor, name)
    return allgather_async(tensor, name).wait()


# ---- broadcast ----


@on_process_set
def broadcast_async_(
    tensor: torch.Tensor, root_rank: int, name: Optional[str] = None, process_set: Any = None
) -> Handle:
    """Starts an in-place broadcast of root_rank's tensor."""
    tensor = check_tensor(tensor)
    root = _core.check_root(root_in_set(root_rank), RUNTIME.size())
    raw = _core.op_name("broadcast", name)
    request = _core.submit_broadcast(raw, _view(tensor), root)
    return _shape_checked(Handle([request], lambda: tensor, "broadcast"), raw, tensor, "broadcast")


@on_process_set
def broadcast_(
    tensor: torch.Tensor, root_rank: int, name: Optional[str] = None, process_set: Any = None
) -> torch.Tensor:
    return broadcast_async_(tensor, root_rank, name, process_set).wait()


@on_process_set
def broadcast_async(
    tensor: torch.Tensor, root_rank: int, name: Optional[str] = None, process_set: Any = None
) -> Handle:
    """Starts a broadcast into a new tensor (the input is not modified)."""
    tensor = check_tensor(tensor)
    return broadcast_async_(tensor.detach().clone(memory_format=torch.contiguous_format), root_rank, name, process_set)


@on_process_set
def broadcast(
    tensor: torch.Tensor, root_rank: int, name: Optional[str] = None, process_set: Any = None
) -> torch.Tensor:
    """root_rank's tensor on every rank, as a new tensor; differentiable."""
    tensor = check_tensor(tensor)
    if tensor.requires_grad and torch.is_grad_enabled():
        return autograd.Broadcast.apply(tensor, root_rank, name)
    return broadcast_async(tensor, root_rank, name).wait()


# ---- reduce-scatter ----


@on_process_set
def reducescatter_async(
    tensor: torch.Tensor,
    name: Optional[str] = None,
    op: int = Average,
    process_set: Any = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> Handle:
    """Starts a reduction over ranks, op(tensor * prescale) * postscale, of which
    rank r keeps its share of the first dimension (the first d0 % size ranks get
    one row more)."""
    tensor = check_tensor(tensor)
    op = _core.check_op(op)
    prescale, postscale = _check_scales(tensor, prescale_factor, postscale_factor)
    if tensor.dim() == 0:
        raise ValueError("kolo: reducescatter needs a tensor of at least one dimension")
    source = tensor.detach().contiguous()
    if prescale != 1.0:
        source = _scale_(source.clone(), prescale)
    size, rank = RUNTIME.size(), RUNTIME.rank()
    rows = _core.split_counts(source.shape[0], size)
    row = math.prod(source.shape[1:])
    output = torch.empty((rows[rank],) + tuple(source.shape[1:]), dtype=source.dtype, device=source.device)
    integer = _integer_scaled(source, prescale, postscale)
    divisor = size if integer and op == Average else 1
    raw = _core.op_name("reducescatter", name)
    request = _core.submit_reducescatter(
        raw, _view(source), _view(output), [n * row for n in rows], Sum if divisor > 1 else op
    )
    return _shape_checked(
        Handle([request], lambda: _scale_(output, postscale / divisor), "reducescatter"), raw, source, "reducescatter"
    )


@on_process_set
def reducescatter(
    tensor: torch.Tensor,
    name: Optional[str] = None,
    compression: Compressor = Compression.none,
    op: int = Average,
    process_set: Any = None,
    prescale_factor: float = 1.0,
    postscale_factor: float = 1.0,
) -> torch.Tensor:
    """op(tensor * prescale) * postscale over ranks, rank r keeping its share of
    the first dimension; differentiable for Sum and Average (Horovod's gradient:
    the output gradients all-gathered, times size for Sum, times the factors)."""
    compressed, ctx = compression.compress(check_tensor(tensor))
    if compressed.requires_grad and torch.is_grad_enabled():
        reduced = autograd.Reducescatter.apply(compressed, name, _core.check_op(op), prescale_factor, postscale_factor)
    else:
        reduced = reducescatter_async(compressed, name, op, process_set, prescale_factor, postscale_factor).wait()
    return compression.decompress(reduced, ctx)


# ---- all-to-all ----


def _split_rows(first_dim: int, size: int, splits: Any) -> List[int]:
    if splits is None:
        if first_dim % size:
            raise ValueError(
                "kolo: alltoall without splits needs the first dimension (%d) divisible by the "
                "number of ranks (%d)" % (first_dim, size)
            )
        return [first_dim // size] * size
    if isinstance(splits, torch.Tensor):
        if splits.dtype.is_floating_point or splits.dim() != 1:
            raise TypeError("kolo: alltoall splits must be a 1-D integer tensor or a list of ints")
        rows = [int(s) for s in splits.tolist()]
    else:
        rows = [int(s) for s in splits]
    if len(rows) != size or any(s < 0 for s in rows) or sum(rows) != first_dim:
        raise ValueError(
            "kolo: alltoall splits %s must be %d non-negative counts summing to %d" % (rows, size, first_dim)
        )
    return rows


@on_process_set
def alltoall_async(
    tensor: torch.Tensor, splits: Any = None, name: Optional[str] = None, process_set: Any = None
) -> Handle:
    """Starts an all-to-all; synchronize(handle) returns (output, received_splits)."""
    tensor = check_tensor(tensor)
    source = tensor.detach().contiguous()
    if source.dim() == 0:
        raise ValueError("kolo: alltoall needs a tensor of at least one dimension")
    size = RUNTIME.size()
    rows = _split_rows(source.shape[0], size, splits)
    row = math.prod(source.shape[1:])
    if source.device.type == "cuda":
        # no device path for all-to-all: staged through host memory
        device = source.device
        inner = alltoall_async(source.cpu(), rows, name, process_set)
        return Handle(
            inner.requests, lambda: tuple(t.to(device) if i == 0 else t for i, t in enumerate(inner.wait())), "alltoall"
        )
    raw = _core.op_name("alltoall", name)
    _prepare_device(source)
    shape_request, gathered = _shapes.submit(raw, tuple(source.shape), _DTYPES[source.dtype])
    counts = _core.size_array(size)
    request = _core.submit_alltoall(
        raw, _view(source), [n * row for n in rows], counts, allocate=_allocate_flat(source.dtype)
    )
    what = "alltoall %s" % raw.decode()

    def finish() -> Tuple[torch.Tensor, torch.Tensor]:
        _shapes.check_compatible(what, _shapes.decode(gathered, size))
        received = torch.tensor([c // row if row else 0 for c in counts], dtype=torch.int32)
        flat = _output(request, source.dtype)
        return flat.reshape((int(received.sum()),) + tuple(source.shape[1:])), received

    return Handle([shape_request, request], finish, what)


@on_process_set
def alltoall(
    tensor: torch.Tensor, splits: Any = None, name: Optional[str] = None, process_set: Any = None
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """Sends splits[r] rows of the first dimension to rank r (even split by
    default) and returns what every rank sent here, in rank order; with splits
    given, also the received splits (as horovod.torch). Differentiable: the
    gradient goes back by an all-to-all with the received splits."""
    tensor = check_tensor(tensor)
    if tensor.requires_grad and torch.is_grad_enabled():
        output, received = autograd.Alltoall.apply(tensor, splits, name)
    else:
        output, received = alltoall_async(tensor, splits, name, process_set).wait()
    return output if splits is None else (output, received)


# ---- synchronisation ----


@on_process_set
def barrier(process_set: Any = None) -> None:
    """Returns once every rank (of process_set) has entered the barrier."""
    _core.submit_barrier().result()


@on_process_set
def join(device: int = -1, process_set: Any = None) -> int:
    """This rank has no more batches: it keeps taking part (with zeros) in the
    others' all-reduces until every rank (of process_set) has joined. Returns the
    last rank to join, as a rank of the ring."""
    last = _core.submit_join().result().last_rank
    scope = current_scope()
    return scope.ranks[last] if scope is not None and last >= 0 else last


def synchronize(handle: Handle) -> Any:
    """Waits for an *_async operation and returns its output."""
    if not isinstance(handle, Handle):
        raise TypeError("kolo: synchronize needs a handle from an *_async call, not %s" % type(handle).__name__)
    return handle.wait()


def poll(handle: Handle) -> bool:
    """True once the operation is complete; never blocks."""
    if not isinstance(handle, Handle):
        raise TypeError("kolo: poll needs a handle from an *_async call, not %s" % type(handle).__name__)
    return handle.poll()


def torch_dtype(code: int) -> torch.dtype:
    return _TORCH[code]


from . import autograd  # noqa: E402  (autograd's functions call the collectives above)

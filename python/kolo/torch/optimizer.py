"""kolo.torch.DistributedOptimizer: wraps a torch optimizer so that every
parameter's gradient is all-reduced while backward still runs.

A hook on each parameter's gradient accumulator fires as soon as that gradient
is final and hands it to libkolo (allreduce_async_, named after the parameter),
so communication overlaps the rest of the backward pass; step() (or
synchronize()) waits for the outstanding reductions and then applies the
wrapped optimizer's update. Negotiation, fusion and failure handling are
libkolo's (engine.h); this module only maps tensors and hooks autograd."""
from __future__ import annotations

import contextlib
import warnings
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

import torch

from .. import _core
from .._runtime import RUNTIME, in_scope
from ..process_sets import process_set_scope
from . import adasum, sparse
from .compression import Compression, Compressor
from .ops import Adasum, Average, Sum, allreduce_into, check_tensor
from .mode_optimizer import job_mode, mode_optimizer
from ..mode import acknowledge, available


def _named(
    optimizer: torch.optim.Optimizer, named_parameters: Optional[Iterable[Tuple[str, torch.Tensor]]]
) -> Dict[torch.Tensor, str]:
    """parameter -> name; the names must be unique and cover every parameter of
    the optimizer (they name the all-reduces, so they must match across ranks)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if named_parameters is None:
        return {p: "noname.%d" % i for i, p in enumerate(params)}
    named = list(named_parameters)
    if any(not isinstance(item, tuple) or len(item) != 2 or not isinstance(item[0], str) for item in named):
        raise ValueError(
            "kolo: named_parameters must be a sequence of (name, parameter) tuples, " "e.g. model.named_parameters()"
        )
    names = [name for name, _ in named]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(
            "kolo: parameter names in named_parameters must be unique; repeated: %s" % ", ".join(duplicates)
        )
    by_param = {p: name for name, p in named}
    unnamed = [i for i, p in enumerate(params) if p not in by_param]
    if unnamed:
        raise ValueError(
            "kolo: named_parameters was given, but %d of the optimizer's parameters are not in it "
            "(indices %s)" % (len(unnamed), unnamed[:10])
        )
    return by_param


class _DistributedOptimizer(torch.optim.Optimizer):
    """Mixed into the wrapped optimizer's own class (see DistributedOptimizer)."""

    def _kolo_setup(
        self,
        names: Dict[torch.Tensor, str],
        compression: Compressor,
        backward_passes_per_step: int,
        op: int,
        gradient_predivide_factor: float,
    ) -> None:
        self._kolo_names = names
        self._kolo_compression = compression
        self._kolo_passes = backward_passes_per_step
        self._kolo_op = op
        self._kolo_predivide = gradient_predivide_factor
        self._kolo_delay: Dict[torch.Tensor, int] = {}
        self._kolo_handles: Dict[torch.Tensor, Tuple[Any, Any, torch.Tensor]] = {}
        self._kolo_accumulators: List[Any] = []
        self._kolo_should_synchronize = True
        self._kolo_synchronized = False
        self._kolo_hooks_enabled = True
        self._kolo_register_hooks()

    # ---- hooks ----

    def _kolo_register_hooks(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if not p.requires_grad:
                    continue
                self._kolo_delay[p] = self._kolo_passes
                # the AccumulateGrad node of p: its hook runs once p.grad is final
                accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
                accumulator.register_hook(self._kolo_make_hook(p))
                self._kolo_accumulators.append(accumulator)

    def _kolo_make_hook(self, p: torch.Tensor):
        def hook(*ignored: Any) -> None:
            if not self._kolo_hooks_enabled:
                return
            if p in self._kolo_handles and self._kolo_handles[p][0] is not None:
                if self._kolo_delay[p] <= 0:
                    raise AssertionError(
                        "kolo: gradients were computed more than backward_passes_per_step times before "
                        "step() or synchronize(); raise backward_passes_per_step to accumulate locally"
                    )
            self._kolo_delay[p] -= 1
            handle = None
            if self._kolo_delay[p] == 0:
                handle = self._kolo_submit(p)
            self._kolo_handles[p] = handle if handle is not None else (None, None, None)

        return hook

    def _kolo_scales(self) -> Tuple[int, float, float]:
        """(op, prescale, postscale): Average is a Sum scaled by 1/f before and
        f/size after, so gradient_predivide_factor f moves part of the division
        before the reduction (horovod's semantics)."""
        if self._kolo_op == Average and self._kolo_predivide != 1.0:
            return Sum, 1.0 / self._kolo_predivide, self._kolo_predivide / RUNTIME.size()
        return self._kolo_op, 1.0, 1.0

    def _kolo_submit(self, p: torch.Tensor) -> Tuple[Any, Any, torch.Tensor]:
        with in_scope(getattr(self, "_kolo_scope", None)):  # the process_set's communicator
            return self._kolo_submit_here(p)

    def _kolo_submit_here(self, p: torch.Tensor) -> Tuple[Any, Any, torch.Tensor]:
        if p.grad is None:
            # not computed here this step (a branch this rank did not take):
            # zeros still go in, since other ranks may have computed it
            p.grad = torch.zeros_like(p)
        if p.grad.is_sparse:  # nn.Embedding(sparse=True): Horovod's sparse all-reduce (sparse.py)
            return sparse.submit_gradient(
                p.grad,
                "allreduce." + self._kolo_names[p],
                self._kolo_op,
                getattr(self, "_kolo_sparse_as_dense", False),
                self._kolo_compression,
            )
        grad = check_tensor(p.grad)
        if not grad.is_contiguous():
            grad = p.grad = grad.contiguous()
        compressed, ctx = self._kolo_compression.compress(grad)
        op, prescale, postscale = self._kolo_scales()
        if not compressed.dtype.is_floating_point:
            prescale = postscale = 1.0
        name = _core.check_name("allreduce." + self._kolo_names[p])
        handle = allreduce_into(compressed, compressed, name, op, prescale, postscale)
        return handle, ctx, compressed

    # ---- synchronisation ----

    def synchronize(self) -> None:
        """Waits for every gradient's all-reduce (submitting those whose hook did
        not fire: unused parameters, or fewer backward passes than expected) and
        writes the averaged gradients into p.grad."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad and (p not in self._kolo_handles or self._kolo_handles[p][0] is None):
                    self._kolo_handles[p] = self._kolo_submit(p)
        try:
            for p, (handle, ctx, compressed) in self._kolo_handles.items():
                output = handle.wait()
                if p.grad.is_sparse:
                    p.grad = output
                    continue
                grad = self._kolo_compression.decompress(output, ctx)
                if grad is not p.grad:
                    p.grad.copy_(grad)
        finally:
            for p in self._kolo_handles:
                self._kolo_delay[p] = self._kolo_passes
            self._kolo_handles.clear()
        self._kolo_synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self) -> Iterator[None]:
        """step() inside this block does not synchronize (call synchronize() first,
        e.g. to clip the averaged gradients)."""
        self._kolo_should_synchronize = False
        try:
            yield
        finally:
            self._kolo_should_synchronize = True

    def step(self, closure: Any = None) -> Any:
        if self._kolo_should_synchronize:
            if self._kolo_synchronized:
                warnings.warn(
                    "kolo: optimizer.step() after optimizer.synchronize() without "
                    "optimizer.skip_synchronize(): the gradients are all-reduced twice"
                )
            self.synchronize()
        self._kolo_synchronized = False
        return super(self.__class__, self).step(closure)

    def zero_grad(self, set_to_none: bool = False) -> None:
        if self._kolo_handles:
            raise AssertionError(
                "kolo: optimizer.zero_grad() after loss.backward() but before optimizer.step() "
                "or optimizer.synchronize(); the gradients are still being all-reduced"
            )
        return super(self.__class__, self).zero_grad(set_to_none)

    def kolo_abandon(self) -> None:
        """Forgets the outstanding all-reduces (after a ring failure, before the
        state is restored); their errors are not raised again."""
        for p in self._kolo_handles:
            self._kolo_delay[p] = self._kolo_passes
        self._kolo_handles.clear()
        self._kolo_synchronized = False


def DistributedOptimizer(
    optimizer: torch.optim.Optimizer,
    named_parameters: Optional[Iterable[Tuple[str, torch.Tensor]]] = None,
    compression: Compressor = Compression.none,
    backward_passes_per_step: int = 1,
    op: int = Average,
    gradient_predivide_factor: float = 1.0,
    num_groups: int = 0,
    groups: Any = None,
    sparse_as_dense: bool = False,
    process_set: Any = None,
) -> torch.optim.Optimizer:
    """Wraps optimizer (horovod.torch.DistributedOptimizer's arguments): its
    gradients are averaged (op) over the ring before each step. The result is an
    instance of the optimizer's own class, with synchronize() and
    skip_synchronize() added.

    In a job whose mode (kolo.mode.from_env(): the job spec, or kolorun --mode)
    is ASYNC, LOCAL_SGD or DILOCO, the optimizer steps on local gradients and
    the model is synced in that mode's rounds instead (kolo.torch.modes; the
    gradient arguments do not apply); synchronize() then ends the training on
    this rank (Rounds.join). The mode is acknowledged to the kolo agent."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError("kolo: DistributedOptimizer needs a torch.optim.Optimizer, not %s" % type(optimizer).__name__)
    if isinstance(optimizer, _DistributedOptimizer):
        raise ValueError("kolo: this optimizer is already a DistributedOptimizer")
    if not isinstance(backward_passes_per_step, int) or backward_passes_per_step < 1:
        raise ValueError("kolo: backward_passes_per_step must be a positive int, not %r" % (backward_passes_per_step,))
    op = Adasum if op == Adasum else _core.check_op(op)
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("kolo: gradient_predivide_factor needs op=Average")
    if not gradient_predivide_factor > 0:
        raise ValueError("kolo: gradient_predivide_factor must be positive")
    if groups is not None or num_groups:
        warnings.warn("kolo: groups/num_groups are ignored; libkolo's engine fuses gradients itself")
    scope = process_set_scope(process_set)  # ValueError for a set this rank is not in
    if not (isinstance(compression, type) and issubclass(compression, Compressor)) and not isinstance(
        compression, Compressor
    ):
        raise TypeError("kolo: compression must be kolo.torch.Compression.none, .fp16 or a Compressor")
    RUNTIME.require()
    names = _named(optimizer, named_parameters)
    spec = job_mode()
    if spec.mode != "SYNC":
        # the job asked for ASYNC, LOCAL_SGD or DILOCO: no gradient all-reduce at all;
        # the optimizer steps locally and kolo.torch.modes syncs the model in rounds
        return mode_optimizer(optimizer, spec)
    if available() is None:
        acknowledge("SYNC")
    if op == Adasum:  # Horovod's delta optimizer (adasum.py)
        return adasum.wrap(optimizer, names, scope)
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedOptimizer.__dict__))
    wrapped = cls.__new__(cls)
    # the wrapped optimizer's own attributes (param_groups, state, defaults, hooks)
    wrapped.__dict__.update(optimizer.__dict__)
    wrapped._kolo_setup(names, compression, backward_passes_per_step, op, float(gradient_predivide_factor))
    wrapped._kolo_sparse_as_dense = bool(sparse_as_dense)
    wrapped._kolo_scope = scope
    return wrapped

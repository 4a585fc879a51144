"""Adasum (horovod.torch's op=hvd.Adasum): the adaptive summation of
Maleki et al., which Horovod runs as a binary tree of pairwise combinations over
the ranks. Two vectors a and b (one tensor's values on two ranks, or on two
subtrees) combine into

    (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b

(a coefficient is 1 where its vector's squared norm is below sqrt(DBL_MIN)), so
orthogonal gradients add and identical ones average. Level one combines ranks
(0, 1), (2, 3), ...; level two the results of (0, 1) and (2, 3); and so on, as
Horovod's recursive vector-halving does; the dot products and norms are per
tensor and computed in double. Horovod refuses a number of ranks that is not a
power of two; kolo lets the odd subtree of a level go up unchanged.

kolo runs it on the host: every rank all-gathers the tensor and evaluates the
same tree (n times the data of a ring all-reduce; Adasum is for CPU training
here). DistributedOptimizer(op=Adasum) is Horovod's delta optimizer: each rank
steps its own optimizer on its own gradients, and the parameter changes, not
the gradients, are combined by Adasum."""
from __future__ import annotations

import contextlib
import math
import sys
from typing import Any, Dict, Iterator, List

import torch

from .. import _core
from .._core import Handle
from .._runtime import in_scope

ADASUM = _core.ADASUM  # not a libkolo op: kolo.torch routes it here before anything reaches libkolo
_TINY = math.sqrt(sys.float_info.min)


def pair(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Adasum of two float64 vectors."""
    dot = float(torch.dot(a, b))
    a_norm, b_norm = float(torch.dot(a, a)), float(torch.dot(b, b))
    a_coefficient = 1.0 - dot / a_norm * 0.5 if a_norm >= _TINY else 1.0
    b_coefficient = 1.0 - dot / b_norm * 0.5 if b_norm >= _TINY else 1.0
    return a_coefficient * a + b_coefficient * b


def tree(vectors: List[torch.Tensor]) -> torch.Tensor:
    """The rank-ordered vectors combined pairwise, level by level."""
    while len(vectors) > 1:
        vectors = [
            pair(vectors[i], vectors[i + 1]) if i + 1 < len(vectors) else vectors[i] for i in range(0, len(vectors), 2)
        ]
    return vectors[0]


def allreduce_into(
    source: torch.Tensor, target: torch.Tensor, name: bytes, prescale: float, postscale: float
) -> Handle:
    """target = Adasum over ranks of source * prescale, times postscale."""
    from .ops import allgather_async  # ops imports this module

    if not source.dtype.is_floating_point:
        raise ValueError("kolo: Adasum needs floating-point tensors, not %s" % source.dtype)
    flat = source.detach().reshape(1, -1).to(torch.float64) * prescale
    gathered = allgather_async(
        flat.to(source.dtype) if source.dtype != torch.float64 else flat, name.decode() + ".adasum"
    )

    def finish() -> torch.Tensor:
        rows = gathered.wait().to(torch.float64)
        combined = tree(list(rows)) * postscale
        target.copy_(combined.reshape(target.shape).to(target.dtype))
        return target

    return Handle(gathered.requests, finish, "adasum %s" % name.decode(errors="replace"))


class _DistributedAdasumOptimizer(torch.optim.Optimizer):
    """Mixed into the wrapped optimizer's own class by DistributedOptimizer(op=Adasum)."""

    def _kolo_adasum_setup(self, names: Dict[torch.Tensor, str], scope: Any) -> None:
        self._kolo_names = names
        self._kolo_scope = scope  # the process_set's communicator (None: the ring)

    def synchronize(self) -> None:
        """Nothing to wait for: the parameter changes are combined in step() (Horovod's too)."""

    @contextlib.contextmanager
    def skip_synchronize(self) -> Iterator[None]:
        raise AssertionError("kolo: skipping synchronization is not supported with the Adasum optimizer")
        yield  # pragma: no cover

    def step(self, closure: Any = None) -> Any:
        """This rank's optimizer step on its own gradients, then every
        parameter's change combined over the ranks by Adasum."""
        params = [p for group in self.param_groups for p in group["params"] if p.requires_grad]
        for p in params:
            if p.grad is None:  # not reached here this step; others may have moved it
                p.grad = torch.zeros_like(p)
        starts = [p.detach().clone() for p in params]
        loss = super(self.__class__, self).step(closure)
        handles = []
        with torch.no_grad(), in_scope(self._kolo_scope):
            for p, start in zip(params, starts):
                delta = (p - start).contiguous()
                name = _core.check_name("allreduce." + self._kolo_names[p])
                handles.append((p, start, delta, allreduce_into(delta, delta, name, 1.0, 1.0)))
            for p, start, delta, handle in handles:
                handle.wait()
                p.copy_(start + delta)
        return loss


def wrap(optimizer: torch.optim.Optimizer, names: Dict[torch.Tensor, str], scope: Any = None) -> torch.optim.Optimizer:
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedAdasumOptimizer.__dict__))
    wrapped = cls.__new__(cls)
    wrapped.__dict__.update(optimizer.__dict__)
    wrapped._kolo_adasum_setup(names, scope)
    return wrapped


__all__ = ["ADASUM", "pair", "tree"]

"""Elastic DDP on backend "kolo": a DistributedDataParallel script inside a kolo job goes on
in the same processes after a worker is lost or joins, like kolo.elastic.run does for
Horovod-style scripts (#33).

A c10d ProcessGroup has a fixed rank and size, and a DDP object keeps its group and its
buckets for life. So on a ring failure (the group's Work raises a RuntimeError naming a
recoverable kolo status, e.g. KOLO_ERR_PEER_LOST) run() rolls the state back to its last
commit, drops the default group, moves this process onto the agent's next ring
(kolo.elastic.reform), initialises the default group again on it, takes rank 0's state
(state.sync) and calls the function again, which builds a new DDP wrapper:

    import kolo.torch.distributed as kolo_dist
    dist.init_process_group(backend="kolo")
    state = TorchState(model=model, optimizer=optimizer, step=0)

    @kolo_dist.elastic_run
    def train(state):
        ddp = DDP(state.model)              # built inside: a new one after every re-form
        while state.step < steps:
            ...one step with ddp and state.optimizer...
            state.step += 1
            state.commit()

    train(state)
"""
from __future__ import annotations

import functools
import gc
import re
from typing import Any, Callable

import torch.distributed as dist

from .. import elastic
from .._runtime import RUNTIME
from ..errors import JobStoppedError, KoloError

_STATUS = re.compile(r"\((KOLO_ERR_[A-Z_]+)\)")


def ring_failure(error: BaseException) -> bool:
    """Whether error is a ring failure the job re-forms around: a recoverable KoloError, or
    the RuntimeError a "kolo" process group's Work raises, which ends with the status name."""
    if isinstance(error, KoloError):
        return elastic.recoverable(error)
    if not isinstance(error, RuntimeError):
        return False
    names = _STATUS.findall(str(error))
    return bool(names) and names[-1] in elastic.RECOVERABLE_STATUS


def _move_group() -> None:
    """The default group onto the agent's next ring (the state was restored already)."""
    gc.collect()  # the failed step's frames and DDP reducer hold the old group
    if dist.is_initialized():
        dist.destroy_process_group()
    elastic.reform()  # raises JobStoppedError when the job is over for this process
    dist.init_process_group(backend="kolo")


def run(func: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: calls func(state, *args, **kwargs) until it returns, moving the default
    "kolo" process group onto the next ring after a ring change. Exceptions that are not ring
    failures, and any failure outside a kolo job, are raised."""

    @functools.wraps(func)
    def wrapper(state: elastic.State, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(state, elastic.State):
            raise TypeError(
                "kolo.torch.distributed.elastic_run: the first argument must be a kolo.elastic "
                "State, not %s" % type(state).__name__
            )
        if not dist.is_initialized() or dist.get_backend() != "kolo":
            raise RuntimeError(
                "kolo.torch.distributed.elastic_run: call " 'torch.distributed.init_process_group(backend="kolo") first'
            )
        try:
            while True:
                try:
                    state.sync()
                    return func(state, *args, **kwargs)
                except elastic.RingChangedInterrupt:
                    pass
                except (RuntimeError, KoloError) as error:
                    if isinstance(error, JobStoppedError) or not elastic.has_agent() or not ring_failure(error):
                        raise
                    state.restore()
                _move_group()
                state.on_reset()
        except JobStoppedError:
            if not elastic.has_agent():
                raise
            if dist.is_initialized():
                dist.destroy_process_group()
            RUNTIME.shutdown()
            raise SystemExit(0)

    return wrapper

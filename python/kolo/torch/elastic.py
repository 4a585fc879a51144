"""kolo.torch.elastic: elastic PyTorch training in place (horovod.torch.elastic's
shape). TorchState keeps a model, an optimizer and any picklable values across
ring changes; @kolo.torch.elastic.run is kolo.elastic.run; ElasticSampler
re-shards a dataset over the ring's current size and skips what was already
processed in the epoch.

    state = kolo.torch.elastic.TorchState(model, optimizer, epoch=0, batch=0)
    state.register_reset_callbacks([lambda: rescale_lr(optimizer, kolo.size())])

    @kolo.torch.elastic.run
    def train(state): ...
"""
from __future__ import annotations

import copy
import functools
import math
import random
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple

import torch

from ..elastic import ObjectState, RingChangedInterrupt, State, reconfigurations, run
from .._runtime import RUNTIME
from .modes import rounds_of
from .snapshot import Snapshot
from .state_sync import optimizer_tensors_to_sync, sync_in_place


class _Commit(NamedTuple):
    """One whole commit of a TorchState: its snapshot slot, values, rounds, samplers."""

    slot: int
    values: Dict[str, Any]
    rounds: Optional[Dict[str, Any]]
    samplers: List[Tuple[int, int]]


class TorchState(ObjectState):
    """model and optimizer (either may be None) plus keyword values. commit()
    copies them in memory (kolo.torch.snapshot: in-place copies into two
    preallocated slots, cheap enough for every step); restore() rolls back to
    the last whole commit; sync() takes rank 0's. step_done() commits every
    commit_every-th call (default 1: every step, so a failure loses at most the
    step in flight). In a non-SYNC mode (kolo.torch.modes) the optimizer's
    rounds are part of the state too: the round's start parameters, the outer
    optimizer's momentum and the round counters."""

    def __init__(
        self,
        model: Optional[torch.nn.Module] = None,
        optimizer: Optional[torch.optim.Optimizer] = None,
        *,
        commit_every: int = 1,
        overlap: Optional[bool] = None,
        **values: Any,
    ) -> None:
        if not isinstance(commit_every, int) or isinstance(commit_every, bool) or commit_every < 1:
            raise ValueError("kolo: TorchState's commit_every must be an int >= 1, not %r" % (commit_every,))
        clash = sorted(key for key in values if hasattr(TorchState, key))
        if clash:
            raise ValueError(
                "kolo: TorchState values may not be named %s (TorchState's own attributes)" % ", ".join(clash)
            )
        if model is not None and not isinstance(model, torch.nn.Module):
            raise TypeError("kolo: TorchState's model must be a torch.nn.Module, not %s" % type(model).__name__)
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                "kolo: TorchState's optimizer must be a torch.optim.Optimizer, not %s" % type(optimizer).__name__
            )
        self.model = model
        self.optimizer = optimizer
        self.commit_every = commit_every
        self._steps_since_commit = 0
        if overlap is None:  # a SYNC optimizer: only its step() changes the parameters
            overlap = optimizer is not None and rounds_of(optimizer) is None
        self._overlap = False  # the first commit (at construction) copies everything at once
        self._snapshot = Snapshot(model, optimizer, overlap=bool(overlap))
        if overlap and optimizer is not None:
            _fence_step(optimizer, self._snapshot)
        self._samplers: List["ElasticSampler"] = [v for v in values.values() if isinstance(v, ElasticSampler)]
        super().__init__(**{k: v for k, v in values.items() if not isinstance(v, ElasticSampler)})
        for key, value in values.items():
            if isinstance(value, ElasticSampler):
                setattr(self, key, value)
        self._overlap = bool(overlap)

    def _rounds(self) -> Any:
        """The kolo.torch.modes.Rounds driving the optimizer (a non-SYNC mode), if any."""
        return rounds_of(self.optimizer)

    def step_done(self) -> None:
        """Marks one training step done: commits at every commit_every-th call
        (default: every step). Raises RingChangedInterrupt as commit() does."""
        self._steps_since_commit += 1
        if self._steps_since_commit >= self.commit_every:
            self.commit()
        else:
            self.check_host_updates()

    def save(self) -> None:
        """The commit: everything that can fail (copying the values, the tensors
        into the slot that is not current) comes first; then one assignment makes
        the new commit current, so a commit interrupted part-way (an exception, a
        signal) leaves the previous one whole and current, never a mix of two."""
        values = copy.deepcopy(self._values())
        rounds = self._rounds()
        saved_rounds = rounds.state_dict() if rounds is not None else None  # a non-SYNC mode
        samplers = [(sampler.epoch, sampler.processed_num) for sampler in self._samplers]
        slot = self._snapshot.write(keep=getattr(self, "_commit", None) and self._commit.slot, overlap=self._overlap)
        self._commit = _Commit(slot, values, saved_rounds, samplers)  # the commit point
        self._steps_since_commit = 0

    def restore(self) -> None:
        if self.optimizer is not None and hasattr(self.optimizer, "kolo_abandon"):
            self.optimizer.kolo_abandon()
        commit = self._commit
        self._snapshot.put_back(commit.slot)
        rounds = self._rounds()
        if rounds is not None and commit.rounds is not None:
            rounds.load_state_dict(commit.rounds)
        for sampler, saved in zip(self._samplers, commit.samplers):
            sampler._saved = saved
            sampler.restore()
        for key, value in copy.deepcopy(commit.values).items():
            setattr(self, key, value)
        self._steps_since_commit = 0

    def wait_commit(self) -> None:
        """Returns once the last commit's background copy is done. optimizer.step(),
        commit(), restore() and sync() wait by themselves; call it before changing
        the parameters or the optimizer's state in place by other means between a
        commit and the next optimizer.step() (or make the state with overlap=False)."""
        self._snapshot.wait()

    def sync(self) -> None:
        self._snapshot.wait()
        if self.optimizer is not None and hasattr(self.optimizer, "kolo_abandon"):
            self.optimizer.kolo_abandon()
        tensors: List[Tuple[str, torch.Tensor]] = []
        if self.model is not None:
            tensors += [
                ("model.%s" % name, tensor)
                for name, tensor in sorted(self.model.state_dict().items())
                if tensor is not None
            ]
        if self.optimizer is not None:  # each tensor in place, no pickled state dict
            tensors += optimizer_tensors_to_sync(self.optimizer, root_rank=0)
        sync_in_place(tensors)  # only to the ranks whose bytes differ, from the nearest holder
        rounds = self._rounds()
        if rounds is not None:
            rounds.broadcast(0)
        for sampler in self._samplers:
            sampler.sync()
        super().sync()


def _fence_step(optimizer: torch.optim.Optimizer, snapshot: Snapshot) -> None:
    """Makes optimizer.step() wait for the commit copy in flight first (it is
    about to change what is being copied)."""
    original = optimizer.step

    @functools.wraps(original)
    def step(*args: Any, **kwargs: Any) -> Any:
        snapshot.wait()
        return original(*args, **kwargs)

    optimizer.step = step  # type: ignore[method-assign]


class ElasticSampler(torch.utils.data.Sampler):
    """Shards a dataset over the ring's current ranks, one epoch at a time; after
    a ring change the indices not yet processed in the epoch are re-sharded over
    the new ranks. Call record_batch(batch_index, batch_size) after each batch
    (or record_indices) and set_epoch(epoch) at each epoch; pass it to TorchState
    as a keyword value so it is committed and synchronised with the state."""

    def __init__(self, dataset: Any, shuffle: bool = True, seed: int = 0) -> None:
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self._saved = (0, 0)
        self.reset()

    def set_epoch(self, epoch: int) -> None:
        """Starts epoch (a new shuffle); setting the current epoch again (as a
        training function re-entered after a ring change does) keeps what was
        already processed in it."""
        if epoch != self.epoch:
            self.epoch = epoch
            self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx: int, batch_size: int) -> None:
        """Marks batches 0..batch_idx (counted from the start of this iteration
        over the sampler, i.e. since set_epoch or the last ring change) of
        batch_size samples per rank as done."""
        self.processed_num = (batch_idx + 1) * batch_size * self.num_replicas + self._start

    def record_indices(self, count: int) -> None:
        """Marks count more samples per rank as done."""
        self.processed_num += count * self.num_replicas

    def save(self) -> None:
        self._saved = (self.epoch, self.processed_num)

    def restore(self) -> None:
        self.epoch, self.processed_num = self._saved
        self.reset()

    def sync(self) -> None:
        from ..objects import broadcast_object

        self.epoch, self.processed_num = broadcast_object((self.epoch, self.processed_num), 0, name="elastic.sampler")
        self.save()
        self.reset()

    def reset(self) -> None:
        """Re-shards what is left of the epoch over the current ring."""
        self.num_replicas = RUNTIME.size() if RUNTIME.is_initialized() else 1
        self.rank = RUNTIME.rank() if RUNTIME.is_initialized() else 0
        self._start = self.processed_num
        indices = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(indices)
        remaining = indices[self.processed_num :]
        self.num_samples = int(math.ceil(len(remaining) / self.num_replicas)) if remaining else 0
        padded = remaining + remaining[: self.num_samples * self.num_replicas - len(remaining)]
        self.indices = padded[self.rank : len(padded) : self.num_replicas]

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return self.num_samples


__all__ = ["TorchState", "ElasticSampler", "ObjectState", "State", "run", "RingChangedInterrupt", "reconfigurations"]

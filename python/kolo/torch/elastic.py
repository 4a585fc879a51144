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
import math
import random
from typing import Any, Dict, Iterator, List, Optional

import torch

from ..elastic import ObjectState, RingChangedInterrupt, State, reconfigurations, run
from .._runtime import RUNTIME
from .functions import broadcast_optimizer_state, broadcast_parameters


class TorchState(ObjectState):
    """model and optimizer (either may be None) plus keyword values. commit()
    copies them in memory; restore() rolls back; sync() takes rank 0's. In a
    non-SYNC mode (kolo.torch.modes) the optimizer's rounds are part of the
    state too: the round's start parameters, the outer optimizer's momentum
    and the round counters."""

    def __init__(self, model: Optional[torch.nn.Module] = None, optimizer: Optional[torch.optim.Optimizer] = None,
                 **values: Any) -> None:
        if model is not None and not isinstance(model, torch.nn.Module):
            raise TypeError("kolo: TorchState's model must be a torch.nn.Module, not %s" % type(model).__name__)
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError("kolo: TorchState's optimizer must be a torch.optim.Optimizer, not %s"
                            % type(optimizer).__name__)
        self.model = model
        self.optimizer = optimizer
        self._samplers: List["ElasticSampler"] = [v for v in values.values() if isinstance(v, ElasticSampler)]
        self._saved_model: Optional[Dict[str, torch.Tensor]] = None
        self._saved_optimizer: Optional[Dict[str, Any]] = None
        self._saved_rounds: Optional[Dict[str, Any]] = None
        super().__init__(**{k: v for k, v in values.items() if not isinstance(v, ElasticSampler)})
        for key, value in values.items():
            if isinstance(value, ElasticSampler):
                setattr(self, key, value)

    def _rounds(self) -> Any:
        """The kolo.torch.modes.Rounds driving the optimizer (a non-SYNC mode), if any."""
        return getattr(self.optimizer, "_kolo_rounds", None) if self.optimizer is not None else None

    def save(self) -> None:
        if self.model is not None:
            self._saved_model = copy.deepcopy(self.model.state_dict())
        if self.optimizer is not None:
            self._saved_optimizer = copy.deepcopy(self.optimizer.state_dict())
        rounds = self._rounds()
        if rounds is not None:  # a non-SYNC mode: round start, outer momentum, counters
            self._saved_rounds = rounds.state_dict()
        for sampler in self._samplers:
            sampler.save()
        super().save()

    def restore(self) -> None:
        if self.optimizer is not None and hasattr(self.optimizer, "kolo_abandon"):
            self.optimizer.kolo_abandon()
        if self.model is not None and self._saved_model is not None:
            self.model.load_state_dict(self._saved_model)
        if self.optimizer is not None and self._saved_optimizer is not None:
            self.optimizer.load_state_dict(self._saved_optimizer)
        rounds = self._rounds()
        if rounds is not None and self._saved_rounds is not None:
            rounds.load_state_dict(self._saved_rounds)
        for sampler in self._samplers:
            sampler.restore()
        super().restore()

    def sync(self) -> None:
        if self.optimizer is not None and hasattr(self.optimizer, "kolo_abandon"):
            self.optimizer.kolo_abandon()
        if self.model is not None:
            broadcast_parameters(self.model.state_dict(), root_rank=0)
        if self.optimizer is not None:
            broadcast_optimizer_state(self.optimizer, root_rank=0)
        rounds = self._rounds()
        if rounds is not None:
            rounds.broadcast(0)
        for sampler in self._samplers:
            sampler.sync()
        super().sync()


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
        self.epoch, self.processed_num = broadcast_object((self.epoch, self.processed_num), 0,
                                                          name="elastic.sampler")
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
        remaining = indices[self.processed_num:]
        self.num_samples = int(math.ceil(len(remaining) / self.num_replicas)) if remaining else 0
        padded = remaining + remaining[:self.num_samples * self.num_replicas - len(remaining)]
        self.indices = padded[self.rank:len(padded):self.num_replicas]

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return self.num_samples


__all__ = ["TorchState", "ElasticSampler", "ObjectState", "State", "run", "RingChangedInterrupt",
           "reconfigurations"]

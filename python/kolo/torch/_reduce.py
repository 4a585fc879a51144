"""The one collective of every non-SYNC mode round: a weighted average of a
flat float32 vector over the ring, non-blocking, optionally compressed.

Every rank contributes (vector, weight, step_time, done): the result is
sum(weight_i * vector_i) / sum(weight_i), the smallest step_time (the fastest
rank's pace) and how many ranks are done (kolo.torch.modes' join). The vector
travels as float32 (an all-reduce), float16 (an all-reduce of half the bytes)
or int8 with one float32 scale per CHUNK elements (four times fewer bytes: a
ring all-reduce with int8 on the wire. Its reduce-scatter is n-1 hops, each an
all-to-all in which a rank sends one quantized shard to its right neighbour
only, who adds its own part in float32 and re-quantizes the partial sum for the
next hop; then an all-gather of the summed shards. A single all-to-all of every
shard would cost n(n-1)/2 shards per rank on kolo's ring, which forwards each
block hop by hop, against these n-1). Progress is made in poll() (never blocks)
or wait()."""
from __future__ import annotations

from typing import Any, List, Optional

import torch

from .ops import Min, Sum, allgather_async, allreduce_async_, alltoall_async

COMPRESSIONS = ("none", "fp16", "int8")
CHUNK = 256  # int8: elements sharing one scale


def quantize(x: torch.Tensor) -> torch.Tensor:
    """x (float32, length a multiple of CHUNK) -> uint8 bytes: int8 values then
    one float32 scale per chunk (max |x| / 127)."""
    chunks = x.reshape(-1, CHUNK)
    scale = chunks.abs().amax(dim=1).clamp_min(1e-30) / 127.0
    q = torch.round(chunks / scale.unsqueeze(1)).clamp_(-127, 127).to(torch.int8)
    return torch.cat([q.reshape(-1).view(torch.uint8), scale.to(torch.float32).view(torch.uint8)])


def dequantize(data: torch.Tensor, count: int) -> torch.Tensor:
    """The inverse of quantize for count elements."""
    q = data[:count].view(torch.int8).to(torch.float32).reshape(-1, CHUNK)
    scale = data[count : count + 4 * (count // CHUNK)].view(torch.float32)
    return (q * scale.unsqueeze(1)).reshape(-1)


def ring_bytes(kind: str, nbytes: int, size: int) -> int:
    """Bytes one rank sends for a collective on a ring of size ranks: an
    all-reduce of nbytes moves 2(n-1)/n of them; an all-gather or all-to-all
    of nbytes per rank moves (n-1) times them."""
    if size <= 1:
        return 0
    if kind == "allreduce":
        return 2 * (size - 1) * nbytes // size
    return (size - 1) * nbytes


class Reduction:
    """One weighted average in flight, named name (the same on every rank)."""

    def __init__(
        self,
        vector: torch.Tensor,
        weight: float,
        step_time: float,
        done: bool,
        name: str,
        compression: str,
        size: int,
        rank: int,
    ) -> None:
        if compression not in COMPRESSIONS:
            raise ValueError("kolo: compression must be one of %s, not %r" % (", ".join(COMPRESSIONS), compression))
        self.name = name
        self.count = vector.numel()
        self.compression = compression
        self.size = size
        self.bytes_sent = 0
        self.result: Optional[torch.Tensor] = None
        self.weight_sum = 0.0
        self.min_step_time = 0.0
        self.done_ranks = 0
        # weight sum and done count (Sum), step time (Min): small, float64
        self._meta = torch.tensor([float(weight), 1.0 if done else 0.0], dtype=torch.float64)
        self._pace = torch.tensor([float(step_time) if step_time > 0 else float("inf")], dtype=torch.float64)
        self._handles: List[Any] = [
            allreduce_async_(self._meta, name=name + ".w", op=Sum),
            allreduce_async_(self._pace, name=name + ".t", op=Min),
        ]
        weighted = vector.detach().to(torch.float32) * float(weight)
        if compression == "none":
            self._buffer = weighted.contiguous()
            self._stage = [allreduce_async_(self._buffer, name=name, op=Sum)]
            self.bytes_sent += ring_bytes("allreduce", 4 * self.count, size)
        elif compression == "fp16":
            self._buffer = weighted.to(torch.float16).contiguous()
            self._stage = [allreduce_async_(self._buffer, name=name, op=Sum)]
            self.bytes_sent += ring_bytes("allreduce", 2 * self.count, size)
        else:
            # pad to size shards of a whole number of chunks
            self._shard = -(-max(self.count, 1) // (size * CHUNK)) * CHUNK
            padded = torch.zeros(size * self._shard, dtype=torch.float32)
            padded[: self.count] = weighted
            self._parts = padded.split(self._shard)
            self._rank = rank
            self._hop = 0
            self._partial = self._parts[rank]  # the shard sent on the first hop is this rank's own
            self._stage = [self._send_hop()] if size > 1 else [self._gather(self._partial)]
        self._phase = 0

    def _advance(self, block: bool) -> bool:
        """Moves on as far as possible; True once the result is there."""
        while self.result is None:
            pending = self._stage + self._handles
            if not block and not all(h.poll() for h in pending):
                return False
            outputs = [h.wait() for h in self._stage]
            if self.compression == "int8" and self._phase == 0:
                received = outputs[0][0] if isinstance(outputs[0], tuple) else outputs[0]
                self._hop += 1
                # the left neighbour's partial sum of shard rank - hop, plus this rank's part of it
                self._partial = dequantize(received, self._shard) + self._parts[(self._rank - self._hop) % self.size]
                if self._hop < self.size - 1:
                    self._stage = [self._send_hop()]
                else:  # the whole sum of shard rank + 1
                    self._stage = [self._gather(self._partial)]
                    self._phase = 1
                continue
            for h in self._handles:
                h.wait()
            self.weight_sum = float(self._meta[0])
            self.done_ranks = int(round(float(self._meta[1])))
            self.min_step_time = float(self._pace[0])
            if self.compression == "int8":
                gathered = outputs[0]
                per_rank = gathered.numel() // self.size
                shards = [
                    dequantize(gathered[r * per_rank : (r + 1) * per_rank], self._shard) for r in range(self.size)
                ]
                # rank q summed shard q + 1 (mod size)
                summed = torch.cat([shards[(s - 1) % self.size] for s in range(self.size)])[: self.count]
            else:
                summed = self._buffer.to(torch.float32)
            self.result = summed / self.weight_sum if self.weight_sum > 0 else summed
        return True

    def _send_hop(self) -> Any:
        """Starts one reduce-scatter hop: this rank's partial sum, quantized, to
        its right neighbour only."""
        send = quantize(self._partial)
        splits = [0] * self.size
        splits[(self._rank + 1) % self.size] = send.numel()
        self.bytes_sent += send.numel()
        return alltoall_async(send, splits=splits, name="%s.rs%d" % (self.name, self._hop))

    def _gather(self, total: torch.Tensor) -> Any:
        """Starts the all-gather of this rank's summed shard, quantized."""
        send = quantize(total)
        self.bytes_sent += ring_bytes("allgather", send.numel(), self.size)
        return allgather_async(send, name=self.name + ".ag")

    def poll(self) -> bool:
        """Never blocks; True once the average is ready."""
        return self._advance(False)

    def wait(self) -> torch.Tensor:
        """Blocks until the average is ready and returns it."""
        self._advance(True)
        assert self.result is not None
        return self.result

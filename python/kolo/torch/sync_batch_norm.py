"""kolo.torch.SyncBatchNorm (horovod.torch.SyncBatchNorm): batch normalisation
whose statistics are those of the whole global batch, every rank's samples
together, in training; running statistics and eval mode as torch's BatchNorm.

The statistics are all-reduced sums (count, then the mean, then the sum of
squared deviations: two passes, no cancellation), written with kolo's
differentiable all-reduce, so autograd gives each rank's input the gradient of
the sum of every rank's loss, as torch's and Horovod's SyncBatchNorm do (their
backward all-reduces sum_dy and sum_dy_xmu). Plain tensor operations: CPU and
CUDA tensors alike (Horovod's runs on CUDA only)."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from .._runtime import RUNTIME
from .ops import Sum, allreduce


class SyncBatchNorm(_BatchNorm):
    """Synchronous N-dimensional BatchNorm over the ranks. Arguments as
    torch.nn.BatchNorm*d: num_features (C of an (N, C, ...) input), eps,
    momentum (None: cumulative average), affine, track_running_stats."""

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: Optional[float] = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
    ) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError("kolo: SyncBatchNorm expected at least 2D input (got %dD input)" % input.dim())

    def _factor(self) -> float:
        """The running statistics' update factor, as _BatchNorm.forward computes it."""
        if self.momentum is not None:
            return self.momentum
        return 1.0 / float(self.num_batches_tracked)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        if self.training and self.track_running_stats:
            self.num_batches_tracked = self.num_batches_tracked + 1
        if not self.training and self.track_running_stats:
            return F.batch_norm(
                input, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps
            )
        if RUNTIME.size() == 1:
            return F.batch_norm(
                input,
                self.running_mean,
                self.running_var,
                self.weight,
                self.bias,
                True,
                self._factor() if self.track_running_stats else 0.0,
                self.eps,
            )
        return self._synchronised(input)

    def _synchronised(self, input: torch.Tensor) -> torch.Tensor:
        dims = [0] + list(range(2, input.dim()))
        shape = [1, -1] + [1] * (input.dim() - 2)
        work = input.double()
        local = torch.tensor([input.numel() // input.size(1)], dtype=torch.float64, device=input.device)
        count = allreduce(local, op=Sum, name=None)
        mean = allreduce(work.sum(dims), op=Sum) / count
        centred = work - mean.reshape(shape)
        var = allreduce((centred * centred).sum(dims), op=Sum) / count
        output = (centred * torch.rsqrt(var + self.eps).reshape(shape)).to(input.dtype)
        if self.affine:
            output = output * self.weight.reshape(shape) + self.bias.reshape(shape)
        if self.track_running_stats:
            with torch.no_grad():
                factor = self._factor()
                n = float(count)
                unbiased = var * (n / (n - 1)) if n > 1 else var
                self.running_mean.mul_(1 - factor).add_(mean.to(self.running_mean.dtype), alpha=factor)
                self.running_var.mul_(1 - factor).add_(unbiased.to(self.running_var.dtype), alpha=factor)
        return output


__all__ = ["SyncBatchNorm"]

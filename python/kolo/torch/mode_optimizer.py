"""DistributedOptimizer in a job whose mode is not SYNC: the user's optimizer,
unchanged, with a kolo.torch.modes.Rounds hooked to its step(). The same
Horovod-style script thus trains in whichever mode the job asks for."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

from .. import mode as _mode
from .modes import Rounds


def job_mode() -> _mode.ModeSpec:
    """The job's mode from libkolo (SYNC with a libkolo that predates modes)."""
    if _mode.available() is not None:
        return _mode.ModeSpec("SYNC", 1, 0, 1.0, 0.0, False, "none", 1)
    return _mode.from_env()


class _ModeOptimizer(torch.optim.Optimizer):
    """Mixed into the wrapped optimizer's class (see mode_optimizer)."""

    def step(self, closure: Any = None) -> Any:
        self._kolo_rounds.before_step()
        result = super(self.__class__, self).step(closure)
        self._kolo_rounds.after_step()
        return result

    def synchronize(self) -> None:
        """Ends training on this rank: every rank calls it (Rounds.join); all
        then hold the same parameters."""
        self._kolo_rounds.join()

    @contextlib.contextmanager
    def skip_synchronize(self) -> Iterator[None]:
        """No gradients are all-reduced in this mode: nothing to skip."""
        yield

    def kolo_abandon(self) -> None:
        self._kolo_rounds.abandon()

    @property
    def kolo_mode(self) -> _mode.ModeSpec:
        return self._kolo_rounds.spec


def mode_optimizer(optimizer: torch.optim.Optimizer, spec: _mode.ModeSpec, **kw: Any) -> torch.optim.Optimizer:
    """optimizer (an instance of its own class) stepping in spec's mode; the
    mode is acknowledged to the kolo agent."""
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_ModeOptimizer.__dict__))
    wrapped = cls.__new__(cls)
    wrapped.__dict__.update(optimizer.__dict__)
    Rounds(None, wrapped, spec, **kw)
    _mode.acknowledge(spec.mode)
    return wrapped


def lr_scale() -> int:
    """The factor a single rank's learning rate is multiplied by in this job's
    mode; a script that writes `lr=args.lr * hvd.lr_scale()` trains in every
    mode unchanged.

    size() in SYNC: one step averages size() ranks' gradients (Horovod's linear
    scaling rule). 1 in ASYNC, LOCAL_SGD and DILOCO: each rank steps on its own
    batch for many steps between syncs (the single-worker optimizer, as in the
    DiLoCo paper and torchft), and DILOCO's outer Nesterov SGD multiplies a
    sustained pseudo-gradient by up to outer_lr / (1 - outer_momentum), 7x
    with the defaults. Measured (docs/PERFORMANCE.md): with the lr scaled by 4
    ranks LOCAL_SGD ends 14 points lower and DILOCO diverges."""
    from .. import size

    return size() if job_mode().mode == "SYNC" else 1

"""The exceptions kolo raises. Every failure that comes from libkolo is a
KoloError carrying the C status (its name and number) and libkolo's message;
the subclasses name the cases a training script handles differently."""
from __future__ import annotations

from typing import Optional

from . import _abi


class KoloError(RuntimeError):
    """A kolo operation failed. `status` is the C status name
    ('KOLO_ERR_PEER_LOST'), `code` its number (by default the status's, from include/kolo/status.h),
    `rank` the rank it names (or None)."""

    def __init__(
        self, message: str, status: str = "KOLO_ERR_INTERNAL", code: Optional[int] = None, rank: Optional[int] = None
    ):
        super().__init__(message)
        self.status = status
        self.code = _abi.STATUS.get(status, _abi.KOLO_ERR_INTERNAL) if code is None else code
        self.rank = rank


class PeerLostError(KoloError):
    """A rank of the ring died or left; `rank` names it when known."""


class KoloTimeoutError(KoloError, TimeoutError):
    """No progress within the communicator's timeout (KOLO_TIMEOUT)."""


class AbortedError(KoloError):
    """The communicator was aborted (shut down, or replaced by a newer ring)."""


class RingChangedError(KoloError):
    """The elastic ring changed under the operation; kolo.elastic.run recovers from it."""


class MismatchError(KoloError, ValueError):
    """Ranks disagree on a tensor's shape, dtype, op or root; the message names the tensor."""


class StalledError(KoloError):
    """A named operation was not submitted by every rank in time."""


class JobStoppedError(KoloError):
    """The kolo agent asked this process to stop (job cancelled or over)."""


class NotInitializedError(KoloError, ValueError):
    """A kolo call before kolo.init() (or after shutdown())."""

    def __init__(self, what: str = "kolo"):
        super().__init__("%s has not been initialized; call kolo.init() first" % what, "KOLO_ERR_STATE")


class ForkedProcessError(KoloError):
    """A collective (or init/shutdown) in a process forked from the one that
    called kolo.init(), e.g. a DataLoader worker: only that process owns the ring.
    rank(), size() and the other queries still answer with the parent's values."""

    def __init__(self, what: str):
        super().__init__(
            "%s: this process (a fork of the one that called kolo.init(), e.g. a DataLoader worker) "
            "cannot use the ring; only the process that joined it may" % what,
            "KOLO_ERR_STATE",
        )


class DuplicateNameError(KoloError, ValueError):
    """An operation was submitted under a name that is still in flight on this
    rank (a ValueError, as Horovod raises for a duplicate name)."""


class ArgumentError(KoloError, ValueError):
    """libkolo refused an argument (a ValueError, as Horovod's argument errors)."""


_BY_STATUS = {
    "KOLO_ERR_EXISTS": DuplicateNameError,
    "KOLO_ERR_INVALID_ARG": ArgumentError,
    "KOLO_ERR_PEER_LOST": PeerLostError,
    "KOLO_ERR_TIMEOUT": KoloTimeoutError,
    "KOLO_ERR_ABORTED": AbortedError,
    "KOLO_ERR_RING_CHANGED": RingChangedError,
    "KOLO_ERR_MISMATCH": MismatchError,
    "KOLO_ERR_STALLED": StalledError,
}


def error_class(status: str) -> type:
    """The KoloError subclass for a C status name."""
    return _BY_STATUS.get(status, KoloError)

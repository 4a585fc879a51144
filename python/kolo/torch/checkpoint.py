"""Durable checkpoints for kolo.torch programs: kolo.torch.Checkpointer.

kolo.elastic keeps a job's state in memory across a lost worker; a checkpoint on disk
is what survives the whole job (a cancel, a failure, a restart tomorrow). The folder is
the job's `checkpoint_dir` (the agent hands it to the process as KOLO_CHECKPOINT_DIR) or
one given here. Rank 0 writes, the others do nothing:

    ckpt = hvd.Checkpointer(keep=3)             # $KOLO_CHECKPOINT_DIR
    start = ckpt.restore(model, optimizer)      # the step to start from (0: none yet)
    for step in range(start, steps):
        ...
        if step % 100 == 0:
            ckpt.save(step, model=model, optimizer=optimizer)
    ckpt.close()                                # waits for the last write

save() copies the state to CPU memory at once (so training may go on changing it) and
writes it on a background thread: torch.save to a temporary file in the same folder,
fsync, rename to `checkpoint-<step>.pt` (atomic: a reader sees the old file or the new
one, never half of one), fsync of the folder, then the oldest beyond `keep` are removed.
At most one write is in flight; a save while one is still writing waits for it.
restore() reads the newest checkpoint that loads on rank 0 and broadcasts it, so every
rank starts from the same state even without a shared filesystem.
"""
from __future__ import annotations

import os
import re
import threading
from typing import Any, Dict, List, Optional

ENV = "KOLO_CHECKPOINT_DIR"
_NAME = re.compile(r"^checkpoint-(\d+)\.pt$")


def _to_cpu(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    return value


class Checkpointer:
    """Rank 0's asynchronous, atomic checkpoints in folder (default $KOLO_CHECKPOINT_DIR),
    keeping the newest `keep`. Without a folder every call is a no-op (enabled is False)."""

    def __init__(self, folder: Optional[str] = None, keep: int = 3):
        if not isinstance(keep, int) or keep < 1:
            raise ValueError("keep must be an int >= 1, not %r" % (keep,))
        self.folder = folder or os.environ.get(ENV) or None
        self.keep = keep
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None

    @property
    def enabled(self) -> bool:
        return self.folder is not None

    def _rank(self) -> int:
        from .. import is_initialized, rank

        return rank() if is_initialized() else 0

    def steps(self) -> List[int]:
        """The steps of the checkpoints in the folder, oldest first."""
        if not self.folder or not os.path.isdir(self.folder):
            return []
        found = [_NAME.match(name) for name in os.listdir(self.folder)]
        return sorted(int(m.group(1)) for m in found if m)

    def path(self, step: int) -> str:
        return os.path.join(self.folder or "", "checkpoint-%012d.pt" % step)

    def save(self, step: int, **state: Any) -> None:
        """Checkpoints state (torch modules and optimizers by their state_dict, anything
        else as it is) at step; rank 0 only. Returns once the state is copied; raises the
        error of a previous write that failed."""
        if not self.enabled or self._rank() != 0:
            return
        self.wait()
        snapshot: Dict[str, Any] = {"step": int(step)}
        for key, value in state.items():
            value = value.state_dict() if hasattr(value, "state_dict") else value
            snapshot[key] = _to_cpu(value)
        self._thread = threading.Thread(
            target=self._write, args=(int(step), snapshot), name="kolo-checkpoint", daemon=True
        )
        self._thread.start()

    def _write(self, step: int, snapshot: Dict[str, Any]) -> None:
        import torch

        try:
            assert self.folder is not None
            os.makedirs(self.folder, exist_ok=True)
            final = self.path(step)
            temporary = "%s.tmp-%d" % (final, os.getpid())
            with open(temporary, "wb") as f:
                torch.save(snapshot, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, final)
            folder = os.open(self.folder, os.O_RDONLY)
            try:
                os.fsync(folder)
            finally:
                os.close(folder)
            for old in self.steps()[: -self.keep]:
                try:
                    os.remove(self.path(old))
                except FileNotFoundError:
                    pass
        except BaseException as error:  # noqa: BLE001 - raised by the next save/wait
            self._error = error

    def wait(self) -> None:
        """Waits for the write in flight; raises its error if it failed."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError("kolo.torch.Checkpointer: writing a checkpoint failed: %s" % error) from error

    def close(self) -> None:
        self.wait()

    def load_latest(self) -> Optional[Dict[str, Any]]:
        """The newest checkpoint that loads (on this rank's filesystem), or None."""
        import torch

        for step in reversed(self.steps()):
            try:
                return torch.load(self.path(step), map_location="cpu", weights_only=False)
            except Exception:  # noqa: BLE001 - a damaged file: try the one before
                continue
        return None

    def restore(self, model: Any = None, optimizer: Any = None) -> int:
        """Loads rank 0's newest checkpoint into model and optimizer on every rank (rank 0
        reads, then broadcasts); returns the step after it, 0 when there is none."""
        from .. import is_initialized, size
        from .functions import broadcast_object

        state = self.load_latest() if self.enabled and self._rank() == 0 else None
        if is_initialized() and size() > 1:
            state = broadcast_object(state, root_rank=0)
        if state is None:
            return 0
        if model is not None and "model" in state:
            model.load_state_dict(state["model"])
        if optimizer is not None and "optimizer" in state:
            optimizer.load_state_dict(state["optimizer"])
        return int(state.get("step", -1)) + 1


__all__ = ["Checkpointer", "ENV"]

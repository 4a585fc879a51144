"""The process side of kolo.Runner: `python3 -m kolo._runner_main` in each rank of
the job. Loads the payload (_runner_ship.py: the cloudpickled (fn, args, kwargs) and
the source of the local modules it needs) from the job's environment
(KOLO_RUNNER_PAYLOAD_0.., base64), or a file: the job's blob, fetched and checked by
the worker (KOLO_JOB_BLOB, payloads over kolo.runner.INLINE_PAYLOAD_BYTES), or
KOLO_RUNNER_PAYLOAD_FILE (local runs),
calls fn under kolo.init(), and on rank 0 hands back the result: as marked lines
in its output (the Runner reads the job's log through the service) or into
KOLO_RUNNER_RESULT_FILE. An exception in fn is the result too (with its
traceback), and the process exits 1; a rank other than 0 hands back its exception
the same way under ERROR_MARK (or into KOLO_RUNNER_RESULT_FILE.<rank>), so the
Runner can raise the first real error of any rank, not the abort it caused on
rank 0. A payload that does not load (a module missing on the workers) is handed
back as the error of its rank (KOLO_RANK) before kolo.init()."""
from __future__ import annotations

import base64
import os
import sys
import traceback
from typing import Any, Dict

import cloudpickle

MARK = "@kolo-result:"
ERROR_MARK = "@kolo-error:"  # + nonce + ":" + rank: a rank other than 0 raised
LINE_CHARS = 12000  # base64 per marked line (the agent cuts lines at 16 KiB)
MAX_RESULT_BYTES = 8 << 20


def load_payload() -> bytes:
    path = os.environ.get("KOLO_RUNNER_PAYLOAD_FILE") or os.environ.get("KOLO_JOB_BLOB")
    if path:
        with open(path, "rb") as f:
            return f.read()
    parts = int(os.environ.get("KOLO_RUNNER_PARTS", "0"))
    if parts <= 0:
        raise RuntimeError("kolo._runner_main: no payload (KOLO_RUNNER_PARTS / KOLO_RUNNER_PAYLOAD_FILE unset)")
    return base64.b64decode("".join(os.environ["KOLO_RUNNER_PAYLOAD_%d" % i] for i in range(parts)))


def _ring_failure(error: BaseException) -> bool:
    """Whether error is a consequence of another rank's failure (a ring that aborted, a
    peer gone), not a failure of this rank's own."""
    try:
        from kolo import errors
    except Exception:  # noqa: BLE001 - kolo did not import: not a ring failure
        return False
    return isinstance(
        error,
        (
            errors.PeerLostError,
            errors.AbortedError,
            errors.RingChangedError,
            errors.JobStoppedError,
            errors.KoloTimeoutError,
            errors.StalledError,
        ),
    )


def error_result(error: BaseException) -> Dict[str, Any]:
    tb = traceback.format_exc()
    try:
        exc = cloudpickle.dumps(error)
        cloudpickle.loads(exc)
    except Exception:  # noqa: BLE001 - some exceptions do not pickle; the traceback still goes back
        exc = None
    return {
        "ok": False,
        "exc": exc,
        "type": type(error).__name__,
        "message": str(error),
        "traceback": tb,
        "ring_failure": _ring_failure(error),
    }


def encode(result: Dict[str, Any]) -> bytes:
    try:
        data = cloudpickle.dumps(result)
    except Exception as error:  # noqa: BLE001
        data = cloudpickle.dumps(
            {
                "ok": False,
                "exc": None,
                "type": type(error).__name__,
                "message": "the return value of fn does not pickle: %s" % error,
                "traceback": traceback.format_exc(),
            }
        )
    if len(data) > MAX_RESULT_BYTES:
        data = cloudpickle.dumps(
            {
                "ok": False,
                "exc": None,
                "type": "ValueError",
                "message": "the return value of fn is %d bytes pickled, over the Runner's limit "
                "of %d bytes" % (len(data), MAX_RESULT_BYTES),
                "traceback": "",
            }
        )
    return data


def hand_back(data: bytes, rank: int = 0) -> None:
    """Rank 0's result (or another rank's error) to the Runner."""
    path = os.environ.get("KOLO_RUNNER_RESULT_FILE")
    if path:
        if rank:
            path += ".%d" % rank
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.replace(path + ".tmp", path)
        return
    text = base64.b64encode(data).decode()
    nonce = os.environ.get("KOLO_RUNNER_NONCE", "")
    mark = MARK + nonce if rank == 0 else "%s%s:%d" % (ERROR_MARK, nonce, rank)
    parts = [text[i : i + LINE_CHARS] for i in range(0, len(text), LINE_CHARS)] or [""]
    sys.stdout.flush()
    sys.stderr.flush()
    for i, part in enumerate(parts):
        sys.stdout.write("%s %d/%d %s\n" % (mark, i + 1, len(parts), part))
    sys.stdout.flush()


def main() -> int:
    from kolo._runner_ship import unpack

    try:
        fn, args, kwargs = cloudpickle.loads(unpack(load_payload()))
    except BaseException as error:  # noqa: BLE001 - e.g. a module the workers do not have
        traceback.print_exc()
        hand_back(encode(error_result(error)), int(os.environ.get("KOLO_RANK", "0") or 0))
        return 1
    import kolo

    kolo.init()
    try:
        result: Dict[str, Any] = {"ok": True, "value": fn(*args, **kwargs)}
    except BaseException as error:  # noqa: BLE001 - everything goes back to the caller
        traceback.print_exc()
        result = error_result(error)
    rank = kolo.rank() if kolo.is_initialized() else 0
    if rank == 0 or not result["ok"]:
        hand_back(encode(result), rank)
    try:
        kolo.shutdown()
    except Exception:  # noqa: BLE001 - the result is out; a ring gone at exit changes nothing
        pass
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

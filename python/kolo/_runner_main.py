"""The process side of kolo.Runner: `python3 -m kolo._runner_main` in each rank of
the job. Loads the cloudpickled (fn, args, kwargs) from the job's environment
(KOLO_RUNNER_PAYLOAD_0.., base64) or a file (KOLO_RUNNER_PAYLOAD_FILE, local runs),
calls fn under kolo.init(), and on rank 0 hands back the result: as marked lines
in its output (the Runner reads rank 0's log through the service) or into
KOLO_RUNNER_RESULT_FILE. An exception in fn is the result too (with its
traceback), and the process exits 1."""
from __future__ import annotations

import base64
import os
import sys
import traceback
from typing import Any, Dict

import cloudpickle

MARK = "@kolo-result:"
LINE_CHARS = 12000  # base64 per marked line (the agent cuts lines at 16 KiB)
MAX_RESULT_BYTES = 8 << 20


def load_payload() -> bytes:
    path = os.environ.get("KOLO_RUNNER_PAYLOAD_FILE")
    if path:
        with open(path, "rb") as f:
            return f.read()
    parts = int(os.environ.get("KOLO_RUNNER_PARTS", "0"))
    if parts <= 0:
        raise RuntimeError("kolo._runner_main: no payload (KOLO_RUNNER_PARTS / KOLO_RUNNER_PAYLOAD_FILE unset)")
    return base64.b64decode("".join(os.environ["KOLO_RUNNER_PAYLOAD_%d" % i] for i in range(parts)))


def error_result(error: BaseException) -> Dict[str, Any]:
    tb = traceback.format_exc()
    try:
        exc = cloudpickle.dumps(error)
        cloudpickle.loads(exc)
    except Exception:  # noqa: BLE001 - some exceptions do not pickle; the traceback still goes back
        exc = None
    return {"ok": False, "exc": exc, "type": type(error).__name__, "message": str(error), "traceback": tb}


def encode(result: Dict[str, Any]) -> bytes:
    try:
        data = cloudpickle.dumps(result)
    except Exception as error:  # noqa: BLE001
        data = cloudpickle.dumps({"ok": False, "exc": None, "type": type(error).__name__,
                                  "message": "the return value of fn does not pickle: %s" % error,
                                  "traceback": traceback.format_exc()})
    if len(data) > MAX_RESULT_BYTES:
        data = cloudpickle.dumps({"ok": False, "exc": None, "type": "ValueError",
                                  "message": "the return value of fn is %d bytes pickled, over the Runner's limit "
                                             "of %d bytes" % (len(data), MAX_RESULT_BYTES), "traceback": ""})
    return data


def hand_back(data: bytes) -> None:
    path = os.environ.get("KOLO_RUNNER_RESULT_FILE")
    if path:
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.replace(path + ".tmp", path)
        return
    text = base64.b64encode(data).decode()
    mark = MARK + os.environ.get("KOLO_RUNNER_NONCE", "")
    parts = [text[i:i + LINE_CHARS] for i in range(0, len(text), LINE_CHARS)] or [""]
    sys.stdout.flush()
    sys.stderr.flush()
    for i, part in enumerate(parts):
        sys.stdout.write("%s %d/%d %s\n" % (mark, i + 1, len(parts), part))
    sys.stdout.flush()


def main() -> int:
    fn, args, kwargs = cloudpickle.loads(load_payload())
    import kolo
    kolo.init()
    try:
        result: Dict[str, Any] = {"ok": True, "value": fn(*args, **kwargs)}
    except BaseException as error:  # noqa: BLE001 - everything goes back to the caller
        traceback.print_exc()
        result = error_result(error)
    rank = kolo.rank() if kolo.is_initialized() else 0
    if rank == 0:
        hand_back(encode(result))
    try:
        kolo.shutdown()
    except Exception:  # noqa: BLE001 - the result is out; a ring gone at exit changes nothing
        pass
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

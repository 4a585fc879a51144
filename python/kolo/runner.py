"""kolo.Runner: HorovodRunner's one call, on a kolo cluster.

    import kolo

    def train(lr, epochs=1):
        import kolo.torch as hvd
        hvd.init()
        ...
        return accuracy

    acc = kolo.Runner(np=4, server="kolo:7070").run(train, 0.1, epochs=5)

run() pickles fn and its arguments with cloudpickle, submits an `exec` job that
runs them under kolo.init() on each of the np workers (python3 -m
kolo._runner_main), prints rank 0's output as it happens, and returns rank 0's
return value; an exception in fn is raised here with the remote traceback as its
cause. np=(min_np, max_np) runs an elastic job (write fn with kolo.elastic to keep
state across a lost worker); np=-1 runs fn in this process and np=-N in N local
processes (kolorun), with no server, for debugging.

How the function and the result travel: the pickled (fn, args, kwargs), with the
source of the local modules it needs (_runner_ship.py; py_modules= names more),
compressed, goes in the job spec (exec.env, base64, in pieces of 96 KiB; at most
MAX_PAYLOAD_BYTES, ValueError past it: load big data inside fn instead of capturing
it); rank 0 writes the pickled return value (at most 8 MiB) as marked lines into its
own output, and any other rank whose fn raised writes its exception the same way;
the Runner reads them back through the server's StreamLogs (so it works wherever
the workers are, with no shared filesystem), hiding those lines, and raises the
first real error of any rank (not the abort it caused elsewhere).
"""
from __future__ import annotations

import base64
import os
import queue
import secrets
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, TextIO, Tuple, Union

import cloudpickle

from . import _runner_ship
from ._runner_main import ERROR_MARK, MARK

# A compressed payload up to INLINE_PAYLOAD_BYTES rides base64 in the job spec (exec.env); a
# bigger one is uploaded to kolo-server first as the job's blob (PutJobBlob: etcd, in chunks
# outside the spec) and each worker fetches it before it starts the process. MAX_PAYLOAD_BYTES
# is kolo-server's default --max-blob-bytes; a server may set another (its error says so).
INLINE_PAYLOAD_BYTES = 256 << 10
MAX_PAYLOAD_BYTES = 64 << 20
# After rank 0's ring failure (an abort, a lost peer): how long to wait for the real
# error of the rank that caused it.
ERROR_GRACE_S = 5.0
# what local ranks keep of the caller's KOLO_* environment (not its ring: kolorun makes theirs)
_KEEP = ("KOLO_LIBRARY", "KOLO_BIN_DIR", "KOLO_TIMEOUT", "KOLO_LOG_LEVEL", "KOLO_SHM")
ENV_PART_CHARS = 96 << 10
_HERE = os.path.dirname(os.path.abspath(__file__))
_CHECKOUT = os.path.dirname(os.path.dirname(_HERE))


class RunnerError(RuntimeError):
    """The job ended without a result from rank 0 (it failed, was cancelled, or its
    rank 0 never finished); `job_id`, `phase` and the job's `error` say why."""

    def __init__(self, message: str, job_id: str = "", phase: str = "", error: str = ""):
        super().__init__(message)
        self.job_id = job_id
        self.phase = phase
        self.error = error


class RemoteTraceback(Exception):
    """The traceback of an exception raised by fn in a worker (set as __cause__)."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return "\n\n" + self.text


class RemoteError(RuntimeError):
    """fn raised an exception that could not be unpickled here; the message holds
    its type, text and remote traceback."""


def _parse_np(np: Any) -> Tuple[int, int]:
    """(min, max) for a cluster run; (-1, -1) in this process; (-n, -n) local."""
    if isinstance(np, bool):
        raise TypeError("np must be an int or (min_np, max_np), not a bool")
    if isinstance(np, int):
        if np == 0:
            raise ValueError("np must not be 0 (np > 0: workers, np = -1: this process, np = -N: N local processes)")
        return np, np
    if (
        isinstance(np, (tuple, list))
        and len(np) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in np)
    ):
        low, high = np
        if low < 1 or high < low:
            raise ValueError("np=(min_np, max_np) needs 1 <= min_np <= max_np, got %r" % (tuple(np),))
        return low, high
    raise TypeError("np must be an int or a (min_np, max_np) pair, not %r" % (np,))


# the job spec's mode parameters (proto/kolo/v1/job.proto JobSpec) and their Python types
MODE_PARAMS = {
    "average_every": int,
    "max_staleness": int,
    "outer_learning_rate": float,
    "outer_momentum": float,
    "outer_nesterov": bool,
    "compression": str,
    "fragments": int,
}
MODES = ("SYNC", "ASYNC", "LOCAL_SGD", "DILOCO")


def _parse_mode(mode: Optional[str], params: Dict[str, Any]) -> Dict[str, Any]:
    """The job spec's mode fields; ranges and which mode uses which parameter are
    the service's to check (at submit, naming the field)."""
    unknown = sorted(set(params) - set(MODE_PARAMS))
    if unknown:
        raise TypeError(
            "Runner() got unknown argument(s) %s (mode parameters: %s)" % (", ".join(unknown), ", ".join(MODE_PARAMS))
        )
    if mode is None:
        if params:
            raise ValueError("Runner(): %s given without a mode" % ", ".join(sorted(params)))
        return {}
    if not isinstance(mode, str) or mode.strip().upper().replace("-", "_") not in MODES:
        raise ValueError("Runner(): mode must be one of %s, not %r" % (", ".join(MODES), mode))
    out: Dict[str, Any] = {"mode": mode.strip().upper().replace("-", "_")}
    for name, value in params.items():
        if value is None:
            continue
        kind = MODE_PARAMS[name]
        if (
            kind is bool
            and not isinstance(value, bool)
            or kind is int
            and (isinstance(value, bool) or not isinstance(value, int))
            or kind is float
            and not isinstance(value, (int, float))
            or kind is str
            and not isinstance(value, str)
        ):
            raise TypeError("Runner(): %s must be %s, not %r" % (name, kind.__name__, value))
        if name == "compression":  # the spec's enum: COMPRESSION_NONE, _FP16, _INT8
            if value.strip().lower() not in _COMPRESSIONS:
                raise ValueError("Runner(): compression must be none, fp16 or int8, not %r" % (value,))
            value = "COMPRESSION_" + value.strip().upper()
        out[name] = value
    return out


_COMPRESSIONS = ("none", "fp16", "int8")
# kolorun's options for the spec's mode fields (np=-N runs)
_KOLORUN_OPTIONS = {
    "average_every": "--sync-every",
    "max_staleness": "--max-staleness",
    "outer_learning_rate": "--outer-lr",
    "outer_momentum": "--outer-momentum",
    "outer_nesterov": "--nesterov",
    "compression": "--compression",
    "fragments": "--fragments",
}


def _kolorun_mode(mode: Dict[str, Any]) -> List[str]:
    """The job spec's mode fields as kolorun options."""
    if not mode:
        return []
    argv = ["--mode", mode["mode"]]
    for name, value in mode.items():
        if name == "mode":
            continue
        if name == "outer_nesterov":
            value = int(value)
        elif name == "compression":
            value = value[len("COMPRESSION_") :].lower()
        argv += [_KOLORUN_OPTIONS[name], str(value)]
    return argv


def _by_value(fn: Callable[..., Any]) -> None:
    """Ships fn's own module by value unless the workers can import it too (the
    standard library or an installed package): a notebook's or a test's functions."""
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    path = getattr(module, "__file__", None)
    if module is None or path is None or module.__name__ == "__main__" or module.__name__.startswith("kolo"):
        return
    installed = [sysconfig.get_paths()[key] for key in ("stdlib", "purelib", "platlib")]
    if any(os.path.abspath(path).startswith(os.path.abspath(p)) for p in installed) or "dist-packages" in path:
        return
    cloudpickle.register_pickle_by_value(module)


def _find_kolorun() -> str:
    for candidate in (
        os.environ.get("KOLO_BIN_DIR") and os.path.join(os.environ["KOLO_BIN_DIR"], "kolorun"),
        shutil.which("kolorun"),
        os.path.join(_CHECKOUT, "build", "bin", "kolorun"),
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError("np=-N needs kolorun: build kolo, put kolorun on PATH or set KOLO_BIN_DIR")


def _where(rank: int, job_id: str) -> str:
    if not job_id:
        return "raised on rank %d" % rank
    return (
        "raised on rank %d of job %s; every rank's output: `kolo logs %s --rank N` (rank %d: "
        "`kolo logs %s --rank %d`)" % (rank, job_id, job_id, rank, job_id, rank)
    )


def _decode(data: Union[bytes, Dict[str, Any]], rank: int = 0, job_id: str = "") -> Any:
    """Returns fn's value or raises its exception (with the remote traceback, the rank
    that raised it and where the ranks' logs are)."""
    result: Dict[str, Any] = cloudpickle.loads(data) if isinstance(data, bytes) else data
    if result.get("ok"):
        return result.get("value")
    where = _where(rank, job_id)
    tb = RemoteTraceback("(%s)\n%s" % (where, result.get("traceback", "")))
    exc = None
    if result.get("exc") is not None:
        try:
            exc = cloudpickle.loads(result["exc"])
        except Exception:  # noqa: BLE001 - e.g. a class this process cannot import
            exc = None
    if not isinstance(exc, BaseException):
        exc = RemoteError(
            "%s: %s\n\nremote traceback:\n%s" % (result.get("type"), result.get("message"), result.get("traceback", ""))
        )
    try:
        exc.kolo_rank = rank  # type: ignore[attr-defined]
        if hasattr(exc, "add_note"):
            exc.add_note("kolo.Runner: " + where)
    except Exception:  # noqa: BLE001 - an exception type that takes no attributes
        pass
    raise exc from tb


class _Marks:
    """Collects the marked lines of one run: rank 0's result, other ranks' errors."""

    def __init__(self, nonce: str):
        self.result_mark = MARK + nonce + " "
        self.error_mark = ERROR_MARK + nonce + ":"
        self.parts: Dict[int, Dict[int, str]] = {}
        self.done: Dict[int, Dict[str, Any]] = {}  # rank -> decoded result, in arrival order

    def marked(self, text: str) -> bool:
        return text.startswith(self.result_mark) or text.startswith(self.error_mark)

    def take(self, text: str) -> Optional[int]:
        """Records a marked line; the rank whose result it completed, else None."""
        if text.startswith(self.result_mark):
            rank, rest = 0, text[len(self.result_mark) :]
        else:
            head, _, rest = text[len(self.error_mark) :].partition(" ")
            rank = int(head)
        index, _, chunk = rest.partition(" ")
        number, _, count = index.partition("/")
        parts = self.parts.setdefault(rank, {})
        parts[int(number)] = chunk
        if len(parts) < int(count):
            return None
        data = base64.b64decode("".join(parts[i] for i in range(1, int(count) + 1)))
        self.done[rank] = cloudpickle.loads(data)
        return rank

    def first_real_error(self) -> Optional[int]:
        """The first rank whose error is its own (not a ring failure caused elsewhere)."""
        for rank, result in self.done.items():
            if not result.get("ok") and not result.get("ring_failure"):
                return rank
        return None


def _follow(lines: Iterable[Any]) -> "queue.Queue[Any]":
    """Reads a log stream on a thread of its own (so the reader can wait with a deadline);
    the queue ends with None, or an exception the stream raised."""
    q: "queue.Queue[Any]" = queue.Queue()

    def pump() -> None:
        try:
            for line in lines:
                q.put(line)
            q.put(None)
        except BaseException as error:  # noqa: BLE001 - handed to the reader
            q.put(error)

    threading.Thread(target=pump, name="kolo-runner-logs", daemon=True).start()
    return q


class Runner:
    """Runs a Python function on np kolo workers and returns rank 0's result.

    np: workers (int > 0), an elastic (min_np, max_np), -1 (this process) or -N
    (N local processes). server/token/tls: as kolo.client.Client (default
    $KOLO_SERVER, $KOLO_TOKEN). name: the job's name; env: extra environment of the
    processes; python: the interpreter on the workers; max_reconfigurations: of the
    job (0 = kolo's default); timeout: seconds for the whole run (None = no limit;
    the job is cancelled past it); stream: where rank 0's output goes (sys.stdout);
    py_modules: more local modules to ship as source (modules, names, paths to .py
    files or package folders), besides those found from fn (docs/RUNNER.md).

    mode: the job's training mode, SYNC (default), ASYNC, LOCAL_SGD or DILOCO, with its
    parameters named as in the job spec (average_every: steps between syncs, H;
    max_staleness; outer_learning_rate, outer_momentum, outer_nesterov; compression:
    none, fp16 or int8; fragments). kolo.torch's DistributedOptimizer in fn then trains
    in that mode (docs/PYTHON.md); the service checks the values at submit.
    """

    def __init__(
        self,
        np: Union[int, Sequence[int]] = 1,
        server: Optional[str] = None,
        token: Optional[str] = None,
        tls: Union[None, bool, str] = None,
        name: str = "kolo-runner",
        env: Optional[Mapping[str, str]] = None,
        python: str = "/usr/bin/python3",
        max_reconfigurations: int = 0,
        timeout: Optional[float] = None,
        stream: Optional[TextIO] = None,
        labels: Optional[Mapping[str, str]] = None,
        py_modules: Sequence[Any] = (),
        mode: Optional[str] = None,
        **mode_params: Any,
    ):
        self.min_np, self.max_np = _parse_np(np)
        self.mode = _parse_mode(mode, mode_params)
        if env is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
            raise TypeError("env must map strings to strings")
        if timeout is not None and (not isinstance(timeout, (int, float)) or timeout <= 0):
            raise ValueError("timeout must be a positive number of seconds or None")
        if not isinstance(max_reconfigurations, int) or max_reconfigurations < 0:
            raise ValueError("max_reconfigurations must be a non-negative int")
        self.np = np
        self.server, self.token, self.tls = server, token, tls
        self.name = name
        self.env = dict(env or {})
        self.python = python
        self.max_reconfigurations = max_reconfigurations
        self.timeout = timeout
        self.stream = stream
        self.labels = dict(labels or {})
        if isinstance(py_modules, (str, bytes)):
            raise TypeError("py_modules takes a list of modules, names or paths, not one string")
        self.py_modules = list(py_modules)
        self.job_id: Optional[str] = None  # the last run's job

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Runs fn(*args, **kwargs) on every rank; returns rank 0's value."""
        if not callable(fn):
            raise TypeError("fn must be callable, not %s" % type(fn).__name__)
        if self.min_np == -1:
            import kolo

            kolo.init()
            return fn(*args, **kwargs)
        _by_value(fn)
        modules = _runner_ship.local_modules(
            (fn, args, kwargs), self.py_modules, by_value=[getattr(fn, "__module__", "") or ""]
        )
        try:
            payload = _runner_ship.pack(cloudpickle.dumps((fn, args, kwargs)), modules)
        except Exception as error:  # noqa: BLE001
            raise TypeError("fn and its arguments must pickle with cloudpickle: %s" % error) from error
        if self.min_np < -1:
            return self._run_local(-self.min_np, payload)
        return self._run_cluster(payload)

    # ---- np = -N: kolorun on this host ----

    def _run_local(self, n: int, payload: bytes) -> Any:
        out = self.stream or sys.stdout
        with tempfile.TemporaryDirectory(prefix="kolo-runner-") as tmp:
            payload_file, result_file = os.path.join(tmp, "payload"), os.path.join(tmp, "result")
            with open(payload_file, "wb") as f:
                f.write(payload)
            env = {k: v for k, v in os.environ.items() if not k.startswith("KOLO_") or k in _KEEP}
            env.update(
                KOLO_RUNNER_PAYLOAD_FILE=payload_file,
                KOLO_RUNNER_RESULT_FILE=result_file,
                PYTHONUNBUFFERED="1",
                **self.env,
            )
            path = [p for p in sys.path if p and os.path.isdir(os.path.join(p, "kolo"))]
            env["PYTHONPATH"] = os.pathsep.join(path + [env.get("PYTHONPATH", "")])
            argv = [_find_kolorun(), "-np", str(n)]
            if self.timeout:
                argv += ["--timeout", str(int(self.timeout) or 1)]
            argv += _kolorun_mode(self.mode)
            argv += ["--", self.python, "-m", "kolo._runner_main"]
            proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            tail = []
            try:
                for raw in proc.stdout:  # type: ignore[union-attr]
                    line = raw.decode("utf-8", "replace")
                    out.write(line)
                    out.flush()
                    tail = (tail + [line])[-20:]
            finally:
                code = proc.wait()
            results: Dict[int, Dict[str, Any]] = {}
            for rank in range(n):
                path = result_file + (".%d" % rank if rank else "")
                if os.path.exists(path):
                    with open(path, "rb") as f:
                        results[rank] = cloudpickle.loads(f.read())
            real = [r for r, v in results.items() if not v.get("ok") and not v.get("ring_failure")]
            if real:
                return _decode(results[real[0]], real[0])
            if 0 in results:
                return _decode(results[0])
            raise RunnerError(
                "kolorun -np %d exited %d without a result from rank 0:\n%s" % (n, code, "".join(tail)),
                phase="FAILED",
                error="".join(tail),
            )

    # ---- np > 0: a kolo job ----

    @staticmethod
    def _check_size(payload: bytes) -> None:
        if len(payload) > MAX_PAYLOAD_BYTES:
            raise ValueError(
                "fn, its arguments and shipped modules are %d bytes pickled and compressed, over the "
                "Runner's limit of %d bytes (kolo.runner.MAX_PAYLOAD_BYTES, kolo-server's default "
                "--max-blob-bytes: they are uploaded to kolo-server, which stores them in etcd): load big "
                "data inside fn (from a path or URL every worker can read) instead of capturing it in fn "
                "or passing it as an argument" % (len(payload), MAX_PAYLOAD_BYTES)
            )

    def _spec(self, payload: bytes, nonce: str, blob: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        exec_: Dict[str, Any] = {"argv": [self.python, "-m", "kolo._runner_main"]}
        env = dict(self.env)
        if blob is None:
            text = base64.b64encode(payload).decode()
            parts = [text[i : i + ENV_PART_CHARS] for i in range(0, len(text), ENV_PART_CHARS)]
            env.update({"KOLO_RUNNER_PAYLOAD_%d" % i: part for i, part in enumerate(parts)})
            env.update(KOLO_RUNNER_PARTS=str(len(parts)))
        else:
            exec_["blob"] = blob  # the worker fetches it and names its file in KOLO_JOB_BLOB
        env.update(KOLO_RUNNER_NONCE=nonce)
        exec_["env"] = env
        return {
            "name": self.name,
            "id": "run-" + nonce,
            "min_workers": self.min_np,
            "max_workers": self.max_np,
            "max_reconfigurations": self.max_reconfigurations,
            "labels": self.labels,
            "exec": exec_,
            **self.mode,
        }

    def _run_cluster(self, payload: bytes) -> Any:
        from . import client as kc

        nonce = secrets.token_hex(8)
        self._check_size(payload)
        with kc.Client(self.server, token=self.token, tls=self.tls) as api:
            blob = None
            if len(payload) > INLINE_PAYLOAD_BYTES:
                try:
                    blob = api.put_blob("run-" + nonce, payload)
                except kc.ResourceExhaustedError as error:
                    raise ValueError(
                        "kolo.Runner: the payload (fn, its arguments and shipped modules: %d bytes "
                        "pickled and compressed) is over the server's limit: %s. Load big data inside "
                        "fn (from a path or URL every worker can read) instead of capturing it in fn "
                        "or passing it as an argument" % (len(payload), error.message)
                    ) from None
            job = api.submit(self._spec(payload, nonce, blob))
            self.job_id = job.id
            try:
                return self._read(api, job.id, _Marks(nonce))
            except kc.DeadlineExceededError:
                api.cancel(job.id, reason="kolo.Runner: timed out after %s s" % self.timeout)
                raise TimeoutError("kolo.Runner: job %s took longer than %s s (cancelled)" % (job.id, self.timeout))
            except BaseException as error:
                reason = (
                    "kolo.Runner: fn raised"
                    if getattr(error, "kolo_rank", None) is not None
                    else "kolo.Runner: interrupted"
                )
                try:  # the others must not wait for a new rank 0
                    if kc.Client.phase(api.get(job.id)) not in kc.FINAL_PHASES:
                        api.cancel(job.id, reason=reason)
                except kc.ClientError:
                    pass
                raise

    def _read(self, api: Any, job_id: str, marks: _Marks) -> Any:
        """Follows every rank's log: prints rank 0's lines, returns rank 0's value or raises
        the first real error of any rank (rank 0's own ring failure only when no other
        rank's error arrives within ERROR_GRACE_S)."""
        from . import client as kc

        out = self.stream or sys.stdout
        lines = _follow(api.logs(job_id, follow=True, timeout=self.timeout))
        grace_end: Optional[float] = None
        while True:
            try:
                item = lines.get(timeout=None if grace_end is None else max(0.0, grace_end - time.monotonic()))
            except queue.Empty:
                break
            if item is None:
                break
            if isinstance(item, BaseException):
                raise item
            if item.notice:
                print("kolo: " + item.text, file=sys.stderr)
                continue
            if not marks.marked(item.text):
                if item.rank == 0:
                    out.write(item.text + "\n")
                    out.flush()
                continue
            rank = marks.take(item.text)
            if rank is None:
                continue
            if marks.done[rank].get("ok"):
                return _decode(marks.done[rank], rank, job_id)
            real = marks.first_real_error()
            if real is not None:
                _decode(marks.done[real], real, job_id)
            if rank == 0 and grace_end is None:
                grace_end = time.monotonic() + ERROR_GRACE_S
        if marks.done:
            rank = 0 if 0 in marks.done else next(iter(marks.done))
            _decode(marks.done[rank], rank, job_id)
        final = api.get(job_id)
        phase = kc.Client.phase(final)
        raise RunnerError(
            "kolo.Runner: job %s ended %s without a result from rank 0%s\n(every rank's output: "
            "`kolo logs %s`, one rank: `kolo logs %s --rank N`)"
            % (job_id, phase, ": " + final.status.error if final.status.error else "", job_id, job_id),
            job_id,
            phase,
            final.status.error,
        )


__all__ = ["Runner", "RunnerError", "RemoteError", "RemoteTraceback", "MAX_PAYLOAD_BYTES", "INLINE_PAYLOAD_BYTES"]

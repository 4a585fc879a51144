"""kolo.client: a Python client of kolo-server's gRPC API (kolo.v1.JobService and
ClusterService) over Debian's python3-grpcio, with the same token and TLS as the
`kolo` CLI.

    from kolo.client import Client
    with Client("127.0.0.1:7070") as c:
        job = c.submit({"name": "mnist", "min_workers": 2,
                        "builtin": {"model": "mlp", "dataset": "fashion-mnist", "epochs": 1}})
        for update in c.watch(job.id):
            print(update.status.phase)
        for line in c.logs(job.id, ranks=[0]):
            print(line.text)

Replies are the protobuf messages of proto/kolo/v1 (`job.status.phase`,
`job.status.error`, ...; `Client.phase(job)` gives the phase's name). Every failed
call raises ClientError (or the subclass for its status) carrying the gRPC status
name and the server's message.
"""
from __future__ import annotations

import hashlib
import os
from typing import Any, Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Union

import grpc
from google.protobuf import json_format

from . import _proto

job_pb2, cluster_pb2 = _proto.load()

DEFAULT_ADDRESS = "127.0.0.1:7070"
FINAL_PHASES = ("SUCCEEDED", "FAILED", "CANCELLED")


class ClientError(Exception):
    """A kolo-server call failed: `code` is the gRPC status name ("NOT_FOUND"),
    `message` the server's explanation."""

    def __init__(self, code: str, message: str, method: str = ""):
        super().__init__("%s: %s%s" % (code, message, " (%s)" % method if method else ""))
        self.code = code
        self.message = message
        self.method = method


class NotFoundError(ClientError, LookupError):
    """No such job or worker."""


class InvalidArgumentError(ClientError, ValueError):
    """The request was refused; the message names the field."""


class AlreadyExistsError(ClientError):
    """A job with this id exists with another spec."""


class FailedPreconditionError(ClientError):
    """Not allowed in the job's phase (e.g. cancelling a finished job)."""


class UnauthenticatedError(ClientError, PermissionError):
    """Missing or wrong bearer token."""


class UnavailableError(ClientError, ConnectionError):
    """The server (or its etcd) cannot be reached."""


class ResourceExhaustedError(ClientError):
    """Too large, too many, or too slow (the message says which)."""


class DeadlineExceededError(ClientError, TimeoutError):
    """The call took longer than its timeout."""


_ERRORS = {
    "NOT_FOUND": NotFoundError,
    "INVALID_ARGUMENT": InvalidArgumentError,
    "ALREADY_EXISTS": AlreadyExistsError,
    "FAILED_PRECONDITION": FailedPreconditionError,
    "UNAUTHENTICATED": UnauthenticatedError,
    "UNAVAILABLE": UnavailableError,
    "RESOURCE_EXHAUSTED": ResourceExhaustedError,
    "DEADLINE_EXCEEDED": DeadlineExceededError,
}


def _error(error: grpc.RpcError, method: str) -> ClientError:
    code = error.code().name if hasattr(error, "code") and error.code() else "UNKNOWN"
    details = error.details() if hasattr(error, "details") else str(error)
    return _ERRORS.get(code, ClientError)(code, details or "", method)


class LogLine(NamedTuple):
    """One line of a job's output (kolo.v1.LogLine, text decoded as UTF-8)."""

    rank: int
    epoch: int
    worker_id: str
    text: str
    raw: bytes
    notice: bool  # a line from kolo about a worker's logs, not from the process


# PutJobBlob's piece size (coordination/keys.h: KOLO_BLOB_CHUNK_BYTES)
BLOB_CHUNK_BYTES = 256 << 10

_METHODS = {
    "SubmitJob": ("JobService", job_pb2.Job),
    "GetJob": ("JobService", job_pb2.Job),
    "ListJobs": ("JobService", job_pb2.ListJobsResponse),
    "CancelJob": ("JobService", job_pb2.Job),
    "ScaleJob": ("JobService", job_pb2.Job),
    "WatchJob": ("JobService", job_pb2.Job),
    "StreamLogs": ("JobService", job_pb2.LogChunk),
    "PutJobBlob": ("JobService", job_pb2.PutJobBlobResponse),
    "ListWorkers": ("ClusterService", cluster_pb2.ListWorkersResponse),
    "DrainWorker": ("ClusterService", cluster_pb2.Worker),
    "UndrainWorker": ("ClusterService", cluster_pb2.Worker),
}


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class Client:
    """A connection to kolo-server.

    address: "host:port" of the gRPC API (default $KOLO_SERVER or 127.0.0.1:7070).
    token: the bearer token of a server started with --token-file (default $KOLO_TOKEN).
    tls: None/False = plaintext; True = TLS verified with the system's CAs; a path =
    TLS verified with that PEM CA bundle (like `kolo --tls-ca`).
    timeout: seconds for each unary call (streams have none unless given).
    """

    def __init__(
        self,
        address: Optional[str] = None,
        token: Optional[str] = None,
        tls: Union[None, bool, str] = None,
        timeout: float = 30.0,
    ):
        self.address = address or os.environ.get("KOLO_SERVER") or DEFAULT_ADDRESS
        token = token if token is not None else os.environ.get("KOLO_TOKEN")
        if tls is not None and not isinstance(tls, (bool, str)):
            raise TypeError("tls must be None, a bool or a CA file path, not %s" % type(tls).__name__)
        if timeout is not None and (not isinstance(timeout, (int, float)) or timeout <= 0):
            raise ValueError("timeout must be a positive number of seconds")
        self.timeout = timeout
        options = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]
        if tls:
            roots = _read(tls) if isinstance(tls, str) else None
            self._channel = grpc.secure_channel(self.address, grpc.ssl_channel_credentials(roots), options=options)
        else:
            self._channel = grpc.insecure_channel(self.address, options=options)
        self._metadata = [("authorization", "Bearer " + token)] if token else None
        self._stubs: Dict[str, Any] = {}

    # ---- plumbing ----

    def _stub(self, method: str, stream: bool):
        if method not in self._stubs:
            service, reply = _METHODS[method]
            path = "/kolo.v1.%s/%s" % (service, method)
            factory = self._channel.unary_stream if stream else self._channel.unary_unary
            self._stubs[method] = factory(
                path, request_serializer=lambda m: m.SerializeToString(), response_deserializer=reply.FromString
            )
        return self._stubs[method]

    def _call(self, method: str, request: Any) -> Any:
        try:
            return self._stub(method, False)(request, timeout=self.timeout, metadata=self._metadata)
        except grpc.RpcError as error:
            raise _error(error, method) from None

    def _stream(self, method: str, request: Any, timeout: Optional[float]) -> Iterator[Any]:
        call = self._stub(method, True)(request, timeout=timeout, metadata=self._metadata)
        try:
            for message in call:
                yield message
        except grpc.RpcError as error:
            raise _error(error, method) from None
        finally:
            call.cancel()

    @staticmethod
    def _check_id(value: Any, what: str = "job_id") -> str:
        if not isinstance(value, str) or not value:
            raise TypeError("%s must be a non-empty string, not %r" % (what, value))
        return value

    # ---- JobService ----

    def submit(self, spec: Union[Mapping[str, Any], "job_pb2.JobSpec"]) -> "job_pb2.Job":
        """Submits a job: a JobSpec message or its JSON form as a dict (docs/API.md)."""
        if isinstance(spec, job_pb2.JobSpec):
            message = spec
        elif isinstance(spec, Mapping):
            try:
                message = json_format.ParseDict(dict(spec), job_pb2.JobSpec())
            except json_format.ParseError as error:
                raise InvalidArgumentError("INVALID_ARGUMENT", str(error), "SubmitJob") from None
        else:
            raise TypeError("spec must be a dict or a kolo.v1.JobSpec, not %s" % type(spec).__name__)
        return self._call("SubmitJob", message)

    def put_blob(self, job_id: str, data: bytes) -> Dict[str, Any]:
        """Uploads data as the blob of job_id, a job not submitted yet, in pieces of
        BLOB_CHUNK_BYTES (PutJobBlob); returns the ExecProgram.blob to put in its spec
        ({"size": ..., "sha256": ...}). The server checks the digest once it has every piece."""
        self._check_id(job_id)
        if not isinstance(data, (bytes, bytearray, memoryview)) or not len(data):
            raise TypeError("data must be non-empty bytes")
        view = memoryview(data).cast("B")
        digest = hashlib.sha256(view).hexdigest()
        offset, done = 0, False
        while not done:
            piece = bytes(view[offset : offset + BLOB_CHUNK_BYTES])
            reply = self._call(
                "PutJobBlob",
                job_pb2.PutJobBlobRequest(id=job_id, offset=offset, data=piece, size=len(view), sha256=digest),
            )
            offset, done = reply.received, reply.complete
        return {"size": len(view), "sha256": digest}

    def get(self, job_id: str) -> "job_pb2.Job":
        """The job with its status and whole event log."""
        return self._call("GetJob", job_pb2.GetJobRequest(id=self._check_id(job_id)))

    def list(self, phase: Optional[str] = None, labels: Optional[Mapping[str, str]] = None) -> List["job_pb2.Job"]:
        """Every job (without events), ordered by id, optionally of one phase ("RUNNING")
        and with all these labels; follows the pages."""
        request = job_pb2.ListJobsRequest(page_size=1000)
        if phase is not None:
            if phase not in job_pb2.Phase.keys():
                raise ValueError("phase must be one of %s, not %r" % (", ".join(job_pb2.Phase.keys()[1:]), phase))
            request.phase = job_pb2.Phase.Value(phase)
        for key, value in (labels or {}).items():
            request.labels[key] = value
        jobs: List[Any] = []
        while True:
            page = self._call("ListJobs", request)
            jobs.extend(page.jobs)
            if not page.next_page_token:
                return jobs
            request.page_token = page.next_page_token

    def cancel(self, job_id: str, reason: str = "") -> "job_pb2.Job":
        """Moves a job that has not ended to CANCELLED."""
        return self._call("CancelJob", job_pb2.CancelJobRequest(id=self._check_id(job_id), reason=reason))

    def scale(self, job_id: str, min_workers: int, max_workers: int = 0) -> "job_pb2.Job":
        """New worker bounds for a job that has not ended (max_workers 0 = min_workers)."""
        for name, value in (("min_workers", min_workers), ("max_workers", max_workers)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise TypeError("%s must be a non-negative int, not %r" % (name, value))
        return self._call(
            "ScaleJob",
            job_pb2.ScaleJobRequest(id=self._check_id(job_id), min_workers=min_workers, max_workers=max_workers),
        )

    def watch(self, job_id: str, timeout: Optional[float] = None) -> Iterator["job_pb2.Job"]:
        """The job now, then again after each change; ends after it reaches a final phase."""
        return self._stream("WatchJob", job_pb2.WatchJobRequest(id=self._check_id(job_id)), timeout)

    def logs(
        self,
        job_id: str,
        ranks: Optional[Iterable[int]] = None,
        tail: int = 0,
        follow: bool = False,
        timeout: Optional[float] = None,
    ) -> Iterator[LogLine]:
        """The job's output as LogLines: only these ranks (None = all), only the last
        `tail` lines of each rank (0 = all), and with follow=True until the job ends."""
        rank_list = list(ranks) if ranks is not None else []
        if any(not isinstance(r, int) or isinstance(r, bool) or r < 0 for r in rank_list):
            raise TypeError("ranks must be non-negative ints, not %r" % (rank_list,))
        if not isinstance(tail, int) or isinstance(tail, bool) or tail < 0:
            raise TypeError("tail must be a non-negative int, not %r" % (tail,))
        request = job_pb2.StreamLogsRequest(id=self._check_id(job_id), ranks=rank_list, tail=tail, follow=bool(follow))
        for chunk in self._stream("StreamLogs", request, timeout):
            for line in chunk.lines:
                yield LogLine(
                    line.rank, line.epoch, line.worker_id, line.text.decode("utf-8", "replace"), line.text, line.notice
                )

    # ---- ClusterService ----

    def workers(self) -> List["cluster_pb2.Worker"]:
        """The registered workers."""
        return list(self._call("ListWorkers", cluster_pb2.ListWorkersRequest()).workers)

    def drain(self, worker_id: str) -> "cluster_pb2.Worker":
        """Gives a worker no new work (its jobs re-form without it)."""
        return self._call("DrainWorker", cluster_pb2.DrainWorkerRequest(id=self._check_id(worker_id, "worker_id")))

    def undrain(self, worker_id: str) -> "cluster_pb2.Worker":
        """Takes a drain back."""
        return self._call("UndrainWorker", cluster_pb2.UndrainWorkerRequest(id=self._check_id(worker_id, "worker_id")))

    # ---- helpers ----

    @staticmethod
    def phase(job: "job_pb2.Job") -> str:
        """The job's phase by name ("RUNNING")."""
        return job_pb2.Phase.Name(job.status.phase)

    def wait(self, job_id: str, timeout: Optional[float] = None) -> "job_pb2.Job":
        """Blocks until the job reaches a final phase; returns it."""
        last = None
        for last in self.watch(job_id, timeout=timeout):
            if self.phase(last) in FINAL_PHASES:
                break
        return last if last is not None else self.get(job_id)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = [
    "Client",
    "ClientError",
    "NotFoundError",
    "InvalidArgumentError",
    "AlreadyExistsError",
    "FailedPreconditionError",
    "UnauthenticatedError",
    "UnavailableError",
    "ResourceExhaustedError",
    "DeadlineExceededError",
    "LogLine",
    "job_pb2",
    "cluster_pb2",
    "FINAL_PHASES",
]

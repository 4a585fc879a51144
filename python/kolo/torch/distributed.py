"""kolo.torch.distributed: torch.distributed backend "kolo" on kolo's ring.

A DDP script switches with one changed string (and this import):

    import kolo.torch.distributed  # registers backend "kolo"
    torch.distributed.init_process_group(backend="kolo")   # was "gloo"

The process group is _kolo_c10d (c10d/, a C++ extension over libkolo's C API, built
when libtorch-dev is installed); this module registers it, loads it from the folder
the package found libkolo in, and forms its ring:

  * under torchrun or any env:// launch (MASTER_ADDR/PORT, RANK, WORLD_SIZE): each
    rank binds a kolo listener, publishes "host:port" in the c10d store and joins
    the ring of all published addresses;
  * in a kolo job or under kolorun (KOLO_AGENT_SOCKET / KOLO_SIZE set, MASTER_ADDR
    not): env:// (and init_method="kolo://") takes the job's ring through kolo.init();
    rank 0 starts torch's TCPStore and broadcasts its address over that ring, and the
    default process group runs on the job's own communicator.

See docs/PYTHON.md ("torch.distributed backend") for what is supported."""
from __future__ import annotations

import atexit
import ctypes
import datetime
import importlib.machinery
import importlib.util
import os
import secrets
import socket
import threading
from types import ModuleType
from typing import Any, Iterator, List, Optional, Tuple

import torch.distributed as dist

# the module (torch.distributed.rendezvous is also the name of a function there)
_rendezvous = importlib.import_module("torch.distributed.rendezvous")

from .. import _core, _lib  # noqa: E402
from .._runtime import RUNTIME, raise_for  # noqa: E402

BACKEND = "kolo"
EXTENSION = "_kolo_c10d.so"
_ADDRESS_BYTES = 256

_lock = threading.Lock()
_extension: Optional[ModuleType] = None
_job_comm: Optional[int] = None  # the kolo job's ring, handed to the default group once
_exported: set = set()  # torchrun variables this module set from the kolo ring (kept current)


def extension_path() -> str:
    """Where _kolo_c10d.so is: $KOLO_C10D_EXTENSION, else next to the libkolo.so the
    package loaded (build/lib of a checkout)."""
    explicit = os.environ.get("KOLO_C10D_EXTENSION")
    if explicit:
        return explicit
    return os.path.join(os.path.dirname(os.path.realpath(_lib.library_path())), EXTENSION)


def extension() -> ModuleType:
    """The loaded _kolo_c10d module. libkolo is loaded first (ctypes), so the
    extension's libkolo.so.0 resolves to that same copy (one communicator space).
    Loading it registers its shutdown_all() with atexit: the groups' threads stop
    while the interpreter is whole (one that takes the GIL during finalisation would
    abort the process)."""
    global _extension
    with _lock:
        if _extension is None:
            path = extension_path()
            if not os.path.exists(path):
                raise ImportError(
                    "kolo's torch.distributed backend is not built (%s missing): install "
                    "libtorch-dev and pybind11-dev (scripts/setup.sh) and rebuild kolo" % path
                )
            loader = importlib.machinery.ExtensionFileLoader("_kolo_c10d", path)
            spec = importlib.util.spec_from_file_location("_kolo_c10d", path, loader=loader)
            module = importlib.util.module_from_spec(spec)
            loader.exec_module(module)
            atexit.register(module.shutdown_all)
            _extension = module
        return _extension


def in_kolo_job() -> bool:
    """Whether this process was started by kolo (a kolo job's agent or kolorun)."""
    return bool(os.environ.get("KOLO_AGENT_SOCKET") or os.environ.get("KOLO_SIZE"))


def _timeout_ms(timeout: datetime.timedelta) -> int:
    return max(1, min(int(timeout.total_seconds() * 1000), 2**31 - 1))


def _local_host() -> str:
    """The address this rank's kolo listener binds and publishes: $KOLO_HOST, else
    loopback when the master is local, else the local address that routes to it."""
    host = os.environ.get("KOLO_HOST")
    if host:
        return host
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    if master == "localhost" or master.startswith("127."):
        return "127.0.0.1"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((master, 9))  # no packet is sent: this only picks the route
            return probe.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def _listen(host: str) -> Tuple[int, str]:
    listener = ctypes.c_void_p()
    lib = _lib.lib
    raise_for(
        lib.kolo_listener_create(("%s:0" % host).encode(), ctypes.byref(listener)),
        "kolo backend: listening on %s" % host,
    )
    buffer = ctypes.create_string_buffer(_ADDRESS_BYTES)
    code = lib.kolo_listener_address(listener, buffer, _ADDRESS_BYTES)
    if code != 0:
        lib.kolo_listener_destroy(listener)
        raise_for(code, "kolo backend: the listener's address")
    return listener.value, buffer.value.decode()


def _locality(peers: List[str], rank: int) -> Tuple[int, int]:
    """(local_rank, local_size) from the hosts of the published addresses."""
    host = peers[rank].rsplit(":", 1)[0]
    local = [r for r, peer in enumerate(peers) if peer.rsplit(":", 1)[0] == host]
    return local.index(rank), len(local)


def store_rendezvous(store: Any, rank: int, size: int, timeout: datetime.timedelta) -> int:
    """Forms a kolo ring for one process group through its c10d store; returns the
    communicator's address (owned by the caller)."""
    listener, address = _listen(_local_host())
    try:
        store.set("kolo/address/%d" % rank, address)
        if rank == 0:
            store.set("kolo/secret", secrets.token_hex(16))
        secret = store.get("kolo/secret")
        peers = [store.get("kolo/address/%d" % r).decode() for r in range(size)]
    except BaseException:
        _lib.lib.kolo_listener_destroy(listener)
        raise
    local_rank, local_size = _locality(peers, rank)
    encoded = [peer.encode() for peer in peers]
    array = (ctypes.c_char_p * size)(*encoded)
    spec = _lib.RingSpec(
        epoch=1,
        rank=rank,
        size=size,
        local_rank=local_rank,
        local_size=local_size,
        peers=array,
        secret=secret,
        timeout_ms=_timeout_ms(timeout),
    )
    comm = ctypes.c_void_p()
    # kolo_comm_create owns the listener from here on, also when it fails
    raise_for(
        _lib.lib.kolo_comm_create(ctypes.byref(spec), ctypes.c_void_p(listener), ctypes.byref(comm)),
        "kolo backend: forming the ring of %d ranks (rank %d, peers %s)" % (size, rank, ", ".join(peers)),
    )
    return comm.value


def _create(store: Any, rank: int, size: int, timeout: datetime.timedelta) -> Any:
    """Backend.register_backend's creator: a ProcessGroupKolo for one group."""
    global _job_comm
    module = extension()
    comm, owned = None, True
    with _lock:
        if (
            _job_comm is not None
            and _lib.lib.kolo_comm_rank(_job_comm) == rank
            and _lib.lib.kolo_comm_size(_job_comm) == size
        ):
            comm, owned, _job_comm = _job_comm, False, None
    if comm is None:
        comm = store_rendezvous(store, rank, size, timeout)
    try:
        return module.create(comm, owned, _timeout_ms(timeout))
    except BaseException:
        if owned:
            _lib.lib.kolo_comm_destroy(comm)
        raise


def _broadcast_text(comm: int, text: str) -> str:
    """Rank 0's text on every rank of comm (at most 255 bytes)."""
    buffer = ctypes.create_string_buffer(text.encode(), _ADDRESS_BYTES)
    raise_for(
        _core.broadcast_blocking(comm, buffer, _ADDRESS_BYTES, 0),
        "kolo backend: broadcasting the store's address",
        comm,
    )
    return buffer.value.decode()


def _store_host(comm: int) -> str:
    if os.environ.get("KOLO_HOST"):
        return os.environ["KOLO_HOST"]
    if _lib.lib.kolo_comm_local_size(comm) == _lib.lib.kolo_comm_size(comm):
        return "127.0.0.1"
    return socket.gethostbyname(socket.gethostname())


def kolo_rendezvous(
    url: str = "kolo://", timeout: datetime.timedelta = dist.default_pg_timeout, **kwargs: Any
) -> Iterator[Tuple[Any, int, int]]:
    """A c10d rendezvous handler on the kolo job's ring (kolo.init()): yields
    (TCPStore, rank, size). The default process group then runs on that ring."""
    global _job_comm
    RUNTIME.init()
    comm = RUNTIME.comm
    lib = _lib.lib
    rank, size = lib.kolo_comm_rank(comm), lib.kolo_comm_size(comm)
    if rank == 0:
        host = _store_host(comm)
        store = dist.TCPStore(host, 0, size, True, timeout, wait_for_workers=False)
        _broadcast_text(comm, "%s:%d" % (host, store.port))
        address = "%s:%d" % (host, store.port)
    else:
        address = _broadcast_text(comm, "")
        host, port = address.rsplit(":", 1)
        store = dist.TCPStore(host, int(port), size, False, timeout)
    # what torchrun would have set, from this ring (again after a re-form: elastic_run)
    host, port = address.rsplit(":", 1)
    for name, value in (("MASTER_ADDR", host), ("MASTER_PORT", port), ("RANK", str(rank)), ("WORLD_SIZE", str(size))):
        if name not in os.environ or name in _exported:
            os.environ[name] = value
            _exported.add(name)
    with _lock:
        _job_comm = comm
    yield (store, rank, size)
    raise RuntimeError("kolo rendezvous: no second ring from one handler")


_env_handler = _rendezvous._rendezvous_handlers["env"]


def _env_or_kolo(
    url: str, timeout: datetime.timedelta = dist.default_pg_timeout, **kwargs: Any
) -> Iterator[Tuple[Any, int, int]]:
    """env:// as torch has it, except in a kolo job without MASTER_ADDR: the job's ring."""
    if in_kolo_job() and ("MASTER_ADDR" not in os.environ or "MASTER_ADDR" in _exported):
        return kolo_rendezvous(url, timeout, **kwargs)
    return _env_handler(url, timeout=timeout, **kwargs)


def _export_job_environment() -> None:
    """RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE from a kolo launch, for scripts
    that read torchrun's variables; variables already set are kept."""
    for torch_name, kolo_name in (
        ("RANK", "KOLO_RANK"),
        ("WORLD_SIZE", "KOLO_SIZE"),
        ("LOCAL_RANK", "KOLO_LOCAL_RANK"),
        ("LOCAL_WORLD_SIZE", "KOLO_LOCAL_SIZE"),
    ):
        if kolo_name in os.environ and torch_name not in os.environ:
            os.environ[torch_name] = os.environ[kolo_name]
            _exported.add(torch_name)
    if "KOLO_RANK" in os.environ and "KOLO_LOCAL_RANK" not in os.environ:
        os.environ.setdefault("LOCAL_RANK", "0")


def register() -> None:
    """Registers backend "kolo" and the kolo:// rendezvous (idempotent; done on import)."""
    if not hasattr(dist.Backend, BACKEND.upper()):
        dist.Backend.register_backend(BACKEND, _create)
    if "kolo" not in _rendezvous._rendezvous_handlers:
        _rendezvous.register_rendezvous_handler("kolo", kolo_rendezvous)
    _rendezvous._rendezvous_handlers["env"] = _env_or_kolo
    if in_kolo_job():
        _export_job_environment()


register()

from .ddp_elastic import ring_failure  # noqa: E402,F401  (re-exported)
from .ddp_elastic import run as elastic_run  # noqa: E402,F401  (re-exported, after the backend is registered)

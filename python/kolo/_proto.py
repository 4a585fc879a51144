"""kolo.v1's protobuf messages for kolo.client: protoc's Python output for
proto/kolo/v1/*.proto. Never committed: the build generates it into
<build>/python/kolo/v1/ (CMake), and when that is not importable this module runs
protoc once into a cache directory (~/.cache/kolo/pb-<digest of the .proto files>)."""
from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
from types import ModuleType
from typing import List, Optional, Tuple

import kolo

_PROTOS = ("job", "cluster")
_HERE = os.path.dirname(os.path.abspath(__file__))
_CHECKOUT = os.path.dirname(os.path.dirname(_HERE))


def _add_root(root: str) -> None:
    """Makes <root>/kolo/v1 importable as kolo.v1 (kolo.__path__ takes extra roots)."""
    path = os.path.join(root, "kolo")
    if path not in kolo.__path__:
        kolo.__path__.append(path)  # type: ignore[attr-defined]


def _import() -> Tuple[ModuleType, ModuleType]:
    return importlib.import_module("kolo.v1.job_pb2"), importlib.import_module("kolo.v1.cluster_pb2")


def _proto_dir() -> Optional[str]:
    for candidate in (os.environ.get("KOLO_PROTO_DIR"), os.path.join(_HERE, "proto"),
                      os.path.join(_CHECKOUT, "proto")):
        if candidate and os.path.exists(os.path.join(candidate, "kolo", "v1", "job.proto")):
            return candidate
    return None


def _generate(proto_dir: str) -> str:
    files = ["kolo/v1/%s.proto" % name for name in _PROTOS]
    digest = hashlib.sha256()
    for name in files:
        with open(os.path.join(proto_dir, name), "rb") as f:
            digest.update(f.read())
    cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    root = os.path.join(cache_home, "kolo", "pb-" + digest.hexdigest()[:16])
    if os.path.exists(os.path.join(root, "kolo", "v1", "cluster_pb2.py")):
        return root
    protoc = shutil.which("protoc")
    if protoc is None:
        raise ImportError("kolo.client needs protoc's Python messages: build kolo (cmake) or install "
                          "protobuf-compiler so they can be generated")
    os.makedirs(os.path.dirname(root), exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="pb-", dir=os.path.dirname(root))
    try:
        subprocess.run([protoc, "--python_out=" + scratch, "-I", proto_dir] + files, check=True,
                       capture_output=True, timeout=60)
        try:
            os.rename(scratch, root)  # atomic: another process may have won; then use its copy
        except OSError:
            pass
    except subprocess.CalledProcessError as error:
        raise ImportError("protoc failed on %s: %s" % (proto_dir, error.stderr.decode(errors="replace"))) from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return root


def _build_roots() -> List[str]:
    roots = []
    for build in (os.environ.get("KOLO_BUILD_DIR"), os.path.join(_CHECKOUT, "build")):
        if build:
            roots.append(os.path.join(build, "python"))
    return roots


def load() -> Tuple[ModuleType, ModuleType]:
    """(job_pb2, cluster_pb2), generating them if nothing importable exists."""
    try:
        return _import()
    except ImportError:
        pass
    for root in _build_roots():
        if os.path.exists(os.path.join(root, "kolo", "v1", "cluster_pb2.py")):
            _add_root(root)
            try:
                return _import()
            except ImportError:
                continue
    proto_dir = _proto_dir()
    if proto_dir is None:
        raise ImportError("kolo.client: no kolo.v1 messages and no proto/kolo/v1 to generate them from "
                          "(set KOLO_PROTO_DIR)")
    _add_root(_generate(proto_dir))
    importlib.invalidate_caches()
    for name in [n for n in sys.modules if n == "kolo.v1" or n.startswith("kolo.v1.")]:
        del sys.modules[name]  # a namespace package found empty before
    return _import()

"""kolo.v1's protobuf messages for kolo.client: protoc's Python output for
proto/kolo/v1/*.proto, generated at build time and never at import time.

Where they come from, first match wins:
  1. kolo.v1 as installed with the package (`pip install ./python` and the wheel generate
     kolo/v1/*_pb2.py into the build: python/setup.py);
  2. development: <$KOLO_BUILD_DIR>/python/kolo/v1, then, only when this package is a source
     checkout's python/kolo, <checkout>/build/python/kolo/v1 (CMake's kolo_python_proto
     target writes them there).
Otherwise importing kolo.client raises ImportError naming the fix."""
from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType
from typing import List, Tuple

import kolo

from ._lib import checkout_root

FIX = (
    "kolo.client needs kolo.v1, protoc's Python output for proto/kolo/v1, which is generated at build "
    "time: in a checkout build kolo (`cmake --build build` writes build/python/kolo/v1; set KOLO_BUILD_DIR "
    "for another build folder); for an installed copy install protobuf-compiler (apt) and reinstall "
    "(`pip install ./python` generates kolo/v1 into the package). Looked in: %s"
)


def _import() -> Tuple[ModuleType, ModuleType]:
    return importlib.import_module("kolo.v1.job_pb2"), importlib.import_module("kolo.v1.cluster_pb2")


def build_roots() -> List[str]:
    """The development places, in order: $KOLO_BUILD_DIR/python, <checkout>/build/python."""
    roots = []
    if os.environ.get("KOLO_BUILD_DIR"):
        roots.append(os.path.join(os.environ["KOLO_BUILD_DIR"], "python"))
    checkout = checkout_root()
    if checkout:
        roots.append(os.path.join(checkout, "build", "python"))
    return roots


def _forget() -> None:
    """Drops a kolo.v1 imported empty (a namespace package) before a root was added."""
    importlib.invalidate_caches()
    for name in [n for n in sys.modules if n == "kolo.v1" or n.startswith("kolo.v1.")]:
        del sys.modules[name]


def load() -> Tuple[ModuleType, ModuleType]:
    """(job_pb2, cluster_pb2); ImportError naming the fix when none was generated."""
    try:
        return _import()
    except ImportError:
        pass
    looked = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "v1")]
    for root in build_roots():
        path = os.path.join(root, "kolo")
        looked.append(os.path.join(path, "v1"))
        if not os.path.exists(os.path.join(path, "v1", "cluster_pb2.py")):
            continue
        if path not in kolo.__path__:
            kolo.__path__.append(path)  # type: ignore[attr-defined]
        _forget()
        try:
            return _import()
        except ImportError:
            continue
    raise ImportError(FIX % ", ".join(looked))

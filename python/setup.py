"""setuptools' build hook for kolo (the metadata is in pyproject.toml): kolo.v1, protoc's
Python output for proto/kolo/v1 (kolo.client's messages), is generated at build time into
the build, so an installed copy and the wheel hold kolo/v1/*_pb2.py and nothing is
generated at import time. The .proto files are <checkout>/proto (this folder's sibling) or
$KOLO_PROTO_DIR; the generator is Debian's protoc (protobuf-compiler), else grpc_tools.
Without either the build fails naming the fix; KOLO_SKIP_PROTO=1 builds without kolo.v1
(kolo.client then raises ImportError saying so)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import List, Optional

from setuptools import setup
from setuptools.command.build_py import build_py

PROTOS = ("job", "cluster")
HERE = os.path.dirname(os.path.abspath(__file__))


def proto_dir() -> Optional[str]:
    """The folder holding kolo/v1/<name>.proto, if any."""
    for candidate in (os.environ.get("KOLO_PROTO_DIR"), os.path.join(HERE, "..", "proto")):
        if candidate and os.path.exists(os.path.join(candidate, "kolo", "v1", "job.proto")):
            return os.path.abspath(candidate)
    return None


def generator() -> Optional[List[str]]:
    """The protoc command line's start: Debian's protoc, else grpc_tools' bundled one."""
    protoc = shutil.which("protoc")
    if protoc:
        return [protoc]
    try:
        import grpc_tools.protoc  # noqa: F401
    except ImportError:
        return None
    return [sys.executable, "-m", "grpc_tools.protoc"]


class BuildWithProto(build_py):
    """build_py, then kolo/v1/{job,cluster}_pb2.py generated into the build folder."""

    def run(self) -> None:
        super().run()
        if os.environ.get("KOLO_SKIP_PROTO") == "1":
            return
        source, command = proto_dir(), generator()
        if source is None or command is None:
            raise SystemExit(
                "kolo: kolo.v1 (kolo.client's protobuf messages) cannot be generated: %s. "
                "Install protobuf-compiler (apt) or grpcio-tools, build from a checkout "
                "(proto/ beside python/) or set KOLO_PROTO_DIR; KOLO_SKIP_PROTO=1 builds "
                "without kolo.client's messages"
                % ("no protoc and no grpc_tools" if command is None else "no proto/kolo/v1/job.proto")
            )
        out = os.path.join(self.build_lib, "kolo", "v1")
        os.makedirs(out, exist_ok=True)
        files = ["kolo/v1/%s.proto" % name for name in PROTOS]
        subprocess.run(command + ["--python_out=" + self.build_lib, "-I", source] + files, check=True)
        with open(os.path.join(out, "__init__.py"), "w") as f:
            f.write('"""kolo.v1: protoc\'s Python output for proto/kolo/v1, generated when kolo was built."""\n')


setup(cmdclass={"build_py": BuildWithProto})

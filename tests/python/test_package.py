"""kolo as a Python package: `pip install --no-deps --no-build-isolation ./python` and a
wheel build work with Debian's pip, setuptools and wheel (no index), the installed copy
imports in a fresh /usr/bin/python3 and runs a one-rank all-reduce, its version is the C
project's, and libkolo is found the way a packaged library is (KOLO_LIBRARY, next to the
package) and never in a build tree outside a checkout. Everything is written under a
temporary directory (a copy of python/, --target folders, HOME): nothing in the checkout,
the user's home or the system site-packages."""
import os
import shutil
import subprocess
import sys
import zipfile
from typing import Dict, Optional

import pytest

SOURCE = os.environ.get("KOLO_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
LIBRARY = os.environ.get("KOLO_LIBRARY", "")
VERSION = os.environ.get("KOLO_VERSION", "")
PYTHON = "/usr/bin/python3"

SMOKE = """
import importlib.metadata, os, sys
import numpy
import kolo
assert kolo.__file__.startswith(os.environ["EXPECT_ROOT"]), kolo.__file__
assert kolo.__version__ == importlib.metadata.version("kolo") == os.environ["EXPECT_VERSION"], kolo.__version__
assert os.path.realpath(kolo.library_path()) == os.path.realpath(os.environ["EXPECT_LIBRARY"]), kolo.library_path()
kolo.init()
assert (kolo.rank(), kolo.size()) == (0, 1)
total = kolo.allreduce(numpy.arange(5, dtype=numpy.float32), op=kolo.Sum, name="smoke")
assert total.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0], total
kolo.shutdown()
import kolo.client
assert kolo.client.job_pb2.__file__.startswith(os.environ["EXPECT_ROOT"]), kolo.client.job_pb2.__file__
assert kolo.client.job_pb2.JobSpec(name="x").SerializeToString() == b"\\n\\x01x", "JobSpec.name is field 1"
assert not os.path.exists(os.path.join(os.environ["HOME"], ".cache", "kolo")), "generated at import time"
print("SMOKE OK")
"""


def environment(tmp: str, pythonpath: Optional[str], library: Optional[str], preload: bool) -> Dict[str, str]:
    """A clean environment: HOME in tmp, no user site, only the given package root."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.path.join(tmp, "home"),
           "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1", "PIP_NO_INDEX": "1",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_CACHE_DIR": "1", "TMPDIR": tmp}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    if library:
        env["KOLO_LIBRARY"] = library
    if preload:  # the ASan pass: libkolo is instrumented, so the runtimes come first
        for name in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS"):
            if name in os.environ:
                env[name] = os.environ[name]
    os.makedirs(env["HOME"], exist_ok=True)
    return env


def run(argv, env: Dict[str, str], cwd: str) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, "%s failed (%d):\n%s\n%s" % (argv, result.returncode, result.stdout, result.stderr)
    return result


def smoke(tmp: str, root: str, library: str, explicit: bool) -> None:
    env = environment(tmp, root, library if explicit else None, preload=True)
    env.update(EXPECT_ROOT=root, EXPECT_VERSION=VERSION, EXPECT_LIBRARY=library)
    result = run([PYTHON, "-s", "-c", SMOKE], env, tmp)
    assert "SMOKE OK" in result.stdout


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A copy of python/ and proto/ side by side, as in a checkout (setuptools builds in the
    source folder: not in the checkout's)."""
    if not LIBRARY or not os.path.exists(LIBRARY):
        pytest.skip("KOLO_LIBRARY (the build's libkolo.so) not set")
    assert VERSION, "KOLO_VERSION (CMake's PROJECT_VERSION) not set"
    tmp = str(tmp_path_factory.mktemp("package"))
    shutil.copytree(os.path.join(SOURCE, "python"), os.path.join(tmp, "python"),
                    ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", "lib", "v1"))
    shutil.copytree(os.path.join(SOURCE, "proto"), os.path.join(tmp, "proto"))
    return tmp


def test_pip_install_to_a_target_imports_and_runs_a_one_rank_allreduce(tree):
    site = os.path.join(tree, "site")
    run([PYTHON, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--target", site, "./python"],
        environment(tree, None, None, preload=False), tree)
    assert os.path.exists(os.path.join(site, "kolo", "py.typed"))
    assert os.path.exists(os.path.join(site, "kolo", "torch", "__init__.py"))
    smoke(tree, site, LIBRARY, explicit=True)


def test_the_wheel_holds_the_package_and_finds_libkolo_next_to_it(tree):
    dist = os.path.join(tree, "dist")
    run([PYTHON, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", dist, "./python"],
        environment(tree, None, None, preload=False), tree)
    wheels = [name for name in os.listdir(dist) if name.endswith(".whl")]
    assert wheels == ["kolo-%s-py3-none-any.whl" % VERSION], wheels
    with zipfile.ZipFile(os.path.join(dist, wheels[0])) as wheel:
        names = set(wheel.namelist())
        metadata = wheel.read("kolo-%s.dist-info/METADATA" % VERSION).decode()
    assert {"kolo/__init__.py", "kolo/_lib.py", "kolo/py.typed", "kolo/torch/__init__.py", "kolo/v1/__init__.py",
            "kolo/v1/job_pb2.py", "kolo/v1/cluster_pb2.py"} <= names
    assert "Version: %s\n" % VERSION in metadata
    site = os.path.join(tree, "wheel-site")
    run([PYTHON, "-m", "pip", "install", "--no-deps", "--target", site, os.path.join(dist, wheels[0])],
        environment(tree, None, None, preload=False), tree)
    # an installed copy without libkolo beside it and no KOLO_LIBRARY: not found (no build
    # tree is searched outside a checkout), unless the system loader has one
    env = environment(tree, site, None, preload=True)
    code = "import ctypes.util, kolo\ntry:\n    kolo.init()\nexcept ImportError as e:\n    print('MISSING', e)\n"
    result = run([PYTHON, "-s", "-c", code], env, tree)
    if "MISSING" not in result.stdout:
        pytest.fail("an installed kolo found a libkolo with none beside it: %s" % result.stdout)
    # libkolo copied next to the package (kolo/lib/, as a packager would) is found without KOLO_LIBRARY
    os.makedirs(os.path.join(site, "kolo", "lib"))
    beside = os.path.join(site, "kolo", "lib", "libkolo.so")
    shutil.copy(LIBRARY, beside)
    smoke(tree, site, beside, explicit=False)


def test_a_copy_built_without_the_messages_names_the_fix_and_generates_nothing_at_import(tree):
    # python/ alone (no proto/ beside it): the build fails naming the fix, unless told to skip kolo.v1
    bare = os.path.join(tree, "bare")
    shutil.copytree(os.path.join(tree, "python"), os.path.join(bare, "python"),
                    ignore=shutil.ignore_patterns("build", "*.egg-info"))
    site = os.path.join(bare, "site")
    env = environment(bare, None, None, preload=False)
    argv = [PYTHON, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--target", site, "./python"]
    failed = subprocess.run(argv, env=env, cwd=bare, capture_output=True, text=True, timeout=300)
    assert failed.returncode != 0 and "KOLO_SKIP_PROTO" in failed.stdout + failed.stderr, failed
    env["KOLO_SKIP_PROTO"] = "1"
    run(argv, env, bare)
    assert not os.path.exists(os.path.join(site, "kolo", "v1"))
    env = environment(bare, site, None, preload=True)
    code = "try:\n    import kolo.client\nexcept ImportError as e:\n    print('MISSING', e)\n"
    result = run([PYTHON, "-s", "-c", code], env, bare)
    assert "MISSING" in result.stdout and "protobuf-compiler" in result.stdout, result.stdout
    assert not os.path.exists(os.path.join(env["HOME"], ".cache", "kolo")), "generated at import time"


def test_the_package_in_the_checkout_finds_the_build_when_nothing_else_names_libkolo(tree):
    build = os.environ.get("KOLO_BUILD_DIR", "")
    if os.path.realpath(build) != os.path.realpath(os.path.join(SOURCE, "build")):
        pytest.skip("this build is not <checkout>/build, the development fallback")
    code = "import kolo\nprint(kolo.library_path())\n"
    result = run([PYTHON, "-s", "-c", code], environment(tree, os.path.join(SOURCE, "python"), None, preload=True),
                 tree)
    assert os.path.realpath(result.stdout.strip()) == os.path.realpath(os.path.join(build, "lib", "libkolo.so"))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))

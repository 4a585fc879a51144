"""What kolo.Runner ships with a function: the source of the local modules it needs.

A module is *local* when it has a file that is not in the standard library or an
installed package (site-packages, dist-packages) and is not kolo: a helper module next
to a notebook or a script, a test's own files. The workers cannot import such a module,
so its source travels in the payload and each rank puts it on sys.path before it
unpickles the function. Found by looking at what the function refers to: its module's
names it uses, its closure, the modules it imports in its body (`import helpers`
inside fn), the classes and functions among its arguments, and, transitively, the
local modules those modules hold. Anything discovery misses is named explicitly with
Runner(py_modules=[module, "name", "path/to/file.py"]).

The payload is b"KOLO1" + zlib(pickle({"files": {relative path: bytes}, "call": cloudpickle
of (fn, args, kwargs)})): plain pickle of bytes only on the outside, so it loads before
any shipped module exists.
"""
from __future__ import annotations

import dis
import importlib.util
import os
import pickle
import sys
import sysconfig
import types
import zlib
from typing import Any, Dict, Iterable, Iterator, List, Optional, Set

MAGIC = b"KOLO1"
_SKIP_DIRS = {"__pycache__", ".git", ".ipynb_checkpoints"}


def _installed_roots() -> List[str]:
    paths = sysconfig.get_paths()
    return [os.path.abspath(paths[key]) for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths]


def is_local(module: types.ModuleType) -> bool:
    """Whether the workers would not have this module: it has a file outside the
    standard library and installed packages, and is neither kolo nor __main__."""
    name = module.__name__
    path = getattr(module, "__file__", None)
    if not path or name == "__main__" or name == "kolo" or name.startswith("kolo."):
        return False
    path = os.path.abspath(path)
    if "site-packages" in path or "dist-packages" in path:
        return False
    return not any(path.startswith(root + os.sep) for root in _installed_roots())


def _imported_names(code: types.CodeType) -> Iterator[str]:
    """The modules a code object (and the functions nested in it) imports."""
    for instruction in dis.get_instructions(code):
        if instruction.opname == "IMPORT_NAME" and isinstance(instruction.argval, str):
            yield instruction.argval
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _imported_names(const)


def _module_named(name: str) -> Optional[types.ModuleType]:
    top = name.split(".")[0]
    module = sys.modules.get(name) or sys.modules.get(top)
    if module is not None:
        return module
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or spec.origin in ("built-in", "frozen"):
        return None
    stand_in = types.ModuleType(top)  # not imported here: only its file is needed
    stand_in.__file__ = spec.origin
    return stand_in


class _Finder:
    """Walks the objects a call refers to and collects the local modules."""

    def __init__(self, by_value: Iterable[str] = ()) -> None:
        self.modules: Dict[str, types.ModuleType] = {}
        self.by_value = set(by_value)  # pickled by value: only what the call uses of them
        self._seen: Set[int] = set()

    def add_module(self, module: Optional[types.ModuleType]) -> None:
        if (
            module is None
            or not is_local(module)
            or module.__name__ in self.modules
            or module.__name__ in self.by_value
        ):
            return
        self.modules[module.__name__] = module
        for value in list(vars(module).values()):  # what the module itself uses
            if isinstance(value, types.ModuleType):
                self.add_module(value)
            elif isinstance(value, (types.FunctionType, type)):
                self.add_module(sys.modules.get(getattr(value, "__module__", "") or ""))
        code_file = getattr(module, "__file__", "")
        if code_file and code_file.endswith(".py") and os.path.isfile(code_file):
            try:
                with open(code_file, "rb") as f:
                    code = compile(f.read(), code_file, "exec")
            except (OSError, SyntaxError, ValueError):
                return
            for name in _imported_names(code):
                self.add_module(_module_named(name))

    def visit(self, obj: Any, depth: int = 0) -> None:
        if depth > 4 or id(obj) in self._seen:
            return
        self._seen.add(id(obj))
        if isinstance(obj, types.ModuleType):
            self.add_module(obj)
        elif isinstance(obj, types.FunctionType):
            owner = sys.modules.get(obj.__module__ or "")
            self.add_module(owner)
            for name in _imported_names(obj.__code__):
                self.add_module(_module_named(name))
            names = set(obj.__code__.co_names)
            for name in names:
                if name in obj.__globals__:
                    self.visit(obj.__globals__[name], depth + 1)
            for cell in obj.__closure__ or ():
                try:
                    self.visit(cell.cell_contents, depth + 1)
                except ValueError:  # an empty cell
                    pass
            for value in (obj.__defaults__ or ()) + tuple((obj.__kwdefaults__ or {}).values()):
                self.visit(value, depth + 1)
        elif isinstance(obj, type):
            self.add_module(sys.modules.get(obj.__module__ or ""))
        elif isinstance(obj, (list, tuple, set, frozenset)):
            for value in list(obj)[:1000]:
                self.visit(value, depth + 1)
        elif isinstance(obj, dict):
            for value in list(obj.values())[:1000]:
                self.visit(value, depth + 1)
        elif hasattr(obj, "__func__"):  # a bound method
            self.visit(obj.__func__, depth + 1)
        else:
            self.add_module(sys.modules.get(type(obj).__module__ or ""))


def _files_of(module: types.ModuleType) -> Dict[str, bytes]:
    """A top-level module's source: name.py, or a package's whole tree of .py files."""
    path = os.path.abspath(module.__file__)  # type: ignore[arg-type]
    files: Dict[str, bytes] = {}
    if os.path.basename(path) == "__init__.py":
        root = os.path.dirname(path)
        base = os.path.dirname(root)
        for folder, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
            for name in sorted(names):
                if name.endswith(".py"):
                    full = os.path.join(folder, name)
                    with open(full, "rb") as f:
                        files[os.path.relpath(full, base)] = f.read()
    elif path.endswith(".py"):
        with open(path, "rb") as f:
            files[os.path.basename(path)] = f.read()
    return files


def _explicit(item: Any) -> types.ModuleType:
    if isinstance(item, types.ModuleType):
        return item
    if isinstance(item, str) and (item.endswith(".py") or os.path.isdir(item)):
        path = os.path.abspath(item)
        if os.path.isdir(path):
            path = os.path.join(path, "__init__.py")
        if not os.path.isfile(path):
            raise FileNotFoundError("py_modules: %s is not a .py file or a package folder" % item)
        name = os.path.basename(os.path.dirname(path)) if path.endswith("__init__.py") else os.path.basename(path)[:-3]
        stand_in = types.ModuleType(name)
        stand_in.__file__ = path
        return stand_in
    if isinstance(item, str):
        module = _module_named(item)
        if module is None:
            raise ModuleNotFoundError("py_modules: no module named %r here" % item)
        return module
    raise TypeError("py_modules takes modules, module names or paths, not %r" % (item,))


def local_modules(
    call: Iterable[Any], explicit: Iterable[Any] = (), by_value: Iterable[str] = ()
) -> Dict[str, types.ModuleType]:
    """The local modules the objects of a call need, with those named explicitly; modules
    named in by_value travel inside the pickle (cloudpickle's register_pickle_by_value)
    and are looked into only for what the call uses."""
    finder = _Finder(by_value)
    for obj in call:
        finder.visit(obj)
    found = dict(finder.modules)
    for item in explicit:
        module = _explicit(item)
        found[module.__name__] = module
    return found


def pack(call: bytes, modules: Dict[str, types.ModuleType]) -> bytes:
    """The payload: the call's cloudpickle with the source of the modules' top-level packages."""
    files: Dict[str, bytes] = {}
    for name in sorted(modules):
        top = name.split(".")[0]
        root = sys.modules.get(top) if top != name else modules[name]
        files.update(_files_of(root if root is not None and getattr(root, "__file__", None) else modules[name]))
    return MAGIC + zlib.compress(pickle.dumps({"files": files, "call": call}, protocol=4), 6)


def unpack(payload: bytes, folder_prefix: str = "kolo-runner-modules-") -> bytes:
    """The call's cloudpickle; the shipped files are written to a new folder put first on
    sys.path. A payload without MAGIC is the call itself (an older Runner)."""
    if not payload.startswith(MAGIC):
        return payload
    import tempfile

    content = pickle.loads(zlib.decompress(payload[len(MAGIC) :]))
    files: Dict[str, bytes] = content["files"]
    if files:
        folder = tempfile.mkdtemp(prefix=folder_prefix)
        for relative, data in files.items():
            target = os.path.normpath(os.path.join(folder, relative))
            if not target.startswith(folder + os.sep):
                raise ValueError("kolo.Runner payload: file %r escapes its folder" % relative)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as f:
                f.write(data)
        sys.path.insert(0, folder)
    return content["call"]

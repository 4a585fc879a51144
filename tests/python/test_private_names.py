"""No module of python/kolo reaches into another one's private names: no `from .x import _y`
of a name that is not a module, and no `x._y` on a kolo module x, other than dunders and
private submodules (kolo._core, kolo._lib: the package's own layout). A module that needs
another's helper uses a public name of it. Reads the source only (ast), no libkolo."""
import ast
import glob
import os
from typing import Dict, List

SOURCE = os.environ.get("KOLO_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
PACKAGE = os.path.join(SOURCE, "python", "kolo")


def module_name(path: str) -> str:
    relative = os.path.relpath(path, os.path.dirname(PACKAGE))[: -len(".py")].replace(os.sep, ".")
    return relative[: -len(".__init__")] if relative.endswith(".__init__") else relative


def resolve(current: str, is_package: bool, level: int, module: str) -> str:
    """The absolute name of `from <level dots><module> import ...` inside module current."""
    if level == 0:
        return module
    parts = current.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


MODULES = {module_name(p): p for p in glob.glob(os.path.join(PACKAGE, "**", "*.py"), recursive=True)}


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def violations(path: str) -> List[str]:
    current = module_name(path)
    is_package = path.endswith("__init__.py")
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    found, aliases = [], {}  # aliases: local name -> the kolo module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = resolve(current, is_package, node.level, node.module or "")
            if not (source == "kolo" or source.startswith("kolo.")):
                continue
            for alias in node.names:
                full = source + "." + alias.name
                if full in MODULES:
                    aliases[alias.asname or alias.name] = full
                elif private(alias.name) and source != current:
                    found.append("%s:%d imports %s" % (current, node.lineno, full))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES and alias.asname:
                    aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            target = aliases[node.value.id]
            if private(node.attr) and target + "." + node.attr not in MODULES and target != current:
                found.append("%s:%d uses %s.%s" % (current, node.lineno, target, node.attr))
    return found


def test_the_scan_sees_kolos_modules_and_their_imports():
    assert {"kolo", "kolo._core", "kolo.torch", "kolo.torch.ops"} <= set(MODULES)
    assert resolve("kolo.torch.grouped", False, 2, "") == "kolo"
    assert resolve("kolo.torch", True, 1, "ops") == "kolo.torch.ops"


def test_no_module_imports_or_uses_another_modules_private_names():
    found: Dict[str, List[str]] = {}
    for name, path in sorted(MODULES.items()):
        if violations(path):
            found[name] = violations(path)
    assert found == {}

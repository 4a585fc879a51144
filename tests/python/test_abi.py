"""python/kolo's view of libkolo's ABI against the C headers. Enum values and integer
constants are never written by hand in python/kolo: they come from kolo/_abi.py, which
scripts/gen-python-abi.py generates from include/kolo/*.h; here it must be current (a header
changed without regenerating fails) and equal, value by value, to the headers as compiled
(kolo_abi_dump, tests/python/abi_dump.c); no status number is spelled by hand. Every
ctypes.Structure python/kolo mirrors is checked too (sizeof, field names in order, offsets
and sizes)."""
import ctypes
import glob
import inspect
import os
import re
import subprocess
import sys
from typing import Dict, Tuple

import pytest

from kolo import _abi, _core, _lib, errors, mode

PACKAGE = os.path.dirname(inspect.getfile(_core))
DUMP = os.path.join(os.environ.get("KOLO_TEST_DIR", ""), "kolo_abi_dump")
SOURCE = os.environ.get("KOLO_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))

# each Python mirror and the C struct it stands for
STRUCTS = {
    "kolo_ring_spec": _lib.RingSpec,
    "kolo_result": _lib.Result,
    "kolo_engine_stats": _lib.EngineStats,
    "kolo_split_options": _lib.SplitOptions,
    "kolo_op_options": _lib.OpOptions,
    "kolo_mode_spec": mode._Spec,
}


class Abi:
    """What kolo_abi_dump printed."""

    def __init__(self, text: str) -> None:
        self.values: Dict[str, int] = {}
        self.sizes: Dict[str, int] = {}
        self.fields: Dict[str, list] = {}
        for line in text.splitlines():
            kind, *rest = line.split()
            if kind in ("enum", "const"):
                self.values[rest[0]] = int(rest[1])
            elif kind == "struct":
                self.sizes[rest[0]] = int(rest[1])
                self.fields[rest[0]] = []
            elif kind == "field":
                self.fields[rest[0]].append((rest[1], int(rest[2]), int(rest[3])))


@pytest.fixture(scope="module")
def abi() -> Abi:
    if not os.path.exists(DUMP):
        pytest.skip("kolo_abi_dump not built (KOLO_TEST_DIR=%s)" % os.environ.get("KOLO_TEST_DIR"))
    return Abi(subprocess.run([DUMP], check=True, capture_output=True, text=True, timeout=60).stdout)


def test_the_generated_abi_module_is_current_with_include_kolo():
    script = os.path.join(SOURCE, "scripts", "gen-python-abi.py")
    result = subprocess.run([sys.executable, script, "--check"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_generated_value_equals_the_compiled_headers(abi):
    generated = {name: value for name, value in vars(_abi).items() if name.startswith("KOLO_")}
    assert sorted(set(generated) - set(abi.values)) == [], "generated but not printed by kolo_abi_dump"
    assert sorted(set(abi.values) - set(generated)) == [], "in the headers but not generated"
    wrong = sorted((name, value, abi.values[name]) for name, value in generated.items() if abi.values[name] != value)
    assert wrong == []
    assert _abi.STATUS == {name: value for name, value in generated.items() if name == "KOLO_OK"
                           or name.startswith("KOLO_ERR_")}


def test_dtype_values_and_count_match_kolo_h(abi):
    for value, name in _core.DTYPE_NAMES.items():
        assert getattr(_core, name.upper()) == value == abi.values["KOLO_" + name.upper()], name
    assert len(_core.DTYPE_NAMES) == len(_core.DTYPE_SIZES) == abi.values["KOLO_DTYPE_COUNT"]


def test_reduction_op_values_match_kolo_h(abi):
    for name in ("SUM", "AVG", "MIN", "MAX", "PROD"):
        assert getattr(_core, name) == abi.values["KOLO_" + name], name
    assert len(_core.OP_NAMES) - 1 == abi.values["KOLO_OP_COUNT"]  # less Adasum, kolo.torch's own


def test_mode_and_compression_values_match_mode_h(abi):
    assert mode.MODES == {abi.values["KOLO_MODE_" + name]: name for name in mode.MODES.values()}
    assert mode.COMPRESSIONS == {abi.values["KOLO_COMPRESSION_" + name.upper()]: name
                                 for name in mode.COMPRESSIONS.values()}


def test_constants_python_uses_match_the_headers(abi):
    assert _core.NAME_MAX == abi.values["KOLO_NAME_MAX"]
    assert _lib.RESULT_MESSAGE_BYTES == abi.values["KOLO_RESULT_MESSAGE_BYTES"]


def status_spellings() -> Tuple[set, set]:
    """Every status name python/kolo spells, and every number it pairs with one by hand:
    KoloError("...", "KOLO_ERR_X", 18) or `code == 25  # KOLO_ERR_X` (there should be none:
    KoloError takes the number from _abi.STATUS, comparisons use _abi's names)."""
    names, pairs = set(), set()
    for path in glob.glob(os.path.join(PACKAGE, "**", "*.py"), recursive=True):
        if os.path.basename(path) == "_abi.py":
            continue
        with open(path) as f:
            text = f.read()
        names.update(re.findall(r"[\"'](KOLO_(?:OK|ERR_[A-Z_]+))[\"']", text))
        pairs.update((n, int(v), path) for n, v in re.findall(r"[\"'](KOLO_(?:OK|ERR_[A-Z_]+))[\"'],\s*(\d+)", text))
        pairs.update((n, int(v), path) for v, n in re.findall(r"\b(\d+)\)?:?\s*#\s*(KOLO_(?:OK|ERR_[A-Z_]+))", text))
    return names, pairs


def test_python_spells_only_status_names_of_status_h_and_no_status_number(abi):
    names, pairs = status_spellings()
    assert len(names) >= 5, names  # the scan sees the names python/kolo uses
    assert sorted(n for n in names if n not in abi.values) == []
    assert sorted(pairs) == []
    for name in names:
        assert errors.KoloError("x", name).code == abi.values[name], name
    assert errors.KoloError("x").code == abi.values["KOLO_ERR_INTERNAL"]


@pytest.mark.parametrize("c_name", sorted(STRUCTS))
def test_every_mirrored_struct_has_cs_size_fields_and_offsets(abi, c_name):
    mirror = STRUCTS[c_name]
    assert ctypes.sizeof(mirror) == abi.sizes[c_name], "sizeof(%s)" % c_name
    python_fields = [(name, getattr(mirror, name).offset, getattr(mirror, name).size)
                     for name, _ in mirror._fields_]
    assert python_fields == abi.fields[c_name]

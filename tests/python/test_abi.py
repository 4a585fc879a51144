"""python/kolo's copy of libkolo's ABI against the C headers: every enum value Python names
(dtypes, reduction ops, status codes, modes, compressions), the constants it repeats, and
every ctypes.Structure it mirrors (sizeof, field names in order, offsets and sizes), as
printed by kolo_abi_dump (tests/python/abi_dump.c, compiled against include/kolo in the
build). A value changed in include/kolo without the Python side fails here."""
import ctypes
import glob
import inspect
import os
import re
import subprocess
from typing import Dict, Tuple

import pytest

from kolo import _core, _lib, errors, mode

PACKAGE = os.path.dirname(inspect.getfile(_core))
DUMP = os.path.join(os.environ.get("KOLO_TEST_DIR", ""), "kolo_abi_dump")

# each Python mirror and the C struct it stands for
STRUCTS = {
    "kolo_ring_spec": _lib.RingSpec,
    "kolo_result": _lib.Result,
    "kolo_engine_stats": _lib.EngineStats,
    "kolo_split_options": _lib.SplitOptions,
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


def test_dtype_values_and_count_match_kolo_h(abi):
    for name in _core.DTYPE_NAMES:
        assert getattr(_core, name.upper()) == abi.values["KOLO_" + name.upper()], name
    assert len(_core.DTYPE_NAMES) == len(_core.DTYPE_SIZES) == abi.values["KOLO_DTYPE_COUNT"]


def test_reduction_op_values_match_kolo_h(abi):
    for name in ("SUM", "AVG", "MIN", "MAX", "PROD"):
        assert getattr(_core, name) == abi.values["KOLO_" + name], name
    assert len(_core.OP_NAMES) - 1 == abi.values["KOLO_OP_COUNT"]  # less Adasum, kolo.torch's own


def test_mode_and_compression_values_match_mode_h(abi):
    assert mode.MODES == {abi.values["KOLO_MODE_" + name]: name for name in mode.MODES.values()}
    assert mode.COMPRESSIONS == {abi.values["KOLO_COMPRESSION_" + name.upper()]: name
                                 for name in mode.COMPRESSIONS.values()}


def test_constants_python_repeats_match_the_headers(abi):
    assert _core.NAME_MAX == abi.values["KOLO_NAME_MAX"]
    assert _lib.RESULT_MESSAGE_BYTES == abi.values["KOLO_RESULT_MESSAGE_BYTES"]


def status_pairs() -> Tuple[set, set]:
    """Every status name python/kolo spells, and every (name, number) it pairs by hand:
    KoloError("...", "KOLO_ERR_X", 18), `code == 25  # KOLO_ERR_X`, and KoloError's default."""
    names, pairs = set(), set()
    for path in glob.glob(os.path.join(PACKAGE, "**", "*.py"), recursive=True):
        with open(path) as f:
            text = f.read()
        names.update(re.findall(r"[\"'](KOLO_(?:OK|ERR_[A-Z_]+))[\"']", text))
        pairs.update((n, int(v), path) for n, v in re.findall(r"[\"'](KOLO_(?:OK|ERR_[A-Z_]+))[\"'],\s*(\d+)", text))
        pairs.update((n, int(v), path) for v, n in re.findall(r"\b(\d+)\)?:?\s*#\s*(KOLO_(?:OK|ERR_[A-Z_]+))", text))
    parameters = inspect.signature(errors.KoloError.__init__).parameters
    pairs.add((parameters["status"].default, parameters["code"].default, "errors.py KoloError"))
    return names, pairs


def test_status_names_and_codes_python_spells_match_status_h(abi):
    names, pairs = status_pairs()
    assert len(pairs) >= 5, pairs  # the scan sees the hand-written pairs
    assert sorted(n for n in names if n not in abi.values) == []
    wrong = sorted((name, code, abi.values.get(name), where) for name, code, where in pairs
                   if abi.values.get(name) != code)
    assert wrong == []


@pytest.mark.parametrize("c_name", sorted(STRUCTS))
def test_every_mirrored_struct_has_cs_size_fields_and_offsets(abi, c_name):
    mirror = STRUCTS[c_name]
    assert ctypes.sizeof(mirror) == abi.sizes[c_name], "sizeof(%s)" % c_name
    python_fields = [(name, getattr(mirror, name).offset, getattr(mirror, name).size)
                     for name, _ in mirror._fields_]
    assert python_fields == abi.fields[c_name]

"""libkolo's float16/bfloat16 converters checked against independent implementations.

The collective tests compute their expected float16/bfloat16 values with libkolo's own
converters, so a converter bug would pass them. Here every 16-bit pattern and a few
hundred thousand float32 values go through libkolo (over ctypes) and through Python's
struct 'e' format (IEEE binary16, round to nearest even) and PyTorch's bfloat16 (round
to nearest even), which share no code with kolo.
"""

import ctypes
import math
import os
import random
import struct

import pytest
import torch

FLOAT16_MAX_ROUNDED = 65520.0  # the smallest magnitude that rounds to infinity in binary16


def load_libkolo() -> ctypes.CDLL:
    """libkolo.so from the build tree CTest names (KOLO_BIN_DIR/../lib)."""
    bin_dir = os.environ.get("KOLO_BIN_DIR")
    if not bin_dir:
        pytest.fail("KOLO_BIN_DIR is not set (run through CTest)")
    lib = ctypes.CDLL(os.path.join(bin_dir, "..", "lib", "libkolo.so"))
    lib.kolo_half_to_float.argtypes = [ctypes.c_uint16]
    lib.kolo_half_to_float.restype = ctypes.c_float
    lib.kolo_float_to_half.argtypes = [ctypes.c_float]
    lib.kolo_float_to_half.restype = ctypes.c_uint16
    lib.kolo_bfloat16_to_float.argtypes = [ctypes.c_uint16]
    lib.kolo_bfloat16_to_float.restype = ctypes.c_float
    lib.kolo_float_to_bfloat16.argtypes = [ctypes.c_float]
    lib.kolo_float_to_bfloat16.restype = ctypes.c_uint16
    return lib


@pytest.fixture(scope="module")
def lib() -> ctypes.CDLL:
    return load_libkolo()


def float32_values(count: int) -> list:
    """Edge cases plus random float32 bit patterns over every exponent (seeded)."""
    edges = [0.0, -0.0, 1.0, -1.0, 0.5, 65504.0, 65519.99, 65520.0, 1e-8, 2.0 ** -24,
             2.0 ** -25, 3 * 2.0 ** -26, 2.0 ** -14, 2.0 ** -14 - 2.0 ** -25, 1.0 + 2.0 ** -11,
             1.0 + 3 * 2.0 ** -11, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 3.3895313892515355e38,
             1e38, -1e-40, math.inf, -math.inf]
    rng = random.Random(20261201)
    values = [struct.unpack("<f", struct.pack("<f", v))[0] for v in edges]
    for _ in range(count):
        bits = rng.getrandbits(32)
        value = struct.unpack("<f", struct.pack("<I", bits))[0]
        if not math.isnan(value):
            values.append(value)
    # values near float16's range, where rounding matters most
    for _ in range(count // 4):
        values.append(struct.unpack("<f", struct.pack("<f", rng.uniform(-70000.0, 70000.0)))[0])
    return values


def python_half_bits(value: float) -> int:
    """binary16 bits of value by struct 'e'; it refuses overflow, which IEEE rounds to inf."""
    if math.isinf(value) or abs(value) >= FLOAT16_MAX_ROUNDED:
        return 0xFC00 if math.copysign(1.0, value) < 0 else 0x7C00
    return struct.unpack("<H", struct.pack("<e", value))[0]


def test_every_float16_pattern_converts_to_the_value_struct_gives(lib):
    for bits in range(0x10000):
        want = struct.unpack("<e", struct.pack("<H", bits))[0]
        got = lib.kolo_half_to_float(bits)
        if math.isnan(want):
            assert math.isnan(got), f"0x{bits:04x}"
        else:
            assert got == want and math.copysign(1, got) == math.copysign(1, want), f"0x{bits:04x}"


def test_float32_to_float16_rounds_as_struct_does(lib):
    for value in float32_values(150_000):
        assert lib.kolo_float_to_half(value) == python_half_bits(value), repr(value)


def test_float16_nan_stays_nan(lib):
    assert math.isnan(lib.kolo_half_to_float(lib.kolo_float_to_half(math.nan)))


def test_every_bfloat16_pattern_converts_to_the_value_torch_gives(lib):
    patterns = torch.arange(0, 0x10000, dtype=torch.int32).to(torch.int16)
    wanted = patterns.view(torch.bfloat16).to(torch.float32).tolist()
    for bits, want in zip(range(0x10000), wanted):
        got = lib.kolo_bfloat16_to_float(bits)
        if math.isnan(want):
            assert math.isnan(got), f"0x{bits:04x}"
        else:
            assert got == want and math.copysign(1, got) == math.copysign(1, want), f"0x{bits:04x}"


def test_float32_to_bfloat16_rounds_as_torch_does(lib):
    values = float32_values(150_000)
    wanted = torch.tensor(values, dtype=torch.float32).to(torch.bfloat16).view(torch.int16)
    for value, want in zip(values, wanted.tolist()):
        assert lib.kolo_float_to_bfloat16(value) == (want & 0xFFFF), repr(value)

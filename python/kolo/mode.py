"""kolo.mode: the training mode a job asked for (SYNC, ASYNC, LOCAL_SGD, DILOCO)
and its parameters, read through libkolo's public C API (include/kolo/mode.h:
kolo_mode_from_env, kolo_mode_spec_default, kolo_mode_spec_validate), and the
acknowledgement that tells the kolo agent which mode this process runs
(kolo_elastic_acknowledge_mode). Nothing here parses the KOLO_MODE*
environment or repeats a default: the values come from C.

    spec = kolo.mode.from_env()      # ModeSpec(mode='DILOCO', sync_every=50, ...)
"""
from __future__ import annotations

import ctypes
from ctypes import POINTER, c_char_p, c_double, c_int, c_size_t, c_uint32, c_void_p
from dataclasses import dataclass, replace
from typing import Any, Dict, Optional

from . import _abi, _lib
from ._runtime import RUNTIME, check_status

# kolo_mode and kolo_compression (include/kolo/mode.h, through the generated _abi)
MODES = {
    _abi.KOLO_MODE_SYNC: "SYNC",
    _abi.KOLO_MODE_ASYNC: "ASYNC",
    _abi.KOLO_MODE_LOCAL_SGD: "LOCAL_SGD",
    _abi.KOLO_MODE_DILOCO: "DILOCO",
}
_MODE_CODES = {name: code for code, name in MODES.items()}
COMPRESSIONS = {
    _abi.KOLO_COMPRESSION_NONE: "none",
    _abi.KOLO_COMPRESSION_FP16: "fp16",
    _abi.KOLO_COMPRESSION_INT8: "int8",
}
_COMPRESSION_CODES = {name: code for code, name in COMPRESSIONS.items()}


class _Spec(ctypes.Structure):
    """kolo_mode_spec (include/kolo/mode.h)."""

    _fields_ = [
        ("mode", c_int),
        ("sync_every", c_uint32),
        ("max_staleness", c_uint32),
        ("outer_lr", c_double),
        ("outer_momentum", c_double),
        ("nesterov", c_int),
        ("compression", c_int),
        ("fragments", c_uint32),
    ]


_SIGNATURES = {
    "kolo_mode_spec_default": (c_int, [c_int, POINTER(_Spec)]),
    "kolo_mode_spec_validate": (c_int, [POINTER(_Spec), c_char_p, c_size_t]),
    "kolo_mode_from_env": (c_int, [POINTER(_Spec), c_char_p, c_size_t]),
    "kolo_elastic_acknowledge_mode": (c_int, [c_void_p, c_int]),
}


def _c() -> Any:
    """libkolo with mode.h declared; ImportError for a libkolo without it."""
    cdll = _lib.lib.load()
    for name, (restype, argtypes) in _SIGNATURES.items():
        function = getattr(cdll, name, None)
        if function is None:
            raise ImportError("%s has no %s (include/kolo/mode.h): rebuild kolo" % (cdll._name, name))
        function.restype = restype
        function.argtypes = argtypes
    return cdll


@dataclass(frozen=True)
class ModeSpec:
    """A training mode and its parameters (kolo_mode_spec): mode is 'SYNC',
    'ASYNC', 'LOCAL_SGD' or 'DILOCO'; compression 'none', 'fp16' or 'int8'."""

    mode: str
    sync_every: int
    max_staleness: int
    outer_lr: float
    outer_momentum: float
    nesterov: bool
    compression: str
    fragments: int

    def _to_c(self) -> _Spec:
        return _Spec(
            _MODE_CODES[self.mode],
            self.sync_every,
            self.max_staleness,
            self.outer_lr,
            self.outer_momentum,
            int(self.nesterov),
            _COMPRESSION_CODES[self.compression],
            self.fragments,
        )

    @staticmethod
    def _from_c(spec: _Spec) -> "ModeSpec":
        return ModeSpec(
            MODES[spec.mode],
            int(spec.sync_every),
            int(spec.max_staleness),
            float(spec.outer_lr),
            float(spec.outer_momentum),
            bool(spec.nesterov),
            COMPRESSIONS[spec.compression],
            int(spec.fragments),
        )

    def as_dict(self) -> Dict[str, Any]:
        return dict(self.__dict__)


def _err() -> Any:
    return ctypes.create_string_buffer(512)


def default(mode: str) -> ModeSpec:
    """mode's parameters as libkolo defines them (kolo_mode_spec_default)."""
    name = parse(mode)
    spec = _Spec()
    check_status(_c().kolo_mode_spec_default(_MODE_CODES[name], ctypes.byref(spec)), "kolo.mode.default")
    return ModeSpec._from_c(spec)


def parse(mode: str) -> str:
    """'diloco', 'local-sgd', ... -> the mode's name; ValueError for others."""
    if not isinstance(mode, str):
        raise TypeError("kolo: a mode is a name (SYNC, ASYNC, LOCAL_SGD, DILOCO), not %s" % type(mode).__name__)
    name = mode.strip().upper().replace("-", "_")
    if name not in _MODE_CODES:
        raise ValueError("kolo: unknown mode %r (SYNC, ASYNC, LOCAL_SGD or DILOCO)" % mode)
    return name


def make(mode: str, **params: Any) -> ModeSpec:
    """mode's defaults with params (ModeSpec's field names) replaced, checked by
    libkolo (kolo_mode_spec_validate): ValueError naming the parameter."""
    unknown = sorted(set(params) - set(ModeSpec.__dataclass_fields__) - {"mode"})
    if unknown:
        raise TypeError("kolo: unknown mode parameter(s) %s" % ", ".join(unknown))
    spec = replace(default(mode), **{k: v for k, v in params.items() if v is not None})
    if spec.compression not in _COMPRESSION_CODES:
        raise ValueError("kolo: compression must be none, fp16 or int8, not %r" % (spec.compression,))
    err = _err()
    if _c().kolo_mode_spec_validate(ctypes.byref(spec._to_c()), err, len(err)) != 0:
        raise ValueError("kolo: mode %s: %s" % (spec.mode, err.value.decode(errors="replace")))
    return spec


def from_env() -> ModeSpec:
    """The job's mode (kolo_mode_from_env: SYNC when KOLO_MODE is unset);
    ValueError naming the variable for a malformed one."""
    spec = _Spec()
    err = _err()
    if _c().kolo_mode_from_env(ctypes.byref(spec), err, len(err)) != 0:
        raise ValueError("kolo: the job's mode: %s" % err.value.decode(errors="replace"))
    return ModeSpec._from_c(spec)


def acknowledge(mode: str) -> None:
    """Tells this process's kolo agent that it trains in mode (no-op outside a
    job). A job whose mode is not SYNC fails unless its processes say so."""
    name = parse(mode)
    RUNTIME.require("kolo.mode.acknowledge")
    if RUNTIME.elastic is None:
        return
    RUNTIME.check(_c().kolo_elastic_acknowledge_mode(RUNTIME.elastic, _MODE_CODES[name]), "kolo.mode.acknowledge")


def available() -> Optional[str]:
    """None when this libkolo has mode.h, else why not."""
    try:
        _c()
    except (ImportError, OSError) as error:
        return str(error)
    return None


__all__ = ["ModeSpec", "MODES", "COMPRESSIONS", "default", "make", "parse", "from_env", "acknowledge", "available"]

"""torchrun for Debian's torch 1.13 on Python 3.11: `python3 -m kolo.torch.torchrun ...`
takes torchrun's arguments and runs it after one fix.

Why: Debian's /usr/bin/torchrun dies at start with
`AttributeError: 'NoneType' object has no attribute 'get'` (in
torch/distributed/elastic/multiprocessing/api.py, to_map). torchrun parses --redirects
and --tee (default "0") with Std.from_str, which looks the number up by iterating over
the IntFlag Std. Since Python 3.11, iterating a Flag yields only its single-bit members
(OUT=1, ERR=2), not NONE=0 or ALL=3, so "0" maps to None and to_map fails. torch fixed
from_str upstream after 1.13; here it is replaced by a lookup by value, Std(int(v)),
which accepts every member on every Python. Nothing else is changed."""
from __future__ import annotations

import re
import sys
from typing import Dict, Union

from torch.distributed.elastic.multiprocessing import api as _api

_VALUE = re.compile(r"^[0123]$")
_MAPPING = re.compile(r"^(\d:[0123],)*(\d:[0123])$")


def std_from_str(vm: str) -> Union[_api.Std, Dict[int, _api.Std]]:
    """Std.from_str by value: "0" -> Std.NONE, "3" -> Std.ALL, "0:3,1:0" -> a mapping."""
    if _VALUE.match(vm):
        return _api.Std(int(vm))
    if _MAPPING.match(vm):
        return {int(i): _api.Std(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
    raise ValueError("%s does not match: <%s> or <%s>" % (vm, _VALUE.pattern, _MAPPING.pattern))


def patch() -> None:
    """Installs the fix (idempotent)."""
    _api.Std.from_str = staticmethod(std_from_str)


def main() -> None:
    patch()
    from torch.distributed.run import main as torchrun_main

    torchrun_main(sys.argv[1:])


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Writes python/kolo/_abi.py, the values of libkolo's public headers that python/kolo uses
(every enum of include/kolo/*.h, the status list, and the integer #defines), so that Python
never copies them by hand. Run it after changing an enum or constant in include/kolo:

    /usr/bin/python3 scripts/gen-python-abi.py            # rewrites python/kolo/_abi.py
    /usr/bin/python3 scripts/gen-python-abi.py --check    # exit 1 if it is out of date

test_python_abi runs the check and compares every value with the compiled headers'
(kolo_abi_dump), so a header changed without regenerating fails there."""
from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Dict, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADERS = ("status.h", "kolo.h", "engine.h", "process_set.h", "mode.h", "log.h", "elastic.h")
OUTPUT = os.path.join(ROOT, "python", "kolo", "_abi.py")


def strip_comments(text: str) -> str:
    return re.sub(r"/\*.*?\*/", " ", re.sub(r"//[^\n]*", " ", text), flags=re.S)


def parse(text: str) -> Tuple[List[Tuple[str, List[Tuple[str, int]]]], List[Tuple[str, int]]]:
    """(enums as (type, [(name, value)]), integer #defines) of one header, in order."""
    text = strip_comments(text)
    enums = []
    status = re.findall(r"X\((KOLO_\w+),\s*(-?\d+),", text)
    if status:
        enums.append(("kolo_status", [(name, int(value)) for name, value in status]))
    for body, type_name in re.findall(r"typedef\s+enum\s+\w*\s*\{([^}]*)\}\s*(\w+)\s*;", text):
        members, value = [], -1
        for item in (i.strip() for i in body.split(",")):
            match = re.fullmatch(r"(KOLO_\w+)(?:\s*=\s*(-?\d+))?", item)
            if not match:
                continue  # the status enum's X-macro expansion, or an empty item
            value = int(match.group(2)) if match.group(2) is not None else value + 1
            members.append((match.group(1), value))
        if members:
            enums.append((type_name, members))
    defines = [(name, int(value)) for name, value in
               re.findall(r"^#define\s+(KOLO_\w+)\s+\(?(-?\d+)u?\)?\s*$", text, flags=re.M)]
    return enums, defines


def render() -> str:
    lines = ['"""libkolo\'s enum values and integer constants, generated from include/kolo/*.h by',
             "scripts/gen-python-abi.py: do not edit (test_python_abi checks it is current and equal",
             'to the compiled headers)."""', "from typing import Dict", ""]
    status: Dict[str, int] = {}
    for header in HEADERS:
        with open(os.path.join(ROOT, "include", "kolo", header)) as f:
            enums, defines = parse(f.read())
        for type_name, members in enums:
            lines.append("# %s (%s)" % (type_name, header))
            lines += ["%s = %d" % member for member in members]
            if type_name == "kolo_status":
                status.update(members)
            lines.append("")
        if defines:
            lines.append("# #define (%s)" % header)
            lines += ["%s = %d" % define for define in defines]
            lines.append("")
    lines.append("# every status code by name (kolo_status_name's names)")
    lines.append("STATUS: Dict[str, int] = {")
    lines += ['    "%s": %d,' % item for item in status.items()]
    lines.append("}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if python/kolo/_abi.py is out of date")
    args = parser.parse_args()
    text = render()
    if args.check:
        with open(OUTPUT) as f:
            if f.read() != text:
                print("python/kolo/_abi.py is out of date with include/kolo: run scripts/gen-python-abi.py")
                return 1
        return 0
    with open(OUTPUT, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

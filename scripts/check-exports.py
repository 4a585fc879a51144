#!/usr/bin/python3
"""Checks libkolo's ABI: what the shared library exports, and that a process has one copy.

`exports`: the dynamic symbols libkolo.so defines (`nm -D --defined-only`) must be
exactly the functions and variables that the public headers include/kolo/*.h declare
(read after the C preprocessor, so macros and #if are honoured). An extra symbol is an
internal function leaking into the ABI (libkolo is built with -fvisibility=hidden; only
the headers' declarations are exported, see include/kolo/api.h); a missing one is a
declared function the library does not provide.

The single route (issue 31): of the exports, each collective operation has exactly one
function, its submit (kolo_<op>_submit: the blocking, _async, _on_stream and _named forms are
inline wrappers in the headers), and the requests they return share one set of functions
(ROUTE and REQUEST_SET below): ROUTE_COUNT in all, asserted.

`one-copy`: no program or library under the given folders that loads libkolo.so (a
NEEDED entry) may define one of libkolo's exported symbols itself: that would be a
second copy of its code and state in one process (two log levels, two status tables).
Such programs link the static kolo_internal instead, or only libkolo.

Usage:
  check-exports.py exports CC LIBKOLO HEADER_DIR
  check-exports.py one-copy LIBKOLO DIR...
Prints what differs and exits 1; exits 0 when the sets agree.
"""

import os
import re
import subprocess
import sys

# Symbols the linker itself may define in a shared object's dynamic table.
LINKER_SYMBOLS = {"_init", "_fini", "_edata", "_end", "__bss_start"}
IDENT = re.compile(r"[A-Za-z_]\w*")
# The collective operations: each exports one function, kolo_<op>_submit.
ROUTE = ("allreduce", "allgather", "broadcast", "reducescatter", "alltoall", "grouped_allreduce",
         "barrier", "join")
# What every operation's request is completed and used with.
REQUEST_SET = {"kolo_wait", "kolo_test", "kolo_wait_result", "kolo_test_result", "kolo_stream_wait",
               "kolo_request_cuda_event", "kolo_free"}
ROUTE_COUNT = 15  # len(ROUTE) + len(REQUEST_SET)


def public_text(cc, header_dir):
    """The declarations of the headers in header_dir, preprocessed, without system headers."""
    headers = sorted(n for n in os.listdir(header_dir) if n.endswith(".h"))
    source = "".join('#include "kolo/%s"\n' % n for n in headers)
    include_root = os.path.dirname(os.path.abspath(header_dir))
    result = subprocess.run([cc, "-E", "-x", "c", "-I", include_root, "-"], input=source,
                            capture_output=True, text=True, check=True)
    keep, parts = False, []
    for line in result.stdout.splitlines():
        marker = re.match(r'#\s*\d+\s+"([^"]*)"', line)
        if marker:
            keep = os.path.abspath(marker.group(1)).startswith(os.path.abspath(header_dir) + os.sep)
        elif keep and not line.startswith("#"):
            parts.append(line)
    return "\n".join(parts)


def strip_attributes(text):
    """Removes __attribute__((...)) and __extension__ so the first name( is the declarator."""
    out, i = [], 0
    while True:
        at = text.find("__attribute__", i)
        if at < 0:
            out.append(text[i:])
            break
        out.append(text[i:at])
        j = text.index("(", at)
        depth = 0
        while True:
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            j += 1
            if depth == 0:
                break
        i = j
    return "".join(out).replace("__extension__", "")


def statements(text):
    """Top-level declarations: split at ';' outside braces, and after a function body."""
    current, depth = [], 0
    for ch in text:
        current.append(ch)
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            head = "".join(current).split("{", 1)[0].strip()
            if depth == 0 and head.endswith(")"):  # an inline function's body
                yield "".join(current)
                current = []
        elif ch == ";" and depth == 0:
            yield "".join(current)
            current = []


def declared_symbols(cc, header_dir):
    """Names of the non-static functions and extern variables the headers declare."""
    names = set()
    for statement in statements(strip_attributes(public_text(cc, header_dir))):
        words = IDENT.findall(statement)
        if not words or words[0] == "typedef" or "static" in words:
            continue
        call = re.search(r"([A-Za-z_]\w*)\s*\(", statement)
        if call:
            names.add(call.group(1))
        elif words[0] == "extern":
            variable = re.search(r"([A-Za-z_]\w*)\s*(\[[^\]]*\]\s*)*(=|;)", statement)
            if variable:
                names.add(variable.group(1))
    return names


def dynamic_symbols(path):
    """Defined dynamic symbols of an ELF file (version suffixes dropped)."""
    result = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True,
                            text=True, check=True)
    names = set()
    for line in result.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 3:
            names.add(fields[2].split("@")[0])
    return names - LINKER_SYMBOLS


def check_exports(cc, library, header_dir):
    exported = dynamic_symbols(library)
    declared = declared_symbols(cc, header_dir)
    extra, missing = sorted(exported - declared), sorted(declared - exported)
    for name in extra:
        print("exported but not declared in %s/*.h: %s" % (header_dir, name))
    for name in missing:
        print("declared in %s/*.h but not exported by %s: %s" % (header_dir, library, name))
    if extra or missing:
        print("FAIL: %s exports %d symbols, the headers declare %d (%d extra, %d missing)"
              % (library, len(exported), len(declared), len(extra), len(missing)))
        return 1
    print("OK: %s exports exactly the %d functions the headers declare" % (library, len(declared)))
    return check_route(exported)


def check_route(exported):
    """One exported function per collective operation plus the shared request set."""
    failures, route = [], set()
    for op in ROUTE:
        forms = sorted(n for n in exported if n == "kolo_" + op or n.startswith("kolo_%s_" % op))
        route.update(forms)
        if forms != ["kolo_%s_submit" % op]:
            failures.append("%s: exported %s, want only kolo_%s_submit" % (op, forms or "nothing", op))
    requests = {n for n in exported if re.match(r"kolo_(wait|test|stream_wait|request_|free$)", n)}
    route.update(requests)
    if requests != REQUEST_SET:
        failures.append("request set: exported %s, want %s" % (sorted(requests), sorted(REQUEST_SET)))
    if len(route) != ROUTE_COUNT:
        failures.append("%d route functions exported, want %d" % (len(route), ROUTE_COUNT))
    for line in failures:
        print("FAIL: " + line)
    if failures:
        return 1
    print("OK: one submit per collective (%d) plus the request set (%d): %d route functions"
          % (len(ROUTE), len(REQUEST_SET), len(route)))
    return 0


def needs(path, soname):
    result = subprocess.run(["readelf", "-d", path], capture_output=True, text=True)
    return result.returncode == 0 and re.search(r"\(NEEDED\).*\[%s\]" % re.escape(soname),
                                                result.stdout) is not None


def defined_symbols(path):
    result = subprocess.run(["nm", "--defined-only", path], capture_output=True, text=True)
    return {f[2] for f in (line.split() for line in result.stdout.splitlines()) if len(f) >= 3}


def is_elf(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def check_one_copy(library, folders):
    soname = re.search(r"SONAME\)\s+Library soname: \[([^\]]+)\]",
                       subprocess.run(["readelf", "-d", library], capture_output=True,
                                      text=True, check=True).stdout).group(1)
    exported = dynamic_symbols(library)
    checked, bad = 0, 0
    for folder in folders:
        for root, _, files in os.walk(folder):
            for name in sorted(files):
                path = os.path.join(root, name)
                if os.path.islink(path) or not is_elf(path) or not needs(path, soname):
                    continue
                checked += 1
                copies = sorted(defined_symbols(path) & exported)
                if copies:
                    bad += 1
                    print("%s loads %s but has its own copy of: %s"
                          % (path, soname, " ".join(copies)))
    if checked == 0:
        print("FAIL: no file under %s loads %s (wrong folders?)" % (" ".join(folders), soname))
        return 1
    if bad:
        print("FAIL: %d of %d files that load %s carry a second copy of its code" % (bad, checked, soname))
        return 1
    print("OK: %d files load %s and none carries a copy of its %d symbols" % (checked, soname, len(exported)))
    return 0


def main(argv):
    if len(argv) == 5 and argv[1] == "exports":
        return check_exports(argv[2], argv[3], argv[4])
    if len(argv) >= 4 and argv[1] == "one-copy":
        return check_one_copy(argv[2], argv[3:])
    print(__doc__.strip().split("Usage:")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))

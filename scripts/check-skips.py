#!/usr/bin/python3
"""Fails when CTest skipped a test that this machine should have run.

A kolo test reports "skipped" by exiting 77 (tests/support/skip.h). Some skips are
justified by the machine: tests labelled `gpu` need a GPU, tests labelled `nogpu`
need its absence, tests labelled `image` run only with KOLO_TEST_IMAGE=1. Any other
skip (a dataset that setup installs, a program the build makes) means the test did not
test anything, and CI must say so.

Usage: check-skips.py BUILD_DIR JUNIT_XML
"""

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree


def has_gpu() -> bool:
    """Whether this machine has a usable NVIDIA GPU (a driver that lists one)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return listed.returncode == 0 and "GPU" in listed.stdout


def labels_by_test(build_dir: str) -> dict:
    """Every test's CTest labels, read from `ctest --show-only=json-v1`."""
    shown = subprocess.run(["ctest", "--show-only=json-v1"], cwd=build_dir, capture_output=True,
                           text=True, check=True)
    result = {}
    for test in json.loads(shown.stdout)["tests"]:
        labels = []
        for prop in test.get("properties", []):
            if prop["name"] == "LABELS":
                labels = list(prop["value"])
        result[test["name"]] = labels
    return result


def skipped_tests(junit_path: str) -> list:
    """(name, output) of every test the JUnit report marks as not run."""
    root = ElementTree.parse(junit_path).getroot()
    skipped = []
    for case in root.iter("testcase"):
        if case.get("status") == "notrun" or case.find("skipped") is not None:
            out = case.find("system-out")
            skipped.append((case.get("name"), (out.text or "") if out is not None else ""))
    return skipped


def why_allowed(labels: list, gpu: bool, image: bool):
    """The reason a skip is justified on this machine, or None."""
    if "gpu" in labels and not gpu:
        return "no GPU on this machine"
    if "nogpu" in labels and gpu:
        return "a GPU is present"
    if "image" in labels and not image:
        return "KOLO_TEST_IMAGE is not 1"
    return None


def main(argv: list) -> int:
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    build_dir, junit_path = argv[1], argv[2]
    labels = labels_by_test(build_dir)
    gpu = has_gpu()
    image = os.environ.get("KOLO_TEST_IMAGE", "0") == "1"
    unexpected = []
    for name, output in skipped_tests(junit_path):
        reason = why_allowed(labels.get(name, []), gpu, image)
        if reason is None:
            last = [line for line in output.strip().splitlines() if line.strip()][-1:] or [""]
            unexpected.append(f"{name}: {last[0]}")
        else:
            print(f"check-skips: {name} skipped ({reason})")
    for line in unexpected:
        print(f"check-skips: UNEXPECTED SKIP {line}", file=sys.stderr)
    if unexpected:
        print(f"check-skips: {len(unexpected)} test(s) skipped that this machine must run",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

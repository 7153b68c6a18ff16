#!/usr/bin/env python3
"""Turns cudapatch's --json report (stdin) into the plan nixpkgs-way.sh runs
(stdout): for each file cudapatch would patch, the interpreter it sets, its
RUNPATH without the driver link (the resolved directories: what
auto-patchelf.py sets), and the path, separated by \\x1f (unlike a tab, not
white space to bash's read, so empty fields survive). Prints a summary to
stderr."""
import json
import sys

driver = sys.argv[1] if len(sys.argv) > 1 else "/run/opengl-driver/lib"
rep = json.load(sys.stdin)
n = skipped = 0
for f in rep["files"]:
    if f.get("skipped") or f.get("errors"):
        skipped += 1
        continue
    entries = [e for e in f.get("runpath", "").split(":") if e and e != driver]
    print("\x1f".join([f.get("interpreter", ""), ":".join(entries), f["path"]]))
    n += 1
missing = sum(1 for f in rep["files"] for d in f.get("deps", []) if d["how"] == "ignored")
print(f"plan: {n} files to patch, {skipped} skipped, {missing} missing dependencies ignored",
      file=sys.stderr)

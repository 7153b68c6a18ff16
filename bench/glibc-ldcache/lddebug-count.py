#!/usr/bin/env python3
"""Count the loader's file probes in LD_DEBUG=libs output.

  lddebug-count.py FILE...        (LD_DEBUG_OUTPUT files, or a captured stderr)

Prints one line of key=value counts:
  searches   "find library=" blocks (a name the loader had to look for)
  tries      "trying file=" lines (RUNPATH/RPATH/LD_LIBRARY_PATH/default dirs)
  cached     "trying cached file=" lines (the resolution-cache note's "=" entries)
  failed     tried paths that do not exist as a regular file now, i.e. opens
             that failed with ENOENT/ENOTDIR (a path that exists but was
             rejected, e.g. the wrong ELF class, is not counted)
  ldsocache  lookups in /etc/ld.so.cache (after RUNPATH failed)
Counting happens after the run, on the same tree, so "exists now" is "existed
then" as long as nothing changed the tree in between.
"""
import os
import sys

c = {"searches": 0, "tries": 0, "cached": 0, "failed": 0, "ldsocache": 0}
for path in sys.argv[1:]:
    with open(path, errors="replace") as f:
        for line in f:
            s = line.strip()
            if "find library=" in s:
                c["searches"] += 1
            elif "search cache=" in s:
                c["ldsocache"] += 1
            elif "trying cached file=" in s or "trying file=" in s:
                cached = "trying cached file=" in s
                c["cached" if cached else "tries"] += 1
                p = s.split("file=", 1)[1]
                if not os.path.isfile(p):
                    c["failed"] += 1
print(" ".join(f"{k}={v}" for k, v in c.items()))

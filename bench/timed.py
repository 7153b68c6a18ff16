#!/usr/bin/env python3
"""timed.py: run one command and append what it cost to a file, as one line

    LABEL WALL_S USER_S SYS_S

WALL_S is the monotonic clock around the spawn and the wait; USER_S and
SYS_S come from wait4's rusage (the command and the children it waited
for), in microseconds, where GNU time prints hundredths: a run of a small
tree takes tens of milliseconds. Exits with the command's status.

    python3 bench/timed.py OUT LABEL -- CMD ARGS...
"""
import os
import sys
import time


def main():
    if len(sys.argv) < 5 or sys.argv[3] != "--":
        sys.exit("usage: timed.py OUT LABEL -- CMD ARGS...")
    out, label, argv = sys.argv[1], sys.argv[2], sys.argv[4:]
    start = time.monotonic()
    try:
        pid = os.posix_spawnp(argv[0], argv, os.environ)
    except OSError as e:
        print(f"timed.py: {argv[0]}: {e.strerror}", file=sys.stderr)
        sys.exit(127)
    _, status, ru = os.wait4(pid, 0)
    wall = time.monotonic() - start
    with open(out, "a") as f:
        f.write(f"{label} {wall:.6f} {ru.ru_utime:.6f} {ru.ru_stime:.6f}\n")
    sys.exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main()

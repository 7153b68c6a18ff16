#!/usr/bin/env bash
# Two builds of cudapatch at 1 and 16 jobs, alternating, on the 10,000-file
# tree of bench/jobs-scaling.sh (issue 14's --jobs target, before/after).
#
#   bash bench/jobs-ab.sh BEFORE AFTER [RUNS] [WORKDIR]
#
# RUNS (default 5) rounds; each round runs BEFORE and AFTER at --jobs 1 and
# at --jobs NPROC, each on a fresh copy of the tree, and prints one line per
# run: build, jobs, wall, user and system seconds, peak RSS (/usr/bin/time).
# Needs bash, coreutils, python3 and /usr/bin/time only (runs on the GPU
# machine, which has no Go: cross-build the two binaries and carry them).
# Findings: bench/HISTORY.md (a dated summary per run; the output itself is
# an artifact of the run, not committed).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
A=$(readlink -f "$1")
B=$(readlink -f "$2")
RUNS=${3:-5}
W=${4:-/tmp/jobs-ab}
MAXJ=$(nproc)
ARGS=(--driver-link-for all --ignore-missing '*' --libc /lib/x86_64-linux-gnu)
rm -rf "${W:?}" && mkdir -p "$W"
# What the run copies is gigabytes, often on tmpfs: removed at exit
# (KEEP=1 keeps it), so that it does not starve the next run of memory.
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "${W:?}"' EXIT
python3 "$HERE/mktree.py" "$W/pristine" --count 10000 --max-size 1048576 >/dev/null
for _ in $(seq "$RUNS"); do
	for b in "$A" "$B"; do
		for j in 1 "$MAXJ"; do
			rm -rf "${W:?}/copy" && cp -a "$W/pristine" "$W/copy" && sync
			/usr/bin/time -f "$b j$j %e %U %S %MkB" "$b" --jobs "$j" "${ARGS[@]}" "$W/copy/store" >/dev/null 2>>"$W/err" || {
				tail -3 "$W/err" >&2
				exit 1
			}
			tail -1 "$W/err"
		done
	done
done

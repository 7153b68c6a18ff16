#!/usr/bin/env bash
# bench/instructions.sh: the user-space instructions of the main job on a
# tree, counted by valgrind's cachegrind, with the defaults and with both
# checks off (issue 43's two sides), for each build given. On a shared
# 2-core machine the timings of checks.sh spread by 10-15 %, so a change
# worth 3-8 % of the checks cannot be told from noise there; these counts
# repeat within 0.1 %. For that the garbage collector is off (GOGC=off,
# GOMEMLIMIT=1TiB): its work under valgrind follows the clock, and spread
# the counts by 2-3 %; GC=1 leaves it on. Kernel work is not counted
# either: pair this with `strace -f -c` for the system calls. Slow (about
# 5 s a run on 600 small files); never run by CI.
#
#   bash bench/instructions.sh STORE BINARY... [-- EXTRA ARGS]
#
# STORE is a directory whose entries are the outputs (bench/mktree.py
# DEST makes DEST/store; `cuda` uses the CUDA corpus of $CPCORPUS with
# bench/corpus-args.sh). Each run is on a fresh copy: a patch run, then
# a no-op re-run of the patched copy. Prints one line a run and, per
# build, the ratio of the defaults to both checks off.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench/corpus-args.sh
. "$HERE/corpus-args.sh"
STORE=${1:?usage: instructions.sh STORE BINARY... [-- EXTRA ARGS]}
shift
bins=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
	bins+=("$(readlink -f "$1")")
	shift
done
[ $# -gt 0 ] && shift
extra=("$@")
[ ${#bins[@]} -gt 0 ] || { echo "instructions.sh: no binary" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "instructions.sh: needs valgrind" >&2; exit 2; }
if [ "$STORE" = cuda ]; then
	STORE=${CPCORPUS:-/tmp/cpcorpus}/pristine/store
	corpus=1
fi
W=$(mktemp -d "${TMPDIR:-/tmp}/cudapatch-ir.XXXXXX")
trap 'rm -rf "${W:?}"' EXIT

# ir LABEL ARGS...: one counted run, its instructions on stdout.
ir() {
	local label=$1
	shift
	# One P, so that no thread spins looking for work (valgrind runs one
	# thread at a time, and a spin counts); Go's preemption signals trip
	# cachegrind. valgrind 3.19 does not know openat2: internal/confine
	# falls back as on an old kernel, the same for every build measured.
	local gc=(GOGC=off GOMEMLIMIT=1TiB)
	[ "${GC:-0}" = 1 ] && gc=()
	if ! env "${gc[@]}" GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1 valgrind --tool=cachegrind --cache-sim=no \
		--cachegrind-out-file=/dev/null "$@" >/dev/null 2>"$W/err"; then
		# A run that finds problems exits 1; only a crash is an error.
		grep -q 'I *refs' "$W/err" || { echo "instructions.sh: $label failed:" >&2; tail -5 "$W/err" >&2; exit 1; }
	fi
	sed -n 's/.*I *refs: *//p' "$W/err" | tr -d ,
}

for b in "${bins[@]}"; do
	for side in defaults off; do
		flags=(--jobs 1)
		[ $side = off ] && flags+=(--symbols off --dlopen off)
		rm -rf "$W/copy" && cp -a "$STORE" "$W/copy"
		if [ "${corpus:-0}" = 1 ]; then
			mapfile -t a < <(cuda_corpus_args "$W/copy")
		else
			a=(--ignore-missing '*' "$W/copy"/*)
		fi
		for kind in patch no-op; do
			n=$(ir "$b $side $kind" "$b" "${flags[@]}" "${extra[@]}" "${a[@]}")
			echo "$b $side $kind $n" | tee -a "$W/runs"
		done
	done
done
python3 - "$W/runs" <<'EOF'
import sys
ir = {}
for line in open(sys.argv[1]):
    b, side, kind, n = line.split()
    ir[b, side, kind] = int(n)
print("binary\trun\tdefaults Ir\tboth off Ir\tratio\tchecks' Ir")
for (b, side, kind), n in ir.items():
    if side == "defaults":
        off = ir[b, "off", kind]
        print(f"{b}\t{kind}\t{n/1e6:.1f}M\t{off/1e6:.1f}M\t{n/off:.2f}x\t{(n-off)/1e6:.1f}M")
EOF

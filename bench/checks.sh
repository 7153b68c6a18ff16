#!/usr/bin/env bash
# bench/checks.sh: what the two checks of the main job (the symbol check
# and dlopen discovery) cost, against the same job with both off (issue
# 43's targets): a patch run on a fresh copy, then a no-op re-run on that
# copy, each side on its own copy, the sides in turns (the defaults first
# in odd rounds). Prints per tree and run kind the median CPU (user+sys)
# and wall seconds of each side, the ratio, and the target. The ratios are
# reported, never asserted: CI runs it as a smoke run on a small tree.
#
#   bash bench/checks.sh CUDAPATCH [RUNS] [WORKDIR]
#
# Trees: the many-small tree (bench/mktree.py; COUNT=N and MAX_SIZE=BYTES
# draw a smaller one, as CI does) and the CUDA corpus ($CPCORPUS, default
# /tmp/cpcorpus, when built; CORPUS=0 leaves it out). RUNS defaults to 5,
# WORKDIR to /tmp/cudapatch-checks (use tmpfs for steadier figures). Needs
# bash, coreutils and python3; bench/timed.py times each run, its CPU in
# microseconds (a no-op of CI's tree takes tens of milliseconds, GNU
# time's resolution is ten). Findings: bench/HISTORY.md.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench/corpus-args.sh
. "$HERE/corpus-args.sh"
BIN=$(readlink -f "${1:?usage: checks.sh CUDAPATCH [RUNS] [WORKDIR]}")
RUNS=${2:-5}
W=${3:-/tmp/cudapatch-checks}
CORPUS_DIR=${CPCORPUS:-/tmp/cpcorpus}
rm -rf "${W:?}" && mkdir -p "$W"
# What the run copies is gigabytes, often on tmpfs: removed at exit
# (KEEP=1 keeps it), so that it does not starve the next run of memory.
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "${W:?}"' EXIT
echo "# $(date -u +%FT%TZ) $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $("$BIN" --version 2>&1 | head -1)"

trees=()
if [ "${CORPUS:-1}" != 0 ] && [ -d "$CORPUS_DIR/pristine/store" ]; then
	cp -a "$CORPUS_DIR/pristine/store" "$W/corpus" && trees+=(corpus)
else
	echo "# corpus: $CORPUS_DIR/pristine/store absent or CORPUS=0, left out"
fi
mk=()
[ -n "${COUNT:-}" ] && mk+=(--count "$COUNT" --max-size "${MAX_SIZE:-1048576}")
python3 "$HERE/mktree.py" "$W/small-tree" "${mk[@]}" >&2 && mv "$W/small-tree/store" "$W/small" && trees+=(small)

# args TREE COPY: the main job's arguments for a copy of TREE at COPY.
args() {
	case $1 in
	corpus) cuda_corpus_args "$2" ;;
	small) printf '%s\n' --ignore-missing '*' "$2"/* ;;
	esac
}

# run TREE SIDE KIND COPY EXTRA...: one timed run, a line in $W/runs.
run() {
	local t=$1 side=$2 kind=$3 copy=$4
	shift 4
	local a
	mapfile -t a < <(args "$t" "$copy")
	if ! python3 "$HERE/timed.py" "$W/runs" "$t $side $kind" -- "$BIN" "$@" "${a[@]}" >/dev/null 2>"$W/err"; then
		echo "checks.sh: $t $side $kind failed:" >&2
		tail -3 "$W/err" >&2
		exit 1
	fi
	tail -1 "$W/runs"
}

for r in $(seq "$RUNS"); do
	for t in "${trees[@]}"; do
		for side in $([ $((r % 2)) = 1 ] && echo "defaults off" || echo "off defaults"); do
			extra=()
			[ "$side" = off ] && extra=(--symbols off --dlopen off)
			rm -rf "${W:?}/copy-$side" && cp -a "$W/$t" "$W/copy-$side" && sync
			run "$t" "$side" patch "$W/copy-$side" "${extra[@]}"
			run "$t" "$side" no-op "$W/copy-$side" "${extra[@]}"
		done
	done
done
rm -rf "${W:?}"/copy-*
python3 - "$W/runs" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 6:
        t, side, kind, wall, user, sys_ = f
        runs.setdefault((t, kind, side), []).append((float(wall), float(user) + float(sys_)))
target = {"patch": 1.4, "no-op": 1.5}
print("tree\trun\truns\tdefaults cpu s\tboth off cpu s\tcpu ratio\tdefaults wall s\tboth off wall s\twall ratio\ttarget")
for t, kind in sorted({k[:2] for k in runs}, key=lambda k: (k[0], k[1] != "patch")):
    d, o = runs.get((t, kind, "defaults"), []), runs.get((t, kind, "off"), [])
    if not d or not o:
        continue
    dw, dc = (statistics.median(x[i] for x in d) for i in (0, 1))
    ow, oc = (statistics.median(x[i] for x in o) for i in (0, 1))
    cr = f"{dc / oc:.2f}x" if oc else "-"
    wr = f"{dw / ow:.2f}x" if ow else "-"
    print(f"{t}\t{kind}\t{len(d)}\t{dc:.3f}\t{oc:.3f}\t{cr}\t{dw:.3f}\t{ow:.3f}\t{wr}\t{target[kind]}x")
EOF

#!/usr/bin/env bash
# bench/ab.sh: the main job of two cudapatch builds, alternating on fresh
# copies of the same trees, for changes that must not cost time (a
# refactoring) or whose cost is to be measured (a new check).
#
#   bash bench/ab.sh A B [RUNS] [WORKDIR]     (A, B: binaries; RUNS default 5)
#
# Trees: the CUDA corpus ($CPCORPUS, default /tmp/cpcorpus, with
# bench/run.sh's arguments; skipped with a line when absent) and the
# many-small tree (every ELF file of /usr/bin and /usr/lib/<multiarch>,
# bench/mktree.py). A and B run in turns, A first in odd rounds, each on a
# fresh copy; one line per run (tree, build, wall, user, system seconds,
# peak RSS), then per tree the medians and B's ratio to A. $AB_ARGS_A and
# $AB_ARGS_B add arguments to one side only (the same binary with a check
# on and off). Needs bash, coreutils, python3, /usr/bin/time (runs on the
# GPU machine too: carry the binaries). Findings: bench/HISTORY.md.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench/corpus-args.sh
. "$HERE/corpus-args.sh"
A=$(readlink -f "${1:?usage: ab.sh A B [RUNS] [WORKDIR]}")
B=$(readlink -f "${2:?usage: ab.sh A B [RUNS] [WORKDIR]}")
RUNS=${3:-5}
W=${4:-/tmp/cudapatch-ab}
CORPUS=${CPCORPUS:-/tmp/cpcorpus}
read -r -a EXTRA_A <<<"${AB_ARGS_A:-}"
read -r -a EXTRA_B <<<"${AB_ARGS_B:-}"
rm -rf "${W:?}" && mkdir -p "$W"
# What the run copies is gigabytes, often on tmpfs: removed at exit
# (KEEP=1 keeps it), so that it does not starve the next run of memory.
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "${W:?}"' EXIT
echo "# $(date -u +%FT%TZ) $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# A=$A ${EXTRA_A[*]}"
echo "# B=$B ${EXTRA_B[*]}"

trees=()
if [ -d "$CORPUS/pristine/store" ]; then
	cp -a "$CORPUS/pristine/store" "$W/corpus" && trees+=(corpus)
else
	echo "# corpus: $CORPUS/pristine/store absent, skipped"
fi
python3 "$HERE/mktree.py" "$W/small-tree" >/dev/null && mv "$W/small-tree/store" "$W/small" && trees+=(small)

# args TREE: the main job's arguments for a copy at $W/copy.
args() {
	local d
	case $1 in
	corpus) cuda_corpus_args "$W/copy" ;;
	small) printf '%s\n' --ignore-missing '*' "$W/copy"/* ;;
	esac
}

for r in $(seq "$RUNS"); do
	for t in "${trees[@]}"; do
		for side in $([ $((r % 2)) = 1 ] && echo "A B" || echo "B A"); do
			rm -rf "${W:?}/copy" && cp -a "$W/$t" "$W/copy" && sync
			mapfile -t a < <(args "$t")
			if [ "$side" = A ]; then bin=$A extra=("${EXTRA_A[@]}"); else bin=$B extra=("${EXTRA_B[@]}"); fi
			/usr/bin/time -f "$t $side %e %U %S %M" -a -o "$W/runs" "$bin" "${extra[@]}" "${a[@]}" >/dev/null 2>"$W/err" ||
				echo "# $t $side exit $? ($(tail -1 "$W/err"))"
			tail -1 "$W/runs"
		done
	done
done
python3 - "$W/runs" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 6 and not line.startswith("Command"):
        t, side, wall, user, sys_, rss = f
        runs.setdefault((t, side), []).append((float(wall), float(user) + float(sys_), int(rss)))
print("tree\tside\truns\twall s\tcpu s\tpeak RSS MiB")
for t in sorted({k[0] for k in runs}):
    med = {}
    for side in "AB":
        rs = runs.get((t, side), [])
        if not rs:
            continue
        med[side] = [statistics.median(x[i] for x in rs) for i in range(3)]
        print(f"{t}\t{side}\t{len(rs)}\t{med[side][0]:.3f}\t{med[side][1]:.3f}\t{med[side][2] / 1024:.1f}")
    if len(med) == 2 and med["A"][0] and med["A"][1]:
        print(f"{t}\tB/A\t\t{med['B'][0] / med['A'][0]:.2f}x\t{med['B'][1] / med['A'][1]:.2f}x\t{med['B'][2] / med['A'][2]:.2f}x")
EOF

#!/usr/bin/env bash
# bench/symbols.sh: what the symbol check costs the main job. Runs
# cudapatch over real trees with --symbols error (the default) and
# --symbols off, alternating (which goes first alternates too), each run
# on a fresh copy of the pristine tree, and prints CPU (user+sys), wall
# and peak RSS (GNU time) per run and their medians (findings: bench/HISTORY.md).
#
#   bash bench/symbols.sh                 # corpus, small, usr; 3 runs each
#   RUNS=5 TREES="small" bash bench/symbols.sh
#
# Trees (each skipped with a line when its source is absent):
#   corpus  the CUDA corpus ($CPCORPUS, default /tmp/cpcorpus; built by
#           scripts/cuda-corpus.sh), with bench/run.sh's arguments
#   small   the many-small tree (bench/mktree.py: every ELF file of
#           /usr/lib/<multiarch> and /usr/bin), with bench/run.sh's arguments
#   usr     /usr/bin and /usr/lib/<multiarch> as bin/ and lib/, as
#           scripts/identical.sh lays them out
# Work directory: $SYMBENCH_DIR (default /tmp/cpsymbols, ~5 GB). Needs go,
# python3 and GNU time (/usr/bin/time).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=bench/corpus-args.sh
. "$REPO/bench/corpus-args.sh"
W=${SYMBENCH_DIR:-/tmp/cpsymbols}
CORPUS=${CPCORPUS:-/tmp/cpcorpus}
RUNS=${RUNS:-3}
TREES=${TREES:-corpus small usr}
MULTI=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
BT=$CORPUS/pristine/bintools
CP=$W/cudapatch
TREE=$W/tree
log() { printf '%s symbols.sh: %s\n' "$(date +%T)" "$*" >&2; }

mkdir -p "$W"
(cd "$REPO" && go build -o "$CP" ./cmd/cudapatch)
printf 'commit %s, %s, %s cores, load %s\n' "$(git -C "$REPO" rev-parse --short HEAD)" \
	"$(lscpu | sed -n 's/^Model name: *//p' | head -1)" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)"

# Each tree: SRC (a pristine directory copied to $TREE before every run),
# args (cudapatch's arguments, one a line) and env (NIX_BINTOOLS or none).
corpus_src() { echo "$CORPUS/pristine/store"; }
corpus_args() { cuda_corpus_args "$TREE"; }
corpus_env() { echo "NIX_BINTOOLS=$BT"; }
small_src() {
	if [ ! -d "$W/small/store" ]; then
		log "making the many-small tree in $W/small"
		rm -rf "$W/small.tmp" && python3 "$REPO/bench/mktree.py" "$W/small.tmp" >/dev/null && mv "$W/small.tmp" "$W/small"
	fi
	echo "$W/small/store"
}
small_args() { printf '%s\n' --ignore-missing '*' "$TREE"/*; }
small_env() { echo "NIX_BINTOOLS=$BT"; }
usr_src() {
	if [ ! -d "$W/usr" ]; then
		log "copying /usr/bin and /usr/lib/$MULTI to $W/usr"
		mkdir -p "$W/usr.tmp/bin" "$W/usr.tmp/lib"
		# Hard links broken: the main job refuses a file with several.
		cp -a --no-preserve=links /usr/bin/. "$W/usr.tmp/bin/"
		cp -a --no-preserve=links "/usr/lib/$MULTI/." "$W/usr.tmp/lib/"
		mv "$W/usr.tmp" "$W/usr"
	fi
	echo "$W/usr"
}
usr_args() { printf '%s\n' --search "$TREE/lib" --ignore-missing '*' "$TREE/bin" "$TREE/lib"; }
usr_env() { echo "CUDAPATCH_BENCH=usr"; }

run() { # TREE MODE RUN
	local t=$1 mode=$2 r=$3 src a=()
	src=$("${t}_src")
	rm -rf "$TREE" && mkdir -p "$TREE" && cp -a --sparse=always "$src/." "$TREE/" && sync
	mapfile -t a < <("${t}_args")
	local rc=0
	(cd "$TREE" && env "$("${t}_env")" /usr/bin/time -f '%e %U %S %M' -o "$W/time" \
		"$CP" --symbols "$mode" "${a[@]}" >"$W/$t-$mode.out" 2>"$W/$t-$mode.err") || rc=$?
	# GNU time puts "Command exited with non-zero status N" first.
	read -r wall user sys rss < <(tail -1 "$W/time")
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$mode" "$r" "$wall" "$user" "$sys" "$rss" "$rc" "$(cut -d' ' -f1 /proc/loadavg)" | tee -a "$W/runs.tsv"
}

: >"$W/runs.tsv"
printf 'tree\tmode\trun\twall_s\tuser_s\tsys_s\tmaxrss_kib\texit\tload1\n'
for t in $TREES; do
	case $t in
	corpus) [ -d "$CORPUS/pristine/store" ] || { log "corpus: $CORPUS/pristine/store absent, skipped"; continue; } ;;
	esac
	for r in $(seq 1 "$RUNS"); do
		if [ $((r % 2)) = 1 ]; then
			run "$t" error "$r"
			run "$t" off "$r"
		else
			run "$t" off "$r"
			run "$t" error "$r"
		fi
	done
	tail -2 "$W/$t-error.err" | sed "s/^/$t error: /" >&2
done
rm -rf "$TREE"

python3 - "$W/runs.tsv" <<'EOF'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
trees = []
for r in rows:
    if r[0] not in trees:
        trees.append(r[0])
print("\ntree    mode   runs  CPU s (median)  wall s  peak RSS MiB (median, max)  load  CPU on/off")
for t in trees:
    med = {}
    for m in ("error", "off"):
        rs = [r for r in rows if r[0] == t and r[1] == m]
        cpu = statistics.median(float(r[4]) + float(r[5]) for r in rs)
        wall = statistics.median(float(r[3]) for r in rs)
        rss = [int(r[6]) / 1024 for r in rs]
        load = statistics.median(float(r[8]) for r in rs)
        med[m] = cpu
        ratio = "" if m == "error" else "%.2fx" % (med["error"] / cpu if cpu else float("nan"))
        print("%-7s %-6s %4d  %14.2f  %6.2f  %10.1f %6.1f  %5.1f  %s" % (t, m, len(rs), cpu, wall, statistics.median(rss), max(rss), load, ratio))
EOF

#!/usr/bin/env bash
# bench/index.sh: what the library index costs, and proof that the lazy index
# decides as the eager one did, on real trees.
#
#   bash bench/index.sh [WORKDIR]        (default /tmp/cpindex)
#
# Writes its findings to stdout and to WORKDIR/INDEX.md ($OUT); a summary of
# them goes to bench/HISTORY.md.
# 1. Cost. One executable (/usr/bin/curl, copied) is patched against
#    /usr/lib/x86_64-linux-gnu (every library of this machine) and against a
#    directory holding only the libraries it needs (copies of the ones the
#    first run resolved), RUNS times each (default 5), alternating, median
#    wall time; with a warm page cache, and cold: before each cold run
#    `sync; echo 3 > /proc/sys/vm/drop_caches` (needs root; without it the
#    cold rows are left out and the script says so). The target (issue 14):
#    the big directory within 3x of the small one, warm and cold.
#    BEFORE=BINARY measures another cudapatch build the same way (e.g. one
#    built from the commit before the lazy index) for comparison;
#    BEFORE_DESC says what it is.
# 2. Proof. Writes WORKDIR/trees.json naming real trees and runs
#    TestIndexMatchesEagerOnRealTrees on them: every question (each name
#    either index can know, each architecture) asked of the lazy and the
#    eager index, and Patch's decisions (a dry run) compared. The trees: the
#    CUDA corpus ($CPCORPUS, default /tmp/cpcorpus; built by
#    scripts/cuda-corpus.sh), the debootstrap userland
#    ($USERLAND/pristine, default /tmp/cudapatch-userland; made by
#    scripts/userland.sh) and this machine's library directories. Trees
#    that are not there are skipped with a note.
# Needs go (for the build and the proof), python3.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
W=${1:-/tmp/cpindex}
RUNS=${RUNS:-5}
CORPUS=${CPCORPUS:-/tmp/cpcorpus}
USERLAND=${USERLAND:-/tmp/cudapatch-userland}
BIG=/usr/lib/x86_64-linux-gnu
EXE=/usr/bin/curl
OUT=${OUT:-$W/INDEX.md}
mkdir -p "$W/bin"
# The report names this machine's directories by their variables.
exec > >(sed -e "s#$CORPUS#\$CPCORPUS#g" -e "s#$USERLAND#\$USERLAND#g" -e "s#$W#\$W#g" | tee "$OUT")
echo "# Library index benchmark"
echo
echo "Written by \`bash bench/index.sh\` at commit $(cd "$REPO" && git rev-parse --short HEAD), $(date -u '+%Y-%m-%d %H:%M UTC')."
echo "\$W is the work directory (the argument), \$CPCORPUS the CUDA corpus (scripts/cuda-corpus.sh), \$USERLAND the debootstrap userland (scripts/userland.sh)."
[ -z "${BEFORE:-}" ] || echo "The *before* rows: \`BEFORE=$(basename "$BEFORE")\` (${BEFORE_DESC:-another build})."
echo
(cd "$REPO" && go build -o "$W/bin/cudapatch" ./cmd/cudapatch) >&2
CP=$W/bin/cudapatch

# ---- 1. cost ---------------------------------------------------------------
rm -rf "$W/out" "$W/deps" && mkdir -p "$W/out/bin" "$W/deps"
cp "$EXE" "$W/out/bin/"
"$CP" --dry-run --json --search "$BIG" "$W/out" >"$W/report.json" 2>/dev/null
python3 - "$W/report.json" "$W/deps" <<'EOF'
import json, shutil, sys
rep = json.load(open(sys.argv[1]))
for f in rep["files"]:
    for d in f.get("deps", []):
        if d["how"] == "resolved":
            shutil.copy(d["path"], sys.argv[2] + "/" + d["name"])
EOF
nlibs=$(find "$BIG" -maxdepth 1 -name '*.so*' | wc -l)
ndeps=$(find "$W/deps" -type f | wc -l)
cold_ok=""
if [ -w /proc/sys/vm/drop_caches ] && (sync && echo 3 >/proc/sys/vm/drop_caches) 2>/dev/null; then cold_ok=1; fi

# one BINARY DIR CACHE: wall ms of one patch of a fresh copy of the executable
one() {
	rm -rf "$W/run" && mkdir -p "$W/run/bin" && cp "$EXE" "$W/run/bin/"
	if [ "$3" = cold ]; then sync && echo 3 >/proc/sys/vm/drop_caches; fi
	local s e
	s=$(date +%s%N)
	"$1" --search "$2" "$W/run" >/dev/null 2>"$W/err" || {
		cat "$W/err" >&2
		exit 1
	}
	e=$(date +%s%N)
	echo $(((e - s) / 1000))
}
median() { sort -n | sed -n "$(((RUNS + 1) / 2))p"; }
us() { awk -v u="$1" 'BEGIN { if (u >= 10000) printf "%.1f ms", u / 1000; else printf "%.2f ms", u / 1000 }'; }

echo "## Library index: one executable against $nlibs libraries vs. its $ndeps dependencies"
echo
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg); $RUNS runs each, median"
echo
echo "| build | cache | --search $BIG | --search deps only | ratio |"
echo "| --- | --- | ---: | ---: | ---: |"
builds=("$CP")
[ -n "${BEFORE:-}" ] && builds+=("$(readlink -f "$BEFORE")")
caches=(warm)
[ -n "$cold_ok" ] && caches+=(cold)
for b in "${builds[@]}"; do
	name=after
	[ "$b" = "$CP" ] || name=before
	for c in "${caches[@]}"; do
		one "$b" "$BIG" warm >/dev/null # warm the binary and the tree
		big=() small=()
		for _ in $(seq "$RUNS"); do
			big+=("$(one "$b" "$BIG" "$c")")
			small+=("$(one "$b" "$W/deps" "$c")")
		done
		mb=$(printf '%s\n' "${big[@]}" | median)
		ms=$(printf '%s\n' "${small[@]}" | median)
		printf '| %s | %s | %s | %s | **%s×** |\n' "$name" "$c" "$(us "$mb")" "$(us "$ms")" \
			"$(awk -v a="$mb" -v b="$ms" 'BEGIN { printf "%.2f", a / b }')"
	done
done
[ -n "$cold_ok" ] || echo "(cold rows left out: /proc/sys/vm/drop_caches is not writable; run as root)"
echo

# ---- 2. proof ----------------------------------------------------------------
trees=()
if [ -d "$CORPUS/pristine/store" ]; then
	S=$CORPUS/pristine/store
	libs=$(find "$S" -mindepth 2 -maxdepth 2 -name lib -printf '"%p",' | sed 's/,$//')
	trees+=("{\"paths\": [\"$S\"], \"patch\": true}")
	trees+=("{\"paths\": [\"$(echo "$S"/*-libcublas-*)\"], \"search\": [$libs], \"search_recursive\": [\"$S\"], \"patch\": true}")
else
	echo "(no CUDA corpus at $CORPUS: skipped)"
fi
if [ -d "$USERLAND/pristine/usr/lib" ]; then
	U=$USERLAND/pristine
	trees+=("{\"paths\": [\"$U\"], \"search_recursive\": [\"$U/usr/lib\"], \"patch\": true}")
	trees+=("{\"paths\": [\"$U/usr/bin\"], \"search\": [\"$U/usr/lib/x86_64-linux-gnu\"], \"ignore_existing\": true, \"patch\": true}")
else
	echo "(no debootstrap userland at $USERLAND/pristine: skipped)"
fi
trees+=("{\"paths\": [\"$W/out\"], \"search\": [\"$BIG\", \"/lib/x86_64-linux-gnu\"], \"search_recursive\": [\"$BIG\"], \"patch\": true}")
(
	IFS=,
	echo "[${trees[*]}]"
) >"$W/trees.json"
echo "## Lazy index against the eager oracle on real trees ($W/trees.json)"
echo
(cd "$REPO" && CUDAPATCH_INDEX_TREES=$W/trees.json go test ./rpath/patch -run 'TestIndexMatchesEagerOnRealTrees' -count=1 -v -timeout 30m) >"$W/proof.log" 2>&1 || {
	tail -40 "$W/proof.log"
	echo "FAIL: the lazy index disagrees with the eager one (see $W/proof.log)"
	exit 1
}
grep -E 'questions|^(ok|---)' "$W/proof.log" | sed 's/^ *//'

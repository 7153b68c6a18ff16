#!/usr/bin/env bash
# bench/run.sh: cudapatch's main job against the nixpkgs way of doing the
# same work, on real trees, measured side by side in one run; writes
# bench/RESULTS.md and the plots next to it, and the figures the README
# quotes from it (the block between its bench/RESULTS.md markers).
#
#   bash bench/run.sh            # everything (about 15 minutes on 2 cores)
#   QUICK=1 bash bench/run.sh    # one run of each, small trees: checks the harness;
#                                # its report goes to $CPBENCH_DIR/quick, bench/ is left alone
#
# Work directory: $CPBENCH_DIR (default /tmp/cpbench, ~6 GB free needed).
# CUDA corpus: $CPCORPUS (default /tmp/cpcorpus), built by
# scripts/cuda-corpus.sh when missing (downloads about 1.4 GB from Debian's
# non-free archive with apt-get; no root needed).
# Needs: go, patchelf (Debian's), python3, objcopy; gnuplot for the plots.
#
# Every measured run starts from the same pristine copy (rm -rf, cp -a, sync,
# outside the timing); the two tools alternate, and which goes first
# alternates too. Page cache is warm for both: nothing is dropped.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
# shellcheck source=bench/corpus-args.sh
. "$HERE/corpus-args.sh"
W=${CPBENCH_DIR:-/tmp/cpbench}
CORPUS=${CPCORPUS:-/tmp/cpcorpus}
PATCHELF=${PATCHELF:-/usr/bin/patchelf}
export PATCHELF
QUICK=${QUICK:-}
if [ -n "$QUICK" ]; then
  RUNS_TREE=1 RUNS_FILE=1 RUNS_SCALE=1 RUNS_SCALE_NIX=1 SCALES="100 200" SCALES_NIX="100 200" RUNS_JOBS=1
else
  RUNS_TREE=${RUNS_TREE:-3}       # the corpus and the many-small tree
  RUNS_FILE=${RUNS_FILE:-5}       # single files
  RUNS_SCALE=${RUNS_SCALE:-3}     # cudapatch at each file count
  RUNS_SCALE_NIX=${RUNS_SCALE_NIX:-1}
  SCALES_NIX=${SCALES_NIX:-500 1000 2000} # the nixpkgs way is linear anyway; 4000 files would cost 3 minutes
  SCALES=${SCALES:-500 1000 2000 4000}
  RUNS_JOBS=${RUNS_JOBS:-3}
fi
BT=$CORPUS/pristine/bintools
TREE=$W/tree
RAW=$W/raw
CP=$W/bin/cudapatch
MEASURE=$W/bin/measure
LONG=$(for i in 1 2 3 4 5 6 7 8 9 10; do printf '/nix/store/%032d-dependency-number-%02d-1.2.3/lib:' "$i" "$i"; done)
LONG=${LONG%:}

log() { printf '%s run.sh: %s\n' "$(date +%T)" "$*" >&2; }

mkdir -p "$W/bin"
rm -rf "$RAW" && mkdir -p "$RAW"
log "building cudapatch and the measuring wrapper"
(cd "$REPO" && go build -o "$CP" ./cmd/cudapatch && go build -o "$MEASURE" bench/measure.go)

# ---- the trees ---------------------------------------------------------
if [ ! -d "$CORPUS/pristine/store" ]; then
  log "building the CUDA corpus in $CORPUS"
  bash "$REPO/scripts/cuda-corpus.sh" "$CORPUS"
fi
SMALL=$W/small/store
[ -n "$QUICK" ] && SMALL=$W/scale-${SCALES##* }/store # the quick check skips the big copy
if [ -z "$QUICK" ] && [ ! -d "$W/small/store" ]; then
  log "copying this machine's ELF files into $W/small"
  rm -rf "$W/small.tmp" && python3 "$HERE/mktree.py" "$W/small.tmp" && mv "$W/small.tmp" "$W/small"
fi
for n in $SCALES; do
  if [ ! -d "$W/scale-$n/store" ]; then
    rm -rf "$W/scale-$n.tmp"
    python3 "$HERE/mktree.py" "$W/scale-$n.tmp" --count "$n" --max-size 1048576
    mv "$W/scale-$n.tmp" "$W/scale-$n"
  fi
done
# Single files: a real small library (zlib) with a non-alloc section of
# zeros appended by objcopy, stored sparse; and the corpus's libcublasLt.
mkdir -p "$W/sizes"
ZLIB=$(readlink -f /usr/lib/x86_64-linux-gnu/libz.so.1)
for spec in 1MB:1000000 10MB:10000000 100MB:100000000 1GiB:1073741824; do
  name=${spec%%:*} size=${spec#*:}
  f=$W/sizes/libz-$name.so
  [ -f "$f" ] && continue
  log "making $f"
  pad=$((size - $(stat -c %s "$ZLIB") - 4096))
  truncate -s "$pad" "$W/sizes/pad"
  objcopy --add-section .bench_pad="$W/sizes/pad" --set-section-flags .bench_pad=noload,readonly \
    "$ZLIB" "$W/sizes/tmp.so"
  cp --sparse=always "$W/sizes/tmp.so" "$f"
  rm -f "$W/sizes/tmp.so" "$W/sizes/pad"
done
LT=$(ls "$CORPUS"/pristine/store/*-libcublas-*/lib/libcublasLt.so.* | head -1)
ln -sf "$LT" "$W/sizes/libcublasLt-real.so"

# ---- helpers -----------------------------------------------------------
restore() { # SRC: a fresh $TREE from a pristine copy, flushed to disk
  rm -rf "$TREE"
  cp -a --sparse=always "$1" "$TREE"
  sync
}
measure() { # CASE TOOL RUN CMD...: one measured run, appended to raw/runs.tsv
  local c=$1 t=$2 r=$3; shift 3
  "$MEASURE" "$RAW/runs.tsv" "$c"$'\t'"$t"$'\t'"$r" -- "$@" >>"$RAW/$c-$t.out" 2>>"$RAW/$c-$t.err" ||
    { log "$c $t run $r failed: see $RAW/$c-$t.err"; tail -5 "$RAW/$c-$t.err" >&2; exit 1; }
}
runpaths() { # OUT: path -> RUNPATH of every file of the plan, as cudapatch print sees them
  # print exits 1 on a file it cannot read (and says why in the JSON): keep going
  { cut -d $'\x1f' -f3 "$RAW/$CASE.plan" | xargs -d '\n' "$CP" print --json || true; } |
    python3 -c '
import json, sys
s, d, i, out = sys.stdin.read(), json.JSONDecoder(), 0, {}
while i < len(s.rstrip()):  # xargs may have run print more than once
    arr, i = d.raw_decode(s, i)
    i += len(s[i:]) - len(s[i:].lstrip())
    out.update({f["path"]: f["info"].get("runpath", f["info"].get("rpath")) if "info" in f
                else "unreadable: " + f.get("error", "?") for f in arr})
print(json.dumps(out))' >"$1"
}
# Tree cases set: CASE, SRC (pristine store), and args() printing cudapatch's
# arguments one per line (paths inside $TREE).
patch_cmd() { # extra flags...: the main job as a Nix build runs it
  local a=(); mapfile -t a < <(args)
  (cd "$TREE" && NIX_BINTOOLS=$BT "$CP" "$@" "${a[@]}")
}
make_plan() {
  restore "$SRC"
  patch_cmd --dry-run --json >"$RAW/$CASE.json" 2>"$RAW/$CASE.plan.err"
  python3 "$HERE/plan.py" <"$RAW/$CASE.json" >"$RAW/$CASE.plan" 2>>"$RAW/$CASE.plan.err"
  log "$CASE: $(tail -1 "$RAW/$CASE.plan.err")"
  printf '%s\t%s\t%s\n' "$CASE" "$(wc -l <"$RAW/$CASE.plan")" "$(cut -d $'\x1f' -f3 "$RAW/$CASE.plan" | xargs -d '\n' stat -c %s | awk '{s += $1} END {print s}')" >>"$RAW/trees.tsv"
}
run_cudapatch() { # RUN [flags...]
  local r=$1; shift
  restore "$SRC"
  local a=(); mapfile -t a < <(args)
  (cd "$TREE" && NIX_BINTOOLS=$BT measure "$CASE" "${TOOL:-cudapatch}" "$r" "$CP" "$@" "${a[@]}")
}
run_nixpkgs() { # RUN
  restore "$SRC"
  measure "$CASE" nixpkgs "$1" bash "$HERE/nixpkgs-way.sh" "$RAW/$CASE.plan"
}
compare_tree() { # RUNS: alternate, check both tools' results once
  local r
  for r in $(seq 1 "$1"); do
    if [ $((r % 2)) = 1 ]; then
      run_cudapatch "$r"
      if [ "$r" = 1 ]; then runpaths "$RAW/$CASE-runpaths-cudapatch.json"; fi
      run_nixpkgs "$r"
      if [ "$r" = 1 ]; then runpaths "$RAW/$CASE-runpaths-nixpkgs.json"; fi
    else
      run_nixpkgs "$r"; run_cudapatch "$r"
    fi
    log "$CASE run $r/$1 done"
  done
}

# ---- machine facts -----------------------------------------------------
{
  echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
  echo "cores=$(nproc)"
  echo "mem=$(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
  echo "kernel=$(uname -sr)"
  echo "os=$(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "fs=$(df -T "$W" | awk 'NR==2 {print $2 " on " $1 " (" $7 ")"}')"
  echo "go=$(go version | cut -d' ' -f3-)"
  echo "patchelf=$("$PATCHELF" --version) ($PATCHELF)"
  echo "commit=$(cd "$REPO" && git rev-parse --short HEAD)$(cd "$REPO" && git diff --quiet HEAD -- cmd rpath go.mod || echo '+dirty')"
  echo "load_start=$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "runs=tree $RUNS_TREE, file $RUNS_FILE, scale $RUNS_SCALE (nixpkgs $RUNS_SCALE_NIX), jobs $RUNS_JOBS"
  echo "long_rpath_len=${#LONG}"
} >"$RAW/machine.env"

# ---- 1. the CUDA corpus ------------------------------------------------
CASE=corpus SRC=$CORPUS/pristine/store
args() { cuda_corpus_args "$TREE"; }
make_plan
compare_tree "$RUNS_TREE"

# ---- 2. many small files -----------------------------------------------
CASE=small SRC=$SMALL
args() { echo --ignore-missing; echo '*'; printf '%s\n' "$TREE"/*; }
make_plan
compare_tree "$RUNS_TREE"
# bytes written per file against its size: one more run, with --json
restore "$SRC"
patch_cmd --json >"$RAW/small-written.json" 2>/dev/null
python3 - "$RAW/small-written.json" >"$RAW/small-written.tsv" <<'EOF'
import json, os, sys
for f in json.load(open(sys.argv[1]))["files"]:
    if f.get("changed"):
        print(os.path.getsize(f["path"]), f.get("bytes_written", 0), f.get("strategy", ""), sep="\t")
EOF
# --jobs 1 against --jobs 2 (cudapatch only)
for r in $(seq 1 "$RUNS_JOBS"); do
  for j in $([ $((r % 2)) = 1 ] && echo "1 2" || echo "2 1"); do
    CASE=jobs SRC=$SMALL TOOL=cudapatch-jobs$j run_cudapatch "$r" --jobs "$j"
  done
done
log "jobs done"

# ---- 3. file count -----------------------------------------------------
args() { echo --ignore-missing; echo '*'; printf '%s\n' "$TREE"/*; }
for n in $SCALES; do
  CASE=scale-$n SRC=$W/scale-$n/store
  make_plan
  for r in $(seq 1 "$RUNS_SCALE"); do
    run_cudapatch "$r"
    if [ "$r" -le "$RUNS_SCALE_NIX" ] && [[ " $SCALES_NIX " == *" $n "* ]]; then run_nixpkgs "$r"; fi
  done
  log "$CASE done"
done

# ---- 4. single files: cudapatch patchelf against patchelf --------------
for f in "$W"/sizes/*.so; do
  CASE=file-$(basename "$f" .so)
  for r in $(seq 1 "$RUNS_FILE"); do
    for t in $([ $((r % 2)) = 1 ] && echo "cudapatch nixpkgs" || echo "nixpkgs cudapatch"); do
      rm -f "$TREE.so"
      cp --sparse=always "$(readlink -f "$f")" "$TREE.so"
      sync
      if [ "$t" = cudapatch ]; then
        measure "$CASE" cudapatch "$r" "$CP" patchelf --set-rpath "$LONG" "$TREE.so"
      else
        measure "$CASE" nixpkgs "$r" "$PATCHELF" --set-rpath "$LONG" "$TREE.so"
      fi
    done
  done
  echo "$CASE"$'\t'"$(stat -c %s "$(readlink -f "$f")")"$'\t'"$(du -k "$(readlink -f "$f")" | cut -f1)" >>"$RAW/sizes.tsv"
  log "$CASE done"
done
rm -rf "$TREE" "$TREE.so"

# ---- 5. go test -bench -------------------------------------------------
log "go test -bench"
(cd "$REPO" && go test -run=- -bench=. -benchmem ./rpath/...) >"$RAW/gobench.txt" 2>&1 || true
PROF_TREE=$W/scale-2000/store
[ -d "$PROF_TREE" ] || PROF_TREE=$W/scale-${SCALES##* }/store
echo "prof_tree=\$CPBENCH_DIR/${PROF_TREE#"$W"/}" >>"$RAW/machine.env"   # no machine path in the report
(cd "$REPO" && CUDAPATCH_BENCH_TREE=$PROF_TREE go test ./rpath/patch -run=- \
  -bench=PatchTree -benchtime=3x -cpuprofile="$RAW/cpu.pprof" -o "$RAW/rpath.test") >"$RAW/gobench-tree.txt" 2>&1 || true
go tool pprof -top -nodecount=30 "$RAW/rpath.test" "$RAW/cpu.pprof" >"$RAW/pprof-top.txt" 2>/dev/null || true
go tool pprof -top -cum -nodecount=30 "$RAW/rpath.test" "$RAW/cpu.pprof" >"$RAW/pprof-cum.txt" 2>/dev/null || true

echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$RAW/machine.env"
if [ -n "$QUICK" ]; then
  log "writing $W/quick/RESULTS.md (a QUICK run does not replace bench/RESULTS.md)"
  mkdir -p "$W/quick"
  python3 "$HERE/report.py" "$RAW" "$HERE" "$W/quick"
else
  log "writing bench/RESULTS.md and the README's figures"
  python3 "$HERE/report.py" "$RAW" "$HERE"
fi

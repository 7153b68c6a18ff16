#!/usr/bin/env bash
# torch-ab.sh BEFORE AFTER [RUNS] [WORKDIR]: the main job of two cudapatch
# builds on the PyTorch tree of scripts/gpu-proof.sh step 4 (torch, nvidia-*,
# triton from the machine's site-packages, every RPATH removed), alternating
# BEFORE and AFTER on a fresh copy each run (default 7 runs each). Prints
# each run's wall time and peak RSS, then the medians and what the last run
# of each wrote (which must be the same files). For the GPU machine; checks
# nothing about the GPU (gpu-proof.sh does). Findings: docs/gpu-proof.md and
# bench/HISTORY.md (a dated summary per run; the output is not committed).
set -euo pipefail
BEFORE=$(readlink -f "$1") AFTER=$(readlink -f "$2") RUNS=${3:-7} W=${4:-/tmp/torch-ab}
unset LD_LIBRARY_PATH
rm -rf "${W:?}" && mkdir -p "$W/pristine"
SITE=$(python3 -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
PY=ffffffffffffffffffffffffffffffff-python-torch/site-packages
mkdir -p "$W/pristine/$PY"
cp -a "$SITE/torch" "$W/pristine/$PY/"
for d in "$SITE"/nvidia "$SITE"/triton "$SITE"/torchgen "$SITE"/functorch; do [ -e "$d" ] && cp -a "$d" "$W/pristine/$PY/"; done
mapfile -t sos < <(find "$W/pristine/$PY" -name '*.so*' -type f)
for f in "${sos[@]}"; do "$AFTER" patchelf --remove-rpath "$f" 2>/dev/null || true; done
echo "torch $(python3 -c 'import torch; print(torch.__version__)'): ${#sos[@]} shared objects, $(du -sh "$W/pristine" | cut -f1); $(nproc) CPUs"

run() { # run NAME BIN
	rm -rf "${W:?}/copy" && cp -a "$W/pristine" "$W/copy"
	local searches=() d
	while read -r d; do searches+=(--search "$d"); done < <(find "$W/copy/$PY" -name '*.so*' -type f -printf '%h\n' | sort -u)
	mkdir -p "$W/copy/driver-link"
	local s e
	s=$(date +%s%N)
	/usr/bin/time -f %M -o "$W/rss" "$2" "${searches[@]}" --driver-link "$W/copy/driver-link" --libc /lib/x86_64-linux-gnu \
		--ignore-missing 'libpython*' --ignore-missing '*' "$W/copy/$PY" >"$W/$1.out"
	e=$(date +%s%N)
	echo "$1 $(((e - s) / 1000000)) $(cat "$W/rss")"
}
for _ in $(seq "$RUNS"); do
	run before "$BEFORE"
	run after "$AFTER"
done | tee "$W/runs" | awk '{ print "  " $1 ": " $2 " ms, peak RSS " $3 " KiB" }'
for b in before after; do
	awk -v b=$b '$1 == b { print $2 }' "$W/runs" | sort -n | awk -v b=$b '{ t[NR] = $1 } END { print b ": median " t[int((NR + 1) / 2)] " ms wall" }'
	awk -v b=$b '$1 == b { print $3 }' "$W/runs" | sort -n | awk -v b=$b '{ r[NR] = $1 } END { print b ": median peak RSS " r[int((NR + 1) / 2)] " KiB" }'
done
echo "files written, last run: before $(grep -c . "$W/before.out" || true), after $(grep -c . "$W/after.out" || true)"

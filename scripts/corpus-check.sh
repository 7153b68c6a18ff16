#!/usr/bin/env bash
# Issue 2's real-library check: every ELF file of the CUDA corpus
# (scripts/cuda-corpus.sh) gets a long RUNPATH, and an interpreter
# where it has one, through `cudapatch patchelf`; then `ld.so --verify` and
# `ld.so --list` must accept each as they accepted the original, and the
# engine's verifier must find nothing. Usage: corpus-check.sh [CORPUS_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
C=${1:-/tmp/cpcorpus}
[ -d "$C/pristine/store" ] || bash scripts/cuda-corpus.sh "$C" >/dev/null
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
go build -o "$W/cudapatch" ./cmd/cudapatch
cp -a "$C/pristine/store" "$W/store"
LD=/lib64/ld-linux-x86-64.so.2
long=$(printf '/nix/store/%032d-cuda-redist-%02d/lib:' $(seq 1 8 | sed 's/.*/0 &/'))'$ORIGIN' # $ORIGIN last: the libraries find their siblings as shipped
n=0 bad=0
while read -r f; do
	head -c4 "$f" | grep -q ELF || continue
	n=$((n + 1))
	rel=${f#"$W"/store/}
	before_v=$($LD --verify "$C/pristine/store/$rel" >/dev/null 2>&1; echo $?)
	before_l=$(env -u LD_LIBRARY_PATH $LD --list "$C/pristine/store/$rel" >/dev/null 2>&1; echo $?)
	args=(--set-rpath "$long" --build-resolution-cache)
	if [ -n "$("$W/cudapatch" patchelf --print-interpreter "$f" 2>/dev/null)" ]; then args+=(--set-interpreter $LD); fi
	if ! "$W/cudapatch" patchelf "${args[@]}" "$f"; then echo "FAIL edit $rel"; bad=$((bad + 1)); continue; fi
	v=$($LD --verify "$f" >/dev/null 2>&1; echo $?)
	l=$(env -u LD_LIBRARY_PATH $LD --list "$f" >/dev/null 2>&1; echo $?)
	ver=$("$W/cudapatch" verify "$f" | grep -vc ': ok$')
	got=$("$W/cudapatch" patchelf --print-rpath "$f")
	status=ok
	if [ "$v" != "$before_v" ] || [ "$l" != "$before_l" ] || [ "$ver" != 0 ] || [ "$got" != "$long" ]; then status=FAIL; bad=$((bad + 1)); fi
	printf '%-4s verify %s->%s list %s->%s %10d bytes %s\n' "$status" "$before_v" "$v" "$before_l" "$l" "$(stat -c %s "$f")" "$rel"
done < <(find "$W/store" -type f | sort)
echo "$n ELF files, $bad failures (RUNPATH of ${#long} bytes)"
exit $((bad > 0))

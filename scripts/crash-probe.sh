#!/usr/bin/env bash
# crash-probe.sh CUDAPATCH [LIB]: issue 31's crash probe. The main job
# patches one library whose RUNPATH holds a store path, killed by strace's
# fault injection on entry to its N-th pwrite64 (every N until it runs to
# the end) and to its ftruncate; then runs again. Each line says whether
# the killed file loads, and whether the next run leaves the bytes one
# clean run leaves (its size, and whether the old store path stayed).
set -euo pipefail
cudapatch=$(readlink -f "$1")
lib=$(readlink -f "${2:-/usr/lib/x86_64-linux-gnu/libgmp.so.10}")
old=/nix/store/0123456789abcdfghijklmnpqrsvwxyz-OLDMARKER/lib
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
name=$(basename "$lib")
mkdir -p "$work/tree/lib"
file=$work/tree/lib/$name
cp "$lib" "$work/orig"
"$cudapatch" patchelf --set-rpath "$old" "$work/orig"
job() { "$cudapatch" --jobs 1 --libc "$(dirname "$lib")" "$work/tree" >/dev/null 2>&1; }
loads() { python3 -c 'import ctypes, sys; ctypes.CDLL(sys.argv[1])' "$1" 2>/dev/null && echo loads || echo "does not load"; }
cp "$work/orig" "$file"
job
cp "$file" "$work/clean"
printf 'original %d bytes, clean run %d bytes\n' "$(stat -c %s "$work/orig")" "$(stat -c %s "$work/clean")"
probe() { # $1: strace inject spec; returns 1 when the job was not killed
	cp "$work/orig" "$file"
	# A subshell, so that bash does not report the kill.
	if (strace -f -qq -o /dev/null -e trace=pwrite64,ftruncate -e "inject=$1" \
		"$cudapatch" --jobs 1 --libc "$(dirname "$lib")" "$work/tree" >/dev/null 2>&1); then
		return 1
	fi
	local killed state
	killed=$(stat -c %s "$file")
	state=$(loads "$file")
	job || true
	if cmp -s "$file" "$work/clean"; then
		printf '%s: killed file %d bytes, %s; next run: identical to a clean run\n' "$1" "$killed" "$state"
	else
		local stale=no
		grep -qa OLDMARKER "$file" && stale=yes
		printf '%s: killed file %d bytes, %s; next run: DIFFERS (%d bytes, old store path left: %s)\n' \
			"$1" "$killed" "$state" "$(stat -c %s "$file")" "$stale"
	fi
}
n=1
while probe "pwrite64:signal=KILL:when=$n"; do n=$((n + 1)); done
probe "ftruncate:signal=KILL:when=1" || echo "ftruncate: not called"

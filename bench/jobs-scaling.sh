#!/usr/bin/env bash
# How the main job uses the cores it is given: patch a store-like tree made of
# this machine's ELF files (/usr/lib/x86_64-linux-gnu and /usr/bin, one level)
# with --jobs 1, 2, 4, …, up to nproc, from a fresh copy each time, median of
# RUNS. Needs only a cudapatch binary, so it runs on machines without Go:
#   bench/jobs-scaling.sh CUDAPATCH [WORKDIR] [RUNS]
set -euo pipefail
CP=$(readlink -f "$1")
W=${2:-/tmp/jobs-scaling}
RUNS=${3:-3}
rm -rf "$W" && mkdir -p "$W/pristine/store/00000000000000000000000000000000-usr-lib/lib" "$W/pristine/store/11111111111111111111111111111111-usr-bin/bin"
copy() { # copy the ELF regular files of $1 (one level) to $2
	find "$1" -maxdepth 1 -type f -size +0 -print0 | while IFS= read -r -d '' f; do
		[ "$(head -c4 "$f" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ] && cp "$f" "$2/" 2>/dev/null || true
	done
}
copy /usr/lib/x86_64-linux-gnu "$W/pristine/store/00000000000000000000000000000000-usr-lib/lib"
copy /usr/bin "$W/pristine/store/11111111111111111111111111111111-usr-bin/bin"
files=$(find "$W/pristine/store" -type f | wc -l)
size=$(du -sh "$W/pristine/store" | cut -f1)
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "tree: $files ELF files, $size"
echo "| jobs | median wall (s) | speed-up vs 1 |"
echo "| ---: | ---: | ---: |"
base=""
for j in 1 2 4 8 16 32 64; do
	[ "$j" -le "$(nproc)" ] || break
	ts=()
	for _ in $(seq "$RUNS"); do
		rm -rf "$W/work" && cp -a "$W/pristine" "$W/work" && sync
		s=$(date +%s%N)
		"$CP" --jobs "$j" --driver-link-for all --ignore-missing '*' --libc /lib/x86_64-linux-gnu "$W/work/store" >/dev/null 2>"$W/err" || { cat "$W/err"; exit 1; }
		e=$(date +%s%N)
		ts+=($(((e - s) / 1000000)))
	done
	med=$(printf '%s\n' "${ts[@]}" | sort -n | sed -n "$(((RUNS + 1) / 2))p")
	[ -n "$base" ] || base=$med
	printf '| %d | %d.%03d | %s× |\n' "$j" $((med / 1000)) $((med % 1000)) "$(awk -v a="$base" -v b="$med" 'BEGIN{printf "%.2f", a/b}')"
done
tail -1 "$W/err"

#!/usr/bin/env bash
# How the main job uses the cores it is given (issue 14: at least 8x from 1
# to 16 jobs on a tree of 10,000 small files).
#
#   bash bench/jobs-scaling.sh CUDAPATCH [WORKDIR] [RUNS]
#
# Needs only a cudapatch binary, bash, coreutils and python3, so it runs on
# machines without Go. Cross-build it with
#   CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -buildvcs=true -o cudapatch ./cmd/cudapatch
# (/cudapatch is gitignored: carry it).
#
# The tree: COUNT (default 10000) ELF files of at most 1 MiB from this
# machine's /usr/lib/x86_64-linux-gnu and /usr/bin, made by bench/mktree.py
# (past the pool's size the pool repeats in further store paths);
# TREE=usr takes every ELF file of those two directories instead (one
# level), as the first version of this script did.
#
# For --jobs 1, 2, 4, ... up to nproc: RUNS fresh copies (default 3), the
# median wall and user+sys time, the speed-up against --jobs 1, and the
# CPU time against --jobs 1 (where it grows, the jobs contend: locks, the
# collector, the kernel; where it stays and the wall does not fall, they
# wait). Then, at the most jobs, one run each that tells the costs apart:
# a dry run (no writes), the same with the garbage collector nearly off
# (GOGC=off GOMEMLIMIT=2GiB), the no-op re-run on the patched tree, print
# over every file, and how many collections a run makes at 1 job and at
# the most jobs. The table is made twice: with cudapatch's collector
# settings and with those it had before (GOGC=100 GOMEMLIMIT=64MiB).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CP=$(readlink -f "$1")
W=${2:-/tmp/jobs-scaling}
RUNS=${3:-3}
COUNT=${COUNT:-10000}
MAXJ=$(nproc)
ARGS=(--driver-link-for all --ignore-missing '*' --libc /lib/x86_64-linux-gnu)
rm -rf "$W" && mkdir -p "$W"
# What the run copies is gigabytes, often on tmpfs: removed at exit
# (KEEP=1 keeps it), so that it does not starve the next run of memory.
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "${W:?}"' EXIT
if [ "${TREE:-}" = usr ]; then
	mkdir -p "$W/pristine/store/00000000000000000000000000000000-usr-lib/lib" "$W/pristine/store/11111111111111111111111111111111-usr-bin/bin"
	copy() { # copy the ELF regular files of $1 (one level) to $2
		find "$1" -maxdepth 1 -type f -size +0 -print0 | while IFS= read -r -d '' f; do
			if [ "$(head -c4 "$f" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; then cp "$f" "$2/" 2>/dev/null || true; fi
		done
	}
	copy /usr/lib/x86_64-linux-gnu "$W/pristine/store/00000000000000000000000000000000-usr-lib/lib"
	copy /usr/bin "$W/pristine/store/11111111111111111111111111111111-usr-bin/bin"
else
	python3 "$HERE/mktree.py" "$W/pristine" --count "$COUNT" --max-size 1048576
fi
files=$(find "$W/pristine/store" -type f | wc -l)
size=$(du -sh "$W/pristine/store" | cut -f1)
fresh() { rm -rf "$W/copy" && cp -a "$W/pristine" "$W/copy" && sync; }

# one [ENV=...] ARGS...: one run of cudapatch on a fresh copy (unless
# NOFRESH is set); prints "wall_ms cpu_ms"
one() {
	[ -n "${NOFRESH:-}" ] || fresh
	local out
	out=$({ TIMEFORMAT='%R %U %S'; time env "$@" >/dev/null 2>"$W/err"; } 2>&1) || {
		cat "$W/err" >&2
		exit 1
	}
	awk '{ printf "%d %d\n", $1 * 1000, ($2 + $3) * 1000 }' <<<"$out"
}
median() { sort -n | sed -n "$(((RUNS + 1) / 2))p"; }
ms() { awk -v m="$1" 'BEGIN { printf "%d.%03d", m / 1000, m % 1000 }'; }

echo "machine: $MAXJ CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(free -g | awk '/Mem:/ { print $2 }') GiB, kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "work dir: $(df -T "$W" | awk 'NR == 2 { print $2 " on " $1 }')"
echo "tree: $files ELF files, $size; cudapatch ${ARGS[*]} (stdout not a terminal: no progress bar); $RUNS runs each, median"
echo
# table ENV...: the scaling table, cudapatch run under env ENV...
table() {
	echo "| jobs | wall (s) | speed-up vs 1 | user+sys (s) | CPU vs 1 |"
	echo "| ---: | ---: | ---: | ---: | ---: |"
	local bw="" bc="" j rows w c
	for j in 1 2 4 8 16 32 64 128; do
		[ "$j" -le "$MAXJ" ] || break
		rows=()
		for _ in $(seq "$RUNS"); do rows+=("$(one "$@" "$CP" --jobs "$j" "${ARGS[@]}" "$W/copy/store")"); done
		w=$(printf '%s\n' "${rows[@]}" | cut -d' ' -f1 | median)
		c=$(printf '%s\n' "${rows[@]}" | cut -d' ' -f2 | median)
		[ -n "$bw" ] || bw=$w bc=$c
		printf '| %d | %s | **%s×** | %s | %s× |\n' "$j" "$(ms "$w")" "$(awk -v a="$bw" -v b="$w" 'BEGIN { printf "%.2f", a / b }')" \
			"$(ms "$c")" "$(awk -v a="$c" -v b="$bc" 'BEGIN { printf "%.2f", a / b }')"
	done
}
echo "cudapatch's own garbage-collector settings (GOGC=400, GOMEMLIMIT=56MiB):"
echo
table
echo
echo "Go's default collector pacing with the old limit (GOGC=100 GOMEMLIMIT=64MiB, the settings before issue 14):"
echo
table GOGC=100 GOMEMLIMIT=64MiB
echo
tail -1 "$W/err"
echo
echo "At --jobs $MAXJ, one run each:"
echo
echo "| run | wall (s) | user+sys (s) |"
echo "| --- | ---: | ---: |"
row() { printf '| %s | %s | %s |\n' "$1" "$(ms "${2% *}")" "$(ms "${2#* }")"; }
row "full patch" "$(one "$CP" --jobs "$MAXJ" "${ARGS[@]}" "$W/copy/store")"
row "no-op re-run of the patched tree" "$(NOFRESH=1 one "$CP" --jobs "$MAXJ" "${ARGS[@]}" "$W/copy/store")"
row "dry run (decide only, nothing written)" "$(one "$CP" --jobs "$MAXJ" --dry-run "${ARGS[@]}" "$W/copy/store")"
row "full patch, GOGC=off GOMEMLIMIT=2GiB" "$(one GOGC=off GOMEMLIMIT=2GiB "$CP" --jobs "$MAXJ" "${ARGS[@]}" "$W/copy/store")"
row "full patch, --jobs 1, GOGC=off GOMEMLIMIT=2GiB" "$(one GOGC=off GOMEMLIMIT=2GiB "$CP" --jobs 1 "${ARGS[@]}" "$W/copy/store")"
mapfile -t FILES < <(find "$W/copy/store" -type f | sort)
row "print over every file (one process, one file at a time)" "$(NOFRESH=1 one "$CP" print "${FILES[@]}")"
for j in 1 "$MAXJ"; do
	fresh
	GODEBUG=gctrace=1 "$CP" --jobs "$j" "${ARGS[@]}" "$W/copy/store" >/dev/null 2>"$W/gc" || true
	echo "garbage collections at --jobs $j: $(grep -c '^gc ' "$W/gc"); last: $(grep '^gc ' "$W/gc" | tail -1)"
done

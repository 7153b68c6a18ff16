#!/usr/bin/env bash
# bench/small-files.sh: the per-file cost of the main job on many small
# files, against the floor of reading them (issue 14).
#
#   bash bench/small-files.sh CUDAPATCH [WORKDIR] [RUNS]
#
# The tree: this machine's ELF files of /usr/lib/x86_64-linux-gnu and
# /usr/bin (one level, regular files), as bench/jobs-scaling.sh makes it.
# RUNS times (default 5), median of each, wall and user+sys CPU:
#   print  `cudapatch print` over every file (one process reading every
#          file's headers: the floor);
#   full   the main job on a fresh copy (every dynamic file rewritten);
#   noop   the main job again on the patched copy (nothing to do).
# Targets: full within 3x of print, noop within 1.5x. With strace (and
# python3), one more full run and one more noop run are traced and every
# system call charged to the file it was made on (bench/syscalls.py): read
# calls per file (target at most 8) and write-side calls per written file
# (target at most 6). Needs only the binary, bash and coreutils otherwise,
# so it runs on machines without Go (strace-less ones skip the counts).
# BEFORE=BINARY measures another build the same way in the same run (the
# runs alternate), BEFORE_DESC says what it is; OUT=FILE also writes the
# findings there.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CP=$(readlink -f "$1")
W=${2:-/tmp/small-files}
RUNS=${3:-5}
JOBS=${JOBS:-$(nproc)}
[ -z "${OUT:-}" ] || exec > >(tee "$OUT")
BUILDS=("$CP")
[ -z "${BEFORE:-}" ] || BUILDS+=("$(readlink -f "$BEFORE")")
name() { if [ "$1" = "$CP" ]; then echo after; else echo before; fi; }
ARGS=(--jobs "$JOBS" --driver-link-for all --ignore-missing '*' --libc /lib/x86_64-linux-gnu)
rm -rf "$W" && mkdir -p "$W/pristine/store/00000000000000000000000000000000-usr-lib/lib" "$W/pristine/store/11111111111111111111111111111111-usr-bin/bin"
# What the run copies is gigabytes, often on tmpfs: removed at exit
# (KEEP=1 keeps it), so that it does not starve the next run of memory.
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "${W:?}"' EXIT
copy() { # copy the ELF regular files of $1 (one level) to $2
	find "$1" -maxdepth 1 -type f -size +0 -print0 | while IFS= read -r -d '' f; do
		if [ "$(head -c4 "$f" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; then cp "$f" "$2/" 2>/dev/null || true; fi
	done
}
copy /usr/lib/x86_64-linux-gnu "$W/pristine/store/00000000000000000000000000000000-usr-lib/lib"
copy /usr/bin "$W/pristine/store/11111111111111111111111111111111-usr-bin/bin"
fresh() { rm -rf "$W/copy" && cp -a "$W/pristine" "$W/copy" && sync; }
fresh
mapfile -t FILES < <(find "$W/copy" -type f | sort)
echo "# Small files: the main job against reading the files"
echo
echo "Written by \`bash bench/small-files.sh\` at commit $(git -C "$HERE/.." rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u '+%Y-%m-%d %H:%M UTC')."
[ -z "${BEFORE:-}" ] || echo "The *before* rows: \`BEFORE=$BEFORE\` (${BEFORE_DESC:-another build})."
echo
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "tree: ${#FILES[@]} ELF files, $(du -sh "$W/pristine/store" | cut -f1); cudapatch ${ARGS[*]}; $RUNS runs, median"
echo

# run NAME CMD...: appends "wall user+sys" (ms) of one run to $W/NAME
run() {
	local name=$1 out
	shift
	out=$({ TIMEFORMAT='%R %U %S'; time "$@" >/dev/null 2>"$W/err"; } 2>&1) || {
		cat "$W/err" >&2
		exit 1
	}
	awk '{ printf "%d %d\n", $1 * 1000, ($2 + $3) * 1000 }' <<<"$out" >>"$W/$name"
}
rm -f "$W"/print-* "$W"/full-* "$W"/noop-*
for _ in $(seq "$RUNS"); do
	for b in "${BUILDS[@]}"; do
		n=$(name "$b")
		fresh
		run "print-$n" "$b" print "${FILES[@]}"
		run "full-$n" "$b" "${ARGS[@]}" "$W/copy/store"
		run "noop-$n" "$b" "${ARGS[@]}" "$W/copy/store"
	done
done
med() { cut -d' ' -f"$2" "$W/$1" | sort -n | sed -n "$(((RUNS + 1) / 2))p"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo "| build | run | wall (ms) | user+sys (ms) | wall / print | CPU / print | target |"
echo "| --- | --- | ---: | ---: | ---: | ---: | --- |"
for b in "${BUILDS[@]}"; do
	n=$(name "$b")
	pw=$(med "print-$n" 1) pc=$(med "print-$n" 2)
	echo "| $n | print | $pw | $pc | 1 | 1 | |"
	for r in full:3 noop:1.5; do
		k=${r%%:*}
		w=$(med "$k-$n" 1) c=$(med "$k-$n" 2)
		echo "| $n | $k | $w | $c | **$(ratio "$w" "$pw")×** | $(ratio "$c" "$pc")× | ≤ ${r#*:}× wall |"
	done
done
echo

if command -v strace >/dev/null && command -v python3 >/dev/null; then
	calls=openat,pread64,pwrite64,read,write,close,ftruncate,fsync,fdatasync,fchmod
	T=(strace -f -qq -e "trace=$calls")
	for b in "${BUILDS[@]}"; do
		n=$(name "$b")
		fresh
		"${T[@]}" -o "$W/full.trace" "$b" "${ARGS[@]}" "$W/copy/store" >/dev/null 2>&1
		"${T[@]}" -o "$W/noop.trace" "$b" "${ARGS[@]}" "$W/copy/store" >/dev/null 2>&1
		echo "System calls per file ($n), full run (strace; target: at most 8 read calls per file, 6 write-side calls per written file):"
		echo '```'
		python3 "$HERE/syscalls.py" "$W/full.trace" "$W/copy"
		echo '```'
		echo "Nothing to do ($n; the patched tree again):"
		echo '```'
		python3 "$HERE/syscalls.py" "$W/noop.trace" "$W/copy"
		echo '```'
	done
else
	echo "(no strace or python3 here: system call counts skipped)"
fi

# The patched tree must still load: the host's ld.so maps every x86_64
# file of it (scripts/maps-on-host.sh; a refused file fails the script).
fresh
"$CP" "${ARGS[@]}" "$W/copy/store" >/dev/null 2>&1 || true
echo "Loader check of the patched tree ($(name "$CP")):"
echo '```'
bash "$HERE/../scripts/maps-on-host.sh" "$W/copy/store"
echo '```'

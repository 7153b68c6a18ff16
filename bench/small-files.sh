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
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CP=$(readlink -f "$1")
W=${2:-/tmp/small-files}
RUNS=${3:-5}
JOBS=${JOBS:-$(nproc)}
ARGS=(--jobs "$JOBS" --driver-link-for all --ignore-missing '*' --libc /lib/x86_64-linux-gnu)
rm -rf "$W" && mkdir -p "$W/pristine/store/00000000000000000000000000000000-usr-lib/lib" "$W/pristine/store/11111111111111111111111111111111-usr-bin/bin"
copy() { # copy the ELF regular files of $1 (one level) to $2
	find "$1" -maxdepth 1 -type f -size +0 -print0 | while IFS= read -r -d '' f; do
		if [ "$(head -c4 "$f" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; then cp "$f" "$2/" 2>/dev/null || true; fi
	done
}
copy /usr/lib/x86_64-linux-gnu "$W/pristine/store/00000000000000000000000000000000-usr-lib/lib"
copy /usr/bin "$W/pristine/store/11111111111111111111111111111111-usr-bin/bin"
fresh() { rm -rf "$W/work" && cp -a "$W/pristine" "$W/work" && sync; }
fresh
mapfile -t FILES < <(find "$W/work" -type f | sort)
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
rm -f "$W/print" "$W/full" "$W/noop"
for _ in $(seq "$RUNS"); do
	fresh
	run print "$CP" print "${FILES[@]}"
	run full "$CP" "${ARGS[@]}" "$W/work/store"
	run noop "$CP" "${ARGS[@]}" "$W/work/store"
done
med() { cut -d' ' -f"$2" "$W/$1" | sort -n | sed -n "$(((RUNS + 1) / 2))p"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
pw=$(med print 1) pc=$(med print 2)
echo "| run | wall (ms) | user+sys (ms) | wall / print | CPU / print | target |"
echo "| --- | ---: | ---: | ---: | ---: | --- |"
echo "| print | $pw | $pc | 1 | 1 | |"
for r in full:3 noop:1.5; do
	n=${r%%:*}
	w=$(med "$n" 1) c=$(med "$n" 2)
	echo "| $n | $w | $c | **$(ratio "$w" "$pw")×** | $(ratio "$c" "$pc")× | ≤ ${r#*:}× wall |"
done
echo

if command -v strace >/dev/null && command -v python3 >/dev/null; then
	fresh
	calls=openat,pread64,pwrite64,read,write,close,ftruncate,fsync,fdatasync,fchmod
	T=(strace -f -qq -e "trace=$calls")
	"${T[@]}" -o "$W/full.trace" "$CP" "${ARGS[@]}" "$W/work/store" >/dev/null 2>&1
	"${T[@]}" -o "$W/noop.trace" "$CP" "${ARGS[@]}" "$W/work/store" >/dev/null 2>&1
	echo "System calls per file, full run (strace; target: at most 8 read calls per file, 6 write-side calls per written file):"
	echo '```'
	python3 "$HERE/syscalls.py" "$W/full.trace" "$W/work"
	echo '```'
	echo "Nothing to do (the patched tree again):"
	echo '```'
	python3 "$HERE/syscalls.py" "$W/noop.trace" "$W/work"
	echo '```'
else
	echo "(no strace or python3 here: system call counts skipped)"
fi

#!/usr/bin/env bash
# How the Go heap's limits trade peak RSS for --jobs scaling (issue 14).
#
#   bash bench/jobs-memory.sh CUDAPATCH [WORKDIR] [RUNS]
#
# The tree: COUNT (default 10000) small ELF files (bench/mktree.py). For
# each collector setting (SETTINGS, default below; "-" is cudapatch's own)
# and for --jobs 1 and --jobs $(nproc): RUNS fresh copies (default 3), the
# median wall and user+sys time and the largest peak RSS (getrusage of the
# child), and the speed-up from 1 job. Then print over every file, the
# floor. Needs only the binary, bash, coreutils and python3.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CP=$(readlink -f "$1")
W=${2:-/tmp/jobs-memory}
RUNS=${3:-3}
COUNT=${COUNT:-10000}
MAXJ=$(nproc)
ARGS=(--driver-link-for all --ignore-missing '*' --libc /lib/x86_64-linux-gnu)
read -r -a SETTINGS <<<"${SETTINGS:-- GOGC=100,GOMEMLIMIT=64MiB GOMEMLIMIT=128MiB GOMEMLIMIT=256MiB GOGC=off,GOMEMLIMIT=4GiB}"
rm -rf "$W" && mkdir -p "$W"
# What the run copies is gigabytes, often on tmpfs: removed at exit
# (KEEP=1 keeps it), so that it does not starve the next run of memory.
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "${W:?}"' EXIT
python3 "$HERE/mktree.py" "$W/pristine" --count "$COUNT" --max-size 1048576 >&2
fresh() { rm -rf "$W/copy" && cp -a "$W/pristine" "$W/copy" && sync; }
# one ENV CMD...: "wall_ms cpu_ms maxrss_kib" of one run (ENV: a,b,c or -)
one() {
	local env=$1
	shift
	python3 - "$env" "$@" <<'PY'
import os, resource, subprocess, sys, time
env = dict(os.environ)
if sys.argv[1] != "-":
    for kv in sys.argv[1].split(","):
        k, v = kv.split("=", 1)
        env[k] = v
t = time.monotonic()
r = subprocess.run(sys.argv[2:], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
w = time.monotonic() - t
if r.returncode not in (0,):
    sys.stderr.write(r.stderr.decode()[-2000:])
    sys.exit(1)
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print(int(w * 1000), int((u.ru_utime + u.ru_stime) * 1000), u.ru_maxrss)
PY
}
median() { sort -n | sed -n "$(((RUNS + 1) / 2))p"; }
echo "machine: $MAXJ CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "tree: $(find "$W/pristine/store" -type f | wc -l) files, $(du -sh "$W/pristine/store" | cut -f1); $RUNS runs each; $("$CP" --version | head -1)"
echo
echo "| setting | jobs | wall (ms) | user+sys (ms) | peak RSS (MiB) | speed-up vs 1 job |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for s in "${SETTINGS[@]}"; do
	base=""
	for j in 1 "$MAXJ"; do
		rows=()
		for _ in $(seq "$RUNS"); do
			fresh
			rows+=("$(one "$s" "$CP" --jobs "$j" "${ARGS[@]}" "$W/copy/store")")
		done
		w=$(printf '%s\n' "${rows[@]}" | cut -d' ' -f1 | median)
		c=$(printf '%s\n' "${rows[@]}" | cut -d' ' -f2 | median)
		m=$(printf '%s\n' "${rows[@]}" | cut -d' ' -f3 | sort -n | tail -1)
		[ -n "$base" ] || base=$w
		printf '| %s | %d | %d | %d | %.1f | %.2f× |\n' "$( [ "$s" = - ] && echo "cudapatch's own" || echo "$s")" "$j" "$w" "$c" "$(awk -v k="$m" 'BEGIN{print k/1024}')" "$(awk -v a="$base" -v b="$w" 'BEGIN{print a/b}')"
	done
done
mapfile -t FILES < <(find "$W/copy/store" -type f | sort)
echo
echo "print over every file (one process): $(one - "$CP" print "${FILES[@]}" | awk '{print $1 " ms wall, " $2 " ms CPU"}')"

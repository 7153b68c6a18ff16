# shellcheck shell=bash
# A/B helpers for measuring a tree with its resolution-cache notes on and off
# (sourced by bench/ldcache-loader.sh and gpu-ldcache.sh). The notes are
# switched in place by ldcache-toggle.py, so both variants are the same files
# on the same disk blocks; "off" is a note type the loader does not know,
# which it treats exactly as no note (proof.sh shows the probes are the same).
#
# The caller sets AB_LIST (a file naming the ELF files whose notes switch)
# and AB_DIR (a scratch directory). Each function prints one line per
# variant, "LABEL note=on|off key=value...", easy to grep into docs.
AB_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

ab_toggle() { xargs -d '\n' -a "$AB_LIST" python3 "$AB_HERE/ldcache-toggle.py" "$1"; }

# ab_lddebug LABEL CMD...: loader probes counted from LD_DEBUG=libs.
ab_lddebug() {
	local label=$1 v
	shift
	for v in on off; do
		ab_toggle "$v"
		rm -rf "${AB_DIR:?}/lddebug" && mkdir -p "$AB_DIR/lddebug"
		LD_DEBUG=libs LD_DEBUG_OUTPUT="$AB_DIR/lddebug/out" "$@" >/dev/null 2>&1
		echo "$label note=$v rc=$? $(python3 "$AB_HERE/lddebug-count.py" "$AB_DIR"/lddebug/out.*)"
	done
	ab_toggle on
}

# ab_strace LABEL CMD...: failed file-name system calls (all processes).
ab_strace() {
	local label=$1 v f
	shift
	command -v strace >/dev/null || { echo "$label: no strace on this machine"; return; }
	for v in on off; do
		ab_toggle "$v"
		f=$AB_DIR/strace.$v
		strace -f -qq -e trace=open,openat,stat,lstat,newfstatat,statx,access,faccessat,faccessat2 -o "$f" "$@" >/dev/null 2>&1
		echo "$label note=$v failed=$(grep -c ' = -1 E' "$f") $(grep ' = -1 E' "$f" |
			sed -n 's/^[0-9]* *\([a-z0-9_]*\)(.*= -1 \(E[A-Z]*\).*/\1:\2/p' | sort | uniq -c |
			awk '{printf "%s=%s ", $2, $1}')total_calls=$(grep -c . "$f")"
	done
	ab_toggle on
}

# ab_time LABEL RUNS CMD...: wall time of CMD, note on and off interleaved
# (on,off then off,on, ...) after one warm-up run of each; prints median,
# mean, min and max in ms, and the median ratio.
ab_time() {
	local label=$1 runs=$2 i v t0 t1 order
	shift 2
	: >"$AB_DIR/time.on"
	: >"$AB_DIR/time.off"
	for v in on off; do ab_toggle "$v"; "$@" >/dev/null 2>&1; done
	for ((i = 0; i < runs; i++)); do
		order="on off"
		((i % 2)) && order="off on"
		for v in $order; do
			ab_toggle "$v"
			t0=$EPOCHREALTIME
			"$@" >/dev/null 2>&1
			t1=$EPOCHREALTIME
			echo "$t0 $t1" | awk '{printf "%.3f\n", ($2 - $1) * 1000}' >>"$AB_DIR/time.$v"
		done
	done
	ab_toggle on
	python3 - "$label" "$AB_DIR/time.on" "$AB_DIR/time.off" <<'EOF'
import statistics, sys
label, res = sys.argv[1], {}
for v, path in (("on", sys.argv[2]), ("off", sys.argv[3])):
    t = [float(x) for x in open(path)]
    res[v] = statistics.median(t)
    print(f"{label} note={v} runs={len(t)} median_ms={res[v]:.2f} mean_ms={statistics.mean(t):.2f} "
          f"min_ms={min(t):.2f} max_ms={max(t):.2f}")
print(f"{label} median off/on = {res['off'] / res['on']:.3f} (saved {res['off'] - res['on']:.2f} ms)")
EOF
}

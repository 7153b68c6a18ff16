#!/usr/bin/env bash
# scripts/userland.sh: relocate a whole Debian userland with cudapatch and
# run it in place, the way Nix relocates prebuilt software.
#
#   sudo bash scripts/userland.sh [WORKDIR]      (default /tmp/cudapatch-userland)
#
# 1. debootstrap a minimal Debian 12 (bookworm, minbase + python3-minimal)
#    into WORKDIR/pristine, from the mirror of /etc/apt/sources.list.d/
#    (or $MIRROR); kept between runs (WORKDIR/pristine.done).
# 2. copy it to WORKDIR/root and rewrite every ELF file there in one
#    cudapatch run: the interpreter of every executable becomes the tree's
#    own ld.so, and every RUNPATH names the tree's library directories
#    (libc included: --libc points at nothing, so libc needs an entry too).
# 3. check every rewritten file with `cudapatch verify`, run cudapatch a
#    second time (it must change nothing), and count the files that still
#    name a host library directory.
# 4. run a set of the tree's programs from the tree, not through chroot:
#    once through the tree's ld.so with --inhibit-cache, once started
#    directly (PT_INTERP); each must print what it should, and LD_DEBUG=libs
#    and /proc/self/maps must show that every object came from the tree.
#
# Needs root (debootstrap), network for the first run (~60 MB of .debs),
# Go and about 500 MB of disk. Results are in docs/userland.md.
set -euo pipefail

WORK=${1:-/tmp/cudapatch-userland}
SUITE=bookworm
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -z ${MIRROR:-} ]]; then
	MIRROR=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
	MIRROR=${MIRROR:-http://deb.debian.org/debian}
fi
PRISTINE=$WORK/pristine
ROOT=$WORK/root
LOG=$WORK/log
mkdir -p "$WORK" "$LOG"

say() { printf '== %s\n' "$*"; }
fail() {
	printf 'FAIL: %s\n' "$*" >&2
	exit 1
}

# --- 1. debootstrap -----------------------------------------------------
if [[ ! -e $WORK/pristine.done ]]; then
	command -v debootstrap >/dev/null || apt-get install -y --no-install-recommends debootstrap
	rm -rf "$PRISTINE"
	say "debootstrap $SUITE from $MIRROR"
	debootstrap --variant=minbase --include=python3-minimal "$SUITE" "$PRISTINE" "$MIRROR" >"$LOG/debootstrap.log" 2>&1 ||
		fail "debootstrap (see $LOG/debootstrap.log)"
	touch "$WORK/pristine.done"
fi

say "fresh copy in $ROOT"
rm -rf "$ROOT"
cp -a "$PRISTINE" "$ROOT"

# --- 2. rewrite -----------------------------------------------------------
say "building cudapatch"
(cd "$HERE" && go build -o "$WORK/cudapatch" ./cmd/cudapatch)
CP=$WORK/cudapatch

LIBDIR=$ROOT/usr/lib/x86_64-linux-gnu
# The tree's /lib64/ld-linux-x86-64.so.2 is an absolute link to
# /lib/x86_64-linux-gnu/…, which outside a chroot names the host's loader:
# the interpreter is the file it means, inside the tree.
LDSO=$LIBDIR/ld-linux-x86-64.so.2
[[ -f $LDSO && ! -L $LDSO ]] || fail "$LDSO is not the loader itself"

mapfile -t ELFS < <(python3 - "$ROOT" <<'EOF'
import os, sys
for d, _, names in os.walk(sys.argv[1]):
    for n in names:
        p = os.path.join(d, n)
        if os.path.isfile(p) and not os.path.islink(p):
            with open(p, "rb") as f:
                if f.read(4) == b"\x7fELF":
                    print(p)
EOF
)
say "${#ELFS[@]} ELF files in the tree"

# cudapatch refuses a file with several hard links (writing it would change
# the other paths too). Debian links /usr/bin/perl and perl5.36.0: give
# each such ELF file its own copy first, as a packager would.
broken=0
for f in "${ELFS[@]}"; do
	if [[ $(stat -c %h "$f") -gt 1 ]]; then
		cp -p "$f" "$f.unlink" && mv "$f.unlink" "$f"
		broken=$((broken + 1))
	fi
done
say "$broken hard-linked ELF files given their own copy"

PATCH_ARGS=(--search-recursive "$ROOT/usr/lib" --interpreter "$LDSO" --libc /nonexistent
	--driver-link-for none "$ROOT")
say "cudapatch ${PATCH_ARGS[*]}"
start=$(date +%s.%N)
rc=0
"$CP" --json "${PATCH_ARGS[@]}" >"$LOG/report.json" 2>"$LOG/patch.stderr" || rc=$?
[[ $rc == 0 ]] || {
	cat "$LOG/patch.stderr" >&2
	fail "cudapatch exited $rc"
}
end=$(date +%s.%N)
cat "$LOG/patch.stderr"
python3 - "$LOG/report.json" "$start" "$end" <<'EOF' | tee "$LOG/summary.txt"
import json, sys, collections
rep = json.load(open(sys.argv[1]))
files = rep["files"]
changed = [f for f in files if f["changed"]]
interp = [f for f in changed if f.get("interpreter") and f.get("interpreter") != f.get("old_interpreter")]
skipped = collections.Counter(f["skipped"] for f in files if f.get("skipped"))
strategies = collections.Counter(f.get("strategy") for f in changed)
deps = collections.Counter(d["how"] for f in files for d in f.get("deps", []))
written = sum(f.get("bytes_written", 0) for f in changed)
entries = collections.Counter(e for f in changed for e in f["runpath"].split(":") if e)
print(f"files examined: {len(files)}; rewritten: {len(changed)} "
      f"(interpreter set on {len(interp)}); unchanged: {rep['unchanged']}; skipped: {dict(skipped)}")
print(f"layouts: {dict(strategies)}; bytes written: {written} ({written / max(len(changed), 1):.0f} per file)")
print(f"dependencies: {dict(deps)}; missing: {len(rep.get('missing') or [])}")
print(f"distinct RUNPATH entries: {len(entries)}")
for e, n in entries.most_common():
    print(f"  {n:5d}  {e}")
print(f"cudapatch wall time: {float(sys.argv[3]) - float(sys.argv[2]):.2f} s")
EOF

say "cudapatch verify on every ELF file"
"$CP" verify "${ELFS[@]}" >"$LOG/verify.txt" 2>&1 || {
	tail -20 "$LOG/verify.txt"
	fail "cudapatch verify"
}

say "second run changes nothing"
"$CP" "${PATCH_ARGS[@]}" >"$LOG/second.stdout" 2>"$LOG/second.stderr" || fail "second run: $(cat "$LOG/second.stderr")"
cat "$LOG/second.stderr"
[[ ! -s $LOG/second.stdout ]] || fail "second run rewrote files: $(head "$LOG/second.stdout")"

say "no RUNPATH or interpreter names a directory outside the tree"
python3 - "$LOG/report.json" "$ROOT" <<'EOF'
import json, sys
rep, root = json.load(open(sys.argv[1])), sys.argv[2]
bad = []
for f in rep["files"]:
    if f.get("skipped"):
        continue
    for e in filter(None, f.get("runpath", "").split(":")):
        if not e.startswith(root + "/") and not e.startswith("$ORIGIN"):
            bad.append((f["path"], e))
    if f.get("interpreter") and not f["interpreter"].startswith(root + "/"):
        bad.append((f["path"], f["interpreter"]))
for b in bad[:20]:
    print("  outside:", *b)
sys.exit(1 if bad else 0)
EOF

# --- 4. run ---------------------------------------------------------------
BIN=$ROOT/usr/bin
SCRATCH=$WORK/scratch
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH/t"
printf 'pear\napple\nfig\n' >"$SCRATCH/t/fruit.txt"
# The programs, each as: name, command line (run by the tree's bash), the
# exact output it must print.
NAMES=() CMDS=() WANTS=()
add() { NAMES+=("$1") CMDS+=("$2") WANTS+=("$3"); }
add bash "$BIN/bash -c 'echo bash \${BASH_VERSINFO[0]}; echo \$((6 * 7))'" $'bash 5\n42'
add ls "$BIN/ls $SCRATCH/t" 'fruit.txt'
add cat "$BIN/cat $SCRATCH/t/fruit.txt" $'pear\napple\nfig'
add sort "$BIN/sort $SCRATCH/t/fruit.txt" $'apple\nfig\npear'
add sha256sum "$BIN/sha256sum < $SCRATCH/t/fruit.txt" 'd7b8370b133ffebfa89e67453a41c3c1bf366d9a0f2cf9263caafc41359dc9a6  -'
add apt-get "$BIN/apt-get --version | $BIN/head -n1" 'apt 2.6.1 (amd64)'
add python3 "$BIN/python3 -c 'import sys, hashlib, zlib; print(sys.version_info[:2], hashlib.sha256(b\"x\").hexdigest()[:8], zlib.crc32(b\"x\"))'" '(3, 11) 2d711642 2363233923'
add perl "$BIN/perl -MPOSIX -MList::Util=sum -e 'print \"perl \", sum(1..10), \" \", POSIX::floor(2.5), \"\\n\"'" 'perl 55 2'
add grep "$BIN/grep -n ^f $SCRATCH/t/fruit.txt" '3:fig'
add sed "$BIN/sed -e s/apple/APPLE/ $SCRATCH/t/fruit.txt" $'pear\nAPPLE\nfig'
add tar "$BIN/tar -C $SCRATCH/t -cf $SCRATCH/t.tar fruit.txt && $BIN/tar -tf $SCRATCH/t.tar" 'fruit.txt'
add maps "$BIN/cat /proc/self/maps" ''

# check_objects FILE: every shared object the loader initialised
# (LD_DEBUG=libs "calling init:") lies in the tree, and there is at least one.
check_objects() {
	local n outside
	n=$(grep -c 'calling init: ' "$1" || true)
	outside=$(grep 'calling init: ' "$1" | grep -v "calling init: $ROOT/" || true)
	[[ $n -gt 0 && -z $outside ]] || {
		echo "objects from outside the tree (or none):" >&2
		echo "$outside" >&2
		return 1
	}
}

# perl finds its XS modules through @INC, which is compiled in
# (/usr/lib/x86_64-linux-gnu/perl-base): a path in data, not in ELF
# headers, so it names the host's copy until PERL5LIB points into the tree,
# as Nix's perl wrappers do. (Python derives its prefix from the path of its
# executable and needs nothing.)
PERL5LIB=$ROOT/usr/lib/x86_64-linux-gnu/perl-base

ran=0
for mode in inhibit-cache direct; do
	for i in "${!NAMES[@]}"; do
		name=${NAMES[i]} cmd=${CMDS[i]} want=${WANTS[i]}
		# The command line runs in the tree's bash, so that every process
		# LD_DEBUG reports on is one of the tree's programs.
		if [[ $mode == inhibit-cache ]]; then
			# Each program goes through the tree's ld.so, bash included.
			run=$(sed -E "s#(^|&& |\\| )($BIN/[^ ]+)#\\1$LDSO --inhibit-cache \\2#g" <<<"$cmd")
			shell=("$LDSO" --inhibit-cache "$BIN/bash")
		else
			run=$cmd
			shell=("$BIN/bash")
		fi
		out=$LOG/$mode-$name
		rm -f "$out".ld*
		env -i PATH="$BIN" LANG=C PERL5LIB="$PERL5LIB" LD_DEBUG=libs LD_DEBUG_OUTPUT="$out.ld" "${shell[@]}" -c "$run" >"$out.stdout" 2>"$out.stderr" ||
			fail "$mode $name: exit $?: $(cat "$out.stderr")"
		got=$(cat "$out.stdout")
		if [[ $name == maps ]]; then
			# The loader and every mapped library are the tree's.
			libs=$(awk '$6 ~ /\.so/ { print $6 }' "$out.stdout" | sort -u)
			grep -q "^$LDSO\$" <<<"$libs" || fail "$mode maps: loader not $LDSO: $libs"
			! grep -v "^$ROOT/" <<<"$libs" || fail "$mode maps: objects from outside the tree"
			got=""
		elif [[ $got != "$want" ]]; then
			fail "$mode $name: got
$got
want
$want"
		fi
		cat "$out".ld.* >"$out.ld" && rm -f "$out".ld.*
		check_objects "$out.ld" || fail "$mode $name: see $out.ld"
		printf '  %-14s %-10s ok (%d objects from the tree)\n' "$mode" "$name" "$(grep -c 'calling init: ' "$out.ld")"
		ran=$((ran + 1))
	done
done
say "all $ran runs passed"

# The control: the same check on the untouched tree's ls, started the same
# way, must fail (its PT_INTERP and libraries are the host's), or the check
# proves nothing.
env -i LD_DEBUG=libs LD_DEBUG_OUTPUT="$LOG/control.ld" "$PRISTINE/usr/bin/ls" "$SCRATCH/t" >/dev/null
cat "$LOG"/control.ld.* >"$LOG/control.ld" && rm -f "$LOG"/control.ld.*
if check_objects "$LOG/control.ld" 2>/dev/null; then
	fail "control: the unpatched ls passed the check"
fi
say "control: the unpatched tree's ls loads $(grep -c 'calling init: ' "$LOG/control.ld") objects from the host, and the check catches it"

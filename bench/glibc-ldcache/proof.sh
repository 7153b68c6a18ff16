#!/usr/bin/env bash
# Run-time proof that a loader built with ldcache.patch honours the
# resolution-cache note (.note.nixos.ldcache, issue 11) as published, and
# that the note decides what loads: small programs built here, notes written
# by patchelf master (--build-resolution-cache) and, where it can, by
# cudapatch. A bench script, not CI: it needs the glibc that build.sh stages.
#
#   bench/glibc-ldcache/proof.sh GLIBC_LIB PATCHELF_MASTER [CUDAPATCH] [WORKDIR]
#
# GLIBC_LIB is build.sh's WORKDIR/root/lib. Each step prints PASS or FAIL
# with the LD_DEBUG=libs lines that show it; exit status 1 if any failed.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
GL=$(readlink -f "${1:?usage: proof.sh GLIBC_LIB PATCHELF [CUDAPATCH] [WORKDIR]}")
PE=$(readlink -f "${2:?patchelf master binary}")
CP=${3:+$(readlink -f "$3")}
W=${4:-/tmp/glibc-ldcache-proof}
LDSO=$GL/ld-linux-x86-64.so.2
unset LD_LIBRARY_PATH LD_PRELOAD
rm -rf "$W" && mkdir -p "$W" && cd "$W" || exit 2
fails=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
hr() { printf '\n== %s\n' "$*"; }
note() { python3 "$HERE/ldcache-toggle.py" print "$1" | sed 's/^[^:]*: /    /'; }
# debug FILE ARGS...: run FILE, LD_DEBUG=libs to stderr, stdout dropped.
debug() { { LD_DEBUG=libs "$@" >/dev/null; } 2>&1; }
tries() { grep -c "trying file=$2" <<<"$1"; }

# lib DIR NAME TAG [CC]: DIR/libNAME.so.1 whose NAME_where() returns TAG.
lib() {
	mkdir -p "$1"
	echo "const char *$2_where(void) { return \"$3\"; }" >"$W/$2.c"
	"${4:-gcc}" -shared -fPIC -o "$1/lib$2.so.1" -Wl,-soname,"lib$2.so.1" "$W/$2.c"
}
# prog OUT RPATH DTAGS LIBS...: a program printing NAME_where() of each lib,
# with our loader as PT_INTERP and RPATH as its DT_RUNPATH (or DT_RPATH).
prog() {
	local out=$1 rpath=$2 dtags=$3 body="" decl="" l
	shift 3
	for l in "$@"; do
		decl+="const char *${l}_where(void);"
		body+="printf(\"$l=%s\\n\", ${l}_where());"
	done
	printf '#include <stdio.h>\n%s\nint main(void) { %s return 0; }\n' "$decl" "$body" >"$W/main.c"
	local links=()
	for l in "$@"; do links+=("$W/link/lib$l.so.1"); done
	gcc -o "$out" "$W/main.c" "${links[@]}" -Wl,--dynamic-linker="$LDSO" \
		-Wl,"$dtags" -Wl,-rpath,"$rpath"
}
mkdir -p link
lib link foo link && lib link cuda link

echo "loader: $LDSO ($("$LDSO" --version | head -1))"
echo "patchelf: $("$PE" --version) (NixOS/patchelf master)"
[ -n "$CP" ] && echo "cudapatch: $CP ($("$CP" --version 2>&1 | head -1))"

hr "1. RUNPATH A:B:C, libfoo only in C"
A=$W/A B=$W/B C=$W/C
mkdir -p "$A" "$B" && lib "$C" foo C
prog p1 "$A:$B:$C:$GL" --enable-new-dtags foo
cp p1 p1.nonote
"$PE" --build-resolution-cache p1
echo "  note of p1:"; note p1
d=$(debug ./p1); d0=$(debug ./p1.nonote)
echo "$d" | grep -E 'trying|find library' | sed 's/^ *[0-9]*: */    with note: /'
echo "$d0" | grep -E 'trying|find library' | sed 's/^ *[0-9]*: */    no note:   /'
if grep -q "trying cached file=$C/libfoo.so.1" <<<"$d" && [ "$(tries "$d" "$A")" = 0 ] &&
	[ "$(tries "$d" "$B")" = 0 ] && [ "$(tries "$d" "")" = 0 ] && [ "$(./p1)" = "foo=C" ]; then
	pass "with the note: libfoo and libc opened directly, A and B never probed, no 'trying file=' at all"
else fail "note not honoured"; fi
if [ "$(tries "$d0" "$A")" -ge 2 ] && [ "$(tries "$d0" "$B")" -ge 2 ] && [ "$(./p1.nonote)" = "foo=C" ]; then
	pass "without the note: the same loader probes A and B ($(tries "$d0" "") 'trying file=' lines)"
else fail "control run did not probe"; fi
if [ -x /usr/bin/strace ]; then
	for f in p1 p1.nonote; do
		echo "    $f: $(strace -f -e trace=openat,stat,newfstatat ./$f 2>&1 >/dev/null | grep -c ' = -1 ENOENT') failed openat/stat"
	done
fi

hr "2. LD_LIBRARY_PATH still wins over the note"
lib "$W/L" foo LD_LIBRARY_PATH
out=$(LD_LIBRARY_PATH=$W/L ./p1)
echo "    LD_LIBRARY_PATH=$W/L ./p1 -> $out"
if [ "$out" = "foo=LD_LIBRARY_PATH" ]; then pass "LD_LIBRARY_PATH before the note"; else fail "note beat LD_LIBRARY_PATH"; fi

hr "3. DT_RPATH-only object: the DT_RPATH chain and LD_LIBRARY_PATH first, then the note"
prog p3 "$A:$B:$C:$GL" --disable-new-dtags foo
readelf -d p3 | grep -E 'RPATH|RUNPATH' | sed 's/^/   /'
"$PE" --build-resolution-cache p3
d=$(debug ./p3)
if [ "$(./p3)" = "foo=C" ] && [ "$(tries "$d" "$A")" -ge 1 ] && ! grep -q 'trying cached' <<<"$d"; then
	pass "RPATH-only: the DT_RPATH walk finds everything before the note is reached ($(tries "$d" "") 'trying file=')"
else fail "RPATH-only"; echo "$d"; fi
out=$(LD_LIBRARY_PATH=$W/L ./p3)
if [ "$out" = "foo=C" ]; then pass "RPATH-only: DT_RPATH before LD_LIBRARY_PATH, as in stock glibc ($out)"
else fail "RPATH-only with LD_LIBRARY_PATH gave $out"; fi
# A name the DT_RPATH chain misses: the note (crafted, E is in no RPATH) answers it.
lib "$W/E" bar E && lib link bar link
prog p3b "$A:$B:$C:$GL" --disable-new-dtags foo bar
"$PE" --build-resolution-cache p3b 2>/dev/null
python3 "$HERE/ldcache-toggle.py" set p3b "libbar.so.1\\0=$W/E/libbar.so.1\\0"
echo "  crafted note:"; note p3b
d=$(debug ./p3b)
echo "$d" | grep -E 'trying|search cache' | grep -v hwcaps | sed 's/^ *[0-9]*: */    /'
if [ "$(./p3b | tr '\n' ' ')" = "foo=C bar=E " ] && grep -q "trying cached file=$W/E/libbar.so.1" <<<"$d" &&
	! grep -q "trying cached file=$C" <<<"$d"; then
	pass "RPATH-only: the note answers what the DT_RPATH chain misses, after it"
else fail "RPATH-only note after the chain"; fi

hr "4. ?\$ORIGIN through a symlinked executable"
P=$W/pkg
mkdir -p "$P/bin" "$W/elsewhere/bin"
lib "$P/lib" foo pkg-origin
lib "$W/elsewhere/lib" foo decoy-next-to-symlink
# shellcheck disable=SC2016
prog "$P/bin/p4" '$ORIGIN/../lib:'"$GL" --enable-new-dtags foo
"$PE" --build-resolution-cache "$P/bin/p4"
echo "  note:"; note "$P/bin/p4"
ln -s "$P/bin/p4" "$W/elsewhere/bin/p4"
out=$("$W/elsewhere/bin/p4")
d=$(debug "$W/elsewhere/bin/p4")
echo "$d" | grep -E 'trying|search path' | sed 's/^ *[0-9]*: */    /'
if [ "$out" = "foo=pkg-origin" ] && grep -q "trying file=$P/bin/../lib/libfoo.so.1" <<<"$d"; then
	pass "?\$ORIGIN/../lib searched as a RUNPATH element of the real file: $out"
else fail "\$ORIGIN hint: $out"; fi

hr "4b. ?DIR with a glibc-hwcaps subdirectory, and a relative ?DIR"
H=$W/hw
lib "$H" foo hw-base
lib "$H/glibc-hwcaps/x86-64-v2" foo hw-x86-64-v2
prog p4b "$H:$GL" --enable-new-dtags foo
"$PE" --build-resolution-cache p4b
echo "  note:"; note p4b
out=$(./p4b)
d=$(debug ./p4b)
echo "$d" | grep -E 'trying' | sed 's/^ *[0-9]*: */    /'
if [ "$out" = "foo=hw-x86-64-v2" ] && ! grep -q "trying cached file=$H" <<<"$d"; then
	pass "?$H searched with its glibc-hwcaps subdirectories: $out"
else fail "hwcaps hint: $out"; fi
mkdir -p "$W/cwd" && lib "$W/cwd/rel" foo relative-to-cwd
prog p4c "rel:$C:$GL" --enable-new-dtags foo
"$PE" --build-resolution-cache p4c
echo "  note:"; note p4c
out=$(cd "$W/cwd" && "$W/p4c") out2=$("$W/p4c")
echo "    run in $W/cwd: $out; run in $W: $out2"
if [ "$out" = "foo=relative-to-cwd" ] && [ "$out2" = "foo=C" ]; then
	pass "?rel searched relative to the current directory at run time, then =C"
else fail "relative hint"; fi

hr "5. '=' entries of the wrong class or machine fall through to the next element"
X32=$W/x32 XARM=$W/xarm
lib "$X32" foo i386 i686-linux-gnu-gcc
lib "$XARM" foo aarch64 aarch64-linux-gnu-gcc
file -L "$X32/libfoo.so.1" "$XARM/libfoo.so.1" | sed 's/, BuildID.*//; s/^/    /'
prog p5 "$X32:$XARM:$C:$GL" --enable-new-dtags foo
"$PE" --build-resolution-cache p5
echo "  note:"; note p5
d=$(debug ./p5)
echo "$d" | grep -E 'trying' | sed 's/^ *[0-9]*: */    /'
if [ "$(./p5)" = "foo=C" ] && grep -q "trying cached file=$X32/libfoo.so.1" <<<"$d" &&
	grep -q "trying cached file=$XARM/libfoo.so.1" <<<"$d" && grep -q "trying cached file=$C/libfoo.so.1" <<<"$d" &&
	[ "$(tries "$d" "")" = 0 ]; then
	pass "wrong class, wrong machine skipped in note order, C loaded, no RUNPATH walk"
else fail "wrong-class fall-through"; fi

hr "6. a note whose entries all fail falls back to the RUNPATH walk"
prog p6 "$A:$B:$C:$GL" --enable-new-dtags foo
"$PE" --build-resolution-cache p6
mv "$C/libfoo.so.1" "$B/" # the library moved after the note was written
d=$(debug ./p6)
echo "$d" | grep -E 'trying' | sed 's/^ *[0-9]*: */    /'
if [ "$(./p6)" = "foo=C" ] && grep -q "trying cached file=$C/libfoo.so.1" <<<"$d" && grep -q "trying file=$B/libfoo.so.1" <<<"$d"; then
	pass "cached file gone: RUNPATH walk found it in B"
else fail "fallback"; fi
mv "$B/libfoo.so.1" "$C/"

hr "7. malformed notes are ignored, never read out of bounds; an empty path list switches the note off"
# A library with a long name leaves room in the note for crafted descriptors.
P7PAD=padpadpadpadpadpadpadpadpadpadpadpadpadpadpadpadpadpadpad
lib "$C" $P7PAD C && lib link $P7PAD link
prog p7 "$A:$B:$C:$GL" --enable-new-dtags foo $P7PAD
"$PE" --build-resolution-cache p7
python3 - p7 <<'EOF'
import struct, sys
src = open(sys.argv[1], 'rb').read()
i = src.index(b'NixOS\0') - 12
namesz, descsz, typ = struct.unpack_from('<III', src, i)
desc = i + 12 + 8
# a descriptor with no NUL at all
b = bytearray(src)
b[desc:desc + descsz] = (b'libc.so.6' + b'X' * descsz)[:descsz]
open(sys.argv[1] + '.nonul', 'wb').write(bytes(b))
# a descriptor that does not end with two NULs: the whole note is no note
b = bytearray(src)
b[desc + descsz - 1] = ord('X')
open(sys.argv[1] + '.noend', 'wb').write(bytes(b))
# a note header whose descsz runs past the PT_NOTE
b = bytearray(src)
struct.pack_into('<I', b, i + 4, 0x7fffffff)
open(sys.argv[1] + '.huge', 'wb').write(bytes(b))
EOF
chmod +x p7.nonul p7.noend p7.huge
ok=1
for f in p7.nonul p7.noend p7.huge; do
	out=$(./$f 2>&1 | head -1); d=$(debug ./$f)
	echo "    $f -> $out; $(grep -c 'trying cached' <<<"$d") cached tries, $(tries "$d" "") RUNPATH tries"
	[ "$out" = "foo=C" ] && ! grep -q 'trying cached' <<<"$d" || ok=0
done
if [ $ok = 1 ]; then pass "malformed notes ignored, RUNPATH walk used"; else fail "malformed note"; fi
# Pairs are walked in order; an empty path list met on the way switches the
# object's note off for that lookup and every later one.
cp p7 p7.off1 && cp p7 p7.off2 && cp p7 p7.skip
python3 "$HERE/ldcache-toggle.py" set p7.off1 "libbar.so.1\\0\\0libfoo.so.1\\0=$C/libfoo.so.1\\0libc.so.6\\0=$GL/libc.so.6\\0"
python3 "$HERE/ldcache-toggle.py" set p7.off2 "libfoo.so.1\\0=$C/libfoo.so.1\\0libbar.so.1\\0\\0libc.so.6\\0=$GL/libc.so.6\\0"
python3 "$HERE/ldcache-toggle.py" set p7.skip "libfoo.so.1\\0x$A:$B/:=$C/libfoo.so.1\\0"
d1=$(debug ./p7.off1) d2=$(debug ./p7.off2) d3=$(debug ./p7.skip)
for f in p7.off1 p7.off2 p7.skip; do
	echo "  $f:"; note $f
done
echo "    p7.off1: $(grep -c 'trying cached' <<<"$d1") cached tries; p7.off2: $(grep 'trying cached' <<<"$d2" | sed 's/.*=//' | tr '\n' ' ')"
if [ "$(./p7.off1 | head -1)" = "foo=C" ] && ! grep -q 'trying cached' <<<"$d1" &&
	grep -q "trying cached file=$C/libfoo.so.1" <<<"$d2" && ! grep -q "trying cached file=$GL" <<<"$d2"; then
	pass "an empty path list before a name switches the note off; met after libfoo's pair, it switches it off for libc only"
else fail "empty path list"; fi
if [ "$(./p7.skip | head -1)" = "foo=C" ] && grep -q "trying cached file=$C/libfoo.so.1" <<<"$d3" && [ "$(tries "$d3" "$A/libfoo")" = 0 ]; then
	pass "elements neither '=' nor '?' are skipped"
else fail "unknown elements"; fi

hr "8. the issue's stale note: stub libcuda in the note, driver link in the RUNPATH"
STUBS=$W/store/cuda-stubs/lib/stubs DRV=$W/run/opengl-driver/lib
lib "$STUBS" cuda STUB
lib "$DRV" cuda DRIVER
mkdir -p "$W/out/bin"
# As a from-source CUDA build links: the stubs dir ends up in the RUNPATH.
prog "$W/out/bin/cu" "$STUBS:$GL" --enable-new-dtags cuda
"$PE" --build-resolution-cache "$W/out/bin/cu"
echo "  note written by patchelf master (the fixup hook):"; note "$W/out/bin/cu"
echo "    before cudapatch: $("$W/out/bin/cu")"
cp "$W/out/bin/cu" cu.pe
if [ -n "$CP" ]; then
	# --keep-libc --search GL: our glibc is not the loader's default dir (it
	# is in Nix), so libc must stay in the RUNPATH.
	"$CP" --driver-link "$DRV" --interpreter "$LDSO" --keep-libc --search "$GL" "$W/out" | sed 's/^/    /'
	echo "  after cudapatch --driver-link: RUNPATH $(readelf -d "$W/out/bin/cu" | sed -n 's/.*RUNPATH.*\[\(.*\)\]/\1/p')"
	echo "  note after cudapatch:"; note "$W/out/bin/cu"
	echo "  cudapatch lint and explain on it:"
	"$CP" lint --driver-link "$DRV" "$W/out/bin/cu" 2>&1 | grep -E 'CP0[0-9][0-9]' | sed 's/^ */    /'
	"$CP" explain "$W/out/bin/cu" 2>&1 | grep 'libcuda' | sed 's/^ */    /'
	out=$("$W/out/bin/cu")
	d=$(debug "$W/out/bin/cu")
	echo "$d" | grep -E 'trying' | sed 's/^ *[0-9]*: */    /'
	echo "    run: $out"
	if [ "$out" = "cuda=DRIVER" ] && ! note "$W/out/bin/cu" | grep -q stubs; then
		pass "after cudapatch the driver's libcuda loads (note rewritten or dropped)"
	elif [ "$out" = "cuda=STUB" ]; then
		fail "cudapatch left the stale note: the loader follows it to the STUB libcuda (issue 11, not fixed in this cudapatch)"
	else fail "stale-note program: $out"; fi
else
	echo "    (no cudapatch given: skipped)"
fi
# Control: patchelf master drops the note when it changes the RUNPATH.
"$PE" --set-rpath "$DRV:$GL" cu.pe
out=$(./cu.pe)
echo "    control: patchelf --set-rpath $DRV:$GL on the noted file: $(note cu.pe | wc -l) note entries left; run: $out"
if [ "$out" = "cuda=DRIVER" ]; then pass "control: without the stale note the driver's libcuda loads"; else fail "control: $out"; fi

if [ -n "$CP" ] && "$CP" --help 2>&1 | grep -q -- 'resolution-cache'; then
	hr "9. a note written by cudapatch itself"
	T=$W/cptree
	mkdir -p "$T/bin"
	prog "$T/bin/p9" "/nonexistent" --enable-new-dtags foo
	"$CP" --search "$A" --search "$B" --search "$C" --search "$GL" --keep-libc --interpreter "$LDSO" "$T" | sed 's/^/    /'
	echo "  RUNPATH $(readelf -d "$T/bin/p9" | sed -n 's/.*RUNPATH.*\[\(.*\)\]/\1/p')"
	echo "  note:"; note "$T/bin/p9"
	d=$(debug "$T/bin/p9")
	echo "$d" | grep -E 'trying' | sed 's/^ *[0-9]*: */    /'
	# cudapatch makes the driver link a "?" hint for every name, in its
	# RUNPATH position (a run-time-only directory, as patchelf treats
	# $ORIGIN): the loader looks there, as the RUNPATH says it must, and
	# then opens the cached file; no other directory is probed.
	if [ "$("$T/bin/p9")" = "foo=C" ] && grep -q "trying cached file=$C/libfoo.so.1" <<<"$d" &&
		[ "$(tries "$d" "")" = "$(tries "$d" /run/opengl-driver/lib/)" ]; then
		pass "cudapatch's note honoured: the driver link searched, then the cached file, no RUNPATH walk"
	else fail "cudapatch's note"; fi
fi

if [ -n "$CP" ]; then
	hr "10. the real loader against cudapatch explain (rpath/ldso's model of the patched loader)"
	# LD_TRACE_LOADED_OBJECTS makes our ld.so list what it would load (the
	# note applies); explain simulates it. Every library, real paths compared.
	trace() { LD_TRACE_LOADED_OBJECTS=1 "$1" 2>/dev/null | sed -n 's/^\t\([^ ]*\) => \(\/[^ ]*\) (.*/\1 \2/p'; }
	simulated() { "$CP" explain "$1" 2>/dev/null | grep -v '(interpreter)$' | sed -n 's/^ *\([^ ]*\) => \(\/[^ ]*\) (.*/\1 \2/p'; }
	canon() { while read -r n f; do echo "$n $(readlink -f "$f")"; done | sort; }
	# Crafted notes on which the note and the RUNPATH walk disagree: D's
	# libfoo is in no RUNPATH, C's is where the walk finds it.
	lib "$W/D" foo D
	prog n0 "$A:$B:$C:$GL" --enable-new-dtags foo $P7PAD
	"$PE" --build-resolution-cache n0
	craft() { cp n0 "$1" && python3 "$HERE/ldcache-toggle.py" set "$1" "$2"; }
	craft n1 "libfoo.so.1\\0=$W/D/libfoo.so.1\\0"
	craft n2 "x\\0\\0libfoo.so.1\\0=$W/D/libfoo.so.1\\0"
	craft n3 "libfoo.so.1\\0=$W/D/libfoo.so.1\\0x\\0\\0libc.so.6\\0=/nonexistent\\0"
	craft n4 "libfoo.so.1\\0?$W/D\\0"
	craft n5 "libfoo.so.1\\0=/nonexistent/libfoo.so.1:junk:=$W/D/libfoo.so.1\\0"
	craft n6 "libfoo.so.1\\0?:=$W/D/libfoo.so.1\\0" # "?": the current directory ($W, no libfoo)
	for f in n1 n2 n3 n4 n5 n6; do echo "    $f: $(note $f | sed 's/^ *//' | tr '\n' ';') runs: $(./$f 2>&1 | head -1)"; done
	differ=0
	for f in p1 p3b p5 p6 p7.off1 p7.off2 p7.skip p7.noend pkg/bin/p4 p4b out/bin/cu n1 n2 n3 n4 n5 n6; do
		[ -e "$W/$f" ] || continue
		a=$(trace "$W/$f" | canon) b=$(simulated "$W/$f" | canon)
		if [ "$a" = "$b" ]; then
			echo "    agree  $f"
		else
			differ=$((differ + 1))
			echo "    DIFFER $f:"
			diff <(echo "$a") <(echo "$b") | sed -n 's/^</      ld.so:   /p; s/^>/      explain: /p'
		fi
	done
	if [ $differ = 0 ]; then pass "cudapatch explain agrees with the real loader on every program"
	else fail "cudapatch explain and the real loader differ on $differ programs"; fi
fi

hr "summary"
echo "failures: $fails"
exit $((fails > 0))

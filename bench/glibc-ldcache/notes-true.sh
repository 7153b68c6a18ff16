#!/usr/bin/env bash
# Are the notes cudapatch writes on the CUDA corpus true for a loader that
# reads them? FuzzNoteTrue (cmd/cudapatch) asks this of small shaped trees;
# this asks it of the real corpus (scripts/cuda-corpus.sh), laid out as in
# bench/ldcache-loader.sh: one store path per package, a program linking
# every CUDA library and the toolkit's stub libcuda, the real driver behind
# a driver link.
#
#   bench/glibc-ldcache/notes-true.sh GLIBC_LIB [CUDAPATCH] [CORPUS_DIR] [WORKDIR]
#
# GLIBC_LIB is the lib directory of the note-reading glibc (build.sh's
# root/lib, or testdata/build/glibc-ldcache/<hash>/lib after a test run).
# After one cudapatch run, for every ELF file of the corpus and with the
# driver link filled and then empty (as on a machine without the driver),
# the loader's `--list` must be the same with the notes as with every note
# switched off (ldcache-toggle.py), no file of a stub directory may load,
# and `cudapatch explain` must list what the loader lists.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
GL=$(readlink -f "$1")
LDSO=$GL/ld-linux-x86-64.so.2
C=${3:-/tmp/cpcorpus}
W=${4:-$(mktemp -d)}
mkdir -p "$W"
if [ -n "${2:-}" ]; then
	CP=$(readlink -f "$2")
else
	(cd "$ROOT" && PATH=$PATH:/usr/local/go/bin go build -o "$W/cudapatch" ./cmd/cudapatch)
	CP=$W/cudapatch
fi
TOGGLE=$HERE/ldcache-toggle.py
# shellcheck source=bench/glibc-ldcache/corpus-app.sh
. "$HERE/corpus-app.sh"
[ -d "$C/pristine/store" ] || bash "$ROOT/scripts/cuda-corpus.sh" "$C" >/dev/null

S=$W/corpus/store DRV=$W/corpus/run/opengl-driver/lib
rm -rf "$W/corpus" && mkdir -p "$W/corpus" && cp -a "$C/pristine/store" "$S"
mkdir -p "$W/driver" && cp -a "$S"/*-nvidia-x11-*/lib/nvidia/current/. "$W/driver/" && rm -rf "$S"/*-nvidia-x11-*
mkdir -p "$DRV"
APP=$(corpus_app "$S" "$W/driver" "$W")
echo "cudapatch: $("$CP" --version 2>&1 | head -1) ($(git -C "$ROOT" rev-parse --short HEAD)); loader: $("$LDSO" --version | head -1)"
"$CP" --search-recursive "$S" --search "$GL" --keep-libc --driver-link "$DRV" --interpreter "$LDSO" \
	--ignore-missing 'libcheckpoint.so' "$S" | tail -1
find "$S" -type f \( -name '*.so*' -o -path '*/bin/*' \) | sort >"$W/files"
xargs -d '\n' -a "$W/files" python3 "$TOGGLE" status

# Trace mode, as ldd runs it: unlike --list it goes on past a missing
# library ("=> not found"), as on a machine without the driver.
list() { LD_TRACE_LOADED_OBJECTS=1 "$LDSO" "$1" 2>&1 | sed 's/ (0x[0-9a-f]*)$//'; }
# explain's load order as the loader lists it: what loads at start, in
# order, before the names it follows for dlopen.
PAIRS='
import json, sys
for n in (json.load(sys.stdin).get("tree") or {}).get("needs") or []:
    if n.get("dlopen"):
        break
    # The loader lists itself by its path, not as a need.
    if not n.get("already_loaded") and n["name"] != "ld-linux-x86-64.so.2":
        print(n["name"], n.get("path") or "not found")
'

fails=0 checked=0 stubs=0 differ=0 explained=0
for driver in filled empty; do
	rm -rf "$DRV" && mkdir -p "$DRV"
	[ "$driver" = filled ] && cp -a "$W/driver/." "$DRV/"
	xargs -d '\n' -a "$W/files" python3 "$TOGGLE" on >/dev/null
	while read -r f; do list "$f" >"$f.on.txt" 2>&1 || true; done <"$W/files"
	xargs -d '\n' -a "$W/files" python3 "$TOGGLE" off >/dev/null
	while read -r f; do
		list "$f" >"$f.off.txt" 2>&1 || true
		checked=$((checked + 1))
		if ! cmp -s "$f.on.txt" "$f.off.txt"; then
			differ=$((differ + 1)) fails=$((fails + 1))
			echo "DIFFER ($driver driver) $f:"
			diff "$f.on.txt" "$f.off.txt" | sed 's/^/    /' | head -10 || true
		fi
		if grep -q '/stubs/' "$f.on.txt"; then
			stubs=$((stubs + 1)) fails=$((fails + 1))
			echo "STUB ($driver driver) $f: $(grep '/stubs/' "$f.on.txt" | head -1)"
		fi
	done <"$W/files"
	xargs -d '\n' -a "$W/files" python3 "$TOGGLE" on >/dev/null
	# explain against the loader, with the notes on (the default nixos loader).
	while read -r f; do
		a=$(sed -n 's/^\t\([^ /][^ ]*\) => \(.*\)$/\1 \2/p' "$f.on.txt")
		b=$("$CP" explain --json "$f" 2>/dev/null | python3 -c "$PAIRS" || true)
		if [ "$a" != "$b" ]; then
			explained=$((explained + 1)) fails=$((fails + 1))
			echo "EXPLAIN ($driver driver) $f:"
			diff <(echo "$a") <(echo "$b") | sed -n 's/^</    ld.so:   /p; s/^>/    explain: /p' | head -10 || true
		fi
	done <"$W/files"
	echo "$driver driver: libcuda.so.1 of the program: $(grep 'libcuda.so.1' "$APP/bin/app.on.txt" | sed 's/^\t//')"
done
find "$S" -name '*.on.txt' -delete -o -name '*.off.txt' -delete
echo "checked $checked listings ($(wc -l <"$W/files") files, driver filled and empty): $differ differ with the notes, $stubs load a stub, $explained where explain differs"
exit $((fails > 0))

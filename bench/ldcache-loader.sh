#!/usr/bin/env bash
# What the resolution-cache note (issue 11) saves at load time, measured with
# a real loader that reads it (bench/glibc-ldcache: glibc 2.41 + ldcache.patch):
# failed openat/stat calls (strace -f), the loader's own probes (LD_DEBUG=libs)
# and wall time, note on and off in the same run, on
#
#   1. the CUDA corpus (scripts/cuda-corpus.sh): a program linking
#      every CUDA library of the corpus, patched by cudapatch like a Nix
#      build would leave it (driver link, gcc-lib, the libc dir kept);
#   2. a synthetic deep tree: PKGS packages x LIBS libraries, every library
#      needing 3 libraries of other packages, every RUNPATH naming all
#      package directories (a torch-like prebuilt tree, ~60 libraries x ~12
#      directories).
#
#   bench/ldcache-loader.sh GLIBC_LIB PATCHELF_MASTER [CORPUS_DIR] [WORKDIR]
#
# GLIBC_LIB: bench/glibc-ldcache/build.sh's WORKDIR/root/lib. Notes are
# written by cudapatch where it writes them (issue 11), else by patchelf
# master's --build-resolution-cache on the final RUNPATH. "on"/"off" switch
# the same files' notes in place (bench/glibc-ldcache/ldcache-toggle.py).
# Env: RUNS (timed runs per variant, default 40), PKGS (12), LIBS (5),
# CUDAPATCH (a cudapatch binary; default: built from this checkout).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
GL=$(readlink -f "${1:?usage: ldcache-loader.sh GLIBC_LIB PATCHELF [CORPUS_DIR] [WORKDIR]}")
PE=$(readlink -f "${2:?patchelf master binary}")
C=${3:-/tmp/cpcorpus}
W=${4:-/tmp/ldcache-loader}
RUNS=${RUNS:-40} PKGS=${PKGS:-12} LIBS=${LIBS:-5}
LDSO=$GL/ld-linux-x86-64.so.2
unset LD_LIBRARY_PATH LD_PRELOAD
export LC_ALL=C
# shellcheck source=bench/glibc-ldcache/ab.sh
. "$ROOT/bench/glibc-ldcache/ab.sh"
# shellcheck source=bench/glibc-ldcache/corpus-app.sh
. "$ROOT/bench/glibc-ldcache/corpus-app.sh"
rm -rf "$W" && mkdir -p "$W" || exit 2
AB_DIR=$W/ab && mkdir -p "$AB_DIR"
AB_LIST= # set per tree below; read by ab.sh
if [ -z "${CUDAPATCH:-}" ]; then
	(cd "$ROOT" && PATH=$PATH:/usr/local/go/bin go build -o "$W/cudapatch" ./cmd/cudapatch) || exit 2
	CUDAPATCH=$W/cudapatch
fi
CP=$(readlink -f "$CUDAPATCH")
hr() { printf '\n== %s\n' "$*"; }
# notes_or_patchelf LIST: write a note with patchelf master where cudapatch
# did not (files with a RUNPATH or RPATH only; patchelf skips the others).
notes_or_patchelf() {
	local f n=0 w=0
	while read -r f; do
		if python3 "$AB_HERE/ldcache-toggle.py" status "$f" | grep -q 'on: 1'; then n=$((n + 1)); continue; fi
		"$PE" --build-resolution-cache "$f" 2>/dev/null && w=$((w + 1))
	done <"$1"
	echo "notes: $n written by cudapatch, $w by patchelf master; $(xargs -d '\n' -a "$1" python3 "$AB_HERE/ldcache-toggle.py" status)"
}
measure() { # LABEL CMD...
	ab_strace "$@"
	ab_lddebug "$@"
	ab_time "$1" "$RUNS" "${@:2}"
}

hr "machine"
echo "$(uname -r), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "loader: $LDSO ($("$LDSO" --version | head -1))"
echo "patchelf: $("$PE" --version); cudapatch: $("$CP" --version 2>&1 | head -1) ($(git -C "$ROOT" rev-parse --short HEAD))"

hr "1. CUDA corpus"
[ -d "$C/pristine/store" ] || bash "$ROOT/scripts/cuda-corpus.sh" "$C" >/dev/null
S=$W/corpus/store
mkdir -p "$W/corpus" && cp -a "$C/pristine/store" "$S"
DRV=$W/corpus/run/opengl-driver/lib
# The driver lives behind the driver link only, as on NixOS.
mkdir -p "$DRV" && cp -a "$S"/*-nvidia-x11-*/lib/nvidia/current/. "$DRV/" && rm -rf "$S"/*-nvidia-x11-*
APP=$(corpus_app "$S" "$DRV" "$W") || exit 1
"$CP" --search-recursive "$S" --search "$GL" --keep-libc --driver-link "$DRV" --interpreter "$LDSO" \
	--ignore-missing 'libcheckpoint.so' "$S" | tail -1
find "$S" -type f -name '*.so*' -o -type f -path '*/bin/*' | sort >"$W/corpus.list"
notes_or_patchelf "$W/corpus.list"
echo "files: $(wc -l <"$W/corpus.list"), $(du -sh "$S" | cut -f1)"
"$CP" print "$APP/bin/app" | sed 's/^/  /'
if ! "$APP/bin/app"; then echo "the corpus program does not start"; exit 1; fi
AB_LIST=$W/corpus.list
measure corpus "$APP/bin/app"

hr "2. synthetic deep tree ($PKGS packages x $LIBS libraries)"
T=$W/deep/store
mkdir -p "$T"
dirs=()
for ((p = 0; p < PKGS; p++)); do
	d=$T/$(printf '%032d' "$p" | tr 0-9 a-j)-pkg$p/lib
	mkdir -p "$d" && dirs+=("$d")
done
rp=$(IFS=:; echo "${dirs[*]}"):$GL
# Build bottom-up: package p's libraries need 3 libraries of packages > p.
for ((p = PKGS - 1; p >= 0; p--)); do
	for ((i = 0; i < LIBS; i++)); do
		deps=()
		for k in 1 2 3; do
			q=$((p + k * 3 - 2)) j=$(((i + k) % LIBS))
			((q < PKGS)) && deps+=("${dirs[q]}/libp${q}_$j.so")
		done
		echo "int p${p}_$i(void) { return $i; }" >"$W/l.c"
		gcc -shared -fPIC -o "${dirs[p]}/libp${p}_$i.so" -Wl,-soname,libp${p}_$i.so "$W/l.c" \
			-Wl,--no-as-needed "${deps[@]}" -Wl,--enable-new-dtags,-rpath,"$rp"
	done
done
mkdir -p "$T/app/bin"
top=()
for ((i = 0; i < LIBS; i++)); do top+=("${dirs[0]}/libp0_$i.so" "${dirs[1]}/libp1_$i.so"); done
gcc -o "$T/app/bin/app" "$W/app.c" -Wl,--no-as-needed "${top[@]}" -lm -ldl -lpthread -lrt \
	-Wl,--dynamic-linker="$LDSO" -Wl,--enable-new-dtags,-rpath,"$rp" || exit 1
find "$T" -type f -name '*.so' -o -type f -path '*/bin/*' | sort >"$W/deep.list"
notes_or_patchelf "$W/deep.list"
echo "RUNPATH of every file: $PKGS package dirs + the libc dir (${#rp} bytes)"
"$T/app/bin/app" || { echo "the deep-tree program does not start"; exit 1; }
echo "libraries loaded: $(LD_TRACE_LOADED_OBJECTS=1 "$T/app/bin/app" | grep -c '=>')"
AB_LIST=$W/deep.list
measure deep "$T/app/bin/app"

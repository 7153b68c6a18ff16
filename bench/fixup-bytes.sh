#!/usr/bin/env bash
# fixup-bytes.sh: bytes written to the outputs by the whole fixupPhase of a
# prebuilt package, the nixpkgs way against cudaPatchelfHook, under the
# stdenv re-creation of the hook tests (hooks/test/stdenv.sh).
#
# Usage: WORK=DIR bench/fixup-bytes.sh CUDAPATCH PATCHELF_MASTER [LIBDIR [INPUT...]]
#
#   CUDAPATCH        the cudapatch binary
#   PATCHELF_MASTER  patchelf built from NixOS/patchelf master (it has
#                    --build-resolution-cache; Debian's 0.14.3 does not)
#   LIBDIR           a directory of prebuilt libraries to add to the package
#                    (e.g. the CUDA corpus' libcublas store path's lib/);
#                    every *.so* file in it is copied into the output's lib/
#   INPUT            store-path-like directories whose lib/ the package's
#                    libraries need (buildInputs), e.g. cuda_cudart, gcc-lib
#   WORK             scratch directory (default: a new temporary one)
#
# The package is hooks/test/build-sample.sh's prebuilt tree plus LIBDIR's
# libraries. The nixpkgs way runs, as nixpkgs registers them, with real
# patchelf processes doing each hook's writes: patchelf's setup hook
# (fixupOutput: `patchelf --shrink-rpath` on every ELF file), autoPatchelfHook
# (postFixup: --set-interpreter on executables, --set-rpath with the resolved
# directories, the RUNPATHs cudapatch computes, so both do the same work),
# autoAddDriverRunpath (postFixup: the driver link prepended) and
# generate-ld-cache (postFixup, registered from preFixup:
# `patchelf --build-resolution-cache` on every ELF file). cudaPatchelfHook
# runs with the same patchelf setup hook and generate-ld-cache present, and
# takes both over. Bytes are counted with strace: every write, pwrite and
# truncate the build's processes make to a file under the outputs.
#
# shellcheck disable=SC2016 # Single-quoted text is hook code, expanded when it runs.
set -euo pipefail
export LC_ALL=C
unset LD_LIBRARY_PATH

CUDAPATCH=$(readlink -f "${1:?usage: fixup-bytes.sh CUDAPATCH PATCHELF_MASTER [LIBDIR] [WORKDIR]}")
PATCHELF=$(readlink -f "${2:?usage: fixup-bytes.sh CUDAPATCH PATCHELF_MASTER [LIBDIR] [WORKDIR]}")
LIBDIR=${3:-}
INPUTS=("${@:4}")
WORK=${WORK:-$(mktemp -d)}
here=$(cd "$(dirname "$0")" && pwd)
hooks=$here/../hooks
command -v strace >/dev/null || { echo "fixup-bytes.sh needs strace (apt-get install strace)" >&2; exit 2; }
"$PATCHELF" --help 2>&1 | grep -q -- --build-resolution-cache ||
	{ echo "$PATCHELF has no --build-resolution-cache: build NixOS/patchelf master" >&2; exit 2; }

mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
bash "$hooks/test/build-sample.sh" "$WORK/sample" >/dev/null
sample=$WORK/sample
# shellcheck disable=SC1091
source "$sample/toolchain.env"
: "${interp:?}" "${libc:?}"
if [[ -n $LIBDIR ]]; then
	cp -P "$LIBDIR"/*.so* "$sample/prebuilt/out/lib/"
fi

mkpkg() { mkdir -p "$WORK/store/$1/nix-support"; echo "$WORK/store/$1"; }
glibc=$(mkpkg glibc)
mkdir -p "$glibc/lib"
ln -sf "$interp" "$glibc/lib/${interp##*/}"
ln -sf "$libc" "$glibc/lib/libc.so.6"
for l in libm.so.6 libdl.so.2 librt.so.1 libpthread.so.0 libutil.so.1 libresolv.so.2; do
	[[ -e ${libc%/*}/$l ]] && ln -sf "${libc%/*}/$l" "$glibc/lib/$l"
done
bintools=$(mkpkg bintools)
echo "$glibc/lib/${interp##*/}" >"$bintools/nix-support/dynamic-linker"
echo "$glibc" >"$bintools/nix-support/orig-libc"
tools=$(mkpkg tools)
mkdir -p "$tools/bin"
ln -sf "$CUDAPATCH" "$tools/bin/cudapatch"
ln -sf "$PATCHELF" "$tools/bin/patchelf"
driver=/run/opengl-driver/lib

hook=$(mkpkg cuda-patchelf-hook)
sed -e "s|@driverLink@|$driver|g" -e "s|@cudaCompat@||g" "$hooks/cuda-patchelf-hook.sh" >"$hook/nix-support/setup-hook"
echo "$tools" >"$hook/nix-support/propagated-build-inputs"

# nixpkgs' hooks, with the bodies doing their real writes through patchelf.
# _benchElfs DIR prints the ELF files below DIR, one a line.
elfs='_benchElfs() { find "$1" -type f | while IFS= read -r f; do [[ $(head -c4 "$f") == $'"'"'\x7fELF'"'"' ]] && printf "%s\n" "$f"; done; }'
fakehook() { local p; p=$(mkpkg "$1"); printf '%s\n' "$elfs" "$2" >"$p/nix-support/setup-hook"; echo "$p"; }
shrink=$(fakehook patchelf-setup-hook '
fixupOutputHooks+=('"'"'if [ -z "${dontPatchELF-}" ]; then patchELF "$prefix"; fi'"'"')
patchELF() { local f; while IFS= read -r f; do patchelf --shrink-rpath "$f" || true; done < <(_benchElfs "$1"); }')
ldcache=$(fakehook generate-ld-cache '
preFixupHooks+=(_registerGenerateLDCache)
_registerGenerateLDCache() { postFixupHooks+=(_generateLDCacheAllOutputs); }
_generateLDCacheAllOutputs() {
  [ -z "${dontGenerateLDCache-}" ] || return 0
  local o; for o in $(getAllOutputNames); do generateLDCache "${!o}"; done
}
generateLDCache() {
  local f
  while IFS= read -r f; do patchelf --build-resolution-cache "$f" 2>/dev/null || true; done < <(_benchElfs "$1")
}')
# autoPatchelfHook and autoAddDriverRunpath: the interpreter and RUNPATH
# cudapatch decides (read from a dry run's report, so both ways do the same
# work), written by patchelf as auto-patchelf.py does, then the driver link
# prepended as addDriverRunpath does.
autopatchelf=$(fakehook auto-patchelf '
autoPatchelfPostFixup() {
  local o paths=()
  for o in $(getAllOutputNames); do [[ $o == debug ]] || paths+=("${!o}"); done
  local search=() i
  for i in $buildInputs; do search+=(--search "$i/lib"); done
  cudapatch --dry-run --json --driver-link-for none "${search[@]}" \
    --ignore-missing "libcuda.so*" --no-resolution-cache "${paths[@]}" >"$TMPDIR/plan.json"
  python3 -c "
import json, sys
for f in json.load(open(sys.argv[1]))[\"files\"]:
    if f.get(\"skipped\") or f.get(\"kind\") not in (\"executable\", \"shared-library\"): continue
    print(\"\x1f\".join([f.get(\"interpreter\", \"\"), f.get(\"runpath\", \"\"), f[\"path\"]]))
" "$TMPDIR/plan.json" >"$TMPDIR/plan.tsv"
  local interp rp path
  while IFS=$'"'"'\x1f'"'"' read -r interp rp path; do
    if [ -n "$interp" ]; then patchelf --set-interpreter "$interp" "$path"; fi
    if [ -n "$rp" ]; then patchelf --set-rpath "$rp" "$path"; fi
  done <"$TMPDIR/plan.tsv"
}
postFixupHooks+=(autoPatchelfPostFixup)')
driverhook=$(fakehook auto-add-driver-runpath '
addDriverRunpathAll() {
  local o f old
  for o in $(getAllOutputNames); do
    [[ $o == debug ]] && continue
    while IFS= read -r f; do
      old=$(patchelf --print-rpath "$f" 2>/dev/null) || continue
      patchelf --set-rpath "'"$driver"'${old:+:$old}" "$f"
    done < <(_benchElfs "${!o}")
  done
}
postFixupHooks+=(addDriverRunpathAll)')

installPhase='mkdir -p "$out" "$debug"
cp -r "$SAMPLE/prebuilt/out/." "$out"
cp -r "$SAMPLE/prebuilt/debug/." "$debug"'

# run NAME NATIVEBUILDINPUTS: build under strace; prints the bytes written
# to the outputs and the number of ELF files whose content changed.
run() {
	local name=$1 dir=$WORK/$1
	mkdir -p "$dir/build" "$dir/tmp"
	local out=$dir/store/out debug=$dir/store/debug
	(cd "$dir/build" && env -i PATH="$tools/bin:$PATH" HOME="$dir" TMPDIR="$dir/tmp" \
		NIX_BINTOOLS="$bintools" SAMPLE="$sample" outputs="out debug" out="$out" debug="$debug" \
		nativeBuildInputs="$2" buildInputs="$sample/deps/dep ${INPUTS[*]}" installPhase="$installPhase" \
		strace -f -qq -y -e trace=write,pwrite64,pwritev,pwritev2,writev,ftruncate -o "$dir/strace.log" \
		bash -c 'source "$1"; genericBuild' builder "$hooks/test/stdenv.sh") >"$dir/build.log" 2>&1 ||
		{ echo "$name: build failed, see $dir/build.log" >&2; exit 1; }
	python3 - "$dir/strace.log" "$dir/store/" <<'EOF'
import re, sys
log, prefix = sys.argv[1], sys.argv[2]
total = calls = 0
files = set()
for line in open(log, errors="replace"):
    m = re.search(r'(p?writev?2?|pwrite64|ftruncate)\(\d+<([^>]*)>.*= (\d+)$', line)
    if not m or not m.group(2).startswith(prefix):
        continue
    calls += 1
    files.add(m.group(2))
    if m.group(1) != "ftruncate":
        total += int(m.group(3))
print(f"{total} {calls} {len(files)}")
EOF
}

# installPhase's copy is not counted (cp copies with copy_file_range), the
# same both ways.
nixpkgs=$(run nixpkgs "$shrink $autopatchelf $driverhook $ldcache")
ours=$(run cudapatch "$shrink $hook $ldcache")
read -r n_bytes n_calls n_files <<<"$nixpkgs"
read -r c_bytes c_calls c_files <<<"$ours"
elf_bytes=$(find "$sample/prebuilt/out" "$sample/prebuilt/debug" -type f -exec sh -c 'head -c4 "$1" | grep -q ELF && stat -c %s "$1"' _ {} \; | awk '{s+=$1} END {print s}')
printf 'package: %s bytes of ELF files in the outputs (%s)\n' "$elf_bytes" "${LIBDIR:-hooks sample only}"
printf '%-28s %14s %10s %8s\n' "fixupPhase" "bytes written" "calls" "files"
printf '%-28s %14s %10s %8s\n' "nixpkgs hooks" "$n_bytes" "$n_calls" "$n_files"
printf '%-28s %14s %10s %8s\n' "cudaPatchelfHook" "$c_bytes" "$c_calls" "$c_files"
for f in "$WORK/nixpkgs/store/out/bin/app" "$WORK/cudapatch/store/out/bin/app"; do
	printf '%s: RUNPATH %s\n' "${f#"$WORK"/}" "$(readelf -d "$f" | sed -n 's/.*runpath: \[\(.*\)\]$/\1/p')"
	readelf -p .note.nixos.ldcache "$f" 2>/dev/null | sed -n 's/^ *\[ *[0-9a-f]*\] */  note: /p'
done

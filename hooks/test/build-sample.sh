#!/usr/bin/env bash
# build-sample.sh OUTDIR: build the prebuilt tree the hook tests patch.
#
#   OUTDIR/deps/dep/lib/libdep.so     a buildInput's library
#   OUTDIR/deps/nolib/                a buildInput without lib/
#   OUTDIR/prebuilt/out/bin/app       NEEDED libfoo.so libdep.so; prints "sample 42"
#   OUTDIR/prebuilt/out/lib/libfoo.so NEEDED libdep.so
#   OUTDIR/prebuilt/out/lib/libgpu.so NEEDED libcuda.so.1 (driver only)
#   OUTDIR/prebuilt/out/lib/libplain.so NEEDED libc.so.6 only: nothing to resolve
#   OUTDIR/prebuilt/out/share/README  not an ELF file
#   OUTDIR/prebuilt-dl/bin/dlcaller   calls dlopen, NEEDED libc only, spells
#                                     no name: nothing to resolve
#   OUTDIR/prebuilt-dl/bin/dlcode     calls dlopen on "libdep.so" built in
#                                     code: with --dlopen resolve it gets
#                                     the directory its output's other files
#                                     find libdep.so in
#   OUTDIR/prebuilt/debug/lib/libfoo.so  a copy in the debug output
#   OUTDIR/deps/oldver/lib/libver.so  a buildInput's libver.so with VER_1 only
#   OUTDIR/prebuilt-ver/bin/vapp      NEEDED libver.so, linked against one with
#                                     VER_2: the symbol check fails it
#   OUTDIR/toolchain.env              interp= and libc= of the host toolchain
#
# Like a vendor tarball, every ELF file carries the RUNPATH /opt/vendor/lib
# and app the interpreter /nonexistent/ld.so, so app runs only once patched.
# CC (default gcc) builds it; the Nix checks reuse this script.
set -euo pipefail
export LC_ALL=C

if [ $# -ne 1 ]; then
	echo "usage: build-sample.sh OUTDIR" >&2
	exit 2
fi
src=$(cd "$(dirname "$0")/sample" && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
cc=${CC:-gcc}
old=/opt/vendor/lib
tmp=$out/.objs

mkdir -p "$tmp" "$out/deps/dep/lib" "$out/deps/nolib/bin" \
	"$out/prebuilt/out/bin" "$out/prebuilt/out/lib" "$out/prebuilt/out/share" \
	"$out/prebuilt/debug/lib"

"$cc" -shared -fPIC -o "$out/deps/dep/lib/libdep.so" -Wl,-soname,libdep.so "$src/dep.c"
"$cc" -shared -fPIC -o "$tmp/libcuda.so.1" -Wl,-soname,libcuda.so.1 "$src/cuda-stub.c"

lib=$out/prebuilt/out/lib
"$cc" -shared -fPIC -o "$lib/libfoo.so" -Wl,-soname,libfoo.so \
	-Wl,--enable-new-dtags,-rpath,$old "$src/foo.c" \
	-L"$out/deps/dep/lib" -ldep
"$cc" -shared -fPIC -o "$lib/libgpu.so" -Wl,-soname,libgpu.so \
	-Wl,--enable-new-dtags,-rpath,$old "$src/gpu.c" \
	"$tmp/libcuda.so.1"
"$cc" -shared -fPIC -o "$lib/libplain.so" -Wl,-soname,libplain.so \
	-Wl,--enable-new-dtags,-rpath,$old "$src/dep.c"
"$cc" -o "$out/prebuilt/out/bin/app" "$src/app.c" \
	-Wl,--enable-new-dtags,-rpath,$old -Wl,--dynamic-linker=/nonexistent/ld.so \
	-Wl,--no-as-needed -L"$lib" -lfoo -L"$out/deps/dep/lib" -ldep

mkdir -p "$out/deps/oldver/lib" "$out/prebuilt-ver/bin" "$out/prebuilt-dl/bin"
"$cc" -shared -fPIC -o "$tmp/libver.so" -Wl,-soname,libver.so \
	-Wl,--version-script="$src/ver-new.map" "$src/ver.c"
"$cc" -shared -fPIC -o "$out/deps/oldver/lib/libver.so" -Wl,-soname,libver.so \
	-Wl,--version-script="$src/ver-old.map" "$src/ver.c"
"$cc" -o "$out/prebuilt-ver/bin/vapp" "$src/vapp.c" \
	-Wl,--dynamic-linker=/nonexistent/ld.so "$tmp/libver.so"

"$cc" -o "$out/prebuilt-dl/bin/dlcaller" "$src/dlcaller.c" \
	-Wl,--enable-new-dtags,-rpath,$old -Wl,--dynamic-linker=/nonexistent/ld.so
"$cc" -o "$out/prebuilt-dl/bin/dlcode" "$src/dlcode.c" \
	-Wl,--enable-new-dtags,-rpath,$old -Wl,--dynamic-linker=/nonexistent/ld.so

echo "not an ELF file" >"$out/prebuilt/out/share/README"
cp "$lib/libfoo.so" "$out/prebuilt/debug/lib/libfoo.so"

# The host's loader and libc, which the tests' $NIX_BINTOOLS points at.
printf 'int main(void) { return 0; }\n' >"$tmp/probe.c"
"$cc" -o "$tmp/probe" "$tmp/probe.c"
interp=$(readelf -l "$tmp/probe" | sed -n 's/.*Requesting program interpreter: \(.*\)\]$/\1/p')
libc=$(readlink -f "$("$cc" -print-file-name=libc.so.6)")
printf 'interp=%s\nlibc=%s\n' "$interp" "$libc" >"$out/toolchain.env"
rm -rf "$tmp"

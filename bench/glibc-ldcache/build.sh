#!/usr/bin/env bash
# Build a glibc whose loader reads the resolution-cache note
# (.note.nixos.ldcache, issue 11): Debian trixie's glibc source (upstream
# 2.41 tarball + Debian's patch series) with ldcache.patch on top, built out
# of tree, then staged as a Nix-style libc directory:
#
#   bench/glibc-ldcache/build.sh [WORKDIR]      (default /tmp/glibc-ldcache)
#
# Result: WORKDIR/root/lib/{ld-linux-x86-64.so.2,libc.so.6,libm.so.6,...},
# debug info stripped. A program uses it the Nix way: PT_INTERP =
# WORKDIR/root/lib/ld-linux-x86-64.so.2 and WORKDIR/root/lib in its RUNPATH.
# WORKDIR/glibc-ldcache.tar.xz is the same directory packed for the GPU
# machine (gpu-ldcache.sh unpacks it).
#
# Needs: curl, xz, gcc >= 12, binutils, make, bison, gawk, python3
# (apt-get install bison gawk). About 6 minutes on 2 idle cores, 10-40 on a
# busy 2-core machine; a rebuild after changing the patch takes ~1 minute.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mkdir -p "${1:-/tmp/glibc-ldcache}" && cd "${1:-/tmp/glibc-ldcache}" && pwd)
URL=http://deb.debian.org/debian/pool/main/g/glibc
ORIG=glibc_2.41.orig.tar.xz
ORIG_SHA=f24aa441021121a79266f0d75242706cab8843a47901fefe74527491807f1998
DEB=glibc_2.41-12+deb13u4.debian.tar.xz
DEB_SHA=dda4153511bfd543502d18e5bc9323110996fe9c531f14ae3fad6eb17f027c7d
cd "$W"

for f in "$ORIG:$ORIG_SHA" "$DEB:$DEB_SHA"; do
	name=${f%%:*} sum=${f##*:}
	[ -f "$name" ] || curl -sSfO "$URL/$name"
	echo "$sum  $name" | sha256sum -c --quiet
done

if [ ! -f src/.unpacked ]; then
	rm -rf src && mkdir src
	tar -xf "$ORIG" -C src --strip-components=1
	tar -xf "$DEB" -C src
	(cd src && grep -v '^#' debian/patches/series | awk 'NF {print $1}' | while read -r p; do
		patch -p1 -s --no-backup-if-mismatch <"debian/patches/$p" || { echo "Debian patch $p failed" >&2; exit 1; }
	done)
	touch src/.unpacked
fi
# Apply ldcache.patch once; a changed patch needs a fresh src/ (rm -rf src).
if ! (cd src && patch -p1 -R -s -f --dry-run <"$HERE/ldcache.patch" >/dev/null 2>&1); then
	(cd src && patch -p1 -s --no-backup-if-mismatch <"$HERE/ldcache.patch")
fi

mkdir -p build
if [ ! -f build/config.status ]; then
	(cd build && ../src/configure --prefix=/usr --disable-werror >configure.log 2>&1) ||
		{ tail -20 build/configure.log; exit 1; }
fi
start=$(date +%s)
(cd build && nice -n 10 make -j"${JOBS:-2}" >make.log 2>&1) || { tail -30 build/make.log; exit 1; }
echo "make: $(($(date +%s) - start)) s"
grep -q 'trying cached file' build/elf/ld.so || { echo "ld.so lacks the ldcache patch" >&2; exit 1; }

# Stage: the loader under its usual name, and the libraries programs NEED.
rm -rf root && mkdir -p root/lib
cp build/elf/ld.so root/lib/ld-linux-x86-64.so.2
for f in libc.so.6 math/libm.so.6 mathvec/libmvec.so.1 dlfcn/libdl.so.2 nptl/libpthread.so.0 \
	rt/librt.so.1 login/libutil.so.1 resolv/libresolv.so.2 resolv/libanl.so.1 \
	nss/libnss_files.so.2 resolv/libnss_dns.so.2; do
	cp -L "build/$f" root/lib/
done
strip --strip-debug root/lib/*
tar -C root -cJf glibc-ldcache.tar.xz lib
echo "staged: $W/root/lib ($(du -sh root/lib | cut -f1)); packed: $W/glibc-ldcache.tar.xz ($(du -h glibc-ldcache.tar.xz | cut -f1))"
"$W/root/lib/ld-linux-x86-64.so.2" --version | head -1

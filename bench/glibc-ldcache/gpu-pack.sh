#!/usr/bin/env bash
# Put what gpu-ldcache.sh needs on the GPU machine into bench/out/gpu-ldcache
# (gitignored; carry it with the run):
#   glibc-ldcache.tar.xz  our loader and glibc libraries (build.sh packs it)
#   patchelf              NixOS/patchelf master, stripped
#   cudapatch             built from this checkout with CGO_ENABLED=0
#
#   bench/glibc-ldcache/gpu-pack.sh BUILD_WORKDIR PATCHELF_MASTER
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:?usage: gpu-pack.sh BUILD_WORKDIR PATCHELF_MASTER}
PE=${2:?patchelf master binary}
O=$ROOT/bench/out/gpu-ldcache
rm -rf "$O" && mkdir -p "$O"
cp "$B/glibc-ldcache.tar.xz" "$O/"
strip -o "$O/patchelf" "$PE"
(cd "$ROOT" && CGO_ENABLED=0 PATH=$PATH:/usr/local/go/bin go build -buildvcs=true -o "$O/cudapatch" ./cmd/cudapatch)
echo "cudapatch from $(git -C "$ROOT" rev-parse --short HEAD)" >"$O/VERSION"
ls -l "$O"
du -sh "$O"

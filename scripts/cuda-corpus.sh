#!/usr/bin/env bash
# scripts/cuda-corpus.sh: the CUDA corpus of the benchmarks and real-library
# checks (bench/run.sh, bench/index.sh, bench/ldcache-loader.sh,
# scripts/corpus-check.sh): the CUDA 11.8 redistributables and the NVIDIA
# 535 driver libraries as Debian 12 ships them in non-free, unpacked into
# directories named like Nix store paths.
#
#   bash scripts/cuda-corpus.sh [DIR]      (default /tmp/cpcorpus)
#
# Downloads about 1.4 GB of .debs into DIR/debs (kept: a second run reuses
# them) and needs about 5 GB in all. The package lists are fetched into
# DIR/apt with apt's signature checks against the Debian archive keyring;
# the system's apt sources are not touched, and root is not needed.
# Needs apt-get and dpkg-deb (any Debian or Ubuntu), and the keyring
# (package debian-archive-keyring).
# Env: DEBIAN_MIRROR (default http://deb.debian.org/debian), DEBIAN_SECURITY
# (default http://deb.debian.org/debian-security), DEBIAN_KEYRING (default
# /usr/share/keyrings/debian-archive-keyring.gpg).
#
# DIR/pristine is the reference and is never patched; copy store/ first.
set -euo pipefail

D=$(mkdir -p "${1:-/tmp/cpcorpus}" && cd "${1:-/tmp/cpcorpus}" && pwd)
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY=${DEBIAN_SECURITY:-http://deb.debian.org/debian-security}
KEYRING=${DEBIAN_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}
SUITE=bookworm # the store names below are bookworm's CUDA 11.8 versions
log() { printf '%s cuda-corpus.sh: %s\n' "$(date +%T)" "$*" >&2; }
die() { printf 'cuda-corpus.sh: %s\n' "$*" >&2; exit 1; }
for t in apt-get dpkg-deb; do command -v "$t" >/dev/null || die "needs $t (Debian or Ubuntu)"; done
[ -r "$KEYRING" ] || die "$KEYRING: missing (apt-get install debian-archive-keyring, or set DEBIAN_KEYRING)"

CUDA_PKGS=(libcublas11 libcublaslt11 libnvblas11 libcudart11.0 libnvrtc11.2 libnvrtc-builtins11.8
	libcufft10 libcufftw10 libcusparse11 libcurand10 libcusolver11 libnppc11 libnppig11 libnvjpeg11
	libcupti11.8 nvidia-cuda-dev)
DRIVER_PKGS=(libcuda1 libnvidia-ptxjitcompiler1 libnvidia-ml1 nvidia-smi)
GCC_PKGS=(libstdc++6 libgcc-s1)
PKGS=("${CUDA_PKGS[@]}" "${DRIVER_PKGS[@]}" "${GCC_PKGS[@]}")

# ---- download: apt with its own sources, lists and cache under DIR/apt ----
A=$D/apt
mkdir -p "$A/lists/partial" "$A/cache/archives/partial" "$D/debs"
cat >"$A/sources.list" <<EOF
deb [signed-by=$KEYRING] $MIRROR $SUITE main contrib non-free
deb [signed-by=$KEYRING] $MIRROR $SUITE-updates main contrib non-free
deb [signed-by=$KEYRING] $SECURITY $SUITE-security main contrib non-free
EOF
APT=(-o "Dir::Etc::SourceList=$A/sources.list" -o Dir::Etc::SourceParts=/dev/null
	-o "Dir::State::Lists=$A/lists" -o "Dir::Cache=$A/cache" -o Dir::Cache::pkgcache=
	-o Dir::Cache::srcpkgcache= -o APT::Architecture=amd64 -o APT::Architectures::=amd64
	-o APT::Sandbox::User=root -o Debug::NoLocking=1)
missing=()
for p in "${PKGS[@]}"; do
	compgen -G "$D/debs/${p}_*.deb" >/dev/null || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	log "fetching Debian $SUITE's package lists (main contrib non-free) into $A"
	apt-get "${APT[@]}" -qq update || die "apt-get update failed (network, or $MIRROR)"
	log "downloading ${#missing[@]} packages (about 1.4 GB for all of them) into $D/debs"
	(cd "$D/debs" && apt-get "${APT[@]}" -q download "${missing[@]}") || die "apt-get download failed"
fi
deb() { # PACKAGE: its one .deb
	local f
	f=$(compgen -G "$D/debs/${1}_*.deb") || die "$1: no .deb in $D/debs"
	[ "$(wc -l <<<"$f")" = 1 ] || die "$1: more than one .deb in $D/debs (remove the old ones)"
	echo "$f"
}
upstream() { # PACKAGE: its upstream version, without epoch or Debian revision
	dpkg-deb -f "$(deb "$1")" Version | sed 's/^[0-9]*://; s/-[^-]*$//; s/~.*//'
}
cublas=$(upstream libcublas11)
[ "$cublas" = 11.11.3.6 ] || log "warning: libcublas11 is $cublas, not 11.11.3.6 (CUDA 11.8); the store names say 11.8"
driver=$(upstream libcuda1)

# ---- the trees: one "store path" per package family, built aside, then moved ----
T=$D/pristine.tmp
rm -rf "$T" && mkdir -p "$T/store"
S=$T/store
mk() { # NAME PACKAGE...: the packages' x86_64 libraries under NAME/lib, programs under NAME/bin
	local out=$S/$1 p
	shift
	mkdir -p "$out/x" "$out/lib" "$out/bin"
	for p in "$@"; do dpkg-deb -x "$(deb "$p")" "$out/x"; done
	[ -d "$out/x/usr/lib/x86_64-linux-gnu" ] && cp -a "$out/x/usr/lib/x86_64-linux-gnu/." "$out/lib/"
	[ -d "$out/x/usr/bin" ] && cp -a "$out/x/usr/bin/." "$out/bin/"
	rm -rf "$out/x"
}
log "unpacking into $D/pristine"
mk 7q1c4mclhbm1z4j9g2sww0k4khvsd0c1-libcublas-11.11.3.6 libcublas11 libcublaslt11 libnvblas11
mk 0yc2rb1cx1n9m3hc0cvn1v5r8fh0z6i2-cuda_cudart-11.8.89 libcudart11.0
mk a3v0ab1xw4khwq6cz8wsd58xvfk5l4bf-cuda_nvrtc-11.8.89 libnvrtc11.2 libnvrtc-builtins11.8
mk kk9qm0p7r8bk4dd0v2c51h0y1b8y5w6n-libcufft-10.9.0.58 libcufft10 libcufftw10
mk 2ha8w3b5p2s0vq3kjw9a5l7fx3w9d1c4-libcusparse-11.7.5.86 libcusparse11
mk 6g4c0vq8b0rj1z7w5k2m8h3n9p1x4s7d-libcurand-10.3.0.86 libcurand10
mk 9m1x3k5v7b9n2c4x6z8q1w3e5r7t9y2u-libcusolver-11.4.1.48 libcusolver11
mk 4r6t8y1u3i5o7p9a2s4d6f8g1h3j5k7l-libnpp-11.8.0.86 libnppc11 libnppig11 libnvjpeg11
mk 5z7x9c1v3b5n7m2q4w6e8r1t3y5u7i9o-cuda_cupti-11.8.87 libcupti11.8
mk "1q2w3e4r5t6y7u8i9o0p1a2s3d4f5g6h-nvidia-x11-$driver" libcuda1 libnvidia-ptxjitcompiler1 libnvidia-ml1 nvidia-smi
# The toolkit's stub libcuda: a trap, never to be chosen at run time.
ST=$S/8h7g6f5d4s3a2p1o9i8u7y6t5r4e3w2q-cuda_cudart-11.8.89-stubs/lib/stubs
mkdir -p "$ST" "$T/x"
dpkg-deb --fsys-tarfile "$(deb nvidia-cuda-dev)" | tar -x -C "$T/x" ./usr/lib/x86_64-linux-gnu/stubs/libcuda.so
cp "$T/x/usr/lib/x86_64-linux-gnu/stubs/libcuda.so" "$ST/"
rm -rf "$T/x"
ln -sf libcuda.so "$ST/libcuda.so.1"
# The gcc runtime, a typical buildInput.
G=$S/3c5v7b9n1m3q5w7e9r2t4y6u8i1o3p5a-gcc-12.2.0-lib/lib
mkdir -p "$G" "$T/x"
for p in "${GCC_PKGS[@]}"; do dpkg-deb -x "$(deb "$p")" "$T/x"; done
for l in libstdc++.so.6 libgcc_s.so.1; do # under /usr/lib or /lib, as the package has it
	f=$(find "$T/x" -name "$l" | head -1)
	[ -n "$f" ] || die "$l: not in ${GCC_PKGS[*]}"
	cp -L "$f" "$G/"
done
rm -rf "$T/x"
# What NIX_BINTOOLS/nix-support provides in a Nix build: the dynamic linker
# and where libc lives (this machine's, so that what is patched can run).
B=$T/bintools/nix-support
mkdir -p "$B" "$T/libc/lib"
echo /lib64/ld-linux-x86-64.so.2 >"$B/dynamic-linker"
echo "$D/pristine/libc" >"$B/orig-libc"
for l in libc.so.6 libm.so.6 libdl.so.2 librt.so.1 libpthread.so.0 libutil.so.1 libresolv.so.2 ld-linux-x86-64.so.2; do
	ln -sf "/lib/x86_64-linux-gnu/$l" "$T/libc/lib/$l"
done
rm -rf "$D/pristine" && mv "$T" "$D/pristine"
log "$(du -sh "$D/pristine" | cut -f1), $(find "$D/pristine" -type f | wc -l) files"
cat <<MSG
Corpus ready under $D/pristine:
  store/*-libcublas-*, *-cuda_cudart-*, ... : CUDA 11.8 libraries as shipped (RUNPATH \$ORIGIN or none)
  store/*-nvidia-x11-*/lib/nvidia/current   : a real driver libcuda.so.1 ($driver), to play /run/opengl-driver/lib
  store/*-cuda_cudart-*-stubs/lib/stubs      : the toolkit's stub libcuda.so (+ libcuda.so.1 link): must never win at run time
  store/*-gcc-12.2.0-lib/lib                 : libstdc++ / libgcc_s, a typical buildInput
  bintools/nix-support/{dynamic-linker,orig-libc} : what NIX_BINTOOLS provides in a Nix build
Copy store/ before patching; the pristine tree is the reference.
MSG

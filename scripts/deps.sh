#!/usr/bin/env bash
# deps.sh: install the Debian packages the test suite needs, when missing.
#
# scripts/test.sh runs it first, so the README's test command does the whole
# set-up on a fresh Debian 12 machine that has only Go and gcc. As root it
# runs apt-get; otherwise it prints the one apt-get line to run and exits 1.
# `deps.sh --list` prints the package names, one a line.
set -euo pipefail

packages=(
	# toolchains for the fixtures (testdata/gen.sh) and the tests' own builds
	gcc libc6-dev binutils lld mold
	gcc-aarch64-linux-gnu libc6-dev-arm64-cross
	gcc-i686-linux-gnu libc6-dev-i386-cross
	gcc-arm-linux-gnueabihf libc6-dev-armhf-cross
	gcc-powerpc64le-linux-gnu libc6-dev-ppc64el-cross
	gcc-riscv64-linux-gnu libc6-dev-riscv64-cross
	gcc-s390x-linux-gnu libc6-dev-s390x-cross
	gcc-powerpc64-linux-gnu libc6-dev-ppc64-cross
	# running foreign binaries, checking results, oracles
	qemu-user elfutils patchelf python3 file time strace
	# the glibc whose loader reads resolution-cache notes, built from
	# Debian's sources as the oracle of explain's nixos loader
	# (bench/glibc-ldcache/build.sh, fixtures.NoteLoader)
	make patch bison gawk curl xz-utils
	# the hook harness and the Nix files
	bash shellcheck nix-bin
	# the shell completions (bash, zsh, fish) and the man page (mandoc -T lint, man -l)
	zsh fish mandoc man-db
	# go mod download over HTTPS, and the checkout's own metadata
	ca-certificates git
)

if [ "${1:-}" = --list ]; then
	printf '%s\n' "${packages[@]}"
	exit 0
fi

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
	exit 0
fi

line="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" != 0 ]; then
	echo "deps.sh: ${#missing[@]} Debian packages the tests need are missing; as root, run:" >&2
	echo "  apt-get update && $line" >&2
	exit 1
fi
echo "deps.sh: installing ${#missing[@]} missing Debian packages (${missing[*]}); about a minute on a fresh machine" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086 # $line is one command, split into words on purpose
$line -qq >/dev/null
echo "deps.sh: done" >&2

#!/usr/bin/env bash
# fresh-root.sh [--log FILE] [--command COMMAND]...: the README's two
# commands in a fresh Debian 12 root, so that a failure that depends on the
# machine (its CPU, its packages, what a developer's machine happens to
# have) shows here before a user meets it. --command runs COMMAND (in the
# clone, by bash) instead of them, to look at one failure in such a root.
#
#   1. debootstrap --variant=minbase bookworm into a temporary directory,
#      with only gcc, libc6-dev, git and ca-certificates (the README's
#      "Debian 12 with Go and gcc"), and the host's extra CA certificates;
#   2. the host's /usr/local/go copied in (no Go download is possible);
#   3. a git clone of this checkout's committed HEAD (not its uncommitted
#      changes), as a user's clone would be;
#   4. in a private mount and PID namespace: the root bound on itself (a
#      mount point, as a machine's / is), /proc, /sys, /dev (with /dev/pts
#      and /dev/shm) mounted, then, chrooted as root with a clean
#      environment, `bash scripts/demo.sh` and `bash scripts/test.sh`;
#   5. on exit, failed or not: everything unmounted, every process of the
#      chroot ended (the PID namespace ends with its first process), the
#      directory removed.
#
# As root, on Debian; the network it needs is Debian's archive (debootstrap,
# and the suite's own apt-get) and the Go module proxy. It exits non-zero
# when either command fails, and prints each command's exit status and wall
# time. Inside, CUDAPATCH_FRESH_ROOT=1 is set, so scripts/test.sh does not
# start another fresh root. DEBIAN_MIRROR picks the archive
# (http://deb.debian.org/debian); FRESH_ROOT_PARENT the directory that holds
# the root (/var/tmp: the root grows to a few GB, too much for a small tmpfs).
set -euo pipefail

# --inside ROOT COMMAND...: the part that runs in the new namespaces (see
# below).
if [ "${1:-}" = --inside ]; then
	root=$2
	shift 2
	inner_commands=("$@")
	# shellcheck disable=SC2317 # called by the EXIT trap
	unmount_all() {
		if mountpoint -q "$root"; then
			umount -R "$root" || umount -l "$root" || true
		fi
	}
	trap unmount_all EXIT
	# The root bound on itself first, so that the chroot's / is a mount
	# point, as a machine's is: `unshare --propagation`, which the Nix
	# tier uses to run programs with a driver link of their own, refuses
	# a / that is not one. The mounts below go on top of it.
	mount --bind "$root" "$root"
	# A new proc for the new PID namespace: the chroot sees its own
	# processes only.
	mount -t proc proc "$root/proc"
	mount --rbind /sys "$root/sys"
	# /dev from the host (null, zero, urandom, tty, the loop devices), but
	# fresh pts and shm instances.
	mount --bind /dev "$root/dev"
	mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$root/dev/pts"
	mount -t tmpfs -o mode=1777 shm "$root/dev/shm"
	# shellcheck disable=SC2016 # dpkg-query's format, not the shell's
	echo "### chroot: Debian $(cat "$root/etc/debian_version"), $(chroot "$root" dpkg-query -W -f='${Package}\n' | wc -l) packages; commit $(git -C "$root/root/cudapatch" rev-parse --short HEAD); $(nproc) CPUs; $(date -u)"
	rc=0
	for cmd in "${inner_commands[@]}"; do
		echo "### \$ $cmd"
		start=$(date +%s)
		crc=0
		chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
			PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
			CUDAPATCH_FRESH_ROOT=1 ${CI:+CI="$CI"} ${FUZZTIME:+FUZZTIME="$FUZZTIME"} \
			bash -c "cd /root/cudapatch && $cmd" 2>&1 || crc=$?
		echo "### exit $crc after $(($(date +%s) - start)) s: $cmd"
		if [ "$crc" != 0 ] && [ "$rc" = 0 ]; then
			rc=$crc
		fi
	done
	exit "$rc"
fi

log=
commands=()
while [ $# != 0 ]; do
	case $1 in
	--log)
		log=${2:?--log needs a FILE}
		shift 2
		;;
	--command)
		commands+=("${2:?--command needs a COMMAND}")
		shift 2
		;;
	*)
		echo "usage: fresh-root.sh [--log FILE] [--command COMMAND]..." >&2
		exit 2
		;;
	esac
done
if ((${#commands[@]} == 0)); then
	commands=("bash scripts/demo.sh" "bash scripts/test.sh")
fi
if [ -n "$log" ]; then
	exec > >(tee "$log") 2>&1
fi
if [ "$(id -u)" != 0 ]; then
	echo "fresh-root.sh: must run as root (debootstrap, mount, chroot)" >&2
	exit 1
fi
if [ ! -x /usr/local/go/bin/go ]; then
	echo "fresh-root.sh: no /usr/local/go/bin/go to copy into the root (the README asks for Go under /usr/local/go)" >&2
	exit 1
fi
repo=$(cd "$(dirname "$0")/.." && pwd)
commit=$(git -C "$repo" rev-parse HEAD)
if ! command -v debootstrap >/dev/null; then
	echo "fresh-root.sh: installing debootstrap" >&2
	DEBIAN_FRONTEND=noninteractive apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

parent=${FRESH_ROOT_PARENT:-/var/tmp}
root=$(mktemp -d "$parent/cudapatch-fresh-root.XXXXXX")
# mktemp makes it 0700, and the chroot's / is this directory: other users
# (the tests run the CLI as nobody) could reach nothing in it.
chmod 0755 "$root"
started=$(date +%s)

# Mounts under ROOT as this namespace sees them (none, normally: they were
# made in the private namespace, which is gone by now).
mounts_under_root() {
	awk -v r="$root" '$5 == r || index($5, r "/") == 1 { print $5 }' /proc/self/mountinfo
}
cleanup() {
	local m
	# Deepest first.
	for m in $(mounts_under_root | sort -r); do
		umount -R "$m" 2>/dev/null || umount -l "$m" || true
	done
	if [ -n "$(mounts_under_root)" ]; then
		echo "fresh-root.sh: still mounted under $root, not removing it:" >&2
		mounts_under_root >&2
		return
	fi
	rm -rf --one-file-system "$root"
	echo "### fresh-root.sh: removed $root; $(($(date +%s) - started)) s in all" >&2
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "### debootstrap bookworm into $root"
start=$(date +%s)
debootstrap --variant=minbase --include=gcc,libc6-dev,ca-certificates,git \
	bookworm "$root" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >/dev/null
# The suite's own apt-get (scripts/deps.sh) reads sources.list.
echo "deb ${DEBIAN_MIRROR:-http://deb.debian.org/debian} bookworm main" >"$root/etc/apt/sources.list"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# A workplace's own CA (an HTTPS proxy), where the host has one.
if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
	cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
	chroot "$root" update-ca-certificates >/dev/null 2>&1
fi
echo "### debootstrap: $(($(date +%s) - start)) s"
cp -a /usr/local/go "$root/usr/local/go"
git clone -q --no-local "$repo" "$root/root/cudapatch"
git -C "$root/root/cudapatch" checkout -q "$commit"

# The mounts and the chroot in their own mount namespace (nothing mounted
# there can reach the host's mounts, and the kernel drops every mount when
# the namespace ends) and PID namespace (a process the tests leave behind
# ends with the namespace's first process).
unshare --mount --propagation private --pid --fork -- bash "$0" --inside "$root" "${commands[@]}"

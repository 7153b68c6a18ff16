#!/usr/bin/env bash
# fresh-machine.sh ROOT COMMIT LOG: run the README's two commands in a debootstrapped
# Debian 12 chroot holding only Go (/usr/local/go), gcc, git and ca-certificates:
#   debootstrap --variant=minbase --include=gcc,libc6-dev,ca-certificates,git bookworm ROOT
#   cp -a /usr/local/go ROOT/usr/local/go   # and the workplace's CA, if it has one
# As root. The transcript, with each command's exit and time, goes to LOG.
set -u
root=$1 commit=$2 log=$3
for m in proc sys dev dev/pts; do mountpoint -q "$root/$m" || mount --bind "/$m" "$root/$m"; done
rm -rf "$root/root/cudapatch"
git clone -q "$(cd "$(dirname "$0")/.." && pwd)" "$root/root/cudapatch" && git -C "$root/root/cudapatch" checkout -q "$commit"
{
# shellcheck disable=SC2016 # dpkg-query's format, not the shell's
echo "### chroot: $(cat "$root/etc/debian_version"), packages: $(chroot "$root" dpkg-query -W -f='${Package}\n' | wc -l); commit $commit; $(date -u)"
for cmd in "bash scripts/demo.sh" "bash scripts/test.sh"; do
  echo "### \$ $cmd"
  start=$(date +%s)
  chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin TERM=dumb bash -c "cd /root/cudapatch && $cmd" 2>&1
  rc=$?
  echo "### exit $rc after $(( $(date +%s) - start )) s"
done
} > "$log" 2>&1
for m in dev/pts dev sys proc; do umount "$root/$m" 2>/dev/null; done

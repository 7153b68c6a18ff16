#!/usr/bin/env bash
# The main job on a bundled sample: a "prebuilt package" built from the C
# sources in hooks/test/sample (an executable, its libraries, one that needs
# the CUDA driver, all with a vendor RUNPATH and a bogus interpreter), patched
# in one pass the way the Nix hook would, then run.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== building the sample package from C sources (hooks/test/sample) and cudapatch (a cold Go cache takes about 2 minutes)"
bash hooks/test/build-sample.sh "$work" >/dev/null
# shellcheck disable=SC1091
. "$work/toolchain.env" # interp= and libc= of this machine's toolchain
go build -o "$work/cudapatch" ./cmd/cudapatch
out=$work/prebuilt/out

echo "== before"
"$work/cudapatch" print "$out/bin/app" "$out/lib/libgpu.so"
if env -u LD_LIBRARY_PATH "$out/bin/app" 2>/dev/null; then echo "unexpected: ran before patching"; exit 1; fi
echo "(app does not run: its interpreter and libraries cannot be found)"

echo "== cudapatch"
"$work/cudapatch" --search "$work/deps/dep/lib" --interpreter "$interp" --libc "$(dirname "$libc")" "$out"

echo "== after"
"$work/cudapatch" print "$out/bin/app" "$out/lib/libgpu.so"
"$work/cudapatch" verify "$out/bin/app" "$out/lib/libfoo.so" "$out/lib/libgpu.so"
echo "== run"
env -u LD_LIBRARY_PATH "$out/bin/app"

#!/usr/bin/env bash
# The facts of the Nix tier (nix/tests/build, hooks' TestNixBuild), read from
# the store after a run: for each case, its derivation, and for each output
# its store path, closure size (nix-store -q --requisites: paths, the sum of
# nix-store -q --size, and du of the same paths) and references. Builds
# nothing: run `go test ./hooks -run TestNixBuild` first (as root, with
# nix-bin), from the same checkout (the store paths are evaluated again, so
# a Go source changed since then shows as "not built").
#
#   bash scripts/nix-tier-report.sh [--full]     # --full: hashes too
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin

full=
[[ ${1-} == --full ]] && full=1

export NIX_CONFIG=$'sandbox = false\nbuild-users-group =\nsubstituters =\n'
export NIX_REMOTE=local
unset LD_LIBRARY_PATH

interp=$(readelf -l /bin/bash | sed -n 's/.*Requesting program interpreter: \(.*\)]$/\1/p')
args=(
	--argstr hostGo "$(command -v go)"
	--argstr hostGoModCache "$(go env GOMODCACHE)"
	--argstr hostCC "$(command -v gcc)"
	--argstr hostPatchelf "$(command -v patchelf)"
	--argstr hostInterp "$interp"
	--argstr hostLibc "$(readlink -f "$(gcc -print-file-name=libc.so.6)")"
)
if [[ -n ${CUDAPATCH-} ]]; then
	args+=(--argstr cudapatchExe "$(readlink -f "$CUDAPATCH")")
fi

manifest=$(nix-instantiate --eval --strict --json -A manifest nix/tests/build "${args[@]}")

name() {
	if [[ -n $full ]]; then
		printf '%s' "$1"
	else
		local b=${1##*/}
		printf '%s' "${b#*-}"
	fi
}

python3 -c '
import json, sys
m = json.load(sys.stdin)
for case in sorted(m["cases"]):
    c = m["cases"][case]
    for o in sorted(c["outputs"]):
        print(case, c["drvPath"], o, c["outputs"][o]["path"])
' <<<"$manifest" | while read -r case drv output path; do
	if ! nix-store --check-validity "$path" 2>/dev/null; then
		printf '%s (%s) %s: not built\n' "$case" "$(name "$drv")" "$output"
		continue
	fi
	mapfile -t reqs < <(nix-store -q --requisites "$path")
	mapfile -t refs < <(nix-store -q --references "$path")
	bytes=0
	for r in "${reqs[@]}"; do
		bytes=$((bytes + $(nix-store -q --size "$r")))
	done
	du=$(du -scb "${reqs[@]}" | tail -1 | cut -f1)
	names=()
	for r in "${refs[@]}"; do
		names+=("$(name "$r")")
	done
	printf '%s (%s) %s: %s\n  closure: %d paths, %d bytes (nix-store -q --size), %d bytes (du -b)\n  references: %s\n' \
		"$case" "$(name "$drv")" "$output" "$(name "$path")" "${#reqs[@]}" "$bytes" "$du" "${names[*]:-(none)}"
done

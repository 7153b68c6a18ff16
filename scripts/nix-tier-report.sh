#!/usr/bin/env bash
# The facts of the Nix tier (nix/tests/build, hooks' TestNixBuild): for each
# case, its derivation, and for each output its store path, closure size
# (nix-store -q --requisites: paths, the sum of nix-store -q --size, and du
# of the same paths) and references. As the test does, it evaluates once
# (--read-write-mode) and builds those .drv paths (nothing to do when the
# test has built them from the same sources; cudapatch is rebuilt when a Go
# source changed since). Checks nothing: `go test ./hooks -run TestNixBuild`
# does. As root, with nix-bin, offline.
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

manifest=$(nix-instantiate --eval --strict --json --read-write-mode -A manifest nix/tests/build "${args[@]}")
mapfile -t drvs < <(python3 -c 'import json, sys; print("\n".join(json.load(sys.stdin)["build"]))' <<<"$manifest")
start=$SECONDS
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! nix-build --no-out-link --keep-going "${drvs[@]}" >/dev/null 2>"$log"; then
	tail -40 "$log" >&2
	echo "nix-build failed; the outputs below that were not built say so" >&2
fi
echo "built ${#drvs[@]} derivations in $((SECONDS - start)) s (0: already in the store)"

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
	mapfile -t refs < <(nix-store -q --references "$path" | sort -t- -k2)
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

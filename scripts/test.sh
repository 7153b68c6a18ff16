#!/usr/bin/env bash
# The whole test suite: formatting, go.mod tidiness, vet, every package's
# tests (the fixture matrix is built from source on first use), then each
# fuzz target for a bounded time. README: "Two commands for a fresh machine".
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin:$HOME/go/bin

# A line before every step that can take a while, so a fresh machine's first
# run is never silent for minutes.
step() { echo "== $*" >&2; }

# The Debian packages the tests need: installed here when missing (as root),
# otherwise deps.sh prints the apt-get line to run and the suite stops.
step "checking the Debian packages the tests need (scripts/deps.sh)"
bash scripts/deps.sh
if ! command -v go >/dev/null; then
	echo "test.sh: no go on PATH; the README asks for Go 1.26 under /usr/local/go" >&2
	exit 1
fi
go version
# Nix (the hooks' Nix tier, nix/tests/build): Debian's nix-bin alone, no
# daemon, no nixbld group, no /etc/nix/nix.conf. As root, the first build
# creates /nix/store and /nix/var/nix; the test passes sandbox = false,
# build-users-group = "" and substituters = "" through NIX_CONFIG itself.
nix-build --version
step "downloading the Go modules (go mod download)"
go mod download

step "gofmt, go mod tidy -diff, go vet"
mapfile -t gofiles < <(git ls-files '*.go')
unformatted=$(gofmt -l "${gofiles[@]}")
if [ -n "$unformatted" ]; then
	echo "gofmt would change: $unformatted" >&2
	exit 1
fi
# An untidy go.mod (a dependency marked // indirect that is imported, a
# missing or stale go.sum line) fails here, before the tests.
go mod tidy -diff
go vet ./...
# The oracle of explain's nixos loader: Debian's glibc 2.41 with our
# ldcache.patch (docs/glibc-ldcache.md), downloaded from Debian's archive
# and built once, then kept under testdata/build/glibc-ldcache/. Its own
# step, because the first build takes minutes.
step "the note-reading glibc (first run: downloads Debian's glibc source and builds it, 6 to 10 minutes on 2 cores)"
go test -count=1 -timeout 60m -run '^TestNoteLoader$' ./cmd/cudapatch
step "go test ./... (about 5 minutes on 2 cores; a fresh clone first builds the fixture matrix from testdata/src, and ./hooks runs real nix-builds)"
go test -count=1 -timeout 30m ./...

# The benchmark smoke run: what the main job's two checks cost against
# the same job with both off, on a 300-file tree of this machine's
# libraries (bench/checks.sh). Its ratios are printed, never asserted:
# timings on a shared machine are no test, and bench/RESULTS.md and
# bench/HISTORY.md keep the measured ones.
step "benchmark smoke run: the checks' cost (bench/checks.sh, 300 files, 3 rounds)"
smoke=$(mktemp -d)
go build -o "$smoke/cudapatch" ./cmd/cudapatch
COUNT=300 CORPUS=0 bash bench/checks.sh "$smoke/cudapatch" 3 "$smoke/work"
rm -rf "$smoke"

# patchelf's own test suite against cudapatch installed as patchelf
# (docs/patchelf-suite.md). It needs a patchelf source tree, which CI does
# not fetch.
if [ -n "${PATCHELF_SRC:-}" ]; then
	bash scripts/patchelf-suite.sh "$PATCHELF_SRC"
else
	echo "skipping patchelf's own test suite: PATCHELF_SRC is not set (a NixOS/patchelf source tree, see docs/patchelf-suite.md)"
fi

# Fuzz targets, FUZZTIME each (default 20s). Run them longer by hand:
#   go test ./rpath/elfedit -run=- -fuzz=FuzzRead -fuzztime=30m
fuzztime=${FUZZTIME:-20s}
# A run whose time runs out while the fuzzer is still minimizing a new
# *interesting* (not failing) input ends in "context deadline exceeded" with
# no crasher written (a known go test -fuzz wart); such a run is repeated once.
# A real failure writes testdata/fuzz/<target>/<hash> and fails at once.
fuzz() {
	local pkg=$1 target=$2 log
	log=$(mktemp)
	if go test "$pkg" -run=- -fuzz="^${target}\$" -fuzztime="$fuzztime" -fuzzminimizetime=5s 2>&1 | tee "$log"; then
		rm -f "$log"
		return 0
	fi
	if grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input written to' "$log"; then
		rm -f "$log"
		echo "fuzz: $target ran out of time while minimizing an interesting input; running it again"
		go test "$pkg" -run=- -fuzz="^${target}\$" -fuzztime="$fuzztime" -fuzzminimizetime=5s
		return
	fi
	rm -f "$log"
	return 1
}
step "fuzz targets, $fuzztime each"
while read -r pkg target; do
	fuzz "$pkg" "$target"
done < <(grep -rE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+\(' . |
	sed -E 's#^\./(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]+)\(.*#./\1 \2#' | sort -u)

# In CI only, last: the README's two commands once more, in a fresh Debian 12
# root on the same machine (scripts/fresh-root.sh; docs/fresh-root.md has
# its time), so that a failure that depends on the machine or on
# what this one has installed shows in CI first. Inside that root
# CUDAPATCH_FRESH_ROOT is set, and this step is not repeated.
if [ "${CI:-}" = true ] && [ -z "${CUDAPATCH_FRESH_ROOT:-}" ]; then
	step "the README's two commands in a fresh Debian 12 root (scripts/fresh-root.sh)"
	bash scripts/fresh-root.sh
fi

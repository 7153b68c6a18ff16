#!/usr/bin/env bash
# The whole test suite: formatting, vet, every package's tests (the fixture
# matrix is built from source on first use), then each fuzz target for a
# bounded time. README: "Running the tests".
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin

unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change: $unformatted" >&2
	exit 1
fi
go vet ./...
go test -count=1 -timeout 30m ./...

# Fuzz targets, FUZZTIME each (default 20s). Run them longer by hand:
#   go test ./rpath/elfedit -run=- -fuzz=FuzzRead -fuzztime=30m
fuzztime=${FUZZTIME:-20s}
while read -r pkg target; do
	go test "$pkg" -run=- -fuzz="^${target}\$" -fuzztime="$fuzztime" -fuzzminimizetime=5s
done < <(grep -rE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]+\(' . |
	sed -E 's#^\./(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]+)\(.*#./\1 \2#' | sort -u)

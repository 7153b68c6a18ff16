#!/usr/bin/env bash
# Runs patchelf's own test suite (its tests/ directory, `make check`) against
# cudapatch installed as `patchelf`, and against the real patchelf built from
# the same source, and prints, for each, "N passed, N failed, N skipped" with
# the lists; then the tests that real patchelf passes and cudapatch does not.
#
# Usage: bash scripts/patchelf-suite.sh PATCHELF_SRC [WORK_DIR]
#
# PATCHELF_SRC is a patchelf source tree (NixOS/patchelf, e.g. `git archive`
# of master); WORK_DIR (default: a new temporary directory) gets the build.
# Needs autoconf, automake, make, gcc and g++; fetches nothing. patchelf is
# GPL-3.0: its source and build stay outside this repository.
#
# Exit status: 0 when every test real patchelf passes passes with cudapatch
# too (docs/patchelf-suite.md lists the deliberate differences, which are
# reported but do not fail the run), 1 otherwise, 2 on bad usage.
set -euo pipefail
export LC_ALL=C

if [[ $# -lt 1 || $# -gt 2 || ! -f $1/tests/Makefile.am ]]; then
    echo "usage: $0 PATCHELF_SRC [WORK_DIR]  (PATCHELF_SRC: a patchelf source tree)" >&2
    exit 2
fi
repo=$(cd "$(dirname "$0")/.." && pwd)
src=$(cd "$1" && pwd)
work=${2:-$(mktemp -d)}
mkdir -p "$work"
work=$(cd "$work" && pwd)
export PATH=$PATH:/usr/local/go/bin

# Tests whose difference is deliberate (docs/patchelf-suite.md says why).
deliberate=(
    # The file has no PT_DYNAMIC; patchelf writes the search path into a
    # .dynamic section nothing loads (readelf -d afterwards: "There is no
    # dynamic section in this file"), cudapatch refuses as for any file
    # without dynamic linking.
    phdr-corruption.sh
)

if [[ ! -x $src/configure ]]; then
    (cd "$src" && ./bootstrap.sh) >"$work/bootstrap.log" 2>&1 || {
        echo "$0: bootstrap.sh failed, see $work/bootstrap.log" >&2
        exit 1
    }
fi

# build DIR: configure and build patchelf and its test programs in DIR.
build() {
    mkdir -p "$1"
    (cd "$1" && "$src/configure" && make -j"$(nproc)" && make -C tests -j"$(nproc)" check TESTS=) \
        >"$1/build.log" 2>&1 || {
        echo "$0: building patchelf in $1 failed, see $1/build.log" >&2
        exit 1
    }
}

# suite DIR: run the tests in DIR; prints "NAME RESULT" lines, sorted.
suite() {
    rm -f "$1"/tests/*.trs "$1"/tests/*.log
    make -C "$1/tests" -k -j"$(nproc)" check >"$1/check.log" 2>&1 || true
    for trs in "$1"/tests/*.trs; do
        name=${trs##*/}
        printf '%s %s\n' "${name%.trs}" "$(sed -n 's/^:test-result: //p' "$trs")"
    done | sort
}

# report LABEL FILE: the counts and lists of one run.
report() {
    local pass fail skip
    pass=$(grep -c ' PASS$' "$2" || true)
    fail=$(grep -Ec ' (FAIL|ERROR|XPASS)$' "$2" || true)
    skip=$(grep -c ' SKIP$' "$2" || true)
    echo "$1: $pass passed, $fail failed, $skip skipped"
    grep -E ' (FAIL|ERROR|XPASS)$' "$2" | sed 's/^/  failed: /' || true
    grep ' SKIP$' "$2" | sed 's/^/  skipped: /' || true
}

real=$work/real
ours=$work/cudapatch
build "$real"
build "$ours"
(cd "$repo" && go build -o "$work/bin/cudapatch" ./cmd/cudapatch)
# Installed as patchelf: the binary is a drop-in patchelf under that name.
rm -f "$ours/src/patchelf"
cp "$work/bin/cudapatch" "$ours/src/patchelf"
touch "$ours/src/patchelf"

suite "$real" >"$work/real.results"
suite "$ours" >"$work/cudapatch.results"
report "patchelf $(cat "$src/version" 2>/dev/null || echo '?')" "$work/real.results"
report "cudapatch as patchelf" "$work/cudapatch.results"

status=0
echo "passed by patchelf, not by cudapatch:"
while read -r name result; do
    [[ $result == PASS ]] || continue
    ourresult=$(awk -v n="$name" '$1 == n { print $2 }' "$work/cudapatch.results")
    [[ $ourresult == PASS ]] && continue
    why=regression
    for d in "${deliberate[@]}"; do
        [[ $d == "$name" ]] && why="deliberate (docs/patchelf-suite.md)"
    done
    echo "  $name: $ourresult, $why"
    [[ $why == regression ]] && status=1
done <"$work/real.results"
echo "logs: $ours/tests/*.log, $real/tests/*.log"
exit "$status"

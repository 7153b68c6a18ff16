# shellcheck shell=bash
# The builder of every mkDerivation of nix/tests/build: bash -e this file.
# shellcheck disable=SC1091
source "${BASH_SOURCE[0]%/*}/setup"
genericBuild

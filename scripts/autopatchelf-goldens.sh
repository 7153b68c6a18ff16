#!/usr/bin/env bash
# Regenerates cmd/cudapatch/testdata/autopatchelf/*.golden from the real
# nixpkgs auto-patchelf.py, which TestAutoPatchelfGolden then compares
# `cudapatch auto-patchelf` against, byte for byte.
#
# Usage: bash scripts/autopatchelf-goldens.sh PATH/TO/auto-patchelf.py
#
# auto-patchelf.py is third-party code and is not in this repository: take
# it from a nixpkgs checkout (pkgs/by-name/au/auto-patchelf/source/
# auto-patchelf.py; the goldens were made from NixOS/nixpkgs@dd274979). It
# needs Debian's python3-pyelftools and patchelf; nothing is fetched, and CI
# only reads the committed goldens.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $# -ne 1 || ! -f $1 ]]; then
    echo "usage: $0 PATH/TO/auto-patchelf.py" >&2
    exit 2
fi
py=$(realpath "$1")
if ! /usr/bin/python3 -c 'import elftools' 2>/dev/null; then
    echo "$0: /usr/bin/python3 has no elftools: apt-get install python3-pyelftools" >&2
    exit 2
fi
command -v patchelf >/dev/null || { echo "$0: patchelf is not installed" >&2; exit 2; }
export PATH=$PATH:/usr/local/go/bin
go test ./cmd/cudapatch -run 'TestAutoPatchelfGolden' -count=1 -v -autopatchelf-py "$py"

#!/usr/bin/env bash
# The nixpkgs way of doing cudapatch's main job, for comparison: per ELF
# file, what auto-patchelf.py runs (patchelf --set-interpreter on dynamic
# executables, then patchelf --set-rpath with the resolved directories when
# there are any), then what addDriverRunpath runs (patchelf --print-rpath,
# then patchelf --set-rpath "/run/opengl-driver/lib:$old").
#
# Usage: nixpkgs-way.sh PLAN
# PLAN has one line per file, fields separated by \x1f: interpreter (or empty), RUNPATH
# without the driver link (or empty), path. bench/plan.py writes it from
# cudapatch's --json report, so both tools do the same work.
#
# It leaves out what the real hooks also spend (Python start-up and
# pyelftools parsing every file, the readelf call of autoFixElfFiles): it is
# a lower bound of their cost.
set -euo pipefail
PATCHELF=${PATCHELF:-/usr/bin/patchelf}
DRIVER_LINK=${DRIVER_LINK:-/run/opengl-driver/lib}
while IFS=$'\x1f' read -r interp rpath path; do
  if [ -n "$interp" ]; then "$PATCHELF" --set-interpreter "$interp" "$path"; fi
  if [ -n "$rpath" ]; then "$PATCHELF" --set-rpath "$rpath" "$path"; fi
  old=$("$PATCHELF" --print-rpath "$path")
  "$PATCHELF" --set-rpath "$DRIVER_LINK:$old" "$path"
done < "$1"

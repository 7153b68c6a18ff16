# lintCheck DRV: a derivation that runs `cudapatch lint` over every output of
# DRV (but debug; an output that is one non-ELF file is passed over) and fails on any finding of warning level or above (lint's
# default --fail-on; the only info rule, CP013, is off by default).
{
  lib,
  runCommand,
  cudapatch,
}:
{
  lintCheck =
    drv:
    let
      outputs = lib.remove "debug" (drv.outputs or [ "out" ]);
      paths = map (output: "${drv.${output}}") outputs;
    in
    runCommand "${drv.name}-cudapatch-lint" { nativeBuildInputs = [ cudapatch ]; } ''
      # An output that is a single file other than an ELF file (a script)
      # has nothing to lint, and lint refuses a named non-ELF file.
      lintPaths=()
      for p in ${lib.escapeShellArgs paths}; do
        if [ -d "$p" ] || isELF "$p"; then lintPaths+=("$p"); fi
      done
      if ((''${#lintPaths[@]})); then cudapatch lint "''${lintPaths[@]}"; fi
      touch "$out"
    '';
}

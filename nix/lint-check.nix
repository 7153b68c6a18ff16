# lintCheck DRV: a derivation that runs `cudapatch lint` over every output of
# DRV (but debug) and fails on any finding of warning level or above (lint's
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
      cudapatch lint ${lib.escapeShellArgs paths}
      touch "$out"
    '';
}

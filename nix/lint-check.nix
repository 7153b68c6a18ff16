# lintCheck DRV: a derivation that runs `cudapatch lint` over every output of
# DRV (but debug) and fails on any finding.
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

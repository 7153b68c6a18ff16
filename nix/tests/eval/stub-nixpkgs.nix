# A stand-in for nixpkgs, for evaluating flake.nix and nix/overlay.nix where
# no nixpkgs exists (CI). callPackage records what it was asked to call.
{
  system,
  overlays ? [ ],
  ...
}:
let
  fix =
    f:
    let
      x = f x;
    in
    x;
  base = {
    inherit system;
    callPackage = fn: args: {
      stubCallPackage = toString fn;
      inherit args;
    };
    mkShell = args: { stubMkShell = args; };
  };
in
fix (final: builtins.foldl' (prev: overlay: prev // overlay final prev) base overlays)

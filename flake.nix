{
  description = "cudapatch: one-pass RUNPATH fixing for prebuilt CUDA binaries, and cudaPatchelfHook";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

  outputs =
    { self, nixpkgs }:
    let
      systems = [
        "x86_64-linux"
        "aarch64-linux"
      ];
      forAllSystems =
        f:
        builtins.listToAttrs (
          map (system: {
            name = system;
            value = f system;
          }) systems
        );
      pkgsFor =
        system:
        import nixpkgs {
          inherit system;
          overlays = [ self.overlays.default ];
        };
    in
    {
      overlays.default = import ./nix/overlay.nix;

      packages = forAllSystems (
        system:
        let
          pkgs = pkgsFor system;
        in
        {
          default = pkgs.cudapatch;
          inherit (pkgs) cudapatch cudaPatchelfHook;
        }
      );

      devShells = forAllSystems (system: {
        default = import ./nix/devshell.nix { pkgs = pkgsFor system; };
      });

      checks = forAllSystems (
        system:
        let
          pkgs = pkgsFor system;
        in
        { inherit (pkgs) cudapatch; }
        // import ./nix/tests {
          inherit pkgs;
          inherit (self.lib) lintCheck;
        }
      );

      # lib.lintCheck drv: a check that runs `cudapatch lint` on drv's outputs.
      lib.lintCheck = drv: ((pkgsFor drv.system).callPackage ./nix/lint-check.nix { }).lintCheck drv;
    };
}

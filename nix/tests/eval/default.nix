# What can be evaluated without nixpkgs: the flake's output names, the
# overlay's attributes, the hook's substitutions and the lint check's command
# line, with nixpkgs replaced by stub-nixpkgs.nix and small stand-ins.
# `nix-instantiate --eval --strict --json nix/tests/eval` prints the summary
# that hooks/nix_test.go compares.
let
  root = ../../..;
  flake = import (root + "/flake.nix");
  outputs = flake.outputs {
    self = outputs;
    nixpkgs.outPath = ./stub-nixpkgs.nix;
  };
  stubLib = {
    platforms.linux = [ ];
    remove = e: builtins.filter (x: x != e);
    escapeShellArgs = l: builtins.concatStringsSep " " (map (x: "'${x}'") l);
  };
  hook =
    cuda_compat:
    import (root + "/nix/hook.nix") {
      lib = stubLib;
      makeSetupHook = args: script: {
        inherit args;
        script = baseNameOf script;
      };
      # callPackage calls selector.nix with a runCommandCC that returns
      # its arguments.
      callPackage =
        fn: args:
        import fn (
          {
            runCommandCC = name: env: buildCommand: {
              outPath = "/nix/store/s-${name}";
              inherit name env buildCommand;
            };
          }
          // args
        );
      cudapatch = "cudapatch";
      bintools = "bintools";
      addDriverRunpath.driverLink = "/run/opengl-driver";
      inherit cuda_compat;
    };
  compatPkg = {
    name = "cuda_compat-12.0";
    outPath = "/nix/store/c-cuda_compat-12.0";
  };
  selector = (hook compatPkg).args.passthru.cudaCompatSelector;
  lint =
    (import (root + "/nix/lint-check.nix") {
      lib = stubLib;
      runCommand = name: env: script: { inherit name script; };
      cudapatch = "cudapatch";
    }).lintCheck
      {
        name = "example";
        outputs = [
          "out"
          "debug"
          "lib"
        ];
        out = "/nix/store/o";
        debug = "/nix/store/d";
        lib = "/nix/store/l";
      };
  pkgs = outputs.packages.x86_64-linux;
  # package.nix called with stand-ins: buildGoModule returns its arguments.
  package = import (root + "/nix/package.nix") {
    lib = stubLib // {
      optionalString = cond: s: if cond then s else "";
      fileset = {
        toSource = x: x;
        fileFilter = f: root: root;
      };
    };
    stdenv = {
      buildPlatform.canExecute = host: true;
      hostPlatform = { };
    };
    buildGoModule = args: args;
    installShellFiles = "installShellFiles";
  };
in
{
  description = flake.description;
  outputs = builtins.attrNames outputs;
  systems = builtins.attrNames outputs.packages;
  packages = builtins.attrNames pkgs;
  defaultIsCudapatch = pkgs.default.stubCallPackage == pkgs.cudapatch.stubCallPackage;
  packageFile = baseNameOf pkgs.cudapatch.stubCallPackage;
  hookFile = baseNameOf pkgs.cudaPatchelfHook.stubCallPackage;
  devShells = builtins.attrNames outputs.devShells.x86_64-linux;
  overlay = builtins.attrNames (import (root + "/nix/overlay.nix") pkgs { });
  hookScript = (hook null).script;
  hookPropagated = (hook null).args.propagatedBuildInputs;
  hookWithoutCompat = (hook null).args.substitutions;
  hookWithCompat = (hook compatPkg).args.substitutions;
  hookSelectorNull = (hook null).args.passthru.cudaCompatSelector;
  selectorName = selector.name;
  selectorInputs = selector.env.nativeBuildInputs;
  selectorCommand = selector.buildCommand;
  packageNativeBuildInputs = package.nativeBuildInputs;
  packagePostInstall = package.postInstall;
  lintName = lint.name;
  lintOutputs = builtins.head (builtins.filter (l: builtins.match " *for p in .*" l != null) (
    builtins.filter builtins.isString (builtins.split "\n" lint.script)
  ));
  lintCommand = builtins.head (builtins.filter (l: builtins.match ".*cudapatch lint.*" l != null) (
    builtins.filter builtins.isString (builtins.split "\n" lint.script)
  ));
}

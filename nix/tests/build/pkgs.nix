# A nixpkgs-shaped package set, just big enough to build derivations that
# use cudaPatchelfHook (nix/hook.nix) with a real nix-build: offline, no
# nixpkgs, no sandbox (sandbox = false, build-users-group = ""), as root.
#
# The bootstrap tools are the host's (bash, coreutils, binutils, patchelf
# under hostPath, the Go toolchain; default.nix compiles its fixtures with
# the host's gcc). cudapatch and cudaPatchelfHook come from the flake's
# overlay (nix/overlay.nix): cudapatch is nix/package.nix built from this
# checkout by buildGoModule, its vendor directory a fixed-output derivation
# that must match package.nix's vendorHash. The rest has the shape of
# nixpkgs: stdenv.mkDerivation over hooks/test/stdenv.sh (setup hooks, env
# hooks, propagation, outputs, __structuredAttrs, fixupPhase with stdenv's
# default hooks), runCommand, runCommandCC, makeSetupHook with
# substitutions, callPackage with .override, lib.fileset,
# installShellFiles, and stand-ins for the hooks cudaPatchelfHook takes
# over, registered as nixpkgs registers them (hooks/).
{
  # Absolute path of a cudapatch binary to test instead of nix/package.nix
  # (hooks' CUDAPATCH); null builds nix/package.nix.
  cudapatchExe ? null,
  # The host's go command and its module cache (`go env GOMODCACHE`, filled
  # by `go mod download`): buildGoModule's vendor derivation runs
  # `go mod vendor` offline against it.
  hostGo ? null,
  hostGoModCache ? null,
  # The host's C compiler (runCommandCC's $CC), patchelf, dynamic loader
  # and libc.so.6.
  hostCC ? "gcc",
  hostPatchelf,
  hostInterp,
  hostLibc,
  hostPath ? "/usr/bin:/bin",
  system ? builtins.currentSystem,
}:
let
  inherit (builtins)
    attrNames
    baseNameOf
    concatStringsSep
    functionArgs
    intersectAttrs
    stringLength
    substring
    isFunction
    listToAttrs
    map
    removeAttrs
    ;
  mapAttrs' =
    f: set:
    listToAttrs (
      map (n: f n set.${n}) (attrNames set)
    );

  shell = "/bin/bash";
  hookDir = ./hooks;

  # $stdenv: setup (stdenv/setup.sh around hooks/test/stdenv.sh) and the
  # default builder. Built with a bare derivation: everything else is built
  # with it.
  stdenvFiles = derivation {
    name = "stdenv-cudapatch-tests";
    inherit system hostPath;
    builder = shell;
    PATH = hostPath;
    setup = ./stdenv/setup.sh;
    defaultBuilder = ./stdenv/default-builder.sh;
    stdenvSh = ../../../hooks/test/stdenv.sh;
    args = [
      "-euc"
      ''
        mkdir -p "$out"
        cp "$stdenvSh" "$out/stdenv.sh"
        cp "$defaultBuilder" "$out/default-builder.sh"
        content=$(<"$setup")
        printf '%s\n' "''${content//@hostPath@/"$hostPath"}" >"$out/setup"
      ''
    ];
  };

  # mkDerivation with the given default native build inputs (stdenv's own
  # setup hooks). passthru and meta stay out of the derivation, as in
  # nixpkgs.
  mkDerivationWith =
    defaultNativeBuildInputs: attrs:
    let
      drv = derivation (
        removeAttrs attrs [
          "passthru"
          "meta"
        ]
        // {
          inherit system defaultNativeBuildInputs;
          builder = shell;
          args = [
            "-e"
            "${stdenvFiles}/default-builder.sh"
          ];
          stdenv = stdenvFiles;
        }
      );
    in
    drv // (attrs.passthru or { });

  # runCommand and makeSetupHook build the stdenv's own hooks, so they use a
  # stdenv without them (nixpkgs has bootstrap stages for this). A
  # buildCommand skips every phase, fixup included, as in nixpkgs.
  runCommand =
    name: env: buildCommand:
    mkDerivationWith [ ] (env // { inherit name buildCommand; });
  # runCommand with a C compiler: $CC, as nixpkgs' cc-wrapper exports it
  # (the host's gcc, on the host's PATH).
  runCommandCC = name: env: runCommand name ({ CC = hostCC; } // env);

  # makeSetupHook { name, propagatedBuildInputs, substitutions, passthru,
  # meta } script: $out/nix-support/setup-hook is script with each @key@ of
  # substitutions replaced; propagatedBuildInputs are recorded.
  makeSetupHook =
    {
      name,
      propagatedBuildInputs ? [ ],
      substitutions ? { },
      passthru ? { },
      meta ? { },
    }:
    script:
    runCommand name
      (
        {
          inherit propagatedBuildInputs script passthru meta;
          substitutionNames = attrNames substitutions;
        }
        // mapAttrs' (n: v: {
          name = "subst_${n}";
          value = v;
        }) substitutions
      )
      ''
        mkdir -p "$out/nix-support"
        content=$(<"$script")
        for name in $substitutionNames; do
          value=subst_$name
          content=''${content//"@$name@"/"''${!value}"}
        done
        printf '%s\n' "$content" >"$out/nix-support/setup-hook"
        recordPropagatedDependencies
      '';

  callPackage =
    fn: args:
    let
      f = if isFunction fn then fn else import fn;
      result = f (intersectAttrs (functionArgs f) pkgs // args);
    in
    result // { override = newArgs: callPackage fn (args // newArgs); };

  hasSuffix =
    suffix: s:
    let
      n = stringLength s;
      k = stringLength suffix;
    in
    n >= k && substring (n - k) k s == suffix;

  # lib, as far as nix/hook.nix and nix/package.nix use it.
  lib = {
    platforms.linux = [ "x86_64-linux" "aarch64-linux" ];
    optionalString = cond: s: if cond then s else "";
    # fileFilter and toSource, for a fileset that is one filter below a
    # root. toSource copies the files the filter keeps (and the
    # directories, empty ones too: they change nothing a build reads) into
    # a store path named "source", as nixpkgs' does.
    fileset = {
      fileFilter = pred: root: { inherit pred root; };
      toSource =
        { root, fileset }:
        builtins.path {
          name = "source";
          path = root;
          filter =
            path: type:
            let
              name = baseNameOf path;
            in
            if type == "directory" then
              name != ".git"
            else
              fileset.pred {
                inherit name type;
                hasExt = ext: hasSuffix ".${ext}" name;
              };
        };
    };
  };

  # The platform attributes package.nix reads: native builds only.
  platforms = {
    buildPlatform.canExecute = _: true;
    hostPlatform = { inherit system; };
  };

  loaderName = baseNameOf hostInterp;
  driverLink = "/run/opengl-driver";

  # The set packages see: the base set with the flake's overlay applied (as
  # `import nixpkgs { overlays = [ cudapatch.overlays.default ]; }`), and
  # cudapatchExe, where given, in place of the overlay's cudapatch.
  pkgs =
    base
    // import ../../overlay.nix pkgs base
    // (if cudapatchExe == null then { } else { cudapatch = prebuiltCudapatch; });

  # A cudapatch binary built outside Nix (hooks' CUDAPATCH).
  prebuiltCudapatch = runCommand "cudapatch" {
    exe = builtins.path {
      path = /. + cudapatchExe;
      name = "cudapatch-exe";
    };
  } ''
    mkdir -p "$out/bin"
    ln -s "$exe" "$out/bin/cudapatch"
  '';

  # nixpkgs' buildGoModule, in its shape: goModules is a fixed-output
  # derivation holding `go mod vendor` (its NAR hash must be vendorHash;
  # offline, the host's module cache stands in for the proxy), and the
  # package is a mkDerivation that copies it to vendor/ and runs
  # `go install` with -mod=vendor -trimpath, GOCACHE and GOPATH in the
  # build directory. It builds with stdenvBoot: the stdenv's
  # generate-ld-cache stand-in runs cudapatch, which is built here (nixpkgs
  # has bootstrap stages for this).
  buildGoModule =
    {
      pname,
      version,
      src,
      vendorHash,
      subPackages ? [ "." ],
      ldflags ? [ ],
      env ? { },
      nativeBuildInputs ? [ ],
      doCheck ? true,
      meta ? { },
      ...
    }@args:
    assert hostGo != null && hostGoModCache != null;
    let
      goEnv = {
        GO111MODULE = "on";
        GOTOOLCHAIN = "local";
        GOPROXY = "off";
        GOSUMDB = "off";
      };
      goModules = derivation (
        goEnv
        // {
          name = "${pname}-${version}-go-modules";
          inherit system src;
          builder = shell;
          PATH = "${pkgs.go}/bin:${hostPath}";
          GOMODCACHE = hostGoModCache;
          outputHashMode = "recursive";
          outputHashAlgo = "sha256";
          outputHash = vendorHash;
          args = [
            "-euc"
            ''
              export HOME=$TMPDIR GOCACHE=$TMPDIR/go-cache GOFLAGS=-mod=mod
              cp -r "$src" "$TMPDIR/source"
              chmod -R u+w "$TMPDIR/source"
              cd "$TMPDIR/source"
              go mod vendor
              cp -r vendor "$out"
            ''
          ];
        }
      );
    in
    stdenvBoot.mkDerivation (
      removeAttrs args [
        "vendorHash"
        "env"
        "doCheck"
      ]
      // env
      // goEnv
      // {
        name = "${pname}-${version}";
        inherit goModules subPackages ldflags;
        nativeBuildInputs = [ pkgs.go ] ++ nativeBuildInputs;
        GOFLAGS = "-mod=vendor -trimpath";
        configurePhase = ''
          export HOME=$TMPDIR GOCACHE=$TMPDIR/go-cache GOPATH=$TMPDIR/go
          cp -r "$src" "$TMPDIR/source"
          chmod -R u+w "$TMPDIR/source"
          cd "$TMPDIR/source"
          cp -r "$goModules" vendor
          chmod -R u+w vendor
        '';
        buildPhase = ''
          for pkg in $subPackages; do
            go install -ldflags "$ldflags" "./$pkg"
          done
        '';
        installPhase = ''
          runHook preInstall
          mkdir -p "$out"
          cp -r "$GOPATH/bin" "$out/"
          runHook postInstall
        '';
        passthru = (args.passthru or { }) // { inherit goModules; };
      }
    );

  # A stdenv without generate-ld-cache, for cudapatch itself.
  stdenvBoot = platforms // {
    mkDerivation = mkDerivationWith [ pkgs.patchelf ];
  };

  base = {
    inherit
      lib
      system
      stdenvFiles
      runCommand
      runCommandCC
      makeSetupHook
      callPackage
      loaderName
      driverLink
      ;

    # The derivation-facing stdenv: its default hooks are patchelf's
    # shrink-rpath and generate-ld-cache, as in nixpkgs.
    stdenv = platforms // {
      mkDerivation = mkDerivationWith [
        pkgs.patchelf
        pkgs.generateLDCacheHook
      ];
    };

    # The host's libc and loader, linked into the store so that
    # interpreters and libc names point at a store path, as in nixpkgs.
    glibc = runCommand "glibc-host" { inherit hostInterp hostLibc; } ''
      mkdir -p "$out/lib"
      ln -s "$hostInterp" "$out/lib/${loaderName}"
      ln -s "$hostLibc" "$out/lib/libc.so.6"
    '';

    # The bintools wrapper, as far as autoPatchelfHook and cudapatch read it:
    # nix-support/{dynamic-linker,orig-libc} and a setup hook exporting
    # $NIX_BINTOOLS.
    bintools =
      runCommand "bintools-host"
        {
          inherit (pkgs) glibc;
          inherit loaderName;
          hook = "${hookDir}/bintools.sh";
        }
        ''
          mkdir -p "$out/nix-support"
          echo "$glibc/lib/$loaderName" >"$out/nix-support/dynamic-linker"
          echo "$glibc" >"$out/nix-support/orig-libc"
          content=$(<"$hook")
          printf '%s\n' "''${content//@out@/"$out"}" >"$out/nix-support/setup-hook"
        '';

    patchelf = runCommand "patchelf-host" { inherit hostPatchelf; hook = "${hookDir}/patchelf.sh"; } ''
      mkdir -p "$out/bin" "$out/nix-support"
      ln -s "$hostPatchelf" "$out/bin/patchelf"
      cp "$hook" "$out/nix-support/setup-hook"
    '';

    inherit buildGoModule;
    # The host's Go toolchain (go finds its GOROOT through the link).
    go = runCommand "go-host" { inherit hostGo; } ''
      mkdir -p "$out/bin"
      ln -s "$hostGo" "$out/bin/go"
    '';
    installShellFiles = makeSetupHook { name = "install-shell-files"; } "${hookDir}/install-shell-files.sh";

    # cudapatch installed as `patchelf`, its drop-in front end: the patchelf
    # that generate-ld-cache runs.
    cudapatchAsPatchelf = runCommand "cudapatch-as-patchelf" { } ''
      mkdir -p "$out/bin"
      ln -s ${pkgs.cudapatch}/bin/cudapatch "$out/bin/patchelf"
    '';

    generateLDCacheHook = makeSetupHook {
      name = "generate-ld-cache";
      substitutions.patchelf = "${pkgs.cudapatchAsPatchelf}/bin/patchelf";
    } "${hookDir}/generate-ld-cache.sh";

    addDriverRunpath = makeSetupHook {
      name = "add-driver-runpath";
      substitutions = { inherit driverLink; };
      passthru = { inherit driverLink; };
    } "${hookDir}/add-driver-runpath.sh";

    # The hooks cudaPatchelfHook takes over.
    autoPatchelfHook = makeSetupHook {
      name = "auto-patchelf-hook";
      propagatedBuildInputs = [ pkgs.bintools ];
    } "${hookDir}/auto-patchelf.sh";
    autoFixElfFiles = makeSetupHook { name = "auto-fix-elf-files"; } "${hookDir}/auto-fix-elf-files.sh";
    autoAddDriverRunpath = makeSetupHook {
      name = "auto-add-driver-runpath-hook";
      propagatedBuildInputs = [
        pkgs.addDriverRunpath
        pkgs.autoFixElfFiles
      ];
    } "${hookDir}/auto-add-driver-runpath.sh";
    autoAddCudaCompatRunpath =
      cuda_compat:
      makeSetupHook {
        name = "auto-add-cuda-compat-runpath-hook";
        propagatedBuildInputs = [ pkgs.autoFixElfFiles ];
        substitutions.libcudaPath = "${cuda_compat}/compat";
      } "${hookDir}/auto-add-cuda-compat-runpath.sh";
    removeStubsFromRunpathHook = makeSetupHook {
      name = "remove-stubs-from-runpath-hook";
      propagatedBuildInputs = [ pkgs.autoFixElfFiles ];
      substitutions = { inherit driverLink; };
    } "${hookDir}/remove-stubs-from-runpath.sh";
  };
in
pkgs

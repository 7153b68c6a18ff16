# Real nix-builds of derivations that use cudaPatchelfHook, over the package
# set of pkgs.nix, and what hooks/nixbuild_test.go checks on them.
#
#   build     every derivation that must build (nix-build -A build)
#   failing   derivations whose build must fail, one by one
#   manifest  JSON for the test: each case's outputs with their exact
#             references, the RUNPATH of every ELF file, the programs to run
#             and what they print, expected build-log lines; the build-only
#             inputs that no closure may contain
#
# The arguments are the host's: see pkgs.nix. Run by hand (as root, no
# daemon) with hooks/nixbuild_test.go's flags, for example
#   go test ./hooks -run TestNixBuild -v
{
  cudapatchExe ? null,
  hostGo ? null,
  hostGoModCache ? null,
  hostCC,
  hostPatchelf,
  hostInterp,
  hostLibc,
  hostPath ? "/usr/bin:/bin",
  system ? builtins.currentSystem,
}:
let
  pkgs = import ./pkgs.nix {
    inherit
      cudapatchExe
      hostGo
      hostGoModCache
      hostCC
      hostPatchelf
      hostInterp
      hostLibc
      hostPath
      system
      ;
  };
  inherit (pkgs)
    stdenv
    runCommand
    glibc
    cudaPatchelfHook
    ;
  inherit (builtins) attrNames listToAttrs map;

  D = "${pkgs.driverLink}/lib";

  # --- Vendor tarballs: built from C with the host's gcc, never fixed up ---

  # hooks/test/build-sample.sh and its sources only.
  hookTest = builtins.path {
    path = ../../../hooks/test;
    name = "cudapatch-hook-test";
    filter =
      path: type:
      baseNameOf path == "build-sample.sh"
      || baseNameOf path == "sample"
      || baseNameOf (dirOf path) == "sample";
  };
  # deps/dep/lib/libdep.so; prebuilt/out/{bin/app,lib/libfoo.so,lib/libgpu.so,lib/libplain.so,share/README}.
  sample = runCommand "cudapatch-sample" {
    inherit hookTest;
    CC = hostCC;
  } ''bash "$hookTest/build-sample.sh" "$out"'';
  # See build-cuda-fixtures.sh.
  cudaFixtures = runCommand "cudapatch-cuda-fixtures" {
    inherit hookTest;
    script = ./build-cuda-fixtures.sh;
    src = ./src;
    CC = hostCC;
  } ''bash "$script" "$src" "$hookTest/sample" "$out"'';

  # --- Dependencies ---

  dep = runCommand "dep" { inherit sample; } ''
    mkdir -p "$out/lib"
    cp "$sample/deps/dep/lib/libdep.so" "$out/lib/"
  '';
  # A runtime dependency (dlopened plugins): an empty lib/.
  rt = runCommand "rt-plugins" { } ''mkdir -p "$out/lib"'';
  # compat/libcuda.so.580.95.05 (and the libcuda.so.1 link), with the
  # forward-compatibility note of the real one: branches 535 to 580.
  cuda_compat = runCommand "cuda_compat-12.0" { src = cudaFixtures; } ''
    cp -r "$src/cuda_compat" "$out"
  '';
  # The NVIDIA driver's libcuda.so.1: never an input; the test mounts it at
  # the driver link to run programs that need it.
  driver = runCommand "nvidia-driver-for-tests" { src = cudaFixtures; } ''
    cp -r "$src/driver" "$out"
  '';
  # out: lib/libcudart.so.12 and the toolkit's lib/stubs/libcuda.so;
  # stubs: the stub again, as the `…-stubs/lib` output nixpkgs has.
  cuda_cudart = stdenv.mkDerivation {
    name = "cuda_cudart-12.0";
    outputs = [
      "out"
      "stubs"
    ];
    nativeBuildInputs = [ cudaPatchelfHook ];
    src = cudaFixtures;
    installPhase = ''
      mkdir -p "$out" "$stubs/lib"
      cp -r "$src/cuda_cudart/lib" "$out/"
      cp "$src/cuda_cudart/lib/stubs/libcuda.so" "$stubs/lib/"
      ln -s libcuda.so "$stubs/lib/libcuda.so.1"
    '';
  };
  # Propagates cuda_cudart, whose lib/ a dependent build then searches.
  libcublas = stdenv.mkDerivation {
    name = "libcublas-12.0";
    nativeBuildInputs = [ cudaPatchelfHook ];
    buildInputs = [ cuda_cudart ];
    propagatedBuildInputs = [ cuda_cudart ];
    src = cudaFixtures;
    installPhase = ''
      mkdir -p "$out"
      cp -r "$src/libcublas/lib" "$out/"
    '';
  };
  # With cuda_compat, the hook names its selector (nix/selector.nix) where
  # compat's directory would be.
  compatHook = cudaPatchelfHook.override { inherit cuda_compat; };
  selector = compatHook.cudaCompatSelector;
  # The hooks cudaPatchelfHook takes over, as a CUDA package lists them.
  oldHooks = [
    pkgs.autoPatchelfHook
    pkgs.autoAddDriverRunpath
    (pkgs.autoAddCudaCompatRunpath cuda_compat)
    pkgs.removeStubsFromRunpathHook
  ];

  # --- The derivations under test ---

  # A prebuilt package split across outputs: bin/ in out, lib/ in lib.
  split = stdenv.mkDerivation {
    name = "sample-split";
    outputs = [
      "out"
      "lib"
    ];
    nativeBuildInputs = [ cudaPatchelfHook ];
    buildInputs = [ dep ];
    src = sample;
    installPhase = ''
      mkdir -p "$out" "$lib"
      cp -r "$src/prebuilt/out/bin" "$src/prebuilt/out/share" "$out/"
      cp -r "$src/prebuilt/out/lib" "$lib/"
    '';
  };

  # gpuapp against libcublas (which propagates cuda_cudart), with both kinds
  # of stub directory among the inputs: the `-stubs` output, and the
  # toolkit's lib/ searched recursively (lib/stubs below it), as packages add
  # it. searchCmd is the function the package calls for that.
  gpuapp =
    {
      name,
      hooks,
      searchCmd ? "addCudaPatchelfSearchPath",
      src ? cudaFixtures,
      install ? ''
        mkdir -p "$out"
        cp -r "$src/gpuapp/bin" "$src/gpuapp/lib" "$out/"
      '',
      extra ? { },
    }:
    stdenv.mkDerivation (extra // {
      inherit name src;
      nativeBuildInputs = hooks;
      buildInputs = [
        libcublas
        cuda_cudart.stubs
      ];
      installPhase = install + ''
        ${searchCmd} ${cuda_cudart}/lib
      '';
    });
  cuda = gpuapp {
    name = "gpuapp";
    hooks = [ cudaPatchelfHook ];
  };
  # Also without patchelf's shrink-rpath: cudapatch alone replaces the
  # vendor RUNPATH, which names the vendor's build directories.
  cudaCompat = gpuapp {
    name = "gpuapp-compat";
    hooks = [ compatHook ];
    extra.dontPatchELF = true;
  };
  # The old hooks present too, in the order CUDA packages list them, and
  # addAutoPatchelfSearchPath from autoPatchelfHook's stand-in.
  takeover = gpuapp {
    name = "gpuapp-takeover";
    hooks = [
      pkgs.autoPatchelfHook
      pkgs.autoAddDriverRunpath
      compatHook
    ]
    ++ builtins.tail (builtins.tail oldHooks);
    searchCmd = "addAutoPatchelfSearchPath";
  };
  # With a hook that has no cuda_compat of its own, autoAddCudaCompatRunpath
  # stays and prepends compat's own directory after cudapatch: compat's
  # libcuda first on every machine, as without cudapatch.
  takeoverOwnCompat = gpuapp {
    name = "gpuapp-takeover-own-compat";
    hooks = [
      pkgs.autoPatchelfHook
      pkgs.autoAddDriverRunpath
      cudaPatchelfHook
    ]
    ++ builtins.tail (builtins.tail oldHooks);
    searchCmd = "addAutoPatchelfSearchPath";
  };
  # Rebuilt from already-patched outputs: the same closure as patched once.
  cudaTwice = gpuapp {
    name = "gpuapp-twice";
    hooks = [ cudaPatchelfHook ];
    src = cuda;
    install = ''
      mkdir -p "$out"
      cp -r "$src/." "$out/"
    '';
  };
  splitTwice = stdenv.mkDerivation {
    name = "sample-split-twice";
    outputs = [
      "out"
      "lib"
    ];
    nativeBuildInputs = [ cudaPatchelfHook ];
    buildInputs = [ dep ];
    srcOut = split.out;
    srcLib = split.lib;
    installPhase = ''
      mkdir -p "$out" "$lib"
      cp -r "$srcOut/." "$out/"
      cp -r "$srcLib/." "$lib/"
    '';
  };

  # libdep.so found only through propagation: the one build input is a
  # package with no lib/ that propagates dep (no RUNPATH of an input names
  # dep, so nothing else leads cudapatch to it).
  depMeta = runCommand "dep-meta" { propagatedBuildInputs = [ dep ]; } ''
    mkdir -p "$out"
    recordPropagatedDependencies
  '';
  propagated = stdenv.mkDerivation {
    name = "sample-propagated";
    nativeBuildInputs = [ cudaPatchelfHook ];
    buildInputs = [ depMeta ];
    src = sample;
    installPhase = ''
      mkdir -p "$out"
      cp -r "$src/prebuilt/out/." "$out/"
    '';
  };

  # __structuredAttrs, with values holding spaces: a library in a directory
  # with a space, an appended RUNPATH entry with a space, and an ignore
  # pattern with a space that string attributes would split into two.
  structured = stdenv.mkDerivation {
    name = "sample-structured";
    __structuredAttrs = true;
    nativeBuildInputs = [ cudaPatchelfHook ];
    buildInputs = [ dep ];
    runtimeDependencies = [ rt ];
    appendRunpaths = [ "$ORIGIN/../lib/plugin dir" ];
    autoPatchelfIgnoreMissingDeps = [ "libabsent *.so" ];
    src = sample;
    extra = cudaFixtures;
    installPhase = ''
      mkdir -p "$out/lib/vendor libs" "$out/lib/plugin dir"
      cp -r "$src/prebuilt/out/bin" "$out/"
      cp "$src/prebuilt/out/lib/libfoo.so" "$src/prebuilt/out/lib/libgpu.so" "$out/lib/vendor libs/"
      cp "$extra/extra/lib/libopt.so" "$out/lib/plugin dir/"
    '';
  };

  # Must fail: libdep.so is provided by nothing.
  missing = stdenv.mkDerivation {
    name = "sample-missing-dep";
    nativeBuildInputs = [ cudaPatchelfHook ];
    src = sample;
    installPhase = ''
      mkdir -p "$out"
      cp -r "$src/prebuilt/out/." "$out/"
    '';
  };
  # Must fail: libdep.so is only in the build directory.
  buildDirLeak = stdenv.mkDerivation {
    name = "sample-build-dir-leak";
    nativeBuildInputs = [ cudaPatchelfHook ];
    src = sample;
    installPhase = ''
      mkdir -p "$out" "$NIX_BUILD_TOP/vendor"
      cp -r "$src/prebuilt/out/." "$out/"
      cp "$src/deps/dep/lib/libdep.so" "$NIX_BUILD_TOP/vendor/"
      addCudaPatchelfSearchPath "$NIX_BUILD_TOP/vendor"
    '';
  };

  # --- What the test checks ---

  interpreter = "${glibc}/lib/${pkgs.loaderName}";
  runSample = {
    "bin/app" = [ { want = "sample 42"; } ];
  };
  # Kernel-module versions the runs fake (/proc/driver/nvidia/version in a
  # private mount namespace): older than compat (580.95.05), of a branch its
  # note lists and of one it does not; compat's own; newer, of its branch
  # and of a later one. "none" hides any module.
  module = {
    older = "535.261.03";
    olderUnlisted = "545.23.08";
    same = "580.95.05";
    sameBranchNewer = "580.159.04";
    newer = "590.10.01";
    none = "none";
  };
  # gpuapp's outputs, given the package and where libcuda.so.1 comes from:
  # "driver" (no cuda_compat), "selector" (the hook's cuda_compat: its
  # selector first), "compat" (compat's own directory first, prepended by
  # autoAddCudaCompatRunpath after cudapatch).
  gpuappExpect =
    self: libcuda:
    let
      head =
        {
          driver = "";
          selector = "${selector}/lib:";
          compat = "${cuda_compat}/compat:";
        }
        .${libcuda}
        + D;
      run = want: extra: { want = "gpu cuInit=${toString want} cublas=13"; } // extra;
    in
    {
      out = {
        references = [
          self
          libcublas
          cuda_cudart
          glibc
        ]
        ++ {
          driver = [ ];
          selector = [ selector ];
          compat = [ cuda_compat ];
        }
        .${libcuda};
        runpaths = {
          "bin/gpuapp" = "${head}:${self}/lib:${libcublas}/lib:${cuda_cudart}/lib";
          "lib/libgpu.so" = head;
        };
        # Without cuda_compat, nothing in the closure is compat; with the
        # selector, compat is there through it (the selector loads it by
        # store path).
        notInClosure = if libcuda == "driver" then { inherit cuda_compat selector; } else { };
        inClosure = if libcuda == "selector" then { inherit cuda_compat; } else { };
        # cuInit names the libcuda that answered: 0 the driver's, 1
        # compat's, 100 the selector's own answer when neither can work
        # (no module, or the chosen file missing).
        runs."bin/gpuapp" =
          {
            # libcuda.so.1 from the driver only, whatever the module.
            driver = [
              (run 0 { withDriver = true; })
              (run 0 {
                withDriver = true;
                module = module.older;
              })
            ];
            # The choice made when the process starts.
            selector = [
              (run 100 { module = module.none; })
              (run 100 {
                module = module.none;
                withDriver = true;
              })
              (run 1 { module = module.older; })
              (run 1 {
                module = module.older;
                withDriver = true;
              })
              (run 0 {
                module = module.olderUnlisted;
                withDriver = true;
              })
              (run 0 {
                module = module.same;
                withDriver = true;
              })
              (run 0 {
                module = module.sameBranchNewer;
                withDriver = true;
              })
              (run 0 {
                module = module.newer;
                withDriver = true;
              })
              (run 100 { module = module.newer; })
            ];
            # Compat's libcuda on every machine, a newer module too (where
            # a real one fails with CUDA error 803).
            compat = [
              (run 1 { })
              (run 1 { withDriver = true; })
              (run 1 {
                withDriver = true;
                module = module.newer;
              })
            ];
          }
          .${libcuda};
      };
    };
  splitExpect = self: {
    out = {
      references = [
        self.lib
        dep
        glibc
      ];
      runpaths."bin/app" = "${D}:${self.lib}/lib:${dep}/lib";
      runs = runSample;
    };
    lib = {
      references = [ dep ];
      runpaths = {
        "lib/libfoo.so" = "${D}:${dep}/lib";
        "lib/libgpu.so" = D;
        "lib/libplain.so" = D;
      };
    };
  };
  takeoverLog = [
    "taking over postFixupHooks entry 'autoPatchelfPostFixup' of autoPatchelfHook"
    "taking over postFixupHooks entry 'autoFixElfFiles addDriverRunpath' of autoAddDriverRunpath"
    "taking over postFixupHooks entry 'autoFixElfFiles removeStubsFromRunpath' of removeStubsFromRunpathHook"
    # The stdenv defaults: patchelf's shrink pass and generate-ld-cache,
    # whose note cudapatch writes with each RUNPATH.
    "of patchelf's setup hook for the outputs cudapatch patches"
    "setting dontGenerateLDCache"
  ];

  # cudapatch itself, nix/package.nix through the overlay: a static Go
  # binary that references nothing (no Go toolchain, no vendor directory),
  # with its completions and man page.
  cudapatchCase = {
    drv = pkgs.cudapatch;
    outputs.out = {
      references = [ ];
      runpaths."bin/cudapatch" = "";
      runs."bin/cudapatch" = [
        {
          args = [ "--version" ];
          wantLines = [ "cudapatch ${pkgs.cudapatch.version}" ];
        }
      ];
      files = [
        "share/bash-completion/completions/cudapatch.bash"
        "share/zsh/site-functions/_cudapatch"
        "share/fish/vendor_completions.d/cudapatch.fish"
        "share/man/man1/cudapatch.1"
      ];
      notInClosure = { inherit (pkgs) go; inherit (pkgs.cudapatch) goModules; };
    };
  };

  cases = (if cudapatchExe == null then { cudapatch = cudapatchCase; } else { }) // {
    cuda_cudart = {
      drv = cuda_cudart;
      # The stubs are patched as every ELF file of the outputs is (the
      # driver link, as autoAddDriverRunpath gives them in nixpkgs); they
      # are never searched, and never in anyone else's RUNPATH.
      outputs = {
        out = {
          references = [ ];
          runpaths = {
            "lib/libcudart.so.12" = D;
            "lib/stubs/libcuda.so" = D;
          };
        };
        stubs = {
          references = [ ];
          runpaths."lib/libcuda.so" = D;
        };
      };
    };
    libcublas = {
      drv = libcublas;
      outputs.out = {
        references = [ cuda_cudart ];
        runpaths."lib/libcublas.so.12" = "${D}:${cuda_cudart}/lib";
      };
    };
    split = {
      drv = split;
      outputs = splitExpect split;
    };
    split-twice = {
      drv = splitTwice;
      outputs = splitExpect splitTwice;
      sameClosureAs = "split";
    };
    gpuapp = {
      drv = cuda;
      outputs = gpuappExpect cuda "driver";
    };
    gpuapp-twice = {
      drv = cudaTwice;
      outputs = gpuappExpect cudaTwice "driver";
      sameClosureAs = "gpuapp";
    };
    gpuapp-compat = {
      drv = cudaCompat;
      outputs = gpuappExpect cudaCompat "selector";
    };
    gpuapp-takeover = {
      drv = takeover;
      outputs = gpuappExpect takeover "selector";
      log = takeoverLog ++ [
        "taking over postFixupHooks entry 'autoFixElfFiles addCudaCompatRunpath' of autoAddCudaCompatRunpath"
      ];
      logCount."taking over postFixupHooks entry" = 4;
      logCount."taking over fixupOutputHooks entry" = 1;
      sameClosureAs = "gpuapp-compat";
    };
    gpuapp-takeover-own-compat = {
      drv = takeoverOwnCompat;
      outputs = gpuappExpect takeoverOwnCompat "compat";
      log = takeoverLog ++ [
        "leaving 'autoFixElfFiles addCudaCompatRunpath' in place"
      ];
      logCount."taking over postFixupHooks entry" = 3;
      logCount."taking over fixupOutputHooks entry" = 1;
    };
    # The selector itself: libcuda.so.1 alone, referencing compat only (its
    # libcuda's store path), never cudapatch or the compiler.
    cuda-compat-selector = {
      drv = selector;
      outputs.out = {
        references = [ cuda_compat ];
        runpaths."lib/libcuda.so.1" = "";
      };
    };
    propagated = {
      drv = propagated;
      outputs.out = {
        references = [
          propagated
          dep
          glibc
        ];
        runpaths = {
          "bin/app" = "${D}:${propagated}/lib:${dep}/lib";
          "lib/libfoo.so" = "${D}:${dep}/lib";
          "lib/libgpu.so" = D;
          "lib/libplain.so" = D;
        };
        runs = runSample;
      };
    };
    structured = {
      drv = structured;
      outputs.out = {
        references = [
          structured
          rt
          dep
          glibc
        ];
        runpaths =
          let
            tail = "$ORIGIN/../lib/plugin dir";
          in
          {
            "bin/app" = "${D}:${rt}/lib:${structured}/lib/vendor libs:${dep}/lib:${tail}";
            "lib/vendor libs/libfoo.so" = "${D}:${dep}/lib:${tail}";
            "lib/vendor libs/libgpu.so" = "${D}:${tail}";
            "lib/plugin dir/libopt.so" = "${D}:${tail}";
          };
        runs = runSample;
      };
      allowMissing = [ "libabsent 1.so" ];
      log = [ "structuredAttrs is enabled" ];
    };
  };

  failing = {
    missing-dep = {
      drv = missing;
      stderr = [
        "error: auto-patchelf could not satisfy dependency libdep.so wanted by ${missing}/bin/app"
        "error: auto-patchelf could not satisfy dependency libdep.so wanted by ${missing}/lib/libfoo.so"
        "cudaPatchelfHook: cudapatch failed (exit status 1)"
      ];
    };
    build-dir-leak = {
      drv = buildDirLeak;
      stderr = [
        "${buildDirLeak}/bin/app"
        "points into the build directory /tmp/nix-build-"
        "cudaPatchelfHook: cudapatch failed"
      ];
    };
  };

  outputPaths = drv: listToAttrs (map (o: {
    name = o;
    value = "${drv.${o}}";
  }) (drv.outputs or [ "out" ]));
  build = map (c: c.drv) (builtins.attrValues cases) ++ [ driver ];
in
{
  inherit build;
  failing = builtins.mapAttrs (_: f: f.drv) failing;
  manifest = {
    inherit interpreter;
    # The derivations of `build`, from the same evaluation as the store
    # paths below (the test builds these).
    build = map (d: d.drvPath) build;
    driverLink = D;
    driverLib = "${driver}/lib";
    # Build-time inputs: no closure may hold one.
    buildOnly = {
      inherit sample cudaFixtures driver depMeta;
      inherit (pkgs)
        cudapatch
        cudapatchAsPatchelf
        bintools
        patchelf
        generateLDCacheHook
        autoPatchelfHook
        autoFixElfFiles
        autoAddDriverRunpath
        removeStubsFromRunpathHook
        addDriverRunpath
        stdenvFiles
        ;
      inherit cudaPatchelfHook compatHook;
      inherit (pkgs) installShellFiles;
    }
    // (if cudapatchExe == null then { inherit (pkgs) go; inherit (pkgs.cudapatch) goModules; } else { }) // {
      cuda_cudart-stubs = cuda_cudart.stubs;
      autoAddCudaCompatRunpath = builtins.elemAt oldHooks 2;
    };
    cases = builtins.mapAttrs (
      _: c:
      removeAttrs c [ "drv" ]
      // {
        drvPath = c.drv.drvPath;
        allOutputs = c.drv.outputs or [ "out" ];
        outputs = builtins.mapAttrs (o: e: e // { path = "${c.drv.${o}}"; }) c.outputs;
      }
    ) cases;
    failing = builtins.mapAttrs (
      _: f:
      removeAttrs f [ "drv" ]
      // {
        drvPath = f.drv.drvPath;
        outputs = outputPaths f.drv;
      }
    ) failing;
  };
}

# Example derivations built with cudaPatchelfHook, and checks on the results:
# exact RUNPATHs, the interpreter, and the program running; with and without
# __structuredAttrs, with a cuda_compat directory and without. Also runs the
# hook's bash harness (hooks/test/run.sh) inside the sandbox.
#
# pkgs must carry nix/overlay.nix. Imported, not callPackage'd, so the result
# is a plain attribute set of derivations, as `checks` wants.
{ pkgs, lintCheck }:
let
  inherit (pkgs)
    lib
    stdenv
    runCommand
    runCommandCC
    binutils
    cudapatch
    cudaPatchelfHook
    addDriverRunpath
    ;
  hookTest = ../../hooks/test;

  # The prebuilt tree of hooks/test/build-sample.sh, as a vendor would ship it.
  sample = runCommandCC "cudapatch-hook-sample" { NIX_DONT_SET_RPATH = 1; } ''
    bash ${hookTest}/build-sample.sh "$out"
  '';

  # A buildInput providing libdep.so, and a runtime dependency.
  dep = runCommand "cudapatch-hook-dep" { } ''
    mkdir -p "$out/lib"
    cp ${sample}/deps/dep/lib/libdep.so "$out/lib/"
  '';
  rt = runCommand "cudapatch-hook-rt" { } ''mkdir -p "$out/lib"'';

  # A cuda_compat of one function: compat/libcuda.so.580.95.05 (the version
  # in its name, which the selector needs) and the libcuda.so.1 link.
  fakeCompat = runCommandCC "fake-cuda-compat-580.95.05" { } ''
    mkdir -p "$out/compat"
    echo 'int cuInit(unsigned f) { (void)f; return 1; }' >libcuda.c
    $CC -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$out/compat/libcuda.so.580.95.05" libcuda.c
    ln -s libcuda.so.580.95.05 "$out/compat/libcuda.so.1"
  '';
  compatHook = cudaPatchelfHook.override { cuda_compat = fakeCompat; };

  driver = "${addDriverRunpath.driverLink}/lib";

  patched =
    { structured, compat }:
    stdenv.mkDerivation {
      name = "cudapatch-hook-example-${if structured then "structured" else "string"}${lib.optionalString compat "-compat"}";
      __structuredAttrs = structured;
      dontUnpack = true;
      nativeBuildInputs = [
        (if compat then compatHook else cudaPatchelfHook)
      ];
      buildInputs = [ dep ];
      runtimeDependencies = [ rt ];
      appendRunpaths = [ "$ORIGIN/../libexec" ];
      autoPatchelfIgnoreMissingDeps = [ "libcuda.so.1" ];
      installPhase = ''
        runHook preInstall
        cp -r ${sample}/prebuilt/out "$out"
        chmod -R u+w "$out"
        mkdir -p "$out/libexec"
        runHook postInstall
      '';
    };

  check =
    { structured, compat }:
    let
      drv = patched { inherit structured compat; };
      # With cuda_compat, its selector comes first.
      head = lib.optionalString compat "${compatHook.cudaCompatSelector}/lib:" + driver;
      tail = "\\$ORIGIN/../libexec";
    in
    runCommand "check-${drv.name}" { nativeBuildInputs = [ binutils ]; } ''
      runpath() { readelf -d "$1" | sed -n 's/.*Library runpath: \[\(.*\)\]$/\1/p'; }
      expect() {
        got=$(runpath "$1")
        if [ "$got" != "$2" ]; then
          echo "RUNPATH of $1: got '$got', want '$2'" >&2
          exit 1
        fi
      }
      expect ${drv}/bin/app "${head}:${rt}/lib:${drv}/lib:${dep}/lib:${tail}"
      expect ${drv}/lib/libfoo.so "${head}:${dep}/lib:${tail}"
      expect ${drv}/lib/libgpu.so "${head}:${tail}"
      interp=$(readelf -l ${drv}/bin/app | sed -n 's/.*interpreter: \(.*\)\]$/\1/p')
      want=$(cat ${stdenv.cc.bintools}/nix-support/dynamic-linker)
      [ "$interp" = "$want" ] || { echo "interpreter: got $interp, want $want" >&2; exit 1; }
      said=$(env -u LD_LIBRARY_PATH ${drv}/bin/app)
      [ "$said" = "sample 42" ] || { echo "app said '$said'" >&2; exit 1; }
      touch "$out"
    '';

  variants = lib.cartesianProduct {
    structured = [
      false
      true
    ];
    compat = [
      false
      true
    ];
  };
  nameOf = v: "hook-${if v.structured then "structured" else "string"}-${if v.compat then "compat" else "nocompat"}";
in
lib.listToAttrs (map (v: lib.nameValuePair (nameOf v) (check v)) variants)
// {
  # The bash harness, against the packaged binary.
  hook-harness = runCommandCC "cudapatch-hook-harness" { nativeBuildInputs = [ binutils ]; } ''
    export CUDAPATCH=${lib.getExe cudapatch} SAMPLE=$TMPDIR/sample WORK=$TMPDIR/work
    bash ${hookTest}/build-sample.sh "$SAMPLE"
    bash ${hookTest}/run.sh
    touch "$out"
  '';

  # lintCheck accepts what the hook wrote.
  lint-example = lintCheck (patched {
    structured = true;
    compat = false;
  });
}

# cudaPatchelfHook: add it to nativeBuildInputs of a derivation that ships
# prebuilt ELF files. See hooks/README.md.
#
# cuda_compat: cudaPackages.cuda_compat where it exists and is wanted (Jetson,
# data-center GPUs with the compat package). Null: no compat RUNPATH entry.
# Given, the hook's compat entry is not cuda_compat's directory but its
# selector's (selector.nix): a libcuda.so.1 that takes cuda_compat's libcuda
# or the driver's when each process starts, by the kernel module it finds.
{
  lib,
  makeSetupHook,
  callPackage,
  cudapatch,
  bintools,
  addDriverRunpath,
  cuda_compat ? null,
}:
let
  cudaCompatSelector =
    if cuda_compat == null then
      null
    else
      callPackage ./selector.nix { inherit cudapatch addDriverRunpath cuda_compat; };
in
makeSetupHook {
  name = "cuda-patchelf-hook";
  # bintools provides $NIX_BINTOOLS (dynamic-linker, orig-libc) even under
  # stdenvNoCC, as it does for autoPatchelfHook.
  propagatedBuildInputs = [
    cudapatch
    bintools
  ];
  substitutions = {
    driverLink = "${addDriverRunpath.driverLink}/lib";
    cudaCompat = if cudaCompatSelector == null then "" else "${cudaCompatSelector}/lib";
  };
  passthru = {
    inherit cudapatch cuda_compat cudaCompatSelector;
  };
  meta = {
    description = "Setup hook that runs cudapatch over every output in postFixup";
    platforms = lib.platforms.linux;
  };
} ../hooks/cuda-patchelf-hook.sh

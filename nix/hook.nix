# cudaPatchelfHook: add it to nativeBuildInputs of a derivation that ships
# prebuilt ELF files. See hooks/README.md.
#
# cuda_compat: cudaPackages.cuda_compat where it exists and is wanted (Jetson,
# data-center GPUs with the compat package). Null: no compat RUNPATH entry.
{
  lib,
  makeSetupHook,
  cudapatch,
  bintools,
  addDriverRunpath,
  cuda_compat ? null,
}:
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
    cudaCompat = if cuda_compat == null then "" else "${cuda_compat}/compat";
  };
  passthru = {
    inherit cudapatch cuda_compat;
  };
  meta = {
    description = "Setup hook that runs cudapatch over every output in postFixup";
    platforms = lib.platforms.linux;
  };
} ../hooks/cuda-patchelf-hook.sh

# The selector of a cuda_compat: a libcuda.so.1 of its own that, when a
# process loads it, reads the kernel module's version and loads
# cuda_compat's libcuda (module older than compat, of a branch its note
# lists) or the driver's (${driverLink}/lib/libcuda.so.1), and forwards
# every function to it. `cudapatch selector` writes and compiles it; see
# docs/architecture.md, "cuda_compat or the driver: chosen when the process
# starts".
#
# $out/lib holds libcuda.so.1 only: the directory cudaPatchelfHook names in
# RUNPATHs where cuda_compat's directory used to be. The file holds
# cuda_compat's libcuda by store path, so the selector's closure holds
# cuda_compat.
{
  runCommandCC,
  cudapatch,
  addDriverRunpath,
  cuda_compat,
}:
let
  version = cuda_compat.version or (builtins.parseDrvName cuda_compat.name).version;
in
runCommandCC "cuda-compat-selector-${version}"
  {
    nativeBuildInputs = [ cudapatch ];
    passthru = { inherit cuda_compat; };
  }
  ''
    cudapatch selector --cuda-compat ${cuda_compat}/compat \
      --driver-link ${addDriverRunpath.driverLink}/lib --out "$out/lib"
  ''

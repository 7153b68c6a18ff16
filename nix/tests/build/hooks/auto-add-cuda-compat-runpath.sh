# shellcheck shell=bash
#
# Stand-in for nixpkgs' autoAddCudaCompatRunpath, registered as it registers
# itself: cuda_compat's directory (@libcudaPath@) is prepended to the RUNPATH
# of every dynamic ELF file, with patchelf, after the driver hook.

addCudaCompatRunpath() {
    local runpath
    runpath=$(patchelf --print-rpath "$1")
    patchelf --set-rpath "@libcudaPath@${runpath:+:$runpath}" "$1"
}

postFixupHooks+=("autoFixElfFiles addCudaCompatRunpath")

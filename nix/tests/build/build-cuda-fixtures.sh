#!/usr/bin/env bash
# build-cuda-fixtures.sh SRC SAMPLE OUTDIR: the CUDA-like "vendor tarballs"
# of the Nix tier (nix/tests/build), built with CC (default gcc) from SRC
# (this directory's src/) and SAMPLE (hooks/test/sample).
#
#   OUTDIR/cuda_cudart/lib/libcudart.so.12         SONAME libcudart.so.12
#   OUTDIR/cuda_cudart/lib/stubs/libcuda.so        the link-time stub (cuInit 100)
#   OUTDIR/cuda_cudart/lib/stubs/libcuda.so.1      -> libcuda.so
#   OUTDIR/libcublas/lib/libcublas.so.12           NEEDED libcudart.so.12
#   OUTDIR/cuda_compat/compat/libcuda.so.580.95.05 cuda_compat's libcuda (cuInit 1),
#                                                  with its forward-compatibility
#                                                  note (branches 535-580)
#   OUTDIR/cuda_compat/compat/libcuda.so.1         -> libcuda.so.580.95.05
#   OUTDIR/driver/lib/libcuda.so.1                 the "driver" (cuInit 0), only
#                                                  ever seen at run time
#   OUTDIR/gpuapp/bin/gpuapp                       NEEDED libgpu.so libcublas.so.12
#                                                  libcudart.so.12
#   OUTDIR/gpuapp/lib/libgpu.so                    NEEDED libcuda.so.1
#   OUTDIR/extra/lib/libopt.so                     NEEDED "libabsent 1.so"
#
# As a from-source vendor build leaves them, the RUNPATHs name the build
# directory ($PWD/build/lib, and /build/source/lib as a sandboxed build
# would) and /opt/vendor/lib; gpuapp's interpreter is /nonexistent/ld.so.
# Nothing runs before it is patched.
set -euo pipefail
export LC_ALL=C

if [ $# -ne 3 ]; then
	echo "usage: build-cuda-fixtures.sh SRC SAMPLE OUTDIR" >&2
	exit 2
fi
src=$1 sample=$2 out=$3
cc=${CC:-gcc}
build=$PWD/build/lib
vendor="$build:/build/source/lib:/opt/vendor/lib"
mkdir -p "$build" "$out/cuda_cudart/lib/stubs" "$out/libcublas/lib" \
	"$out/cuda_compat/compat" "$out/driver/lib" "$out/gpuapp/bin" \
	"$out/gpuapp/lib" "$out/extra/lib"

so() { # so OUT SONAME SOURCE [ARGS...]
	local o=$1 soname=$2 s=$3
	shift 3
	"$cc" -shared -fPIC -o "$o" -Wl,-soname,"$soname" -Wl,--no-as-needed "$s" "$@"
}

so "$out/cuda_cudart/lib/stubs/libcuda.so" libcuda.so.1 "$sample/cuda-stub.c"
ln -s libcuda.so "$out/cuda_cudart/lib/stubs/libcuda.so.1"
# Its version is in its name, as in cuda_compat: the selector needs it.
so "$out/cuda_compat/compat/libcuda.so.580.95.05" libcuda.so.1 "$src/libcuda.c" \
	-DCUINIT_RESULT=1 -DCOMPAT_NOTE
ln -s libcuda.so.580.95.05 "$out/cuda_compat/compat/libcuda.so.1"
so "$out/driver/lib/libcuda.so.1" libcuda.so.1 "$src/libcuda.c" -DCUINIT_RESULT=0

so "$build/libcudart.so.12" libcudart.so.12 "$src/cudart.c" \
	-Wl,--enable-new-dtags,-rpath,/opt/vendor/lib
so "$build/libcublas.so.12" libcublas.so.12 "$src/cublas.c" \
	-Wl,--enable-new-dtags,-rpath,"$vendor" "$build/libcudart.so.12"
# Linked against the stub, as CUDA programs are.
so "$build/libgpu.so" libgpu.so "$sample/gpu.c" \
	-Wl,--enable-new-dtags,-rpath,"$vendor" "$out/cuda_cudart/lib/stubs/libcuda.so"
"$cc" -o "$out/gpuapp/bin/gpuapp" "$src/gpuapp.c" -Wl,--no-as-needed \
	-Wl,--enable-new-dtags,-rpath,"$vendor" -Wl,--dynamic-linker=/nonexistent/ld.so \
	-Wl,-rpath-link,"$out/cuda_cudart/lib/stubs" \
	"$build/libgpu.so" "$build/libcublas.so.12" "$build/libcudart.so.12"

so "$build/libabsent 1.so" "libabsent 1.so" "$src/absent.c"
so "$out/extra/lib/libopt.so" libopt.so "$src/opt.c" \
	-Wl,--enable-new-dtags,-rpath,"$vendor" "$build/libabsent 1.so"

cp "$build/libcudart.so.12" "$out/cuda_cudart/lib/"
cp "$build/libcublas.so.12" "$out/libcublas/lib/"
cp "$build/libgpu.so" "$out/gpuapp/lib/"

#!/usr/bin/env bash
# Proof on a real NVIDIA GPU (issue 8): programs patched by cudapatch find the
# real driver through the driver link, never the toolkit's stub, and
# cuda_compat wins when asked. Run on a machine with the NVIDIA driver, the
# CUDA toolkit (nvcc) and PyTorch:
#
#   scripts/gpu-proof.sh CUDAPATCH_BINARY [WORKDIR]
#
# Only RUNPATHs decide: LD_LIBRARY_PATH is unset and every run goes through
# the interpreter with --inhibit-cache (no /etc/ld.so.cache). Each step
# prints PASS or FAIL; the script exits non-zero if any step failed.
# Each run is recorded in docs/gpu-proof.md as a dated line (machine,
# commit, result); the output itself is an artifact, not committed.
set -uo pipefail
CP=$(readlink -f "${1:?usage: gpu-proof.sh CUDAPATCH [WORKDIR]}")
W=${2:-/tmp/gpu-proof}
unset LD_LIBRARY_PATH LD_PRELOAD
rm -rf "$W" && mkdir -p "$W"
fails=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
hr() { printf '\n== %s\n' "$*"; }

hr "machine"
date -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
cat /proc/driver/nvidia/version 2>/dev/null | head -1
uname -r
CUDA=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")}
echo "CUDA toolkit: $CUDA ($(nvcc --version | tail -1))"
# The real driver: where the loader finds libcuda.so.1 without our help.
real=$(env LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib python3 - <<'EOF'
import ctypes, os
ctypes.CDLL("libcuda.so.1")
for line in open("/proc/self/maps"):
    if "libcuda.so" in line:
        print(os.path.realpath(line.split()[-1])); break
EOF
)
echo "real driver libcuda: $real"
[ -n "$real" ] || { echo "no driver libcuda found"; exit 2; }
DRVDIR=$(dirname "$real")
echo "cudapatch: $("$CP" patchelf --version 2>&1 | head -1), commit ${CUDAPATCH_COMMIT:-unknown}"
LDSO=/lib64/ld-linux-x86-64.so.2

# A store-like tree: the interpreter copied to a non-standard path, the
# driver link a directory of symlinks to the real driver's libraries.
S=$W/store
GLIBC=$S/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-glibc/lib
mkdir -p "$GLIBC" "$W/run/opengl-driver/lib"
cp -L $LDSO "$GLIBC/ld-linux-x86-64.so.2"
INTERP=$GLIBC/ld-linux-x86-64.so.2
for f in "$DRVDIR"/libcuda.so* "$DRVDIR"/libnvidia-*.so*; do
	[ -e "$f" ] && ln -sf "$f" "$W/run/opengl-driver/lib/$(basename "$f")"
done
DRIVER_LINK=$W/run/opengl-driver/lib
run() { # run a program with only RUNPATHs deciding; $LD_DEBUG_OUT gets LD_DEBUG=libs
	env -u LD_LIBRARY_PATH LD_DEBUG=libs LD_DEBUG_OUTPUT="$W/lddebug" "$INTERP" --inhibit-cache "$@"
}
loaded_libcuda() { # which libcuda.so.1 file the last run loaded
	cat "$W"/lddebug.* 2>/dev/null | sed -n 's/.*calling init: \(.*libcuda\.so[^ ]*\).*/\1/p' | head -1
}

hr "1. a CUDA program: driver API + runtime API kernel"
cat >"$W/probe.cu" <<'EOF'
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
__global__ void axpy(int n, float a, const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
int main() {
  CUresult r = cuInit(0);
  if (r != CUDA_SUCCESS) { const char *s; cuGetErrorString(r, &s); printf("cuInit: %d %s\n", r, s); return 1; }
  CUdevice d; cuDeviceGet(&d, 0); char name[256]; cuDeviceGetName(name, sizeof name, d);
  int drv; cuDriverGetVersion(&drv);
  printf("device: %s (driver API %d)\n", name, drv);
  const int n = 1 << 20; float *x, *y;
  cudaError_t e = cudaMallocManaged(&x, n * sizeof(float));
  if (e != cudaSuccess) { printf("cudaMalloc: %s\n", cudaGetErrorString(e)); return 1; }
  cudaMallocManaged(&y, n * sizeof(float));
  for (int i = 0; i < n; i++) { x[i] = i; y[i] = 1; }
  axpy<<<(n + 255) / 256, 256>>>(n, 2.0f, x, y);
  e = cudaDeviceSynchronize();
  if (e != cudaSuccess) { printf("kernel: %s\n", cudaGetErrorString(e)); return 1; }
  for (int i = 0; i < n; i++) if (y[i] != 2.0f * i + 1) { printf("wrong result at %d\n", i); return 1; }
  printf("kernel result: correct (%d elements)\n", n);
  return 0;
}
EOF
CUDART=$S/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-cuda_cudart/lib
PKG=$S/cccccccccccccccccccccccccccccccc-probe
mkdir -p "$CUDART" "$PKG/bin"
nvcc -o "$PKG/bin/probe" "$W/probe.cu" -lcuda -cudart shared || { fail "nvcc"; exit 1; }
cp -a "$CUDA"/lib64/libcudart.so* "$CUDART/" 2>/dev/null || cp -a "$CUDA"/targets/x86_64-linux/lib/libcudart.so* "$CUDART/"
"$CP" patchelf --remove-rpath --set-interpreter /nonexistent/ld.so "$PKG/bin/probe"
"$CP" print "$PKG/bin/probe"
"$CP" --search "$CUDART" --driver-link "$DRIVER_LINK" --interpreter "$INTERP" \
	--libc /lib/x86_64-linux-gnu "$PKG" "$CUDART"
"$CP" print "$PKG/bin/probe" "$CUDART"/libcudart.so.*.*
rm -f "$W"/lddebug.*
out=$(run "$PKG/bin/probe" 2>&1)
echo "$out"
got=$(loaded_libcuda)
echo "libcuda loaded from: $got"
if echo "$out" | grep -q "kernel result: correct" && [ "$(readlink -f "$got")" = "$real" ]; then
	pass "probe ran on the GPU with the real driver"
else
	fail "probe"
fi
# Directly started (through its PT_INTERP, the copied loader), too:
if env -u LD_LIBRARY_PATH "$PKG/bin/probe" | grep -q "kernel result: correct"; then pass "probe started directly"; else fail "probe started directly"; fi

hr "2. the toolkit's stubs among the search dirs"
STUBS=$(ls -d "$CUDA"/lib64/stubs "$CUDA"/targets/x86_64-linux/lib/stubs 2>/dev/null | head -1)
echo "stubs: $STUBS ($(ls "$STUBS" | grep -c .) files)"
PKG2=$S/dddddddddddddddddddddddddddddddd-probe-stubs
cp -a "$PKG" "$PKG2"
"$CP" patchelf --remove-rpath --set-interpreter /nonexistent/ld.so "$PKG2/bin/probe"
"$CP" --search "$STUBS" --search "$CUDART" --driver-link "$DRIVER_LINK" --interpreter "$INTERP" \
	--libc /lib/x86_64-linux-gnu --json "$PKG2" >"$W/stubs.json"
python3 -c "import json,sys; r=json.load(open('$W/stubs.json')); [print(d['name'], d['how'], d.get('dir','')) for f in r['files'] for d in f.get('deps',[])]"
"$CP" print "$PKG2/bin/probe"
rm -f "$W"/lddebug.*
out=$(run "$PKG2/bin/probe" 2>&1)
echo "$out"
got=$(loaded_libcuda)
echo "libcuda loaded from: $got"
if echo "$out" | grep -q "kernel result: correct" && [ "$(readlink -f "$got")" = "$real" ] && ! grep -q stubs <<<"$got"; then
	pass "stubs searched, real driver loaded"
else
	fail "stubs"
fi

hr "3. cuda_compat first"
COMPAT=$(ls -d "$CUDA"/compat /usr/local/cuda/compat 2>/dev/null | head -1)
if [ -n "$COMPAT" ] && ls "$COMPAT"/libcuda.so* >/dev/null 2>&1; then
	echo "compat: $COMPAT ($(ls "$COMPAT" | tr '\n' ' '))"
	PKG3=$S/eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee-probe-compat
	cp -a "$PKG" "$PKG3"
	"$CP" patchelf --remove-rpath --set-interpreter /nonexistent/ld.so "$PKG3/bin/probe"
	"$CP" --search "$CUDART" --cuda-compat "$COMPAT" --driver-link "$DRIVER_LINK" --interpreter "$INTERP" \
		--libc /lib/x86_64-linux-gnu "$PKG3"
	"$CP" print "$PKG3/bin/probe"
	rm -f "$W"/lddebug.*
	out=$(run "$PKG3/bin/probe" 2>&1)
	echo "$out"
	got=$(loaded_libcuda)
	echo "libcuda loaded from: $got"
	case "$got" in
	"$COMPAT"/*) pass "compat libcuda loaded (run reported: $(echo "$out" | head -1))" ;;
	*) fail "compat not loaded" ;;
	esac
else
	echo "no cuda_compat directory with a libcuda on this machine: step skipped"
fi

hr "4. PyTorch from a store-like tree"
SITE=$(python3 -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
echo "torch: $(python3 -c 'import torch; print(torch.__version__)') at $SITE"
PY=$S/ffffffffffffffffffffffffffffffff-python-torch/site-packages
mkdir -p "$PY"
cp -a "$SITE/torch" "$PY/"
for d in "$SITE"/nvidia "$SITE"/triton "$SITE"/torchgen "$SITE"/functorch; do [ -e "$d" ] && cp -a "$d" "$PY/"; done
# Remove every RPATH/RUNPATH, as a wheel built for FHS would not have the store's.
mapfile -t sos < <(find "$PY" -name '*.so*' -type f)
echo "shared objects: ${#sos[@]}"
for f in "${sos[@]}"; do "$CP" patchelf --remove-rpath "$f" 2>/dev/null; done
if env -u LD_LIBRARY_PATH PYTHONPATH="$PY" "$INTERP" --inhibit-cache "$(command -v python3)" -c 'import torch' 2>/dev/null; then
	fail "torch imported before patching (the test would prove nothing)"
else
	pass "torch does not import without RUNPATHs"
fi
searches=()
while read -r d; do searches+=(--search "$d"); done < <(find "$PY" -name '*.so*' -type f -printf '%h\n' | sort -u)
start=$(date +%s%N)
/usr/bin/time -v "$CP" "${searches[@]}" --driver-link "$DRIVER_LINK" --libc /lib/x86_64-linux-gnu \
	--ignore-missing 'libpython*' --ignore-missing '*' "$PY" 2>"$W/torch-time.txt" | tail -3
end=$(date +%s%N)
grep -E "Elapsed|Maximum resident|File system outputs" "$W/torch-time.txt"
echo "cudapatch on the torch tree: $(((end - start) / 1000000)) ms for ${#sos[@]} shared objects ($(du -sh "$PY" | cut -f1))"
cat >"$W/torch-check.py" <<'EOF'
import torch, sys
print("torch", torch.__version__, "from", torch.__file__)
print("cuda available:", torch.cuda.is_available())
print("device:", torch.cuda.get_device_name(0))
a = torch.randn(1024, 1024, dtype=torch.float64)
b = torch.randn(1024, 1024, dtype=torch.float64)
g = (a.cuda() @ b.cuda()).cpu()
c = a @ b
err = (g - c).abs().max().item()
print("matmul max abs error vs CPU:", err)
sys.exit(0 if torch.cuda.is_available() and err < 1e-9 else 1)
EOF
rm -f "$W"/lddebug.*
if env -u LD_LIBRARY_PATH PYTHONPATH="$PY" LD_DEBUG=libs LD_DEBUG_OUTPUT="$W/lddebug" "$INTERP" --inhibit-cache "$(command -v python3)" "$W/torch-check.py"; then
	echo "libcuda loaded from: $(loaded_libcuda)"
	pass "patched torch runs on the GPU"
else
	fail "patched torch"
fi

hr "summary"
echo "failures: $fails"
exit $((fails > 0))

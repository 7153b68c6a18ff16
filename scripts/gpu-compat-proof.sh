#!/usr/bin/env bash
# Proof on a real NVIDIA GPU (issue 40): with --cuda-compat, the libcuda a
# process takes is chosen when it starts, by the selector that cudapatch
# builds, from the running kernel module and cuda_compat's own note. Run on a
# machine with the NVIDIA driver, the CUDA toolkit (nvcc, and its compat/
# directory) and PyTorch:
#
#   scripts/gpu-compat-proof.sh CUDAPATCH_BINARY [WORKDIR]
#
# cuda_compat is laid out as a store path of its own and given as a build
# input; only RUNPATHs decide (LD_LIBRARY_PATH unset, the loader run with
# --inhibit-cache). On a driver not older than compat, the selector must take
# the driver: cuInit 0, a kernel and a PyTorch matmul on the GPU, exactly one
# driver libcuda mapped, compat's never. The negative control is the order
# autoAddCudaCompatRunpath writes (compat first): cuInit 803. Each step prints
# PASS or FAIL; the script exits non-zero if any step failed.
set -uo pipefail
CP=$(readlink -f "${1:?usage: gpu-compat-proof.sh CUDAPATCH [WORKDIR]}")
W=${2:-/tmp/gpu-compat-proof}
unset LD_LIBRARY_PATH LD_PRELOAD
rm -rf "$W" && mkdir -p "$W"
fails=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
hr() { printf '\n== %s\n' "$*"; }

hr "machine"
date -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
head -1 /proc/driver/nvidia/version
CUDA=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")}
echo "CUDA toolkit: $CUDA ($(nvcc --version | tail -1))"
real=$(env LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib python3 - <<'PY'
import ctypes, os
ctypes.CDLL("libcuda.so.1")
for line in open("/proc/self/maps"):
    if "libcuda.so" in line:
        print(os.path.realpath(line.split()[-1])); break
PY
)
echo "real driver libcuda: $real"
[ -n "$real" ] || { echo "no driver libcuda found"; exit 2; }
DRVDIR=$(dirname "$real")
COMPAT_SRC=$(ls -d "$CUDA"/compat /usr/local/cuda/compat 2>/dev/null | head -1)
[ -n "$COMPAT_SRC" ] || { echo "no cuda_compat directory"; exit 2; }
echo "cudapatch: $("$CP" --version 2>&1 | head -1), commit ${CUDAPATCH_COMMIT:-unknown}"

S=$W/store
GLIBC=$S/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-glibc/lib
COMPAT=$S/gggggggggggggggggggggggggggggggg-cuda_compat/compat
SEL=$S/hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh-cuda-compat-selector/lib
CUDART=$S/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-cuda_cudart/lib
DRIVER_LINK=$W/run/opengl-driver/lib
mkdir -p "$GLIBC" "$DRIVER_LINK" "$COMPAT" "$CUDART"
cp -L /lib64/ld-linux-x86-64.so.2 "$GLIBC/"
INTERP=$GLIBC/ld-linux-x86-64.so.2
for f in "$DRVDIR"/libcuda.so* "$DRVDIR"/libnvidia-*.so*; do
	[ -e "$f" ] && ln -sf "$f" "$DRIVER_LINK/$(basename "$f")"
done
cp -a "$COMPAT_SRC"/. "$COMPAT/"
cp -a "$CUDA"/lib64/libcudart.so* "$CUDART/" 2>/dev/null || cp -a "$CUDA"/targets/x86_64-linux/lib/libcudart.so* "$CUDART/"
echo "compat: $(ls "$COMPAT" | tr '\n' ' ')"
readelf -p .note.cuda.fwd_compatibility "$COMPAT"/libcuda.so.*.* 2>/dev/null | grep -o '{.*}' || true
run() { env -u LD_LIBRARY_PATH "$INTERP" --inhibit-cache "$@"; }

hr "1. the selector"
t0=$(date +%s%N)
"$CP" selector --cuda-compat "$COMPAT" --driver-link "$DRIVER_LINK" --out "$SEL" || fail "cudapatch selector"
t1=$(date +%s%N)
echo "built in $(((t1 - t0) / 1000000)) ms: $(ls -l "$SEL")"
echo "exports: $(readelf -W --dyn-syms "$SEL/libcuda.so.1" | awk '$4=="FUNC" && $7!="UND"' | wc -l) functions"

hr "2. programs: DT_NEEDED libcuda.so.1, and dlopen(\"libcuda.so.1\")"
cat >"$W/maps.h" <<'C'
#include <stdio.h>
#include <string.h>
#include <regex.h>
/* Prints every mapped libcuda file once and the count of driver libraries
   (libcuda.so.<version>) among them. */
static void maps(void) {
  FILE *f = fopen("/proc/self/maps", "r"); char line[4096], seen[16][1024]; int n = 0, drivers = 0;
  regex_t re; regcomp(&re, "libcuda\\.so\\.[0-9]+\\.[0-9]+", REG_EXTENDED);
  while (fgets(line, sizeof line, f)) {
    char *p = strchr(line, '/'); if (!p || !strstr(p, "libcuda")) continue;
    p[strcspn(p, "\n")] = 0; int dup = 0;
    for (int i = 0; i < n; i++) if (!strcmp(seen[i], p)) dup = 1;
    if (dup || n == 16) continue;
    snprintf(seen[n++], 1024, "%s", p); printf("mapped: %s\n", p);
    if (!regexec(&re, p, 0, 0, 0)) drivers++;
  }
  printf("driver libcuda files mapped: %d\n", drivers);
}
C
cat >"$W/probe.cu" <<'C'
#include <cuda.h>
#include <cuda_runtime.h>
#include "maps.h"
__global__ void axpy(int n, float a, const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
int main() {
  CUresult r = cuInit(0);
  printf("cuInit: %d\n", r);
  if (r != CUDA_SUCCESS) { maps(); return 1; }
  CUdevice d; cuDeviceGet(&d, 0); char name[256]; cuDeviceGetName(name, sizeof name, d);
  printf("device: %s\n", name);
  const int n = 1 << 20; float *x, *y;
  cudaMalloc(&x, n * sizeof(float)); cudaMalloc(&y, n * sizeof(float));
  float *h = (float *)malloc(n * sizeof(float));
  for (int i = 0; i < n; i++) h[i] = i;
  cudaMemcpy(x, h, n * sizeof(float), cudaMemcpyHostToDevice);
  for (int i = 0; i < n; i++) h[i] = 1;
  cudaMemcpy(y, h, n * sizeof(float), cudaMemcpyHostToDevice);
  axpy<<<(n + 255) / 256, 256>>>(n, 2.0f, x, y);
  if (cudaDeviceSynchronize() != cudaSuccess) { printf("kernel failed\n"); return 1; }
  cudaMemcpy(h, y, n * sizeof(float), cudaMemcpyDeviceToHost);
  for (int i = 0; i < n; i++) if (h[i] != 2.0f * i + 1) { printf("wrong result at %d\n", i); return 1; }
  printf("kernel result: correct\n");
  maps();
  return 0;
}
C
cat >"$W/dlprobe.c" <<'C'
#include <dlfcn.h>
#include "maps.h"
int main() {
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h) { printf("dlopen: %s\n", dlerror()); return 1; }
  int (*init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
  int (*count)(int *) = (int (*)(int *))dlsym(h, "cuDeviceGetCount");
  int r = init(0), c = -1;
  printf("cuInit: %d\n", r);
  if (r == 0) { count(&c); printf("devices: %d\n", c); }
  maps();
  return r != 0;
}
C
PKG=$S/cccccccccccccccccccccccccccccccc-probe
mkdir -p "$PKG/bin"
nvcc -I"$W" -o "$PKG/bin/probe" "$W/probe.cu" -lcuda -cudart shared || { fail "nvcc"; exit 1; }
gcc -I"$W" -o "$PKG/bin/dlprobe" "$W/dlprobe.c" -ldl || { fail "gcc"; exit 1; }
for f in "$PKG"/bin/*; do "$CP" patchelf --remove-rpath --set-interpreter /nonexistent/ld.so "$f"; done
NEG=$S/dddddddddddddddddddddddddddddddd-probe-compat-first
cp -a "$PKG" "$NEG"
"$CP" --search "$CUDART" --search "$COMPAT" --cuda-compat "$SEL" --driver-link "$DRIVER_LINK" \
	--interpreter "$INTERP" --libc /lib/x86_64-linux-gnu "$PKG" "$CUDART"
"$CP" print "$PKG"/bin/* "$CUDART"/libcudart.so.*.*
"$CP" explain "$PKG/bin/probe" | grep -i libcuda
"$CP" doctor "$PKG/bin/probe"
for p in probe dlprobe; do
	out=$(run "$PKG/bin/$p" 2>&1)
	echo "$out"
	if grep -q "cuInit: 0" <<<"$out" && grep -q "driver libcuda files mapped: 1" <<<"$out" &&
		grep -q "mapped: $(readlink -f "$real")" <<<"$out" && ! grep -q "mapped: $COMPAT" <<<"$out"; then
		pass "$p: the selector took the driver; one driver libcuda mapped, compat's not"
	else
		fail "$p"
	fi
done
if grep -q "kernel result: correct" <<<"$(run "$PKG/bin/probe" 2>&1)"; then pass "kernel on the GPU"; else fail "kernel"; fi

hr "3. negative control: compat first in the RUNPATH, as autoAddCudaCompatRunpath writes it"
for f in "$NEG"/bin/*; do
	"$CP" patchelf --set-interpreter "$INTERP" --set-rpath "$COMPAT:$DRIVER_LINK:$CUDART" "$f"
done
for p in probe dlprobe; do
	out=$(run "$NEG/bin/$p" 2>&1)
	echo "$out"
	if grep -q "cuInit: 803" <<<"$out"; then pass "$p with compat first: 803, as expected"; else fail "$p negative control"; fi
done

hr "4. PyTorch from a store-like tree, with --cuda-compat"
SITE=$(python3 -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
PY=$S/ffffffffffffffffffffffffffffffff-python-torch/site-packages
mkdir -p "$PY"
cp -a "$SITE/torch" "$PY/"
for d in "$SITE"/nvidia "$SITE"/triton "$SITE"/torchgen "$SITE"/functorch; do [ -e "$d" ] && cp -a "$d" "$PY/"; done
mapfile -t sos < <(find "$PY" -name '*.so*' -type f)
for f in "${sos[@]}"; do "$CP" patchelf --remove-rpath "$f" 2>/dev/null; done
searches=()
while read -r d; do searches+=(--search "$d"); done < <(find "$PY" -name '*.so*' -type f -printf '%h\n' | sort -u)
"$CP" "${searches[@]}" --search "$COMPAT" --cuda-compat "$SEL" --driver-link "$DRIVER_LINK" --libc /lib/x86_64-linux-gnu \
	--ignore-missing 'libpython*' --ignore-missing '*' "$PY" | tail -2
cat >"$W/torch-check.py" <<'PY'
import os, re, sys, torch
ok = torch.cuda.is_available()
print("cuda available:", ok)
a = torch.randn(1024, 1024, dtype=torch.float64)
b = torch.randn(1024, 1024, dtype=torch.float64)
err = ((a.cuda() @ b.cuda()).cpu() - a @ b).abs().max().item()
print("matmul max abs error vs CPU:", err)
libs = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libcuda" in l})
print("\n".join("mapped: " + l for l in libs))
drivers = [l for l in libs if re.search(r"libcuda\.so\.\d+\.\d+", l)]
print("driver libcuda files mapped:", len(drivers))
sys.exit(0 if ok and err < 1e-9 and len(drivers) == 1 and "compat" not in drivers[0] else 1)
PY
if env -u LD_LIBRARY_PATH PYTHONPATH="$PY" "$INTERP" --inhibit-cache "$(command -v python3)" "$W/torch-check.py"; then
	pass "patched torch: matmul on the GPU through the selector, one driver libcuda"
else
	fail "patched torch"
fi

hr "5. cost at process start: dlopen of the selector against dlopen of the driver's libcuda"
cat >"$W/cost.c" <<'C'
#include <dlfcn.h>
#include <stdio.h>
#include <time.h>
int main(int argc, char **argv) {
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  void *h = dlopen(argv[1], RTLD_NOW);
  clock_gettime(CLOCK_MONOTONIC, &b);
  if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
  printf("%.1f\n", (b.tv_sec - a.tv_sec) * 1e6 + (b.tv_nsec - a.tv_nsec) / 1e3);
  return 0;
}
C
gcc -o "$W/cost" "$W/cost.c" -ldl
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for _ in $(seq 3); do "$W/cost" "$DRIVER_LINK/libcuda.so.1" >/dev/null; "$W/cost" "$SEL/libcuda.so.1" >/dev/null; done
d=$(for _ in $(seq 41); do env -u LD_LIBRARY_PATH "$W/cost" "$DRIVER_LINK/libcuda.so.1"; done | median)
s=$(for _ in $(seq 41); do env -u LD_LIBRARY_PATH "$W/cost" "$SEL/libcuda.so.1"; done | median)
echo "dlopen, median of 41 fresh processes: driver libcuda $d us; selector (which opens the driver's) $s us"
if awk -v d="$d" -v s="$s" 'BEGIN { printf "the selector adds %.0f us\n", s - d; exit !(s - d < 1000) }'; then pass "under 1 ms"; else fail "selector cost"; fi

hr "summary"
echo "failures: $fails"
exit $((fails > 0))

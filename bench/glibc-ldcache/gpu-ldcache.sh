#!/usr/bin/env bash
# Issue 11 on the GPU machine, one shot (about 3-6 minutes): with a real
# loader that reads the resolution-cache note (glibc 2.41 + ldcache.patch,
# packed by build.sh), measure PyTorch from a store-like tree patched by
# cudapatch, note on vs off in the same run:
#   - the loader's failed probes (LD_DEBUG=libs; no strace there),
#   - wall time of `import torch` to the first CUDA call, and of loading
#     libtorch_cuda.so with its dependencies alone,
# and show that the issue's stale-note program (stub libcuda in the note,
# patchelf master's fixup) loads the driver's libcuda after cudapatch.
#
#   bash bench/glibc-ldcache/gpu-ldcache.sh CARRY_DIR [WORKDIR]
#
# CARRY_DIR (bench/glibc-ldcache/gpu-pack.sh makes it): glibc-ldcache.tar.xz,
# patchelf (NixOS/patchelf master), cudapatch (CGO_ENABLED=0). Python runs
# under our glibc: our ld.so runs the venv's python3 with our libc, libm,
# libdl, libpthread, librt and libutil preloaded by path, so every library
# lookup after that goes through our loader, and glibc's own libraries are
# never taken from the host. LD_LIBRARY_PATH is unset for every measured run.
#
# Overridable for a dry run elsewhere: PYTHON, SITE (site-packages to copy
# from), SITE_DIRS (what to copy), CHECK (the timed Python code), LOADLIB
# (library dlopened alone, relative to the copy), CUDA_HOME, DRIVER_DIR,
# CHECK_CUDA=0 (no GPU: do not require a CUDA device), BUDGET_S (seconds for
# the timed runs, default 150).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
K=$(readlink -f "${1:?usage: gpu-ldcache.sh CARRY_DIR [WORKDIR]}")
W=${2:-/tmp/gpu-ldcache}
PYTHON=${PYTHON:-/opt/torch/.venv/bin/python3}
SITE=${SITE:-/opt/torch/.venv/lib/python3.12/site-packages}
SITE_DIRS=${SITE_DIRS:-torch nvidia triton torchgen functorch}
CHECK=${CHECK:-'import os, torch; torch.zeros(1, device="cuda"); torch.cuda.synchronize(); os._exit(0)'}
LOADLIB=${LOADLIB:-torch/lib/libtorch_cuda.so}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
BUDGET_S=${BUDGET_S:-150}
HOST_LLP=${LD_LIBRARY_PATH:-/usr/local/nvidia/lib64:/usr/local/nvidia/lib}
unset LD_LIBRARY_PATH LD_PRELOAD
export LC_ALL=C.UTF-8
rm -rf "$W" && mkdir -p "$W" || exit 2
fails=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
hr() { printf '\n== %s (t=%ss)\n' "$*" "$SECONDS"; }
# shellcheck source=bench/glibc-ldcache/ab.sh
. "$HERE/ab.sh"
AB_DIR=$W/ab && mkdir -p "$AB_DIR"
AB_LIST=$W/torch.list # read by ab.sh
PE=$K/patchelf CP=$K/cudapatch
chmod +x "$PE" "$CP" 2>/dev/null

hr "machine"
date -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true
echo "$(uname -r), $(nproc) cores, $(ldd --version | head -1)"
S=$W/store
GL=$S/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-glibc-2.41-ldcache/lib
mkdir -p "$GL" && tar -xJf "$K/glibc-ldcache.tar.xz" -C "$(dirname "$GL")" || exit 2
LDSO=$GL/ld-linux-x86-64.so.2
echo "loader: $LDSO ($("$LDSO" --version | head -1))"
grep -q 'trying cached file' "$LDSO" || { echo "this ld.so lacks ldcache.patch"; exit 2; }
echo "patchelf: $("$PE" --version); cudapatch: $("$CP" --version 2>&1 | head -1), $(cat "$K/VERSION" 2>/dev/null)"
PRE="$GL/libc.so.6 $GL/libm.so.6 $GL/libdl.so.2 $GL/libpthread.so.0 $GL/librt.so.1 $GL/libutil.so.1"
py() { PYTHONPATH=$PY timeout 180 "$LDSO" --preload "$PRE" "$PYTHON" "$@"; } # a hung CUDA call must not eat the run

# The real driver: where libcuda.so.1 is found with the machine's own setup.
if [ -z "${DRIVER_DIR:-}" ]; then
	real=$(env LD_LIBRARY_PATH="$HOST_LLP" "$PYTHON" -c '
import ctypes, os
ctypes.CDLL("libcuda.so.1")
print(next(os.path.realpath(l.split()[-1]) for l in open("/proc/self/maps") if "libcuda.so" in l))')
	DRIVER_DIR=$(dirname "$real")
fi
echo "driver libraries: $DRIVER_DIR"
DRV=$W/run/opengl-driver/lib
mkdir -p "$DRV"
for f in "$DRIVER_DIR"/libcuda.so* "$DRIVER_DIR"/libnvidia-*.so*; do
	[ -e "$f" ] && ln -sf "$f" "$DRV/$(basename "$f")"
done
loaded() { # FILE-PATTERN: which file of that name the last LD_DEBUG run initialised
	cat "$W"/lddebug.* 2>/dev/null | sed -n "s/.*calling init: \(.*$1[^ ]*\).*/\1/p" | head -1
}

hr "1. the issue's stale note, with the real driver"
STUBS=$S/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-cuda_cudart-stubs/lib/stubs
mkdir -p "$STUBS"
stub=
for f in "$CUDA_HOME"/lib64/stubs/libcuda.so "$CUDA_HOME"/targets/x86_64-linux/lib/stubs/libcuda.so; do
	[ -e "$f" ] && stub=$f && break
done
if [ -n "$stub" ]; then
	cp "$stub" "$STUBS/libcuda.so" && ln -s libcuda.so "$STUBS/libcuda.so.1" # as nixpkgs' stubs have
	OUT=$S/cccccccccccccccccccccccccccccccc-cuinit
	mkdir -p "$OUT/bin"
	cat >"$W/cuinit.c" <<'EOF'
#include <stdio.h>
#include <string.h>
int cuInit(unsigned int);
int main(void) {
  int r = cuInit(0);
  char line[4096], *which = "?";
  FILE *m = fopen("/proc/self/maps", "r");
  while (m && fgets(line, sizeof line, m))
    if (strstr(line, "libcuda.so")) { which = strchr(line, '/'); which[strcspn(which, "\n")] = 0; break; }
  printf("cuInit=%d libcuda=%s\n", r, which);
  return r != 0;
}
EOF
	# Linked as a from-source CUDA build is: -lcuda from the stubs, the stubs in the RUNPATH.
	gcc -o "$OUT/bin/cuinit" "$W/cuinit.c" "$STUBS/libcuda.so" -Wl,--dynamic-linker="$LDSO" \
		-Wl,--enable-new-dtags,-rpath,"$STUBS:$GL"
	"$PE" --build-resolution-cache "$OUT/bin/cuinit"
	echo "  note written by patchelf master (nixpkgs' generate-ld-cache fixup):"
	python3 "$HERE/ldcache-toggle.py" print "$OUT/bin/cuinit" | sed 's/^[^:]*: /    /'
	echo "    run: $("$OUT/bin/cuinit")  (34 = CUDA_ERROR_STUB_LIBRARY)"
	"$CP" --driver-link "$DRV" --interpreter "$LDSO" --keep-libc --search "$GL" "$OUT" | sed 's/^/    /'
	echo "  after cudapatch: RUNPATH $("$PE" --print-rpath "$OUT/bin/cuinit"), note:"
	python3 "$HERE/ldcache-toggle.py" print "$OUT/bin/cuinit" | sed 's/^[^:]*: /    /'
	out=$("$OUT/bin/cuinit")
	echo "    run: $out"
	case "$out" in
	"cuInit=0 libcuda=$DRV/"* | "cuInit=0 libcuda=$DRIVER_DIR/"*) pass "after cudapatch the driver's libcuda loads and cuInit succeeds" ;;
	*stubs*) fail "after cudapatch the stale note still loads the stub (issue 11 not fixed in this cudapatch)" ;;
	*) fail "stale-note program: $out" ;;
	esac
else
	fail "no stub libcuda.so under $CUDA_HOME: step skipped"
fi

hr "2. PyTorch from a store-like tree"
PY=$S/dddddddddddddddddddddddddddddddd-python-torch/site-packages
mkdir -p "$PY"
for d in $SITE_DIRS; do [ -e "$SITE/$d" ] && cp -a "$SITE/$d" "$PY/"; done
mapfile -t sos < <(find "$PY" -name '*.so*' -type f | sort)
echo "copied $(du -sh "$PY" | cut -f1), ${#sos[@]} shared objects (t=${SECONDS}s)"
for f in "${sos[@]}"; do "$CP" patchelf --remove-rpath "$f" 2>/dev/null; done
# The C++ runtime as a store path, as Nix has it (gcc-lib in the RUNPATHs),
# instead of the host's through /etc/ld.so.cache.
GCCLIB=$S/eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee-gcc-lib/lib
mkdir -p "$GCCLIB"
for n in libstdc++.so.6 libgcc_s.so.1; do
	p=$(ldconfig -p | awk -v n="$n" '$1 == n && /x86-64/ { print $NF; exit }')
	[ -n "$p" ] && cp -L "$p" "$GCCLIB/$n"
done
searches=(--search "$GCCLIB")
while read -r d; do searches+=(--search "$d"); done < <(printf '%s\n' "${sos[@]}" | xargs -d '\n' dirname | sort -u)
"$CP" "${searches[@]}" --driver-link "$DRV" --libc "$GL" --ignore-missing '*' "$PY" | tail -1
printf '%s\n' "${sos[@]}" >"$AB_LIST"
before=$(xargs -d '\n' -a "$W/torch.list" python3 "$HERE/ldcache-toggle.py" status)
echo "after cudapatch: $before"
if ! grep -q 'on: 0,' <<<"$before"; then
	writer=cudapatch
else
	writer="patchelf master (this cudapatch writes no notes)"
	for f in "${sos[@]}"; do "$PE" --build-resolution-cache "$f" 2>/dev/null; done
fi
echo "notes written by $writer: $(xargs -d '\n' -a "$W/torch.list" python3 "$HERE/ldcache-toggle.py" status) (t=${SECONDS}s)"

cat >"$W/check.py" <<'EOF'
import os, torch
print("torch", torch.__version__, "from", torch.__file__)
libc = next(l.split()[-1] for l in open("/proc/self/maps") if "libc.so" in l)
print("libc:", libc)
if torch.cuda.is_available():
    print("device:", torch.cuda.get_device_name(0))
    a = torch.randn(512, 512, dtype=torch.float64)
    print("matmul max abs error vs CPU:", ((a.cuda() @ a.cuda()).cpu() - a @ a).abs().max().item())
else:
    print("cuda available: False")
maps = {l.split()[-1] for l in open("/proc/self/maps") if ".so" in l.split()[-1]}
copied = tuple(os.path.join(os.environ["SITE"], d) + "/" for d in os.environ["SITE_DIRS"].split())
print("mapped libraries: %d from the store copy, %d of the copied packages from the original site-packages" % (
    sum(m.startswith(os.environ["STORE"]) for m in maps), sum(m.startswith(copied) for m in maps)))
# Packages the tree does not copy (numpy) come from the venv, as they would
# from their own store paths.
for m in sorted(m for m in maps if m.startswith(os.environ["SITE"])):
    print("  from the original site-packages:", m)
EOF
rm -f "$W"/lddebug.*
out=$(STORE=$S SITE=$SITE SITE_DIRS=$SITE_DIRS LD_DEBUG=libs LD_DEBUG_OUTPUT=$W/lddebug py "$W/check.py" 2>&1)
# shellcheck disable=SC2001
sed 's/^/    /' <<<"$out"
echo "    libcuda loaded from: $(loaded libcuda.so)"
if grep -q "^libc: $GL/libc.so.6" <<<"$out" && grep -q ', 0 of the copied packages from the original' <<<"$out" &&
	{ grep -q '^device:' <<<"$out" || [ "${CHECK_CUDA:-1}" = 0 ]; }; then
	pass "torch from the patched tree runs under our glibc, notes on"
else
	fail "torch from the patched tree under our glibc"
fi

hr "3. loader probes (LD_DEBUG=libs), note on and off"
ab_lddebug torch-cuda py -c "$CHECK" | tee -a "$W/summary"
ab_lddebug load-libtorch_cuda py -c "import ctypes; ctypes.CDLL('$PY/$LOADLIB')" | tee -a "$W/summary"

hr "4. wall time, note on and off interleaved"
t0=$EPOCHREALTIME
py -c "$CHECK" >/dev/null 2>&1
one=$(echo "$t0 $EPOCHREALTIME" | awk '{print $2 - $1}')
n=$(awk -v b="$BUDGET_S" -v o="$one" 'BEGIN { n = int(b * 0.8 / (2 * o + 0.2)); print (n < 5 ? 5 : (n > 30 ? 30 : n)) }')
echo "one run: ${one}s -> $n runs per variant"
ab_time torch-cuda "$n" py -c "$CHECK" | tee -a "$W/summary"
ab_time load-libtorch_cuda "$((n * 2))" py -c "import ctypes; ctypes.CDLL('$PY/$LOADLIB')" | tee -a "$W/summary"

hr "summary"
echo "notes written by: $writer"
grep -h -E '^(torch-cuda|load-libtorch_cuda) ' "$W/summary" 2>/dev/null || true
echo "failures: $fails (total ${SECONDS}s)"
exit $((fails > 0))

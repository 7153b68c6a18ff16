#!/usr/bin/env bash
# Proof on a real NVIDIA GPU (issue 30): PyTorch's CUDA libraries laid out
# one store path per redistributable, as nixpkgs' cudaPackages are, patched
# by cudapatch with no $ORIGIN and no hand-written dlopen list. What torch
# and the CUDA libraries load with dlopen (NVRTC, nvJitLink, cuDNN's
# sub-libraries) is found through the RUNPATH entries dlopen discovery
# adds, and no CUDA library is mapped from outside the tree.
#
#   scripts/gpu-dlopen-proof.sh CUDAPATCH_BINARY [WORKDIR]
#
# Run where the NVIDIA driver and a CUDA-enabled PyTorch with its nvidia-*
# wheels are installed. The tree is patched twice: with --dlopen off (the
# way before discovery: the dlopen'd libraries are expected to fail or to
# come from outside the tree), then with the default --dlopen resolve.
# Only RUNPATHs decide: LD_LIBRARY_PATH is unset and every run goes through
# a copied interpreter with --inhibit-cache. Each step prints PASS or FAIL;
# the exit status is non-zero if a step of the resolve run failed.
# Each run is recorded in docs/gpu-proof.md as a dated line (machine,
# commit, result); the output itself is an artifact, not committed.
set -uo pipefail
CP=$(readlink -f "${1:?usage: gpu-dlopen-proof.sh CUDAPATCH [WORKDIR]}")
W=${2:-/tmp/gpu-dlopen-proof}
unset LD_LIBRARY_PATH LD_PRELOAD
rm -rf "$W" && mkdir -p "$W"
hr() { printf '\n== %s\n' "$*"; }

hr "machine"
date -u
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
real=$(env LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib python3 - <<'EOF'
import ctypes, os
ctypes.CDLL("libcuda.so.1")
for line in open("/proc/self/maps"):
    if "libcuda.so" in line:
        print(os.path.realpath(line.split()[-1])); break
EOF
)
[ -n "$real" ] || { echo "no driver libcuda found"; exit 2; }
echo "real driver libcuda: $real"
DRVDIR=$(dirname "$real")
echo "cudapatch: $("$CP" --version 2>&1 | head -2 | tr '\n' ' ')"

S=$W/store
GLIBC=$S/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-glibc/lib
mkdir -p "$GLIBC" "$W/run/opengl-driver/lib"
cp -L /lib64/ld-linux-x86-64.so.2 "$GLIBC/ld-linux-x86-64.so.2"
INTERP=$GLIBC/ld-linux-x86-64.so.2
for f in "$DRVDIR"/libcuda.so* "$DRVDIR"/libnvidia-*.so*; do
	[ -e "$f" ] && ln -sf "$f" "$W/run/opengl-driver/lib/$(basename "$f")"
done
DRIVER_LINK=$W/run/opengl-driver/lib
# A glibc-only libc directory and a gcc-lib one, as in Nix: the host's lib
# directory as --libc would take every library found there (a host cuDNN,
# NCCL) for libc and hide the failures this proves absent.
for l in libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libutil.so.1 libresolv.so.2; do
	[ -e "/lib/x86_64-linux-gnu/$l" ] && cp -L "/lib/x86_64-linux-gnu/$l" "$GLIBC/"
done
GCCLIB=$S/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-gcc-lib/lib
mkdir -p "$GCCLIB"
cp -L /lib/x86_64-linux-gnu/libstdc++.so.6 /lib/x86_64-linux-gnu/libgcc_s.so.1 "$GCCLIB/"

hr "the tree: torch in one store path, each CUDA redistributable in its own"
SITE=$(python3 -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
echo "torch $(python3 -c 'import torch; print(torch.__version__)') at $SITE"
PY=$S/ffffffffffffffffffffffffffffffff-python-torch/site-packages
mkdir -p "$PY"
cp -a "$SITE/torch" "$PY/"
for d in "$SITE"/triton "$SITE"/torchgen "$SITE"/functorch; do [ -e "$d" ] && cp -a "$d" "$PY/"; done
# Python runs with -S and this path: the tree, then the rest of the site
# directory without torch and the nvidia wheels (torch preloads whatever
# nvidia/*/lib it finds on sys.path, which would bypass every RUNPATH).
SHADOW=$W/site-rest
mkdir -p "$SHADOW"
for e in "$SITE"/*; do
	case $(basename "$e") in
	nvidia* | torch | torch-* | triton | triton-* | torchgen | functorch) ;;
	*) ln -s "$e" "$SHADOW/" ;;
	esac
done
# redist NAME: the nixpkgs cudaPackages attribute a wheel library belongs to.
redist() {
	case $1 in
	libcublas*) echo libcublas ;;
	libcudart*) echo cuda_cudart ;;
	libcufft*) echo libcufft ;;
	libcurand*) echo libcurand ;;
	libcusolver*) echo libcusolver ;;
	libcusparseLt*) echo libcusparse_lt ;;
	libcusparse*) echo libcusparse ;;
	libnvrtc*) echo cuda_nvrtc ;;
	libnvJitLink*) echo libnvjitlink ;;
	libcudnn*) echo cudnn ;;
	libnccl*) echo nccl ;;
	libcupti* | libnvperf* | libpcsampling*) echo cuda_cupti ;;
	libnvToolsExt* | libnvtx*) echo cuda_nvtx ;;
	libcufile*) echo libcufile ;;
	libnvshmem*) echo libnvshmem ;;
	*) echo other ;;
	esac
}
declare -A dirs=()
while read -r f; do
	r=$(redist "$(basename "$f")")
	h=$(printf '%s' "$r" | md5sum | cut -c1-32)
	d=$S/$h-$r/lib
	mkdir -p "$d"
	cp -a "$f" "$d/"
	dirs[$d]=1
done < <(find "$SITE/nvidia" \( -type f -o -type l \) -name 'lib*.so*' | sort)
echo "redistributables: ${#dirs[@]}"
for d in "${!dirs[@]}"; do echo "  $(basename "$(dirname "$d")"): $(find "$d" -name 'lib*.so*' | wc -l) files"; done | sort
# Remove every RPATH/RUNPATH, as a wheel built for FHS would not have the store's.
mapfile -t sos < <(find "$PY" "${!dirs[@]}" -name '*.so*' -type f)
for f in "${sos[@]}"; do "$CP" patchelf --remove-rpath "$f" 2>/dev/null; done
echo "shared objects: ${#sos[@]}"
searches=(--search "$GCCLIB")
for d in "${!dirs[@]}"; do searches+=(--search "$d"); done

cat >"$W/check.py" <<'EOF'
import os, sys, traceback
results = []
def step(name, fn):
    try:
        msg = fn()
        results.append((name, True, msg))
    except BaseException as e:
        results.append((name, False, "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")))
import torch
store = sys.argv[1]
def fft():
    x = torch.randn(4096, dtype=torch.complex64)
    err = (torch.fft.fft(x.cuda()).cpu() - torch.fft.fft(x)).abs().max().item()
    assert err < 1e-2, err
    return "max abs error %.2g" % err
def jiterator():
    fn = torch.cuda.jiterator._create_jit_fn("template <typename T> T fma1(T x, T y) { return x * y + T(1); }")
    a, b = torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")
    err = (fn(a, b) - (a * b + 1)).abs().max().item()
    assert err < 1e-5, err
    return "max abs error %.2g" % err
def conv2d():
    torch.backends.cudnn.enabled = True
    x, w = torch.randn(8, 16, 32, 32), torch.randn(32, 16, 3, 3)
    got = torch.nn.functional.conv2d(x.cuda(), w.cuda(), padding=1).cpu()
    err = (got - torch.nn.functional.conv2d(x, w, padding=1)).abs().max().item()
    assert err < 1e-2, err
    return "cuDNN %s, max abs error %.2g" % (torch.backends.cudnn.version(), err)
def cusolver():
    a = torch.randn(256, 256, dtype=torch.float64)
    a = a @ a.T + 256 * torch.eye(256, dtype=torch.float64)
    l = torch.linalg.cholesky(a.cuda())
    vals = torch.linalg.eigvalsh(a.cuda())
    err = (l @ l.T - a.cuda()).abs().max().item()
    assert err < 1e-8 and vals.min().item() > 0, err
    return "cholesky residual %.2g" % err
def cublaslt_fp16():
    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    bias = torch.randn(2048)
    got = torch.nn.functional.linear(a.half().cuda(), b.half().cuda(), bias.half().cuda()).float().cpu()
    want = torch.nn.functional.linear(a, b, bias)
    err = ((got - want).abs().max() / want.abs().max()).item()
    assert err < 1e-2, err
    return "relative error %.2g" % err
for name, fn in [("torch.fft", fft), ("jiterator kernel", jiterator), ("cuDNN conv2d", conv2d),
                 ("cusolver", cusolver), ("fp16 cublasLt matmul", cublaslt_fp16)]:
    step(name, fn)
def maps():
    outside, inside = set(), set()
    for line in open("/proc/self/maps"):
        p = line.split()[-1] if len(line.split()) >= 6 else ""
        b = os.path.basename(p)
        if not (b.startswith("libcu") or b.startswith("libnv")) or ".so" not in b:
            continue
        if b.startswith("libcuda.so") or b.startswith("libnvidia-"):
            continue  # the driver's, through the driver link
        (inside if p.startswith(store + "/") else outside).add(p)
    assert not outside, "mapped from outside the tree: " + ", ".join(sorted(outside))
    return "%d CUDA libraries mapped, all from the tree" % len(inside)
step("/proc/self/maps", maps)
for name, ok, msg in results:
    print("%s: %s (%s)" % ("PASS" if ok else "FAIL", name, msg))
sys.exit(0 if all(ok for _, ok, _ in results) else 1)
EOF

patch_and_check() { # MODE
	hr "cudapatch --dlopen $1, no \$ORIGIN, no hand-written list"
	start=$(date +%s%N)
	"$CP" --dlopen "$1" "${searches[@]}" --driver-link "$DRIVER_LINK" --libc "$GLIBC" \
		--ignore-missing '*' --json "$PY" "${!dirs[@]}" >"$W/report-$1.json" 2>"$W/stderr-$1.txt"
	echo "exit $?, $((($(date +%s%N) - start) / 1000000)) ms; $(tail -1 "$W/stderr-$1.txt")"
	python3 - "$W/report-$1.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
found = {}
for f in r.get("files") or []:
    for d in f.get("deps") or []:
        if d.get("source") == "dlopen-string":
            found.setdefault(d.get("how", "?"), set()).add(d.get("name"))
for how, names in sorted(found.items()):
    print("dlopen names %s: %d (%s)" % (how, len(names), ", ".join(sorted(names))[:600]))
# Every directory discovery adds carries its evidence: the string, in which
# file, whole soname, prefix or .note.dlopen.
added = [(f["path"], d) for f in r.get("files") or [] for d in f.get("deps") or []
         if d.get("source", "") in ("dlopen", "dlopen-string", "dlopen-prefix") and d.get("how") in ("resolved", "versioned")]
bare = [(p, d.get("name")) for p, d in added if not (d.get("evidence") or {}).get("string")]
print("directories added by discovery: %d, with evidence: %d" % (len(added), len(added) - len(bare)))
for p, n in bare[:10]:
    print("  no evidence: %s for %s" % (n, p))
for p, d in added[:6]:
    e = d.get("evidence") or {}
    print("  %s <- %s: %r in %s (%s)" % (p.split("/")[-1], d.get("dir", "").split("/")[-2:], e.get("string"), e.get("file", "").split("/")[-1], e.get("kind")))
sys.exit(1 if bare else 0)
EOF
	ev=$?
	env -u LD_LIBRARY_PATH PYTHONPATH="$PY:$SHADOW" USE_PYTORCH_KERNEL_CACHE=0 \
		"$INTERP" --inhibit-cache "$(command -v python3)" -S "$W/check.py" "$S" 2>&1 | tail -8
	local run=${PIPESTATUS[0]}
	[ "$ev" = 0 ] || echo "FAIL: a directory added without evidence"
	return $((run | ev))
}
patch_and_check off
echo "(expected: the dlopen'd libraries fail or come from outside the tree)"
patch_and_check resolve
rc=$?
hr "summary"
echo "resolve run: $([ $rc = 0 ] && echo PASS || echo FAIL)"
exit $rc

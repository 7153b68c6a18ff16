#!/usr/bin/env bash
# Issue 15 on the GPU machine, one shot (about 2-4 minutes): what
# `cudapatch doctor` says on a real NVIDIA host, checked against what really
# loads. Each run is recorded in docs/doctor.md as a dated line (machine,
# commit, result); the output itself is an artifact, not committed.
#
#   bash scripts/doctor-gpu.sh CUDAPATCH [WORKDIR]
#
# CUDAPATCH is a linux/amd64 binary, built where Go is:
#   CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -buildvcs=true -o cudapatch ./cmd/cudapatch
# The log goes to stdout and to $OUT/doctor-gpu.log (else WORKDIR's).
#
# Steps:
#   0. the machine: driver, kernel module, LD_LIBRARY_PATH, cuda_compat, the
#      version strings inside each libcuda (what rpath/nvdriver reads);
#   1. cudapatch doctor, with the machine's LD_LIBRARY_PATH;
#   2. cudapatch doctor --fix --dry-run;
#   3. PyTorch copied twice and patched by cudapatch, without and with
#      --cuda-compat $CUDA_HOME/compat; cudapatch doctor on libtorch_cuda.so
#      of each (LD_LIBRARY_PATH unset, and once set), and what really loads:
#      the libcuda a CUDA call maps, and whether it fails with error 803.
#      Doctor's "<- loads" line must name the same file, and it must say
#      "error 803" exactly when torch fails with it;
#   4. as root, when the driver link does not exist: cudapatch doctor --fix
#      for real (with the machine's LD_LIBRARY_PATH, where it may find the
#      driver), twice (the second has nothing to do); then the plain copy,
#      LD_LIBRARY_PATH unset, loads the driver link's libcuda. Everything it
#      made is removed again. APPLY_FIX=0 skips it.
#
# Overridable: PYTHON, SITE (site-packages to copy from), SITE_DIRS (what to
# copy), CUDA_HOME, FILE (the library doctor looks at, relative to the
# copy), LIBC (the host's libc directory), APPLY_FIX, DOCTOR_ARGS (added to
# every doctor command: --proc/--sys of a fake machine, for a dry run
# elsewhere).
set -uo pipefail
CP=$(readlink -f "${1:?usage: doctor-gpu.sh CUDAPATH [WORKDIR]}")
W=${2:-/tmp/doctor-gpu}
PYTHON=${PYTHON:-/opt/torch/.venv/bin/python3}
SITE=${SITE:-/opt/torch/.venv/lib/python3.12/site-packages}
SITE_DIRS=${SITE_DIRS:-torch nvidia}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
FILE=${FILE:-torch/lib/libtorch_cuda.so}
LIBC=${LIBC:-$(dirname "$(readlink -f "$(ldconfig -p | awk '$1 == "libc.so.6" && /x86-64/ { print $NF; exit }')")")}
HOST_LLP=${LD_LIBRARY_PATH-/usr/local/nvidia/lib64:/usr/local/nvidia/lib}
LINK=/run/opengl-driver/lib
CONF=/etc/tmpfiles.d/cudapatch-driver-link.conf
read -ra DA <<<"${DOCTOR_ARGS:-}"
export LC_ALL=C.UTF-8
rm -rf "$W" && mkdir -p "$W" || exit 2
LOG=${OUT:-$W}/doctor-gpu.log
exec > >(tee "$LOG") 2>&1
chmod +x "$CP" 2>/dev/null
fails=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
hr() { printf '\n== %s (t=%ss)\n' "$*" "$SECONDS"; }
show() { # show COMMAND...: print the command line, run it, print its exit status
	printf '$ %s\n' "$*"
	"$@"
	echo "[exit $?]"
}

hr "0. the machine"
date -u
"$CP" --version
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -2
echo "kernel module: $(head -1 /proc/driver/nvidia/version 2>/dev/null)"
echo "/sys/module/nvidia/version: $(cat /sys/module/nvidia/version 2>/dev/null)"
echo "LD_LIBRARY_PATH=$HOST_LLP"
echo "$(uname -r), $(nproc) cores, $(ldd --version | head -1)"
echo "ld.so.cache:"
ldconfig -p | grep -E 'libcuda\.so|libnvidia-ml\.so' | sed 's/^/  /'
for d in ${HOST_LLP//:/ } "$CUDA_HOME/compat" "$CUDA_HOME/lib64/stubs" "$LINK"; do
	echo "$d:"
	# shellcheck disable=SC2012 # shown to the reader, not parsed
	ls -l "$d"/libcuda.so* 2>&1 | sed 's/^/  /'
done
echo "version strings inside each libcuda (NUL-ended, exactly a driver version; what rpath/nvdriver reads):"
for f in $(for d in ${HOST_LLP//:/ } "$CUDA_HOME/compat" "$CUDA_HOME/lib64/stubs" $(ldconfig -p | awk '$1 == "libcuda.so.1" { print $NF }' | xargs -r -n1 dirname); do
	[ -e "$d/libcuda.so.1" ] && readlink -f "$d/libcuda.so.1"
	[ -e "$d/libcuda.so" ] && readlink -f "$d/libcuda.so"
done | sort -u); do
	v=$(strings -n 5 "$f" 2>/dev/null | grep -xE '[1-9][0-9]{2}\.[0-9]{1,3}(\.[0-9]{1,3})?' | sort | uniq -c | tr -s ' \n' ' ')
	m=$(strings -n 5 "$f" 2>/dev/null | grep -cE '^/proc/driver/nvidia|^/dev/nvidia')
	kind=$(file -b "$f" 2>/dev/null | cut -d, -f1)
	echo "  $f ($(stat -c %s "$f") bytes${kind:+, $kind}): versions [${v:- none}], driver paths: $m"
done

hr "1. cudapatch doctor"
show env LD_LIBRARY_PATH="$HOST_LLP" "$CP" doctor "${DA[@]}"

hr "2. cudapatch doctor --fix --dry-run"
show env LD_LIBRARY_PATH="$HOST_LLP" "$CP" doctor "${DA[@]}" --fix --dry-run

hr "3. PyTorch patched by cudapatch, without and with --cuda-compat"
cat >"$W/cuda.py" <<'EOF'
import os, sys
try:
    import torch
    print("torch", torch.__version__, "from", os.path.dirname(torch.__file__))
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    print("CUDA: ok,", torch.cuda.get_device_name(0))
    status = 0
except Exception as e:
    print("CUDA: failed:", str(e).splitlines()[0])
    status = 1
libs = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libcuda.so" in l})
print("libcuda mapped:", " ".join(libs) if libs else "(none)")
print("libcuda real path:", " ".join(sorted({os.path.realpath(p) for p in libs})) or "(none)")
sys.exit(status)
EOF
# llp VALUE: the env(1) arguments that set LD_LIBRARY_PATH to VALUE, or
# unset it for "".
llp() {
	if [ -n "$1" ]; then E=("LD_LIBRARY_PATH=$1"); else E=(-u LD_LIBRARY_PATH); fi
}
# pyrun LABEL LLP DIR: import torch from DIR, and a CUDA call.
pyrun() {
	llp "$2"
	PY_OUT=$(env "${E[@]}" PYTHONPATH="$3" timeout 240 "$PYTHON" "$W/cuda.py" 2>&1)
	# shellcheck disable=SC2001
	sed 's/^/    /' <<<"$PY_OUT"
}
# doc LABEL LLP DIR: cudapatch doctor on DIR's FILE.
doc() {
	llp "$2"
	printf '$ env %s cudapatch doctor %s\n' "${E[*]}" "$3/$FILE"
	DOC_OUT=$(env "${E[@]}" "$CP" doctor "${DA[@]}" "$3/$FILE" 2>&1)
	local rc=$?
	echo "$DOC_OUT"
	echo "[exit $rc]"
}
# compare LABEL: doctor's prediction against the Python run: the file of
# its "<- loads" line, and whether it says error 803.
compare() {
	local pred real d803 r803
	pred=$(grep -- '<- loads$' <<<"$DOC_OUT" | head -1 | awk '{ sub(":$", "", $1); print $1 }')
	[ -n "$pred" ] && pred=$(readlink -f "$pred")
	real=$(sed -n 's/^libcuda real path: //p' <<<"$PY_OUT")
	grep -q 'error 803' <<<"$DOC_OUT" && d803=yes || d803=no
	grep -qiE '803|unsupported display driver' <<<"$PY_OUT" && r803=yes || r803=no
	echo "  doctor: loads ${pred:-(none)}, error 803: $d803; torch: mapped $real, error 803: $r803"
	if [ "$pred" = "$real" ] || { [ -z "$pred" ] && [ "$real" = "(none)" ]; }; then
		pass "$1: doctor names the libcuda that loads ($real)"
	else
		fail "$1: doctor says ${pred:-none}, torch mapped $real"
	fi
	if [ "$d803" = "$r803" ]; then
		pass "$1: doctor's error-803 prediction ($d803) matches torch"
	else
		fail "$1: doctor says error 803: $d803, torch: $r803"
	fi
}
for v in plain compat; do
	D=$W/$v/site-packages
	mkdir -p "$D"
	for d in $SITE_DIRS; do [ -e "$SITE/$d" ] && cp -a "$SITE/$d" "$D/"; done
	compat=()
	[ "$v" = compat ] && compat=(--cuda-compat "$CUDA_HOME/compat")
	echo "-- $v: $(du -sh "$D" | cut -f1) copied (t=${SECONDS}s)"
	# The host's libc needs no RUNPATH entry; the libraries the wheels take
	# from the host (libstdc++, libgcc_s) come from ld.so.cache as before.
	printf '$ cudapatch %s--driver-link %s --libc %s --ignore-missing %s %s\n' "${compat[*]:+${compat[*]} }" "$LINK" "$LIBC" "'*'" "$D"
	env -u LD_LIBRARY_PATH "$CP" "${compat[@]}" --driver-link "$LINK" --libc "$LIBC" --ignore-missing '*' "$D" >"$W/$v.patch" 2>&1
	echo "[exit $?] $(tail -1 "$W/$v.patch")"
	grep -E 'libcudart\.so[^ ]*: RUNPATH' "$W/$v.patch" | sed 's/^/  /'
done
hr "3a. the plain copy (driver link first), LD_LIBRARY_PATH unset"
doc plain "" "$W/plain/site-packages"
pyrun plain "" "$W/plain/site-packages"
compare "plain"
hr "3b. the --cuda-compat copy, LD_LIBRARY_PATH unset"
doc compat "" "$W/compat/site-packages"
pyrun compat "" "$W/compat/site-packages"
compare "compat"
hr "3c. the --cuda-compat copy, LD_LIBRARY_PATH=$HOST_LLP"
doc compat-llp "$HOST_LLP" "$W/compat/site-packages"
pyrun compat-llp "$HOST_LLP" "$W/compat/site-packages"
compare "compat, LD_LIBRARY_PATH set"

hr "4. cudapatch doctor --fix, for real"
if [ "$(id -u)" != 0 ] || [ "${APPLY_FIX:-1}" = 0 ] || [ -e /run/opengl-driver ] || [ -e "$CONF" ]; then
	echo "skipped: not root, APPLY_FIX=0, or /run/opengl-driver or $CONF exists already"
else
	# With the machine's LD_LIBRARY_PATH, so that doctor finds its driver
	# there if ld.so.cache lists none.
	show env LD_LIBRARY_PATH="$HOST_LLP" "$CP" doctor "${DA[@]}" --fix
	second=$(env LD_LIBRARY_PATH="$HOST_LLP" "$CP" doctor "${DA[@]}" --fix 2>&1)
	echo "$second" | tail -2
	if grep -q '^doctor --fix: nothing to do' <<<"$second"; then
		pass "a second doctor --fix has nothing to do"
	else
		fail "a second doctor --fix changed something"
	fi
	echo "$CONF:"
	sed 's/^/  /' "$CONF"
	# shellcheck disable=SC2012 # shown to the reader, not parsed
	ls -l "$LINK" | sed 's/^/  /'
	doc plain-linked "" "$W/plain/site-packages"
	pyrun plain-linked "" "$W/plain/site-packages"
	compare "plain, after doctor --fix"
	# /proc/self/maps names the file the links end at.
	if grep -q "^ *$LINK/libcuda.so.1 .*<- loads\$" <<<"$DOC_OUT" &&
		grep -qxF "libcuda real path: $(readlink -f "$LINK/libcuda.so.1")" <<<"$PY_OUT"; then
		pass "after doctor --fix, torch maps the driver link's libcuda"
	else
		fail "after doctor --fix, torch does not map $LINK/libcuda.so.1's file"
	fi
	rm -rf /run/opengl-driver "$CONF"
	echo "removed /run/opengl-driver and $CONF again"
fi

hr "summary"
echo "$fails failure(s); log: $LOG"
rm -rf "$W/plain" "$W/compat"
exit $((fails > 0))

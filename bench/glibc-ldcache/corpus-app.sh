# shellcheck shell=bash
# Sourced by ../ldcache-loader.sh and notes-true.sh: the program of the CUDA
# corpus's measurements.
#
# corpus_app STORE DRIVER_DIR WORKDIR: writes STORE/<zeros>-cuda-app/bin/app,
# a program that links every CUDA library of STORE, the toolkit's stub
# libcuda and DRIVER_DIR's libnvidia-ml, and prints its path. The glibc
# libraries are NEEDED by the program so that they load first, from the
# note-reading glibc (Nix's loader finds them in its default directory; ours
# would take the host's through /etc/ld.so.cache). Later lookups of them are
# matches by soname in both variants. Its interpreter is a path that does
# not exist: cudapatch --interpreter sets it.
corpus_app() {
	local s=$1 drv=$2 w=$3 n app=$1/00000000000000000000000000000000-cuda-app
	local libs=()
	mkdir -p "$app/bin"
	for n in libcublas.so.11 libcublasLt.so.11 libcudart.so.11.0 libnvrtc.so.11.2 libcufft.so.10 libcufftw.so.10 \
		libcusparse.so.11 libcurand.so.10 libcusolver.so.11 libnppc.so.11 libnppig.so.11 libnvjpeg.so.11 \
		libcupti.so.11.8; do
		libs+=("$(find "$s" -name "$n" | head -1)")
	done
	libs+=("$(find "$s" -path '*stubs*' -name libcuda.so | head -1)" "$drv/libnvidia-ml.so.1")
	echo 'int main(void) { return 0; }' >"$w/app.c"
	gcc -o "$app/bin/app" "$w/app.c" -Wl,--no-as-needed "${libs[@]}" -lm -ldl -lpthread -lrt -lutil \
		-Wl,--dynamic-linker=/nonexistent/ld.so || return 1
	echo "$app"
}

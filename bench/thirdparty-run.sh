#!/usr/bin/env bash
# The smoke runs of bench/thirdparty.sh (RUN=1) on one patched tree, under
# LD_DEBUG=libs,files: every shared library of its outputs loaded alone (the host
# python's ctypes), then the tree's own programs (python3.11 importing
# numpy and scipy, ffmpeg, gst-inspect-1.0 on the soup plugin, vulkaninfo
# on lavapipe, firefox --headless --screenshot, node requiring each
# addon). Writes RUNDIR.used: FILE<TAB>DIR for each library found in DIR
# through FILE's RUNPATH (thirdparty.py used).
#
#   bench/thirdparty-run.sh TREE RUNDIR
set -uo pipefail
T=${1:?usage: thirdparty-run.sh TREE RUNDIR} R=${2:?usage: thirdparty-run.sh TREE RUNDIR}
HERE=$(dirname "$(readlink -f "$0")")
L=$(mktemp -d) H=$(mktemp -d)
trap 'rm -rf "$L" "$H"' EXIT
unset LD_LIBRARY_PATH LD_PRELOAD
run() { # COMMAND...: under LD_DEBUG, bounded, its output dropped
	env HOME="$H" LD_DEBUG=libs,files LD_DEBUG_OUTPUT="$L/ld" timeout 120 "$@" >/dev/null 2>&1 </dev/null
	echo "$T: $(basename "$1") exit $?" >&2
}
first() { find "$R" -path "$1" \( -type f -o -type l \) 2>/dev/null | head -1; }

# Every library, alone.
while IFS= read -r lib; do
	head -c4 "$lib" | grep -q ELF || continue
	env HOME="$H" LD_DEBUG=libs,files LD_DEBUG_OUTPUT="$L/ld" timeout 20 \
		python3 -c 'import ctypes, sys; ctypes.CDLL(sys.argv[1])' "$lib" >/dev/null 2>&1 </dev/null
done < <(find "$R" -type f \( -name '*.so' -o -name '*.so.*' -o -name '*.node' \) | sort)
echo "$T: libraries loaded" >&2

case $T in
python)
	pp=$(find "$R" -type d \( -name python3.11 -path '*/usr/lib/*' -o -name lib-dynload -o -name dist-packages \) | tr '\n' ':')
	run env PYTHONPATH="$pp" "$(first '*/usr/bin/python3.11')" -c 'import numpy, scipy, scipy.linalg, scipy.fft, scipy.sparse.linalg, ssl, sqlite3, ctypes; numpy.linalg.inv(numpy.eye(3))'
	;;
ffmpeg)
	ff=$(first '*/usr/bin/ffmpeg')
	run "$ff" -hide_banner -version
	run "$ff" -hide_banner -f lavfi -i testsrc=duration=0.2 -c:v libx264 -f null -
	;;
gstreamer)
	plugins=$(find "$R" -type d -name gstreamer-1.0 -path '*/lib/*' | tr '\n' ':')
	export GST_PLUGIN_SYSTEM_PATH_1_0=$plugins GST_REGISTRY_1_0=$H/registry.bin
	GST_PLUGIN_SCANNER_1_0=$(first '*/gst-plugin-scanner')
	export GST_PLUGIN_SCANNER_1_0
	run "$(first '*/usr/bin/gst-inspect-1.0')" soup
	run "$(first '*/usr/bin/gst-launch-1.0')" -q videotestsrc num-buffers=1 ! fakesink
	;;
mesa)
	lvp=$(first '*/libvulkan_lvp.so')
	icd=$(first '*/icd.d/lvp_icd.x86_64.json')
	if [ -n "$lvp" ] && [ -n "$icd" ]; then
		sed "s|\"library_path\": *\"[^\"]*\"|\"library_path\": \"$lvp\"|" "$icd" >"$H/lvp.json"
		run env VK_ICD_FILENAMES="$H/lvp.json" "$(first '*/usr/bin/vulkaninfo')" --summary
	fi
	;;
firefox)
	run "$(first '*/usr/lib/firefox-esr/firefox-esr')" --headless --no-remote --profile "$H" --screenshot "$H/s.png" about:blank
	;;
npm-*)
	while IFS= read -r n; do run node -e 'require(process.argv[1])' "$n"; done < <(find "$R" -name '*.node' -type f)
	;;
esac
python3 "$HERE/thirdparty.py" used "$L"/ld.* >"$R.used"
echo "$T: $(wc -l <"$R.used") libraries found through a RUNPATH" >&2

#!/usr/bin/env bash
# Directories dlopen discovery adds on third-party trees (issue 43): Debian
# packages and npm native addons, one directory per package laid out like a
# store path, each tree's own packages patched as outputs with
# --search-recursive over its dependencies' directories. Every binary given
# patches a fresh copy with --json; thirdparty.py counts, per tree, the
# RUNPATH entries whose only reason is discovery (no DT_NEEDED, no
# .note.dlopen entry of the file reaches them), and with RUN=1 runs the
# smoke commands of thirdparty-run.sh under LD_DEBUG=libs on each patched
# copy and counts the added entries a load went through.
#
#   bash bench/thirdparty.sh WORKDIR BINARY...        (BINARY as LABEL=PATH)
#   e.g. RUN=1 bash bench/thirdparty.sh /tmp/tp old=/tmp/cp-2d62424 new=./cudapatch
#
# Needs apt-get (Debian bookworm sources), dpkg-deb, npm, python3 and the
# network; downloads about 600 MB once into WORKDIR/debs. TREES selects
# trees by name. LAYOUT=merged puts a tree's own packages in one output
# directory (one store path for the whole program, as a bundling derivation
# has) instead of one each (LAYOUT=split, the default). Not run in CI.
set -euo pipefail
W=$(readlink -f "${1:?usage: thirdparty.sh WORKDIR LABEL=BINARY...}")
shift
[ $# -gt 0 ] || { echo "thirdparty.sh: no binary given" >&2; exit 2; }
HERE=$(dirname "$(readlink -f "$0")")
RUNS=$W/runs/${LAYOUT:-split}
mkdir -p "$W/debs" "$W/pkgs" "$W/npm" "$RUNS"

# tree: its packages (outputs); npm trees start with "npm:".
declare -A TREE=(
	[python]="python3.11 python3.11-minimal libpython3.11-stdlib libpython3.11-minimal python3-numpy python3-scipy"
	[ffmpeg]="ffmpeg libavcodec59 libavformat59 libavutil57 libavfilter8 libavdevice59 libswscale6 libswresample4 libpostproc56"
	[gstreamer]="gstreamer1.0-tools libgstreamer1.0-0 gstreamer1.0-plugins-base libgstreamer-plugins-base1.0-0 gstreamer1.0-plugins-good"
	[qt6]="libqt6core6 libqt6gui6 libqt6widgets6 libqt6network6 libqt6dbus6 libqt6xml6 libqt6sql6 libqt6printsupport6 libqt6opengl6 qt6-qpa-plugins qt6-gtk-platformtheme"
	[libreoffice]="libreoffice-core"
	[firefox]="firefox-esr"
	[mesa]="mesa-vulkan-drivers libvulkan1 vulkan-tools libgl1-mesa-dri libegl-mesa0 libglx-mesa0 libgbm1 libglapi-mesa"
	[npm-canvas]="npm:@napi-rs/canvas-linux-x64-gnu"
	[npm-swc]="npm:@swc/core-linux-x64-gnu"
	[npm-duckdb]="npm:@duckdb/node-bindings-linux-x64"
	[npm-llama]="npm:@node-llama-cpp/linux-x64-vulkan"
)
# What the npm trees link to, from Debian.
NPMDEPS="libc6 libstdc++6 libgcc-s1 libvulkan1 libgomp1"
read -r -a NAMES <<<"${TREES:-python ffmpeg gstreamer qt6 libreoffice firefox mesa npm-canvas npm-swc npm-duckdb npm-llama}"

closure() { # PACKAGE... → their Depends/Pre-Depends closure, real amd64 packages
	apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
		--no-breaks --no-replaces --no-enhances "$@" 2>/dev/null |
		grep -E '^[a-z0-9]' | grep -v ':' | sort -u
}
dir_of() { # PACKAGE → its store-like directory
	echo "$W/pkgs/$(printf %s "$1" | md5sum | cut -c1-32)-$1"
}
fetch() { # PACKAGE... → each extracted once under WORKDIR/pkgs
	local need=() p
	for p in "$@"; do [ -d "$(dir_of "$p")" ] || need+=("$p"); done
	[ ${#need[@]} -gt 0 ] || return 0
	(cd "$W/debs" && apt-get download "${need[@]}" >/dev/null 2>&1 ||
		for p in "${need[@]}"; do apt-get download "$p" >/dev/null 2>&1 || echo "skip $p (not downloadable)" >&2; done)
	for p in "${need[@]}"; do
		local deb
		deb=$(ls "$W/debs/${p}_"*.deb 2>/dev/null | head -1)
		[ -n "$deb" ] || continue
		mkdir -p "$(dir_of "$p").tmp" && dpkg-deb -x "$deb" "$(dir_of "$p").tmp" && mv "$(dir_of "$p").tmp" "$(dir_of "$p")"
	done
}
npm_fetch() { # SPEC → its unpacked directory, or nothing if not served
	local d
	d="$W/npm/$(printf %s "$1" | md5sum | cut -c1-32)-$(basename "$1")"
	if [ ! -d "$d" ]; then
		local tgz
		tgz=$(cd "$W/npm" && npm pack "$1" 2>/dev/null | tail -1) || true
		[ -n "$tgz" ] && [ -f "$W/npm/$tgz" ] || { echo "skip $1 (not served)" >&2; return 0; }
		mkdir -p "$d" && tar -xzf "$W/npm/$tgz" -C "$d"
	fi
	echo "$d"
}

LIBC=$(dir_of libc6)
fetch libc6
for t in "${NAMES[@]}"; do
	outs=() deps=()
	if [[ ${TREE[$t]} == npm:* ]]; then
		d=$(npm_fetch "${TREE[$t]#npm:}")
		[ -n "$d" ] || continue
		outs=("$d")
		read -r -a dpk <<<"$NPMDEPS"
		fetch "${dpk[@]}"
		for p in "${dpk[@]}"; do [ "$p" = libc6 ] || deps+=("$(dir_of "$p")"); done
	else
		read -r -a own <<<"${TREE[$t]}"
		mapfile -t all < <(closure "${own[@]}")
		fetch "${all[@]}"
		for p in "${all[@]}"; do
			[ -d "$(dir_of "$p")" ] || continue
			if [[ " ${own[*]} " == *" $p "* ]]; then outs+=("$(dir_of "$p")"); elif [ "$p" != libc6 ]; then deps+=("$(dir_of "$p")"); fi
		done
	fi
	search=()
	for d in "${deps[@]}"; do search+=(--search-recursive "$d"); done
	for b in "$@"; do
		label=${b%%=*} bin=$(readlink -f "${b#*=}")
		r=$RUNS/$t-$label
		rm -rf "$r" && mkdir -p "$r"
		copies=()
		if [ "${LAYOUT:-split}" = merged ]; then
			m=$r/$(printf %s "$t" | md5sum | cut -c1-32)-$t
			mkdir -p "$m" && for o in "${outs[@]}"; do cp -a "$o/." "$m/"; done
			copies=("$m")
		else
			for o in "${outs[@]}"; do cp -a "$o" "$r/" && copies+=("$r/$(basename "$o")"); done
		fi
		"$bin" --libc "$LIBC/lib/x86_64-linux-gnu" "${search[@]}" --symbols off \
			--ignore-missing '*' --json "${copies[@]}" >"$r.json" 2>"$r.err" ||
			echo "$t/$label: exit $? ($(tail -1 "$r.err"))" >&2
		printf '%s\n' "${deps[@]}" >"$r.deps"
		[ "${RUN:-0}" = 1 ] && bash "$HERE/thirdparty-run.sh" "$t" "$r"
	done
done
python3 "$HERE/thirdparty.py" "$RUNS" "${NAMES[@]}" -- "${@%%=*}"

#!/usr/bin/env bash
# run.sh: test cuda-patchelf-hook.sh under the stdenv re-creation in stdenv.sh.
#
# Environment:
#   CUDAPATCH  the cudapatch binary under test (required)
#   SAMPLE     a tree from build-sample.sh (required)
#   WORK       an empty scratch directory (default: a new temporary one)
#
# Each scenario is one "derivation": fake store packages for the setup hooks,
# a builder that sources stdenv.sh and runs genericBuild (installPhase copies
# the prebuilt tree into the outputs, then fixupPhase), then assertions on the
# result read with readelf. The hooks cudaPatchelfHook takes over are
# re-created as registrations only: their bodies record that they ran.
# Prints one line per failed assertion; exits 1 if any failed.
#
# shellcheck disable=SC2016 # Single-quoted text is code for the builder.
set -euo pipefail
export LC_ALL=C
unset LD_LIBRARY_PATH

here=$(cd "$(dirname "$0")" && pwd)
: "${CUDAPATCH:?CUDAPATCH must name the cudapatch binary}"
: "${SAMPLE:?SAMPLE must name a tree from build-sample.sh}"
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
driver=/run/opengl-driver/lib
failures=0

# shellcheck disable=SC1091
source "$SAMPLE/toolchain.env"
: "${interp:?}" "${libc:?}"

fail() {
	echo "FAIL [$scenario]: $*"
	failures=$((failures + 1))
}

runpath_of() {
	readelf -d "$1" | sed -n 's/.*Library runpath: \[\(.*\)\]$/\1/p'
}

rpath_of() {
	readelf -d "$1" | sed -n 's/.*Library rpath: \[\(.*\)\]$/\1/p'
}

# expect_rpath FILE WANT: FILE has DT_RPATH WANT and no DT_RUNPATH.
expect_rpath() {
	local got
	got=$(rpath_of "$1")
	[[ $got == "$2" ]] || fail "RPATH of ${1#"$WORK"/}: got '$got', want '$2'"
	got=$(runpath_of "$1")
	[[ -z $got ]] || fail "${1#"$WORK"/} has a RUNPATH '$got' beside its RPATH"
}

interp_of() {
	readelf -l "$1" | sed -n 's/.*Requesting program interpreter: \(.*\)\]$/\1/p'
}

expect_runpath() {
	local got
	got=$(runpath_of "$1")
	[[ $got == "$2" ]] || fail "RUNPATH of ${1#"$WORK"/}: got '$got', want '$2'"
}

expect_interp() {
	local got
	got=$(interp_of "$1")
	[[ $got == "$2" ]] || fail "interpreter of ${1#"$WORK"/}: got '$got', want '$2'"
}

expect_log() {
	grep -qF -- "$2" "$1" || fail "${1##*/} lacks: $2"
}

expect_no_log() {
	if grep -qF -- "$2" "$1"; then fail "${1##*/} has: $2"; fi
}

expect_hooklog() {
	local got want
	got=$(cat "$dir/hooks.log" 2>/dev/null || true)
	want=$(printf '%s\n' "$@")
	[[ $got == "$want" ]] || fail "hooks.log: got
$got
want
$want"
}

# has_note FILE: whether FILE carries the resolution note in a PT_NOTE.
has_note() {
	readelf -nW "$1" | grep -q 'NixOS.*0x63a86cb6'
}

expect_runs() {
	local got
	got=$(env -u LD_LIBRARY_PATH "$1" 2>&1) || true
	[[ $got == "sample 42" ]] || fail "${1#"$WORK"/} printed '$got', want 'sample 42'"
}

# mkpkg NAME: a fake store path; prints it.
mkpkg() {
	mkdir -p "$WORK/store/$1/nix-support"
	echo "$WORK/store/$1"
}

# Packages shared by all scenarios.
pkg_cudapatch=$(mkpkg cudapatch)
mkdir -p "$pkg_cudapatch/bin"
ln -sf "$CUDAPATCH" "$pkg_cudapatch/bin/cudapatch"

glibc=$(mkpkg glibc)
mkdir -p "$glibc/lib"
ln -sf "$interp" "$glibc/lib/${interp##*/}"
ln -sf "$libc" "$glibc/lib/libc.so.6"
bintools=$(mkpkg bintools)
echo "$glibc/lib/${interp##*/}" >"$bintools/nix-support/dynamic-linker"
echo "$glibc" >"$bintools/nix-support/orig-libc"
loader=$glibc/lib/${interp##*/}

compat=$(mkpkg cuda_compat)/compat
mkdir -p "$compat"

# mkhook NAME COMPAT: cudaPatchelfHook as makeSetupHook builds it.
mkhook() {
	local pkg
	pkg=$(mkpkg "$1")
	sed -e "s|@driverLink@|$driver|g" -e "s|@cudaCompat@|$2|g" \
		"$here/../cuda-patchelf-hook.sh" >"$pkg/nix-support/setup-hook"
	echo "$pkg_cudapatch" >"$pkg/nix-support/propagated-build-inputs"
	echo "$pkg"
}
# A cudapatch that records its arguments, one a line, in $HOOKLOG.args
# (first in nativeBuildInputs, its bin/ comes first on PATH).
pkg_logged=$(mkpkg cudapatch-logged)
mkdir -p "$pkg_logged/bin"
printf '#!/usr/bin/env bash\nprintf "%%s\\n" "$@" >"$HOOKLOG.args"\nexec %q "$@"\n' "$CUDAPATCH" >"$pkg_logged/bin/cudapatch"
chmod +x "$pkg_logged/bin/cudapatch"

# search_args: the --search directories of the recorded call, in order,
# joined by '|'.
search_args() {
	awk 'prev == "--search" { print } { prev = $0 }' "$dir/hooks.log.args" | paste -sd'|'
}

hook_nocompat=$(mkhook cuda-patchelf-hook "")
hook_compat=$(mkhook cuda-patchelf-hook-compat "$compat")

# fakehook NAME BODY: a package whose setup hook is BODY.
fakehook() {
	local pkg
	pkg=$(mkpkg "$1")
	printf '%s\n' "$2" >"$pkg/nix-support/setup-hook"
	echo "$pkg"
}
# The registrations of nixpkgs' hooks, as of nixpkgs 25.11 (autoPatchelfHook,
# autoAddDriverRunpath, autoAddCudaCompatRunpath, removeStubsFromRunpathHook).
fixElf='autoFixElfFiles() { echo "ran autoFixElfFiles $1" >>"$HOOKLOG"; }'
fake_autopatchelf=$(fakehook autoPatchelfHook '
declare -a autoPatchelfLibs extraAutoPatchelfLibs
gatherLibraries() { autoPatchelfLibs+=("$1/lib"); }
addEnvHooks "$targetOffset" gatherLibraries
addAutoPatchelfSearchPath() { echo "ran addAutoPatchelfSearchPath" >>"$HOOKLOG"; }
autoPatchelf() { echo "ran autoPatchelf" >>"$HOOKLOG"; }
autoPatchelfPostFixup() { echo "ran autoPatchelfPostFixup" >>"$HOOKLOG"; }
postFixupHooks+=(autoPatchelfPostFixup)')
fake_driver=$(fakehook autoAddDriverRunpath "$fixElf"'
postFixupHooks+=("autoFixElfFiles addDriverRunpath")')
fake_compat=$(fakehook autoAddCudaCompatRunpath "$fixElf"'
postFixupHooks+=("autoFixElfFiles addCudaCompatRunpath")')
fake_stubs=$(fakehook removeStubsFromRunpathHook "$fixElf"'
prePhases+=(removeStubsFromRunpathHookRegistration)
removeStubsFromRunpathHookRegistration() {
  postFixupHooks+=("autoFixElfFiles removeStubsFromRunpath")
}')
# patchelf's setup hook (its shrink pass) and generate-ld-cache, in both the
# shapes nixpkgs has had: a fixupOutputHooks entry, and a postFixupHooks
# entry registered from preFixup (after autoPatchelfHook's).
fake_shrink=$(fakehook patchelf '
fixupOutputHooks+=('"'"'if [ -z "${dontPatchELF-}" ]; then patchELF "$prefix"; fi'"'"')
patchELF() { echo "ran patchELF ${1##*/}" >>"$HOOKLOG"; }')
fake_ldcache_fixup=$(fakehook generate-ld-cache-fixup '
fixupOutputHooks+=('"'"'if [ -z "${dontGenerateLDCache-}" ]; then generateLDCache "$prefix"; fi'"'"')
generateLDCache() { echo "ran generateLDCache ${1##*/}" >>"$HOOKLOG"; }')
fake_ldcache_post=$(fakehook generate-ld-cache-post '
preFixupHooks+=(_registerGenerateLDCache)
_registerGenerateLDCache() { postFixupHooks+=(_generateLDCacheAllOutputs); }
_generateLDCacheAllOutputs() {
  if [ -n "${dontGenerateLDCache-}" ]; then return 0; fi
  echo "ran _generateLDCacheAllOutputs" >>"$HOOKLOG"
}
generateLDCache() { echo "ran generateLDCache ${1##*/}" >>"$HOOKLOG"; }')
# Registered between others: sees the hook list and app's RUNPATH when it runs.
bystander=$(fakehook bystander '
bystanderPostFixup() {
  local IFS="|"
  echo "bystander saw postFixupHooks=${postFixupHooks[*]}" >>"$HOOKLOG"
  echo "bystander saw RUNPATH=$(readelf -d "$out/bin/app" | sed -n "s/.*runpath: \[\(.*\)\]$/\1/p")" >>"$HOOKLOG"
}
postFixupHooks+=(bystanderPostFixup)')

dep=$SAMPLE/deps/dep
nolib=$SAMPLE/deps/nolib
installPhase='mkdir -p "$out" "$debug"
cp -r "$SAMPLE/prebuilt/out/." "$out"
cp -r "$SAMPLE/prebuilt/debug/." "$debug"'

# build NAME [VAR=VALUE...]: run the builder of scenario NAME in string mode,
# with the variables as the environment. Sets dir, out, debug and status.
build() {
	scenario=$1
	shift
	dir=$WORK/$scenario
	out=$dir/store/out
	debug=$dir/store/debug
	mkdir -p "$dir/build"
	status=0
	(cd "$dir/build" && env NIX_BINTOOLS="$bintools" HOOKLOG="$dir/hooks.log" \
		SAMPLE="$SAMPLE" PATH="$PATH" outputs="out debug" out="$out" debug="$debug" \
		installPhase="$installPhase" "$@" \
		bash -c 'source "$1"; genericBuild
			if [[ $(declare -f autoPatchelf) == *cudaPatchelf* ]]; then
				echo "autoPatchelf is cudaPatchelf" >>"$HOOKLOG"
			fi
			touch "$2"' builder "$here/stdenv.sh" "$dir/done") \
		>"$dir/build.log" 2>&1 || status=$?
}

# build_structured NAME DECLARATIONS: as build, with __structuredAttrs: the
# declarations (bash, as Nix writes them) go to .attrs.sh.
build_structured() {
	scenario=$1
	dir=$WORK/$scenario
	out=$dir/store/out
	debug=$dir/store/debug
	mkdir -p "$dir/build"
	{
		printf "declare -A outputs=([out]=%q [debug]=%q)\n" "$out" "$debug"
		printf 'declare installPhase=%q\n' "$installPhase"
		printf '%s\n' "$2"
	} >"$dir/build/.attrs.sh"
	status=0
	(cd "$dir/build" && env NIX_BINTOOLS="$bintools" HOOKLOG="$dir/hooks.log" \
		SAMPLE="$SAMPLE" NIX_ATTRS_SH_FILE="$dir/build/.attrs.sh" \
		bash -c 'source "$1"; genericBuild
			if [[ $(declare -f autoPatchelf) == *cudaPatchelf* ]]; then
				echo "autoPatchelf is cudaPatchelf" >>"$HOOKLOG"
			fi
			touch "$2"' builder "$here/stdenv.sh" "$dir/done") \
		>"$dir/build.log" 2>&1 || status=$?
}

expect_success() {
	if ((status != 0)) || [[ ! -e $dir/done ]]; then
		fail "build failed (status $status); log:"
		sed 's/^/    /' "$dir/build.log"
		return 1
	fi
}

# --- 1: string attrs, no compat, all replaced hooks present ----------------
rt=$WORK/rt
build string-takeover \
	nativeBuildInputs="$fake_autopatchelf $bystander $fake_driver $hook_nocompat $fake_compat $fake_stubs" \
	buildInputs="$dep $nolib" \
	runtimeDependencies="$rt" \
	appendRunpaths='$ORIGIN/../libexec' \
	autoPatchelfIgnoreMissingDeps="libcuda.so.1"
if expect_success; then
	app_rp="$driver:$rt/lib:$out/lib:$dep/lib:\$ORIGIN/../libexec"
	expect_runpath "$out/bin/app" "$app_rp"
	expect_runpath "$out/lib/libfoo.so" "$driver:$dep/lib:\$ORIGIN/../libexec"
	expect_runpath "$out/lib/libgpu.so" "$driver:\$ORIGIN/../libexec"
	expect_runpath "$debug/lib/libfoo.so" /opt/vendor/lib
	expect_interp "$out/bin/app" "$loader"
	expect_runs "$out/bin/app"
	# autoPatchelfPostFixup's place is taken; the compat hook stays, because
	# this hook has no compat directory; the bystander sees final RUNPATHs.
	expect_hooklog \
		"bystander saw postFixupHooks=cudaPatchelfPostFixup|bystanderPostFixup|autoFixElfFiles addCudaCompatRunpath" \
		"bystander saw RUNPATH=$app_rp" \
		"ran autoFixElfFiles addCudaCompatRunpath"
	log=$dir/build.log
	expect_log "$log" "taking over postFixupHooks entry 'autoPatchelfPostFixup' of autoPatchelfHook"
	expect_log "$log" "taking over postFixupHooks entry 'autoFixElfFiles addDriverRunpath' of autoAddDriverRunpath"
	expect_log "$log" "taking over postFixupHooks entry 'autoFixElfFiles removeStubsFromRunpath' of removeStubsFromRunpathHook"
	expect_log "$log" "leaving 'autoFixElfFiles addCudaCompatRunpath' in place"
	[[ $(grep -c "taking over postFixupHooks entry" "$log") == 3 ]] || fail "want exactly 3 take-over lines"
fi

# --- 2: structuredAttrs, compat set, paths with spaces -----------------------
rtsp="$WORK/rt dir"
tree="$WORK/dep tree"
mkdir -p "$tree/lib/x86_64" "$tree/include"
cp "$dep/lib/libdep.so" "$tree/lib/x86_64/"
decls=$(
	# shellcheck disable=SC2034,SC2016 # declared for declare -p.
	{
		nativeBuildInputs=("$fake_driver" "$hook_compat" "$bystander" "$fake_compat" "$fake_stubs")
		buildInputs=("$nolib")
		runtimeDependencies=("$rtsp")
		appendRunpaths=('$ORIGIN' "/opt/my libs")
		autoPatchelfIgnoreMissingDeps=("libcuda.so.*")
		cudaPatchelfIgnoreMissingDeps=("libnvidia-ml.so.1")
		printf -v preFixup 'addCudaPatchelfSearchPath %q' "$tree"
		declare -p nativeBuildInputs buildInputs runtimeDependencies appendRunpaths \
			autoPatchelfIgnoreMissingDeps cudaPatchelfIgnoreMissingDeps preFixup
	}
)
build_structured structured-compat "$decls"
if expect_success; then
	app_rp="$compat:$driver:$rtsp/lib:$out/lib:$tree/lib/x86_64:\$ORIGIN:/opt/my libs"
	expect_runpath "$out/bin/app" "$app_rp"
	expect_runpath "$out/lib/libfoo.so" "$compat:$driver:$tree/lib/x86_64:\$ORIGIN:/opt/my libs"
	expect_runpath "$out/lib/libgpu.so" "$compat:$driver:\$ORIGIN:/opt/my libs"
	expect_runpath "$debug/lib/libfoo.so" /opt/vendor/lib
	expect_interp "$out/bin/app" "$loader"
	expect_runs "$out/bin/app"
	expect_hooklog \
		"bystander saw postFixupHooks=cudaPatchelfPostFixup|bystanderPostFixup" \
		"bystander saw RUNPATH=$app_rp" \
		"autoPatchelf is cudaPatchelf"
	log=$dir/build.log
	expect_log "$log" "structuredAttrs is enabled"
	expect_log "$log" "taking over postFixupHooks entry 'autoFixElfFiles addCudaCompatRunpath' of autoAddCudaCompatRunpath"
	[[ $(grep -c "taking over postFixupHooks entry" "$log") == 3 ]] || fail "want exactly 3 take-over lines"
fi

# --- 3: a missing dependency fails the build ---------------------------------
# The buildInput that provides libdep.so is left out. libcuda.so.1, a driver
# library, is never missing: the driver link satisfies it.
build missing \
	nativeBuildInputs="$hook_nocompat"
if ((status == 0)) || [[ -e $dir/done ]]; then
	fail "build succeeded with libdep.so missing"
fi
log=$dir/build.log
expect_log "$log" "could not satisfy dependency libdep.so wanted by $out/bin/app"
expect_log "$log" "could not satisfy dependency libdep.so wanted by $out/lib/libfoo.so"
expect_no_log "$log" "dependency libcuda.so.1"
expect_log "$log" "cudapatch failed (exit status 1)"

# --- 4: dontCudaPatchelf leaves everything to the other hooks ----------------
build disabled \
	nativeBuildInputs="$fake_autopatchelf $fake_driver $hook_compat" buildInputs="$dep" \
	dontCudaPatchelf=1
if expect_success; then
	expect_runpath "$out/bin/app" /opt/vendor/lib
	expect_interp "$out/bin/app" /nonexistent/ld.so
	expect_hooklog "ran autoPatchelfPostFixup" "ran autoFixElfFiles addDriverRunpath"
	expect_no_log "$dir/build.log" "taking over postFixupHooks entry"
fi

# --- 5: strictDeps, deprecated "ignore all", no compat -----------------------
build strict-ignore-all \
	nativeBuildInputs="$hook_nocompat" buildInputs="$dep" strictDeps=1 \
	autoPatchelfIgnoreMissingDeps=1
if expect_success; then
	expect_runpath "$out/bin/app" "$driver:$out/lib:$dep/lib"
	expect_runpath "$out/lib/libgpu.so" "$driver"
	expect_runs "$out/bin/app"
	expect_log "$dir/build.log" "'autoPatchelfIgnoreMissingDeps = true' is deprecated"
	expect_hooklog "autoPatchelf is cudaPatchelf"
fi

# --- 6: autoPatchelfRelativeRpaths, --structured-logs in autoPatchelfFlags --
# The outputs sit in $dir/store, given as NIX_STORE: out/lib is reached
# relative to each file, the dependency outside the store and the driver link
# stay absolute, and the log carries auto-patchelf's JSON events.
build relative-structured \
	nativeBuildInputs="$hook_nocompat" buildInputs="$dep" \
	NIX_STORE="$WORK/relative-structured/store" \
	autoPatchelfRelativeRpaths=1 autoPatchelfFlags="--structured-logs"
if expect_success; then
	expect_runpath "$out/bin/app" "$driver:\$ORIGIN/../lib:$dep/lib"
	expect_runpath "$out/lib/libfoo.so" "$driver:$dep/lib"
	expect_runs "$out/bin/app"
	log=$dir/build.log
	expect_log "$log" "{\"SetRpath\": {\"file\": \"$out/bin/app\", \"rpath\": \"$driver:\$ORIGIN/../lib:$dep/lib\"}}"
	expect_log "$log" "{\"SetInterpreter\": {\"file\": \"$out/bin/app\", \"interpreter_path\": \"$loader\"}}"
	expect_no_log "$log" "ignoring"
	# The relocated output still runs.
	mv "$dir/store" "$dir/moved-store"
	expect_runs "$dir/moved-store/out/bin/app"
fi

# --- 7: --ignore-existing reaches cudapatch ---------------------------------
# The outputs' own libraries are not indexed: libfoo.so, only in out/lib, is
# missing.
build ignore-existing \
	nativeBuildInputs="$hook_nocompat" buildInputs="$dep" \
	autoPatchelfFlags="--ignore-existing"
if ((status == 0)) || [[ -e $dir/done ]]; then
	fail "build succeeded with --ignore-existing and libfoo.so only in the output"
fi
expect_log "$dir/build.log" "could not satisfy dependency libfoo.so wanted by $out/bin/app"
expect_no_log "$dir/build.log" "ignoring autoPatchelfFlags"

# --- 8: generate-ld-cache (postFixup shape, registered after this hook) and
# patchelf's shrink pass are taken over: every patched file gets its note
# from cudapatch, the debug output (not patched) still gets the shrink pass,
# and generate-ld-cache runs on nothing.
build ldcache-post \
	nativeBuildInputs="$fake_shrink $hook_nocompat $fake_ldcache_post" buildInputs="$dep" \
	cudaPatchelfFlags="--driver-link-for needed"
if expect_success; then
	expect_runpath "$out/bin/app" "$out/lib:$dep/lib"
	expect_runpath "$out/lib/libgpu.so" "$driver"
	# Nothing to resolve: kept, and shrunk as patchelf --shrink-rpath would.
	expect_runpath "$out/lib/libplain.so" ""
	expect_runpath "$debug/lib/libfoo.so" /opt/vendor/lib
	for f in "$out/bin/app" "$out/lib/libfoo.so" "$out/lib/libgpu.so"; do
		has_note "$f" || fail "${f#"$WORK"/}: no resolution note"
	done
	if has_note "$out/lib/libplain.so"; then fail "libplain.so: a note without a search path"; fi
	expect_runs "$out/bin/app"
	expect_hooklog "ran patchELF debug" "autoPatchelf is cudaPatchelf"
	log=$dir/build.log
	expect_log "$log" "taking over fixupOutputHooks entry 'if [ -z \"\${dontPatchELF-}\" ]; then patchELF \"\$prefix\"; fi' of patchelf's setup hook"
	expect_log "$log" "setting dontGenerateLDCache"
fi

# --- 9: the fixupOutput shape of generate-ld-cache, and dontGenerateLDCache:
# no note is written, none is generated, dontPatchELF keeps the shrink pass
# out of it.
build ldcache-fixup-off \
	nativeBuildInputs="$fake_ldcache_fixup $fake_shrink $hook_nocompat" buildInputs="$dep" \
	dontGenerateLDCache=1 dontPatchELF=1
if expect_success; then
	expect_runpath "$out/bin/app" "$driver:$out/lib:$dep/lib"
	for f in "$out/bin/app" "$out/lib/libfoo.so" "$out/lib/libgpu.so"; do
		if has_note "$f"; then fail "${f#"$WORK"/}: a note despite dontGenerateLDCache"; fi
	done
	expect_runs "$out/bin/app"
	expect_hooklog "autoPatchelf is cudaPatchelf"
	log=$dir/build.log
	expect_log "$log" "taking over fixupOutputHooks entry 'if [ -z \"\${dontGenerateLDCache-}\" ]; then generateLDCache \"\$prefix\"; fi' of generate-ld-cache"
	expect_no_log "$log" "of patchelf's setup hook"
fi

# --- 10: the fixupOutput shape of generate-ld-cache, notes on.
build ldcache-fixup \
	nativeBuildInputs="$fake_ldcache_fixup $hook_compat" buildInputs="$dep"
if expect_success; then
	has_note "$out/bin/app" || fail "app: no resolution note"
	readelf -p .note.nixos.ldcache "$out/bin/app" | grep -qF "=$compat/libcuda.so.1" &&
		fail "app: a compat libcuda that does not exist is in the note"
	expect_runs "$out/bin/app"
	expect_hooklog "autoPatchelf is cudaPatchelf"
fi

# Copies of libdep.so in directories only autoPatchelfLibs names: where the
# RUNPATH points says which directory cudapatch searched first.
for d in "$WORK/alt-a/lib" "$WORK/alt-b/lib" "$WORK/alt lib/x"; do
	mkdir -p "$d"
	cp "$dep/lib/libdep.so" "$d/"
done
altA=$WORK/alt-a/lib altB=$WORK/alt-b/lib altSp="$WORK/alt lib/x"

# --- 11: autoPatchelfLibs set as a string and appended to in preFixup,
# with autoPatchelfHook present (its env hook gathers dep/lib too). The
# directories are searched in the array's order when cudapatch runs, each
# once; one that does not exist is skipped.
build libs-string \
	nativeBuildInputs="$pkg_logged $fake_autopatchelf $hook_nocompat" buildInputs="$dep" \
	autoPatchelfLibs="$altA $WORK/absent" \
	preFixup='autoPatchelfLibs+=("$altB" "$altA" "$dep/lib")' altA="$altA" altB="$altB" dep="$dep"
if expect_success; then
	expect_runpath "$out/bin/app" "$driver:$out/lib:$altA"
	expect_runs "$out/bin/app"
	got=$(search_args)
	[[ $got == "$altA|$dep/lib|$altB" ]] || fail "--search: got '$got', want '$altA|$dep/lib|$altB'"
fi

# --- 12: structuredAttrs: autoPatchelfLibs an array whose entries may hold
# spaces, rewritten in preFixup (a directory put first), and patchelfFlags
# as an array: --force-rpath writes DT_RPATH.
decls=$(
	# shellcheck disable=SC2034,SC2016,SC2089,SC2090 # declared for declare -p.
	{
		nativeBuildInputs=("$pkg_logged" "$hook_nocompat")
		buildInputs=("$dep")
		autoPatchelfLibs=("$WORK/absent")
		patchelfFlags=("--force-rpath")
		printf -v preFixup 'autoPatchelfLibs=(%q "${autoPatchelfLibs[@]}")' "$altSp"
		declare -p nativeBuildInputs buildInputs autoPatchelfLibs patchelfFlags preFixup
	}
)
build_structured libs-structured "$decls"
if expect_success; then
	expect_rpath "$out/bin/app" "$driver:$out/lib:$altSp"
	expect_rpath "$out/lib/libfoo.so" "$driver:$altSp"
	expect_runs "$out/bin/app"
	if has_note "$out/bin/app"; then fail "app: a resolution note beside DT_RPATH"; fi
	got=$(search_args)
	[[ $got == "$altSp|$dep/lib" ]] || fail "--search: got '$got', want '$altSp|$dep/lib'"
	grep -qxF -- "--patchelf-flag=--force-rpath" "$dir/hooks.log.args" || fail "patchelfFlags did not reach cudapatch"
fi

# --- 13: patchelfFlags as a string: every option packages pass is honoured.
build patchelf-flags \
	nativeBuildInputs="$hook_nocompat" buildInputs="$dep" \
	patchelfFlags="--force-rpath --no-clobber-old-sections --page-size 4096"
if expect_success; then
	expect_rpath "$out/bin/app" "$driver:$out/lib:$dep/lib"
	expect_runs "$out/bin/app"
	expect_no_log "$dir/build.log" "ignoring"
fi

# --- 14: an option cudapatch does not take fails the build with one line,
# and nothing is written.
build patchelf-flags-refused \
	nativeBuildInputs="$hook_nocompat" buildInputs="$dep" \
	patchelfFlags="--set-rpath /x"
if ((status == 0)) || [[ -e $dir/done ]]; then
	fail "build succeeded with patchelfFlags=--set-rpath"
fi
expect_log "$dir/build.log" 'cudapatch: patchelf option "--set-rpath" (patchelfFlags, --extra-args) is not supported'
expect_log "$dir/build.log" "cudapatch failed (exit status 2)"
expect_runpath "$out/bin/app" /opt/vendor/lib

# --- 15: cudaPatchelfDlopen becomes cudapatch's --dlopen: off builds as
# before, a bad value fails the build with cudapatch's own message.
build dlopen-off \
	nativeBuildInputs="$hook_nocompat" buildInputs="$dep" cudaPatchelfDlopen=off
if expect_success; then
	expect_runpath "$out/bin/app" "$driver:$out/lib:$dep/lib"
	expect_runs "$out/bin/app"
fi
build dlopen-bad \
	nativeBuildInputs="$hook_nocompat" buildInputs="$dep" cudaPatchelfDlopen=bogus
if ((status == 0)) || [[ -e $dir/done ]]; then
	fail "cudaPatchelfDlopen=bogus: the build succeeded"
fi
expect_log "$dir/build.log" 'invalid value "bogus" for --dlopen'

# --- 16: the symbol check: vapp needs VER_2 of libver.so, which the build
# input's older libver.so lacks: with cudaPatchelfSymbols=error the build
# fails with the finding and nothing is written, and so it does unset (the
# default); cudaPatchelfIgnoreSymbols ignores it by pattern,
# cudaPatchelfSymbols=warn reports it without failing, a bad value fails.
oldver=$SAMPLE/deps/oldver
verInstall='mkdir -p "$out" "$debug"
cp -r "$SAMPLE/prebuilt-ver/." "$out"'
build symbols-missing-version \
	nativeBuildInputs="$hook_nocompat" buildInputs="$oldver" installPhase="$verInstall" \
	cudaPatchelfSymbols=error
if ((status == 0)) || [[ -e $dir/done ]]; then
	fail "symbols-missing-version: the build succeeded"
fi
expect_log "$dir/build.log" "error: $out/bin/vapp: fails-at-load: version VER_2 of libver.so (required by $out/bin/vapp)"
expect_log "$dir/build.log" "cudapatch failed (exit status 1)"
expect_interp "$out/bin/vapp" /nonexistent/ld.so
build symbols-ignored \
	nativeBuildInputs="$hook_nocompat" buildInputs="$oldver" installPhase="$verInstall" \
	cudaPatchelfSymbols=error cudaPatchelfIgnoreSymbols='*@VER_2 unrelated'
if expect_success; then
	expect_interp "$out/bin/vapp" "$loader"
	expect_no_log "$dir/build.log" "error:"
	expect_log "$dir/build.log" "cudapatch: symbols: 2 ignored by pattern"
fi
build symbols-default \
	nativeBuildInputs="$hook_nocompat" buildInputs="$oldver" installPhase="$verInstall"
if ((status == 0)) || [[ -e $dir/done ]]; then
	fail "symbols-default: the build succeeded (the check is on by default)"
fi
expect_log "$dir/build.log" "error: $out/bin/vapp: fails-at-load: version VER_2 of libver.so (required by $out/bin/vapp)"
build symbols-warn \
	nativeBuildInputs="$hook_nocompat" buildInputs="$oldver" installPhase="$verInstall" \
	cudaPatchelfSymbols=warn
if expect_success; then
	expect_interp "$out/bin/vapp" "$loader"
	expect_log "$dir/build.log" "warning: $out/bin/vapp: fails-at-load: version VER_2 of libver.so"
fi
build symbols-bad \
	nativeBuildInputs="$hook_nocompat" buildInputs="$oldver" installPhase="$verInstall" \
	cudaPatchelfSymbols=bogus
if ((status == 0)) || [[ -e $dir/done ]]; then
	fail "cudaPatchelfSymbols=bogus: the build succeeded"
fi
expect_log "$dir/build.log" 'invalid value "bogus" for --symbols'

# --- 17: cuda_compat's own libcuda, and its selector. The compat directories
# above hold no libcuda and are used as given. A directory holding compat's
# own libcuda is refused (its libcuda fails on a driver not older than it),
# and nothing is written; the selector built from it (cudapatch selector,
# as nix/selector.nix runs it) takes its place first in every RUNPATH, in
# each file's resolution note, and in the take-over of
# autoAddCudaCompatRunpath; cudaPatchelfCudaCompat names either.
realcompat=$(mkpkg cuda_compat-580)/compat
mkdir -p "$realcompat"
printf 'int cuInit(unsigned f) { (void)f; return 1; }\n' >"$WORK/compat-libcuda.c"
"${CC:-gcc}" -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$realcompat/libcuda.so.580.95.05" "$WORK/compat-libcuda.c"
ln -sf libcuda.so.580.95.05 "$realcompat/libcuda.so.1"
sel=$(mkpkg cuda-compat-selector-580)/lib
scenario=selector-build
if ! CC=${CC:-gcc} "$CUDAPATCH" selector --cuda-compat "$realcompat" --driver-link "$driver" \
	--out "$sel" >"$WORK/selector.log" 2>&1; then
	fail "cudapatch selector: $(cat "$WORK/selector.log")"
fi
hook_realcompat=$(mkhook cuda-patchelf-hook-realcompat "$realcompat")
hook_selector=$(mkhook cuda-patchelf-hook-selector "$sel")

build compat-own-libcuda \
	nativeBuildInputs="$hook_realcompat" buildInputs="$dep"
if ((status == 0)) || [[ -e $dir/done ]]; then
	fail "a compat directory with compat's own libcuda: the build succeeded"
fi
expect_log "$dir/build.log" "cuda_compat: $realcompat/libcuda.so.1 is cuda_compat's own libcuda"
expect_log "$dir/build.log" "--cuda-compat-selector"
expect_log "$dir/build.log" "cudapatch failed (exit status"
expect_interp "$out/bin/app" /nonexistent/ld.so
expect_runpath "$out/lib/libgpu.so" /opt/vendor/lib

build compat-selector \
	nativeBuildInputs="$fake_ldcache_fixup $fake_driver $hook_selector $fake_compat" buildInputs="$dep"
if expect_success; then
	expect_runpath "$out/bin/app" "$sel:$driver:$out/lib:$dep/lib"
	expect_runpath "$out/lib/libgpu.so" "$sel:$driver"
	expect_runs "$out/bin/app"
	got=$("$loader" --inhibit-cache --list "$out/lib/libgpu.so" 2>&1 | sed -n 's/^[[:space:]]*libcuda\.so\.1 => \([^ ]*\).*/\1/p')
	[[ $got == "$sel/libcuda.so.1" ]] || fail "libgpu.so: libcuda.so.1 resolves to '$got', want the selector $sel/libcuda.so.1"
	readelf -p .note.nixos.ldcache "$out/lib/libgpu.so" | grep -qF "=$sel/libcuda.so.1" ||
		fail "libgpu.so: the resolution note does not name the selector"
	expect_log "$dir/build.log" "taking over postFixupHooks entry 'autoFixElfFiles addCudaCompatRunpath' of autoAddCudaCompatRunpath"
	expect_no_log "$dir/build.log" "$realcompat"
fi

# cudaPatchelfCudaCompat: the selector over a hook without compat; compat's
# own directory over the selector hook is refused.
build compat-var-selector \
	nativeBuildInputs="$hook_nocompat" buildInputs="$dep" cudaPatchelfCudaCompat="$sel"
if expect_success; then
	expect_runpath "$out/lib/libgpu.so" "$sel:$driver"
fi
build compat-var-own-libcuda \
	nativeBuildInputs="$hook_selector" buildInputs="$dep" cudaPatchelfCudaCompat="$realcompat"
if ((status == 0)) || [[ -e $dir/done ]]; then
	fail "cudaPatchelfCudaCompat naming compat's own libcuda: the build succeeded"
fi
expect_log "$dir/build.log" "is cuda_compat's own libcuda"

# --- 18: the defaults that differ from autoPatchelfHook and
# autoAddDriverRunpath, each with the variable that restores the old
# behaviour (hooks/README.md, "Differences to expect").
# dlopen discovery's sibling rule: dlcode calls dlopen on a name whose
# first eight bytes its code forms ("libdep.s", as PyTorch builds
# libnvrtc's); in one output with app and libfoo.so, which need
# libdep.so, it gets dep/lib (evidence kind code). dlcaller calls dlopen
# and forms no name: it gets nothing (before the code rule it got every
# directory outside its output its siblings needed). Never a directory of
# its own output. cudaPatchelfDlopen=off: DT_NEEDED only, as
# autoPatchelfHook.
dlInstall='mkdir -p "$out" "$debug"
cp -r "$SAMPLE/prebuilt/out/." "$SAMPLE/prebuilt-dl/." "$out"'
build dlopen-output-rule \
	nativeBuildInputs="$hook_nocompat" buildInputs="$dep" installPhase="$dlInstall"
if expect_success; then
	expect_runpath "$out/bin/dlcode" "$driver:$dep/lib"
	expect_runpath "$out/bin/dlcaller" "$driver"
	expect_runpath "$out/bin/app" "$driver:$out/lib:$dep/lib"
fi
build dlopen-output-rule-off \
	nativeBuildInputs="$hook_nocompat" buildInputs="$dep" installPhase="$dlInstall" \
	cudaPatchelfDlopen=off
if expect_success; then
	expect_runpath "$out/bin/dlcode" "$driver"
	expect_runpath "$out/bin/dlcaller" "$driver"
	expect_runpath "$out/bin/app" "$driver:$out/lib:$dep/lib"
fi
# The driver link on every file: cudaPatchelfDriverLinkFor=none gives none
# (autoPatchelfHook alone), needed only to files that need a driver library.
build driver-link-none \
	nativeBuildInputs="$hook_nocompat" buildInputs="$dep" cudaPatchelfDriverLinkFor=none
if expect_success; then
	expect_runpath "$out/bin/app" "$out/lib:$dep/lib"
	expect_runpath "$out/lib/libfoo.so" "$dep/lib"
	expect_runs "$out/bin/app"
fi
build driver-link-needed \
	nativeBuildInputs="$hook_nocompat" buildInputs="$dep" cudaPatchelfDriverLinkFor=needed
if expect_success; then
	expect_runpath "$out/bin/app" "$out/lib:$dep/lib"
	expect_runpath "$out/lib/libgpu.so" "$driver"
fi
# autoAddDriverRunpath's opt-out means none too; the hook's own variable
# wins over it.
build driver-link-dontuse \
	nativeBuildInputs="$hook_nocompat" buildInputs="$dep" dontUseAutoAddDriverRunpath=1
if expect_success; then
	expect_runpath "$out/bin/app" "$out/lib:$dep/lib"
	expect_log "$dir/build.log" "dontUseAutoAddDriverRunpath is set: no driver link"
fi
build driver-link-dontuse-all \
	nativeBuildInputs="$hook_nocompat" buildInputs="$dep" dontUseAutoAddDriverRunpath=1 \
	cudaPatchelfDriverLinkFor=all
if expect_success; then
	expect_runpath "$out/bin/app" "$driver:$out/lib:$dep/lib"
fi
build driver-link-bad \
	nativeBuildInputs="$hook_nocompat" buildInputs="$dep" cudaPatchelfDriverLinkFor=bogus
if ((status == 0)) || [[ -e $dir/done ]]; then
	fail "cudaPatchelfDriverLinkFor=bogus: the build succeeded"
fi
expect_log "$dir/build.log" 'invalid value "bogus" for --driver-link-for'
# cuda_compat: cudaPatchelfCudaCompat="" turns off the compat entry of a
# hook built with one.
build compat-off \
	nativeBuildInputs="$hook_compat" buildInputs="$dep" cudaPatchelfCudaCompat=
if expect_success; then
	expect_runpath "$out/bin/app" "$driver:$out/lib:$dep/lib"
fi
# The symbol check: cudaPatchelfSymbols=off checks nothing, as
# autoPatchelfHook: vapp's missing VER_2 neither fails nor is reported.
build symbols-off \
	nativeBuildInputs="$hook_nocompat" buildInputs="$oldver" installPhase="$verInstall" \
	cudaPatchelfSymbols=off
if expect_success; then
	expect_interp "$out/bin/vapp" "$loader"
	expect_no_log "$dir/build.log" "fails-at-load"
fi

# --- 19: cudapatch stays the last writer of the notes. generate-ld-cache
# as nixpkgs #535735 runs it (patchelf --build-resolution-cache over every
# ELF file, its failure the hook's): patchelf fails on a file whose note it
# did not write. A derivation that calls cudaPatchelf itself with
# dontCudaPatchelf (nothing taken over) still gets generate-ld-cache
# stopped; the control runs cudapatch directly and the build fails.
fake_ldcache_strict=$(fakehook generate-ld-cache-strict '
preFixupHooks+=(_registerGenerateLDCache)
_registerGenerateLDCache() { postFixupHooks+=(_generateLDCacheAllOutputs); }
generateLDCache() { :; }
_generateLDCacheAllOutputs() {
  if [ -n "${dontGenerateLDCache-}" ]; then return 0; fi
  echo "ran _generateLDCacheAllOutputs" >>"$HOOKLOG"
  local f
  while IFS= read -r -d "" f; do
    if readelf -nW "$f" 2>/dev/null | grep -q "NixOS.*0x63a86cb6"; then
      echo "patchelf: --build-resolution-cache: a resolution cache note is already present; rebuild from an unpatched binary" >&2
      return 1
    fi
  done < <(find "$out" -type f -print0)
}')
build ldcache-manual \
	nativeBuildInputs="$hook_nocompat $fake_ldcache_strict" buildInputs="$dep" \
	dontCudaPatchelf=1 preFixup='cudaPatchelf -- "$out"'
if expect_success; then
	expect_runpath "$out/bin/app" "$driver:$out/lib:$dep/lib"
	has_note "$out/bin/app" || fail "app: no resolution note"
	expect_runs "$out/bin/app"
	expect_log "$dir/build.log" "setting dontGenerateLDCache"
	expect_no_log "$dir/build.log" "already present"
fi
build ldcache-manual-control \
	nativeBuildInputs="$hook_nocompat $fake_ldcache_strict" buildInputs="$dep" \
	dontCudaPatchelf=1 preFixup='cudapatch --search "$dep/lib" --ignore-missing "libcuda.so.1" -- "$out"' dep="$dep"
if ((status == 0)) || [[ -e $dir/done ]]; then
	fail "generate-ld-cache after a note cudapatch wrote: the build succeeded"
fi
expect_log "$dir/build.log" "a resolution cache note is already present"

if ((failures > 0)); then
	echo "$failures assertion(s) failed; scratch tree kept in $WORK"
	exit 1
fi
echo "all hook scenarios passed"

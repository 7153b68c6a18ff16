# shellcheck shell=bash
#
# cudaPatchelfHook: one cudapatch run over every output, in postFixup.
#
# It replaces autoPatchelfHook, autoAddDriverRunpath, autoAddCudaCompatRunpath
# and removeStubsFromRunpathHook. This file only turns stdenv variables into
# cudapatch flags; every decision about a RUNPATH is cudapatch's.
#
# @driverLink@ (the driver library directory, /run/opengl-driver/lib) and
# @cudaCompat@ (the lib directory of cuda_compat's selector, nix/selector.nix,
# or empty) are substituted by makeSetupHook (nix/hook.nix). A derivation may
# override either by setting cudaPatchelfDriverLink or cudaPatchelfCudaCompat
# (empty: no compat entry). cudapatch uses a compat directory as given when it
# holds a selector or no libcuda, and refuses cuda_compat's own directory.

# Propagated twice, the hook would gather every library directory twice.
if [[ -n ${cudaPatchelfHookSourced-} ]]; then
    return 0
fi
declare -g cudaPatchelfHookSourced=1

if [[ -z ${cudaPatchelfDriverLink+set} ]]; then
    declare -g cudaPatchelfDriverLink='@driverLink@'
fi
if [[ -z ${cudaPatchelfCudaCompat+set} ]]; then
    declare -g cudaPatchelfCudaCompat='@cudaCompat@'
fi

_cudaPatchelfLog() {
    echo "cudaPatchelfHook: $*" >&2
}

# autoPatchelfLibs is autoPatchelfHook's list of library directories: the
# env hooks append <dep>/lib of every host dependency to it, and
# derivations append to it (or rewrite it) themselves, in preFixup for
# example. It is read when cudapatch runs. A derivation may set it as a
# string (whitespace-separated, as every list variable); that becomes the
# array the env hooks append to.
_cudaPatchelfLibsToArray() {
    local -
    set -o noglob
    local IFS=$' \t\n'
    # shellcheck disable=SC2206 # Split on whitespace, as concatTo splits a string.
    local -a words=($autoPatchelfLibs)
    unset autoPatchelfLibs
    declare -ga autoPatchelfLibs=(${words[@]+"${words[@]}"})
}
if [[ -n ${autoPatchelfLibs+set} && ${autoPatchelfLibs@a} != *[aA]* ]]; then
    _cudaPatchelfLibsToArray
fi
declare -ga autoPatchelfLibs
# Flag/directory pairs from addCudaPatchelfSearchPath, in call order.
declare -ga cudaPatchelfSearchArgs=()

# <dep>/lib of every host dependency, in dependency order, as
# autoPatchelfHook gathers them: only lib/, not lib64 and not
# subdirectories. Without strictDeps stdenv calls this once per env hook
# list for every package, so a directory may come twice.
_cudaPatchelfGatherLibraries() {
    local dir
    for dir in ${autoPatchelfLibs[@]+"${autoPatchelfLibs[@]}"}; do
        [[ $dir == "$1/lib" ]] && return 0
    done
    autoPatchelfLibs+=("$1/lib")
}

# _cudaPatchelfLibDirs ARRAY: appends to ARRAY the directories of
# autoPatchelfLibs and then of extraAutoPatchelfLibs (where
# autoPatchelfHook's addAutoPatchelfSearchPath puts them, when that hook
# is present), as they are now, in order, each once. Without
# __structuredAttrs the entries of autoPatchelfLibs are split on
# whitespace, so that an edit of the string form
# (autoPatchelfLibs="$autoPatchelfLibs /x") counts too.
_cudaPatchelfLibDirs() {
    local -n _cudaPatchelfDirs=$1
    local -
    set -o noglob
    local IFS=$' \t\n'
    local -a all=()
    local entry
    for entry in ${autoPatchelfLibs[@]+"${autoPatchelfLibs[@]}"}; do
        if [[ -n ${__structuredAttrs-} ]]; then
            all+=("$entry")
        else
            # shellcheck disable=SC2206 # Split on whitespace, as above.
            all+=($entry)
        fi
    done
    all+=(${extraAutoPatchelfLibs[@]+"${extraAutoPatchelfLibs[@]}"})
    local -A seen=()
    for entry in ${all[@]+"${all[@]}"}; do
        [[ -n $entry && -z ${seen[$entry]-} ]] || continue
        seen[$entry]=1
        _cudaPatchelfDirs+=("$entry")
    done
}

# shellcheck disable=SC2154 # targetOffset is set by stdenv while sourcing.
addEnvHooks "$targetOffset" _cudaPatchelfGatherLibraries

# addCudaPatchelfSearchPath [--no-recurse] [--] DIR...
# Adds library search directories for the next cudaPatchelf run. Without
# --no-recurse, cudapatch also searches every directory below DIR that holds a
# *.so* file, as addAutoPatchelfSearchPath does.
addCudaPatchelfSearchPath() {
    local flag=--search-recursive
    while (($# > 0)); do
        case "$1" in
        --)
            shift
            break
            ;;
        --no-recurse)
            flag=--search
            shift
            ;;
        --*)
            _cudaPatchelfLog "addCudaPatchelfSearchPath: invalid argument: $1"
            return 1
            ;;
        *) break ;;
        esac
    done
    local dir
    for dir in "$@"; do
        if [[ -z $dir ]]; then
            _cudaPatchelfLog "addCudaPatchelfSearchPath: ignoring an empty directory name"
            continue
        fi
        cudaPatchelfSearchArgs+=("$flag" "$dir")
    done
}

# cudaPatchelf [--no-recurse] [--] PATH...
# Runs cudapatch once over PATHs with the flags the derivation's variables ask
# for. Returns cudapatch's exit status; its messages go to stderr unchanged.
cudaPatchelf() {
    local norecurse=
    while (($# > 0)); do
        case "$1" in
        --)
            shift
            break
            ;;
        --no-recurse)
            norecurse=1
            shift
            ;;
        --*)
            _cudaPatchelfLog "cudaPatchelf: invalid argument: $1"
            return 1
            ;;
        *) break ;;
        esac
    done
    if (($# == 0)); then
        _cudaPatchelfLog "cudaPatchelf: no paths given"
        return 1
    fi

    # concatTo reads both forms: a whitespace-separated string, or a bash
    # array under __structuredAttrs (where entries may contain spaces).
    local -a ignoreMissing=() ignoreSymbols=() runtimeDeps=() appendRunpathsArray=()
    local -a autoFlags=() ownFlags=() patchelfFlagsArray=()
    concatTo ignoreMissing autoPatchelfIgnoreMissingDeps cudaPatchelfIgnoreMissingDeps
    concatTo ignoreSymbols cudaPatchelfIgnoreSymbols
    concatTo runtimeDeps runtimeDependencies
    concatTo appendRunpathsArray appendRunpaths
    concatTo autoFlags autoPatchelfFlags
    concatTo ownFlags cudaPatchelfFlags
    concatTo patchelfFlagsArray patchelfFlags

    local -a args=()
    if [[ -n $norecurse ]]; then
        args+=(--no-recurse)
    fi
    if [[ -n $cudaPatchelfCudaCompat ]]; then
        args+=(--cuda-compat "$cudaPatchelfCudaCompat")
    fi
    args+=(--driver-link "$cudaPatchelfDriverLink")
    # Which files get the driver link: unset is cudapatch's default, all.
    # autoAddDriverRunpath's opt-out (dontUseAutoAddDriverRunpath) means
    # none, as that hook then adds nothing.
    if [[ -n ${cudaPatchelfDriverLinkFor-} ]]; then
        args+=(--driver-link-for "$cudaPatchelfDriverLinkFor")
    elif [[ -n ${dontUseAutoAddDriverRunpath-} ]]; then
        _cudaPatchelfLog "dontUseAutoAddDriverRunpath is set: no driver link (cudaPatchelfDriverLinkFor=none)"
        args+=(--driver-link-for none)
    fi
    if [[ -n ${cudaPatchelfDlopen-} ]]; then
        args+=(--dlopen "$cudaPatchelfDlopen")
    fi
    # The symbol check: unset is cudapatch's default, error.
    if [[ -n ${cudaPatchelfSymbols-} ]]; then
        args+=(--symbols "$cudaPatchelfSymbols")
    fi

    local entry
    for entry in "${ignoreMissing[@]}"; do
        if [[ $entry == 1 || $entry == true ]]; then
            _cudaPatchelfLog "WARNING: 'autoPatchelfIgnoreMissingDeps = true' is deprecated;" \
                "use 'autoPatchelfIgnoreMissingDeps = [ \"*\" ]' instead"
            entry='*'
        fi
        args+=(--ignore-missing "$entry")
    done
    for entry in "${ignoreSymbols[@]}"; do
        args+=(--ignore-symbol "$entry")
    done

    # Library directories that do not exist (a dependency without lib/)
    # are skipped, as auto-patchelf skips them.
    local -a libDirs=()
    _cudaPatchelfLibDirs libDirs
    for entry in ${libDirs[@]+"${libDirs[@]}"}; do
        if [[ -d $entry ]]; then
            args+=(--search "$entry")
        fi
    done
    local i
    for ((i = 0; i < ${#cudaPatchelfSearchArgs[@]}; i += 2)); do
        entry=${cudaPatchelfSearchArgs[i + 1]}
        if [[ ! -d $entry ]]; then
            _cudaPatchelfLog "skipping search path $entry: not a directory"
            continue
        fi
        args+=("${cudaPatchelfSearchArgs[i]}" "$entry")
    done

    for entry in "${runtimeDeps[@]}"; do
        args+=(--runtime-dependency "$entry/lib")
    done
    for entry in "${appendRunpathsArray[@]}"; do
        args+=(--append-rpath "$entry")
    done

    # autoPatchelfFlags were written for auto-patchelf.py; cudapatch takes
    # the same spellings (--ignore-existing, --keep-libc, --preserve-origin,
    # --relative-rpaths, --relativize-rpath, --structured-logs).
    args+=("${autoFlags[@]}")
    # autoPatchelfRelativeRpaths = true: store entries relative to each
    # file; cudapatch takes the store from $NIX_STORE.
    if [[ -n ${autoPatchelfRelativeRpaths-} ]]; then
        args+=(--relative-rpaths)
    fi
    # A derivation opts out of resolution notes with dontGenerateLDCache,
    # generate-ld-cache's own variable. The take-over sets that variable to
    # keep generate-ld-cache from running after cudapatch, so the value the
    # derivation gave is the one recorded before.
    if [[ -n ${_cudaPatchelfDontGenerateLDCache-${dontGenerateLDCache-}} ]]; then
        args+=(--no-resolution-cache)
    fi
    if [[ -n ${_cudaPatchelfShrinkKept-} ]]; then
        args+=(--shrink-kept)
    fi
    # patchelfFlags, which auto-patchelf passes to every patchelf call:
    # cudapatch honours the options that matter to packages and refuses
    # the others (docs/auto-patchelf.md), as for auto-patchelf --extra-args.
    for entry in "${patchelfFlagsArray[@]}"; do
        args+=("--patchelf-flag=$entry")
    done
    args+=("${ownFlags[@]}")

    _cudaPatchelfStopLDCache
    _cudaPatchelfLog "running cudapatch on $*"
    local rc=0
    cudapatch "${args[@]}" -- "$@" || rc=$?
    if ((rc != 0)); then
        _cudaPatchelfLog "cudapatch failed (exit status $rc)"
    fi
    return "$rc"
}

# Names used by derivations written for autoPatchelfHook. When that hook is
# present its own functions stay: whichever setup hook is sourced last defines
# them.
if ! declare -F autoPatchelf >/dev/null; then
    autoPatchelf() { cudaPatchelf "$@"; }
fi
if ! declare -F addAutoPatchelfSearchPath >/dev/null; then
    addAutoPatchelfSearchPath() { addCudaPatchelfSearchPath "$@"; }
fi

_cudaPatchelfDisabled() {
    [[ -n ${dontCudaPatchelf-} || -n ${dontAutoPatchelf-} ]]
}

# _cudaPatchelfOutputs: the outputs cudaPatchelfPostFixup patches, one a line.
_cudaPatchelfOutputs() {
    local output
    for output in $(getAllOutputNames); do
        [[ $output == debug ]] && continue
        [[ -e ${!output} ]] || continue
        printf '%s\n' "${!output}"
    done
}

# _cudaPatchelfPatchesOutput DIR: whether cudaPatchelfPostFixup patches DIR.
_cudaPatchelfPatchesOutput() {
    local dir
    while IFS= read -r dir; do
        [[ $dir == "$1" ]] && return 0
    done < <(_cudaPatchelfOutputs)
    return 1
}

cudaPatchelfPostFixup() {
    if _cudaPatchelfDisabled; then
        _cudaPatchelfLog "skipped: dontCudaPatchelf or dontAutoPatchelf is set"
        return 0
    fi
    local -a paths=()
    local output
    while IFS= read -r output; do
        paths+=("$output")
    done < <(_cudaPatchelfOutputs)
    ((${#paths[@]} > 0)) || return 0
    cudaPatchelf -- "${paths[@]}"
}

# _cudaPatchelfTakeOverWhat ENTRY: prints the hook that registered the
# postFixupHooks entry ENTRY when cudapatch does its work, else fails.
_cudaPatchelfTakeOverWhat() {
    case "$1" in
    autoPatchelfPostFixup) echo autoPatchelfHook ;;
    # autoPatchelfHook before it had a named function.
    *"autoPatchelf -- "*getAllOutputNames*) echo autoPatchelfHook ;;
    "autoFixElfFiles addDriverRunpath") echo autoAddDriverRunpath ;;
    autoAddDriverRunpathPhase) echo autoAddDriverRunpath ;;
    autoAddOpenGLRunpathPhase) echo autoAddOpenGLRunpathHook ;;
    "autoFixElfFiles addCudaCompatRunpath")
        # Without a compat directory of its own, cudapatch adds no compat
        # entry: the other hook's prepend then still gives the right order.
        [[ -n $cudaPatchelfCudaCompat ]] || return 1
        echo autoAddCudaCompatRunpath
        ;;
    "autoFixElfFiles removeStubsFromRunpath") echo removeStubsFromRunpathHook ;;
    # generate-ld-cache since it moved to postFixup (registered from
    # preFixup, after autoPatchelfHook's entry).
    _generateLDCacheAllOutputs) echo generate-ld-cache ;;
    *) return 1 ;;
    esac
}

# Runs in preFixup: by then every setup hook has been sourced and every
# prePhases registration (removeStubsFromRunpathHook's) has run. Entries of the
# hooks cudapatch replaces are dropped, and cudaPatchelfPostFixup takes the
# place of the earliest of them, so hooks registered in between still run
# after the RUNPATHs are final.
_cudaPatchelfTakeOver() {
    if _cudaPatchelfDisabled; then
        _cudaPatchelfLog "not taking over other hooks: dontCudaPatchelf or dontAutoPatchelf is set"
        return 0
    fi
    local -a kept=()
    local entry owner shown placed=
    for entry in "${postFixupHooks[@]}"; do
        if [[ $entry == cudaPatchelfPostFixup ]]; then
            if [[ -z $placed ]]; then
                kept+=("$entry")
                placed=1
            fi
        elif owner=$(_cudaPatchelfTakeOverWhat "$entry"); then
            shown=$entry
            if [[ $shown == *$'\n'* ]]; then
                shown="(inline script)"
            fi
            _cudaPatchelfLog "taking over postFixupHooks entry '$shown' of $owner:" \
                "cudapatch writes its RUNPATH entries in the same pass"
            if [[ -z $placed ]]; then
                kept+=(cudaPatchelfPostFixup)
                placed=1
            fi
        else
            if [[ $entry == "autoFixElfFiles addCudaCompatRunpath" ]]; then
                _cudaPatchelfLog "leaving '$entry' in place: this cudaPatchelfHook has no cuda_compat directory," \
                    "so compat's libcuda comes first on every machine, a newer driver's too;" \
                    "give the hook cuda_compat (cudaPatchelfHook.override { inherit cuda_compat; })" \
                    "to choose between them when each process starts"
            fi
            kept+=("$entry")
        fi
    done
    postFixupHooks=("${kept[@]}")
    _cudaPatchelfTakeOverLDCache
    _cudaPatchelfTakeOverShrink
}

# patchelf's setup hook runs `patchelf --shrink-rpath` over every ELF file
# of every output in fixupOutput, a whole-file rewrite each, before
# cudapatch rewrites the RUNPATH anyway. For the outputs cudapatch patches,
# it shrinks the RUNPATHs it keeps itself (--shrink-kept) in the same
# write, so the pass is dropped there; other outputs (debug) keep it.
# shellcheck disable=SC2016 # The entries are code, expanded when they run.
_cudaPatchelfTakeOverShrink() {
    [[ -z ${dontPatchELF-} ]] || return 0
    local -a kept=()
    local entry took=
    for entry in ${fixupOutputHooks+"${fixupOutputHooks[@]}"}; do
        if [[ $entry == *'patchELF "$prefix"'* && $entry != *_cudaPatchelfPatchesOutput* ]]; then
            _cudaPatchelfLog "taking over fixupOutputHooks entry '$entry' of patchelf's setup hook" \
                "for the outputs cudapatch patches: cudapatch shrinks the RUNPATHs it keeps in the same write"
            entry='if [ -z "${dontPatchELF-}" ] && ! _cudaPatchelfPatchesOutput "$prefix"; then patchELF "$prefix"; fi'
            took=1
        fi
        kept+=("$entry")
    done
    fixupOutputHooks=(${kept+"${kept[@]}"})
    if [[ -n $took ]]; then
        declare -g _cudaPatchelfShrinkKept=1
    fi
}

# generate-ld-cache writes each ELF file's resolution note
# (.note.nixos.ldcache) with `patchelf --build-resolution-cache`: from the
# vendor's RUNPATH when it runs in fixupOutput, before cudapatch (the note
# then disagrees with the RUNPATH cudapatch writes), or by rewriting every
# file once more after cudapatch in postFixup. cudapatch writes the note in
# the same edit as the RUNPATH, so the hook's entries are dropped, and,
# because its postFixup variant registers itself from preFixup, possibly
# after this function has run, its own opt-out is set too. The
# derivation's dontGenerateLDCache is recorded first: it still turns the
# notes off (cudapatch --no-resolution-cache).
_cudaPatchelfTakeOverLDCache() {
    _cudaPatchelfHasLDCache || return 0
    local -a kept=()
    local entry
    for entry in ${fixupOutputHooks+"${fixupOutputHooks[@]}"}; do
        if [[ $entry == *generateLDCache* ]]; then
            _cudaPatchelfLog "taking over fixupOutputHooks entry '$entry' of generate-ld-cache:" \
                "cudapatch writes each file's resolution note with its RUNPATH"
            continue
        fi
        kept+=("$entry")
    done
    fixupOutputHooks=(${kept+"${kept[@]}"})
    _cudaPatchelfStopLDCache
}

_cudaPatchelfHasLDCache() {
    declare -F generateLDCache >/dev/null || declare -F _registerGenerateLDCache >/dev/null
}

# _cudaPatchelfStopLDCache: keeps generate-ld-cache from running after
# cudapatch, at the take-over or, with dontCudaPatchelf (nothing taken
# over), when a derivation runs cudaPatchelf itself. Its `patchelf
# --build-resolution-cache` fails on a file whose note differs from the
# one patchelf would write ("a resolution cache note is already present"),
# which every note cudapatch writes may (the driver link, the driver's
# libraries, dlopen names), so cudapatch must be the last writer. The
# derivation's own dontGenerateLDCache is recorded first.
_cudaPatchelfStopLDCache() {
    _cudaPatchelfHasLDCache || return 0
    [[ -z ${_cudaPatchelfLDCacheStopped-} ]] || return 0
    declare -g _cudaPatchelfLDCacheStopped=1
    declare -g _cudaPatchelfDontGenerateLDCache=${dontGenerateLDCache-}
    if [[ -z ${dontGenerateLDCache-} ]]; then
        _cudaPatchelfLog "setting dontGenerateLDCache: cudapatch writes each file's" \
            "resolution note with its RUNPATH, generate-ld-cache must not rewrite them afterwards"
    fi
    declare -g dontGenerateLDCache=1
}

preFixupHooks+=(_cudaPatchelfTakeOver)
postFixupHooks+=(cudaPatchelfPostFixup)

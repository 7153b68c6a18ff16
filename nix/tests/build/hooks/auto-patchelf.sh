# shellcheck shell=bash
#
# Stand-in for nixpkgs' autoPatchelfHook, registered as it registers itself:
# gatherLibraries as an env hook, addAutoPatchelfSearchPath (extraAutoPatchelfLibs),
# and autoPatchelfPostFixup in postFixupHooks at source time. autoPatchelf
# itself fails the build: where cudaPatchelfHook is present it must have
# taken the postFixupHooks entry over, so this never runs.

declare -ga autoPatchelfLibs=()
declare -ga extraAutoPatchelfLibs=()

gatherLibraries() {
    autoPatchelfLibs+=("$1/lib")
}

# shellcheck disable=SC2154 # targetOffset is set by stdenv while sourcing.
addEnvHooks "$targetOffset" gatherLibraries

# addAutoPatchelfSearchPath [--no-recurse] [--] DIR...: every directory at or
# below DIR holding a *.so or *.so.* file (DIR itself only with --no-recurse).
addAutoPatchelfSearchPath() {
    local -a depth=()
    while (($# > 0)); do
        case "$1" in
        --)
            shift
            break
            ;;
        --no-recurse)
            depth=(-maxdepth 1)
            shift
            ;;
        --*)
            echo "addAutoPatchelfSearchPath: invalid argument: $1" >&2
            return 1
            ;;
        *) break ;;
        esac
    done
    local file
    while IFS= read -r -d '' file; do
        local dir=${file%/*} seen
        for seen in ${extraAutoPatchelfLibs+"${extraAutoPatchelfLibs[@]}"}; do
            [[ $seen == "$dir" ]] && continue 2
        done
        extraAutoPatchelfLibs+=("$dir")
    done < <(find "$@" "${depth[@]}" ! -type d \( -name '*.so' -o -name '*.so.*' \) -print0 | sort -z)
}

autoPatchelf() {
    echo "autoPatchelfHook stand-in: autoPatchelf $* ran; cudaPatchelfHook should have taken its postFixupHooks entry over" >&2
    return 1
}

autoPatchelfPostFixup() {
    if [[ -z ${dontAutoPatchelf-} ]]; then
        local -a paths=()
        local output
        for output in $(getAllOutputNames); do
            [[ -e ${!output} ]] && paths+=("${!output}")
        done
        autoPatchelf -- "${paths[@]}"
    fi
}

postFixupHooks+=(autoPatchelfPostFixup)

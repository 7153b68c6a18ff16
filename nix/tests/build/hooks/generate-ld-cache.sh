# shellcheck shell=bash
#
# Stand-in for nixpkgs' generate-ld-cache setup hook, a stdenv default: it
# registers itself from preFixup, so that it lands in postFixupHooks after
# every hook appended at source time (autoPatchelfHook's, cudaPatchelfHook's),
# and then writes a resolution-cache note (.note.nixos.ldcache) into every
# ELF file of every output with `patchelf --build-resolution-cache`, unless
# dontGenerateLDCache. @patchelf@ is the patchelf it runs; one without that
# option writes no notes (logged once). As in nixpkgs #535735 (patchelf
# through xargs), a patchelf failure fails the build: patchelf refuses a
# file whose note differs from the one it would write, so a note cudapatch
# wrote before this hook runs fails here.

preFixupHooks+=(_registerGenerateLDCache)

_registerGenerateLDCache() {
    postFixupHooks+=(_generateLDCacheAllOutputs)
}

_generateLDCacheAllOutputs() {
    [[ -z ${dontGenerateLDCache-} ]] || return 0
    local help
    help=$("@patchelf@" --help 2>&1 || true)
    if [[ $help != *--build-resolution-cache* ]]; then
        echo "generate-ld-cache: @patchelf@ has no --build-resolution-cache; no notes written"
        return 0
    fi
    local output
    for output in $(getAllOutputNames); do
        _generateLDCache "${!output}"
    done
}

_generateLDCache() {
    local dir=$1 file
    [[ -e $dir ]] || return 0
    echo "generating LD cache for ELF files in $dir"
    while IFS= read -r -d '' file; do
        [[ $file == *.build-id* ]] && continue
        isELF "$file" || continue
        "@patchelf@" --build-resolution-cache "$file" || return
    done < <(find "$dir" -type f -print0)
}

# shellcheck shell=bash
#
# Stand-in for the setup hook of nixpkgs' patchelf package, which every
# stdenv build has: in fixupPhase, each output's ELF files get
# `patchelf --shrink-rpath` (unless dontPatchELF), before postFixup and so
# before cudaPatchelfHook. Registered as nixpkgs registers it.

# shellcheck disable=SC2016 # evaluated by runHook, per output.
fixupOutputHooks+=('if [ -z "${dontPatchELF-}" ]; then patchELF "$prefix"; fi')

patchELF() {
    local dir=$1 file
    [[ -e $dir ]] || return 0
    echo "shrinking RPATHs of ELF executables and libraries in $dir"
    while IFS= read -r -d '' file; do
        [[ $file == *.build-id* ]] && continue
        isELF "$file" || continue
        echo "shrinking $file"
        patchelf --shrink-rpath "$file" || true
    done < <(find "$dir" -type f -print0)
}

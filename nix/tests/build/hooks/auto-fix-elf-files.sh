# shellcheck shell=bash
#
# Stand-in for nixpkgs' autoFixElfFiles setup hook, which the driver, compat
# and stub hooks propagate: autoFixElfFiles FUNCTION runs FUNCTION FILE on
# every dynamically linked ELF file of every output.

autoFixElfFiles() {
    local fn=$1 output file
    local -a dirs=()
    for output in $(getAllOutputNames); do
        [[ -e ${!output} ]] && dirs+=("${!output}")
    done
    ((${#dirs[@]} > 0)) || return 0
    while IFS= read -r -d '' file; do
        isELF "$file" || continue
        # No dynamic section (a static program): nothing to fix.
        patchelf --print-rpath "$file" >/dev/null 2>&1 || continue
        "$fn" "$file"
    done < <(find "${dirs[@]}" -type f -print0 | sort -z)
}

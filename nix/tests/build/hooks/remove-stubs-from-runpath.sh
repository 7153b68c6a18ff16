# shellcheck shell=bash
#
# Stand-in for nixpkgs' removeStubsFromRunpathHook, registered as it
# registers itself: from prePhases, so that its postFixupHooks entry comes
# after the others. removeStubsFromRunpath FILE replaces the first stub
# directory of FILE's RUNPATH by the driver link and drops the others.

prePhases+=(removeStubsFromRunpathHookRegistration)

removeStubsFromRunpathHookRegistration() {
    postFixupHooks+=("autoFixElfFiles removeStubsFromRunpath")
}

removeStubsFromRunpath() {
    local runpath entry replaced='' IFS=:
    local -a kept=()
    runpath=$(patchelf --print-rpath "$1")
    for entry in $runpath; do
        if [[ $entry == */stubs || $entry == */stubs/* || $entry == *-stubs/lib ]]; then
            if [[ -z $replaced ]]; then
                kept+=("@driverLink@/lib")
                replaced=1
            fi
        else
            kept+=("$entry")
        fi
    done
    if [[ -n $replaced ]]; then
        patchelf --set-rpath "${kept[*]}" "$1"
    fi
}

# shellcheck shell=bash
#
# The parts of nixpkgs' stdenv (pkgs/stdenv/generic/setup.sh) that a setup hook
# relies on, re-created so the hook can be tested without Nix: shell options,
# .attrs.sh for __structuredAttrs, runHook/_eval, addEnvHooks and the env hook
# arrays, concatTo, getAllOutputNames, activation of setup hooks with
# hostOffset/targetOffset, the shape of fixupPhase (with the recording of
# propagatedBuildInputs), buildCommand and isELF. Phases that do real work
# (unpack, build, strip, shrink-rpath) are left out; the Nix package set of
# nix/tests/build adds its stand-ins for patchelf's shrink-rpath and
# generate-ld-cache as setup hooks, as nixpkgs' stdenv does.
#
# Inputs, as the derivation builder receives them: nativeBuildInputs,
# buildInputs and defaultNativeBuildInputs (store-path-like directories; a
# nix-support/setup-hook in one is sourced, bin/ of a native input goes on
# PATH, and nix-support/propagated-build-inputs is followed), outputs, and
# either one variable per output or, under structuredAttrs,
# NIX_ATTRS_SH_FILE.

# shellcheck disable=SC2034 # The env hook and package tables are read
# through indirection (${!ref}), as in setup.sh.

set -eu
set -o pipefail
shopt -s inherit_errexit nullglob

if [[ -f ${NIX_ATTRS_SH_FILE-} ]]; then
    # shellcheck disable=SC1090
    source "$NIX_ATTRS_SH_FILE"
    __structuredAttrs=1
    echo "structuredAttrs is enabled"
    for outputName in "${!outputs[@]}"; do
        export "$outputName=${outputs[$outputName]}"
    done
    unset outputName
else
    __structuredAttrs=
    : "${outputs:=out}"
fi

getAllOutputNames() {
    if [[ -n $__structuredAttrs ]]; then
        echo "${!outputs[*]}"
    else
        echo "$outputs"
    fi
}

_eval() {
    if declare -F "$1" >/dev/null 2>&1; then
        "$@"
    else
        eval "$1"
    fi
}

_callImplicitHook() {
    local def="$1"
    local hookName="$2"
    if declare -F "$hookName" >/dev/null; then
        "$hookName"
    elif type -p "$hookName" >/dev/null; then
        # shellcheck disable=SC1090
        source "$hookName"
    elif [[ -n ${!hookName:-} ]]; then
        eval "${!hookName}"
    else
        return "$def"
    fi
}

# As in setup.sh, the hook list is expanded once, before the first hook runs:
# a hook that edits the array changes only later runHook calls.
runHook() {
    local hookName="$1"
    shift
    local hooksSlice="${hookName%Hook}Hooks[@]"
    local hook
    for hook in "_callImplicitHook 0 $hookName" ${!hooksSlice+"${!hooksSlice}"}; do
        _eval "$hook" "$@"
    done
    return 0
}

concatTo() {
    local -
    set -o noglob
    local -n targetref="$1"
    shift
    local arg default name type
    for arg in "$@"; do
        IFS="=" read -r name default <<<"$arg"
        local -n nameref="$name"
        if [[ -z ${nameref[*]} && -n $default ]]; then
            targetref+=("$default")
        elif type=$(declare -p "$name" 2>/dev/null); then
            case "${type#* }" in
            -A*)
                echo "concatTo(): ERROR: trying to use concatTo on an associative array." >&2
                return 1
                ;;
            -a*)
                targetref+=("${nameref[@]}")
                ;;
            *)
                # shellcheck disable=SC2206
                targetref+=(${nameref-})
                ;;
            esac
        fi
    done
}

addToSearchPath() {
    local varName="$1" dir="$2"
    if [[ -d $dir && ":${!varName-}:" != *":$dir:"* ]]; then
        export "$varName=${!varName:+${!varName}:}$dir"
    fi
}

# Platform offsets: build = -1, host = 0, target = 1.
declare -a pkgsBuildBuild=() pkgsBuildHost=() pkgsBuildTarget=()
declare -a pkgsHostHost=() pkgsHostTarget=() pkgsTargetTarget=()
declare -a envBuildBuildHooks=() envBuildHostHooks=() envBuildTargetHooks=()
declare -a envHostHostHooks=() envHostTargetHooks=() envTargetTargetHooks=()
declare -a pkgBuildHookVars=(envBuildBuildHook envBuildHostHook envBuildTargetHook)
declare -a pkgHostHookVars=(envHostHostHook envHostTargetHook)
declare -a pkgTargetHookVars=(envTargetTargetHook)
declare -a pkgHookVarVars=(pkgBuildHookVars pkgHostHookVars pkgTargetHookVars)
declare -a pkgBuildAccumVars=(pkgsBuildBuild pkgsBuildHost pkgsBuildTarget)
declare -a pkgHostAccumVars=(pkgsHostHost pkgsHostTarget)
declare -a pkgTargetAccumVars=(pkgsTargetTarget)
declare -a pkgAccumVarVars=(pkgBuildAccumVars pkgHostAccumVars pkgTargetAccumVars)

addEnvHooks() {
    local depHostOffset="$1"
    shift
    local pkgHookVarsSlice="${pkgHookVarVars[$depHostOffset + 1]}[@]"
    local pkgHookVar
    for pkgHookVar in "${!pkgHookVarsSlice}"; do
        eval "${pkgHookVar}s"'+=("$@")'
    done
}

# findInputs PKG HOSTOFFSET TARGETOFFSET, restricted to what the tests use:
# propagated-build-inputs keeps the offsets of the package that propagates.
findInputs() {
    local -r pkg="$1" hostOffset="$2" targetOffset="$3"
    local varVar="${pkgAccumVarVars[hostOffset + 1]}"
    local varRef="${varVar}[$((targetOffset - hostOffset))]"
    local var="${!varRef}"
    local -n list="$var"
    local seen
    for seen in ${list+"${list[@]}"}; do
        [[ $seen == "$pkg" ]] && return 0
    done
    list+=("$pkg")
    if [[ ! -e $pkg ]]; then
        echo "build input $pkg does not exist" >&2
        exit 1
    fi
    local next
    if [[ -f $pkg/nix-support/propagated-build-inputs ]]; then
        for next in $(<"$pkg/nix-support/propagated-build-inputs"); do
            findInputs "$next" "$hostOffset" "$targetOffset"
        done
    fi
}

activatePackage() {
    local pkg="$1"
    local -r hostOffset="$2" targetOffset="$3"
    if [[ -z ${strictDeps-} || $hostOffset -le -1 ]]; then
        addToSearchPath PATH "$pkg/bin"
    fi
    if [[ -f $pkg/nix-support/setup-hook ]]; then
        # shellcheck disable=SC1091
        source "$pkg/nix-support/setup-hook"
    fi
}

_activatePkgs() {
    local hostOffset targetOffset pkg
    for hostOffset in -1 0 1; do
        local pkgsVar="${pkgAccumVarVars[hostOffset + 1]}"
        for targetOffset in -1 0 1; do
            ((hostOffset <= targetOffset)) || continue
            local pkgsRef="${pkgsVar}[$targetOffset - $hostOffset]"
            local pkgsSlice="${!pkgsRef}[@]"
            for pkg in ${!pkgsSlice+"${!pkgsSlice}"}; do
                activatePackage "$pkg" "$hostOffset" "$targetOffset"
            done
        done
    done
}

# Without strictDeps every env hook list sees every package, once per list.
_addToEnv() {
    local depHostOffset depTargetOffset pkg
    for depHostOffset in -1 0 1; do
        local hookVar="${pkgHookVarVars[depHostOffset + 1]}"
        local pkgsVar="${pkgAccumVarVars[depHostOffset + 1]}"
        for depTargetOffset in -1 0 1; do
            ((depHostOffset <= depTargetOffset)) || continue
            local hookRef="${hookVar}[$depTargetOffset - $depHostOffset]"
            if [[ -z ${strictDeps-} ]]; then
                local visitedPkgs=""
                for pkg in \
                    ${pkgsBuildBuild+"${pkgsBuildBuild[@]}"} \
                    ${pkgsBuildHost+"${pkgsBuildHost[@]}"} \
                    ${pkgsBuildTarget+"${pkgsBuildTarget[@]}"} \
                    ${pkgsHostHost+"${pkgsHostHost[@]}"} \
                    ${pkgsHostTarget+"${pkgsHostTarget[@]}"} \
                    ${pkgsTargetTarget+"${pkgsTargetTarget[@]}"}; do
                    if [[ $visitedPkgs == *"$pkg"* ]]; then
                        continue
                    fi
                    runHook "${!hookRef}" "$pkg"
                    visitedPkgs+=" $pkg"
                done
            else
                local pkgsRef="${pkgsVar}[$depTargetOffset - $depHostOffset]"
                local pkgsSlice="${!pkgsRef}[@]"
                for pkg in ${!pkgsSlice+"${!pkgsSlice}"}; do
                    runHook "${!hookRef}" "$pkg"
                done
            fi
        done
    done
}

# Store paths hold no spaces, so, as in setup.sh, both the string and the
# array form are split on whitespace. The stdenv's own inputs come after the
# derivation's.
: "${nativeBuildInputs=}" "${buildInputs=}" "${defaultNativeBuildInputs=}"
# shellcheck disable=SC2068
for _pkg in ${nativeBuildInputs[@]}; do
    findInputs "$_pkg" -1 0
done
# shellcheck disable=SC2068
for _pkg in ${buildInputs[@]}; do
    findInputs "$_pkg" 0 1
done
# shellcheck disable=SC2068
for _pkg in ${defaultNativeBuildInputs[@]}; do
    findInputs "$_pkg" -1 0
done
unset _pkg
_activatePkgs
_addToEnv

# isELF FILE: whether FILE starts with the ELF magic, as setup.sh decides.
isELF() {
    local magic
    [[ -f $1 ]] || return 1
    LC_ALL=C read -r -n 4 -d '' magic <"$1" || true
    [[ $magic == $'\x7fELF' ]]
}

# recordPropagatedDependencies: propagatedBuildInputs go to
# $out/nix-support/propagated-build-inputs, where findInputs of a dependent
# build follows them (setup.sh writes them to the dev output, which is out
# when there is no dev).
recordPropagatedDependencies() {
    local -a deps=()
    concatTo deps propagatedBuildInputs
    ((${#deps[@]} > 0)) || return 0
    local dest=${out:?recordPropagatedDependencies: the derivation has no out output}
    mkdir -p "$dest/nix-support"
    printf '%s ' "${deps[@]}" >"$dest/nix-support/propagated-build-inputs"
}

fixupPhase() {
    local output
    for output in $(getAllOutputNames); do
        if [[ -e ${!output} ]]; then chmod -R u+w,u-s,g-s "${!output}"; fi
    done
    runHook preFixup
    for output in $(getAllOutputNames); do
        prefix="${!output}" runHook fixupOutput
    done
    recordPropagatedDependencies
    runHook postFixup
}

# genericBuild, reduced to buildCommand (runCommand's derivations: nothing
# else runs), or prePhases, configurePhase and buildPhase (only when set:
# this stdenv has no default for them), installPhase and fixupPhase. A phase
# set as a variable is evaluated, else the function of that name runs.
genericBuild() {
    if [[ -n ${buildCommand-} ]]; then
        eval "$buildCommand"
        return
    fi
    local phase
    # shellcheck disable=SC2068
    for phase in ${prePhases[@]-} configurePhase buildPhase installPhase fixupPhase; do
        if [[ $phase == fixupPhase && -n ${dontFixup-} ]]; then
            continue
        fi
        if [[ ($phase == configurePhase || $phase == buildPhase) && -z ${!phase:-} ]]; then
            continue
        fi
        echo "Running phase: $phase"
        if [[ -n ${!phase:-} ]]; then
            eval "${!phase}"
        else
            "$phase"
        fi
    done
}

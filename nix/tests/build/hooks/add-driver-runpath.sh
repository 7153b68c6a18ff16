# shellcheck shell=bash
#
# Stand-in for nixpkgs' addDriverRunpath setup hook: addDriverRunpath FILE
# puts the driver link (@driverLink@/lib) first in FILE's RUNPATH.

addDriverRunpath() {
    local runpath
    runpath=$(patchelf --print-rpath "$1")
    patchelf --set-rpath "@driverLink@/lib${runpath:+:$runpath}" "$1"
}

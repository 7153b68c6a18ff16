# shellcheck shell=bash
#
# Stand-in for nixpkgs' autoAddDriverRunpath, registered as it registers
# itself; addDriverRunpath and autoFixElfFiles come from the hooks it
# propagates. When it runs, every dynamic ELF file gets the driver link
# prepended, with patchelf.
postFixupHooks+=("autoFixElfFiles addDriverRunpath")

# shellcheck shell=bash
#
# Stand-in for the bintools wrapper's setup hook: what autoPatchelfHook and
# cudapatch read is $NIX_BINTOOLS/nix-support/{dynamic-linker,orig-libc}.
# (nixpkgs picks the variable's suffix from the target offset; this package
# set only has native builds.)
export NIX_BINTOOLS=@out@

# shellcheck shell=bash
#
# $stdenv/setup of the package set in nix/tests/build: what
# pkgs/stdenv/generic/setup.sh is to nixpkgs. The input handling, phases and
# hooks are hooks/test/stdenv.sh (copied next to this file as stdenv.sh), so
# the Nix builds and the bash harness share one re-creation of stdenv. This
# file adds what a real builder needs around it: the host's tools as the
# bootstrap tools (builds run with sandbox = false), after every input's
# bin/ as in nixpkgs.
#
# @hostPath@ is substituted when the stdenv is built.

# Inputs' bin/ directories are appended to PATH while stdenv.sh activates
# them; an empty PATH would mean the current directory.
# shellcheck disable=SC2123 # on purpose: no command is looked up here.
PATH=/path-not-set
# shellcheck disable=SC1091
source "${BASH_SOURCE[0]%/*}/stdenv.sh"
PATH=${PATH#/path-not-set}
PATH=${PATH#:}
export PATH="${PATH:+$PATH:}@hostPath@"

# What `go test ./...` needs: Go, a C toolchain, binutils (readelf, gold),
# lld, mold and elfutils for the fixture matrix, patchelf to compare against,
# qemu-user for the foreign-architecture fixtures, shellcheck for the hook,
# and nix-instantiate for the .nix tests. The Debian cross compilers that
# testdata/gen.sh calls by their Debian names are not provided here.
{ pkgs }:
pkgs.mkShell {
  packages = with pkgs; [
    (pkgs.go_1_26 or go)
    gcc
    binutils
    lld
    mold
    elfutils
    qemu
    patchelf
    file
    shellcheck
    nix
    python3
  ];
  shellHook = ''
    unset LD_LIBRARY_PATH
  '';
}

# cudapatch, the program. Built from the Go sources only (.go, and the .s
# of the CPUID reader), so editing nix/ or
# the docs does not rebuild it.
{
  lib,
  stdenv,
  buildGoModule,
  installShellFiles,
  version ? "0.1.0-dev",
}:
buildGoModule {
  pname = "cudapatch";
  inherit version;

  # The Go sources and their assembly (.s: rpath/ldso/internal/x86isa).
  src = lib.fileset.toSource {
    root = ../.;
    fileset = lib.fileset.fileFilter (
      file: file.hasExt "go" || file.hasExt "s" || file.name == "go.mod" || file.name == "go.sum"
    ) ../.;
  };

  # NAR hash of `go mod vendor` (Go 1.26). The Nix tier (hooks'
  # TestNixBuild) builds this package through the overlay, its vendor
  # directory as a fixed-output derivation with this hash, so a stale hash
  # fails CI; paste the "got:" hash of the failure.
  vendorHash = "sha256-vM7oCJbVrGQyWwoHf+jrb/D73xbBI421cSvPEZOIFWs=";

  subPackages = [ "cmd/cudapatch" ];
  env.CGO_ENABLED = 0;
  ldflags = [
    "-s"
    "-w"
    "-X main.version=${version}"
  ];

  # The shell completions and the man page are written by the binary just
  # built, from its command definitions, so they always match it. A cross
  # build cannot run it and goes without.
  nativeBuildInputs = [ installShellFiles ];
  postInstall = lib.optionalString (stdenv.buildPlatform.canExecute stdenv.hostPlatform) ''
    installShellCompletion --cmd cudapatch \
      --bash <("$out/bin/cudapatch" completion bash) \
      --zsh <("$out/bin/cudapatch" completion zsh) \
      --fish <("$out/bin/cudapatch" completion fish)
    "$out/bin/cudapatch" man > cudapatch.1
    installManPage cudapatch.1
  '';

  # The test suite builds its fixtures with Debian cross compilers and runs
  # them under qemu-user; CI runs it. The flake's checks cover the hook.
  doCheck = false;

  meta = {
    description = "Set RUNPATH, interpreter, driver and cuda_compat entries of prebuilt ELF files in one pass";
    longDescription = ''
      cudapatch replaces autoPatchelfHook, autoAddDriverRunpath,
      autoAddCudaCompatRunpath and removeStubsFromRunpathHook: it resolves
      every DT_NEEDED against the outputs and the search directories and
      writes each file once.
    '';
    mainProgram = "cudapatch";
    platforms = lib.platforms.linux;
  };
}

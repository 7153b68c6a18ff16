# Adds cudapatch and cudaPatchelfHook. go.mod asks for Go 1.26.
final: prev: {
  cudapatch = final.callPackage ./package.nix {
    buildGoModule = final.buildGo126Module or final.buildGoModule;
  };
  cudaPatchelfHook = final.callPackage ./hook.nix { };
}

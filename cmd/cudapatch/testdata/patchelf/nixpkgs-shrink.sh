# What nixpkgs' fixup phase does to every ELF file of an output: shrink
# the RPATH to the directories that hold a needed library, under the store.
cd "$FIXTURE"
NIX_STORE=$FIXTURE
patchelf --set-rpath "/build/tmp/lib:$FIXTURE/lib:/usr/lib/x86_64-linux-gnu:\$ORIGIN/../lib:$FIXTURE/bin" bin/main
patchelf --set-rpath "$FIXTURE/lib:/nonexistent" lib/libfoo.so
echo "not an ELF file" > lib/README
isELF() { [ "$(head -c4 "$1")" = $'\x7fELF' ]; }
find . -type f | sort | while IFS= read -r f; do
	isELF "$f" || continue
	echo "shrinking $f"
	patchelf --shrink-rpath --allowed-rpath-prefixes "$NIX_STORE" "$f" || echo "failed: $?"
	echo "  now '$(patchelf --print-rpath "$f")'"
done
# A second pass changes nothing.
patchelf --shrink-rpath --allowed-rpath-prefixes "$NIX_STORE" bin/main lib/libfoo.so
patchelf --print-rpath bin/main lib/libfoo.so
./bin/main

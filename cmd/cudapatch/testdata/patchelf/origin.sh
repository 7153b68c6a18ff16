# Relocatable trees: $ORIGIN-relative RUNPATHs on several files in one
# call, then the tree is moved and still runs.
cd "$FIXTURE"
patchelf --set-rpath '$ORIGIN/../lib' bin/main
patchelf --set-rpath '$ORIGIN' lib/libfoo.so lib/libbar.so
patchelf --print-rpath bin/main lib/libfoo.so lib/libbar.so
mv "$FIXTURE" "$FIXTURE.moved"
"$FIXTURE.moved/bin/main"
mv "$FIXTURE.moved" "$FIXTURE"

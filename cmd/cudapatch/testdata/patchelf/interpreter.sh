# What autoPatchelfHook and friends do to an executable: read the old
# interpreter, set a new one and a RUNPATH in the same call.
cd "$FIXTURE"
old=$(patchelf --print-interpreter bin/main)
echo "interpreter: $old"
patchelf --set-interpreter "/lib/../$old" --set-rpath "$FIXTURE/lib" bin/main
patchelf --set-rpath "$FIXTURE/lib" lib/libfoo.so
patchelf --print-interpreter --print-rpath bin/main
./bin/main

# The calls auditwheel's repair makes (auditwheel/patcher.py): read the
# RPATH, replace it with an $ORIGIN-relative DT_RPATH, rename a grafted
# library and give it a new SONAME. Runs in a copy of a fixture variant.
cd "$FIXTURE"
mkdir -p pkg/.libs
cp lib/libbar.so pkg/.libs/libbar-1a2b3c.so
patchelf --set-soname libbar-1a2b3c.so pkg/.libs/libbar-1a2b3c.so
cp lib/libfoo.so pkg/.libs/libfoo.so
cp bin/main pkg/main
for f in pkg/main pkg/.libs/libfoo.so; do
	echo "rpath of $f: '$(patchelf --print-rpath "$f")'"
	patchelf --remove-rpath "$f"
done
patchelf --replace-needed libbar.so libbar-1a2b3c.so pkg/.libs/libfoo.so
patchelf --force-rpath --set-rpath '$ORIGIN/.libs' pkg/main
patchelf --force-rpath --set-rpath '$ORIGIN' pkg/.libs/libfoo.so
for f in pkg/main pkg/.libs/*.so; do
	echo "$f: rpath '$(patchelf --print-rpath "$f")' soname '$(patchelf --print-soname "$f")'"
	patchelf --print-needed "$f"
done
readelf -d pkg/main | grep -c RPATH
./pkg/main

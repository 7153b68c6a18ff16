# Failing calls: scripts test the exit code and show the message.
cd "$FIXTURE"
echo "just text, long enough to be more than an ELF header's fifty-two bytes" > notelf
try() { if out=$(patchelf "$@" 2>&1); then echo "ok: $out"; else echo "exit $?: $out"; fi; }
try --print-rpath nonexistent
try --print-rpath notelf
try --print-rpath lib
try --set-rpath
try --replace-needed a
try --print-interpreter lib/libfoo.so
try --set-interpreter /x lib/libfoo.so
try --print-rpath
try --set-rpath /x --add-rpath /y bin/main
try --output out bin/main lib/libfoo.so
try --page-size -4096 bin/main
try --unknown-option bin/main

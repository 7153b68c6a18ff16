package ldcache_test

import (
	"bytes"
	"testing"

	"github.com/cudapatch/cudapatch/rpath/ldcache"
)

// FuzzDecode: Decode never panics, and what it accepts encodes back to the
// bytes it was read from (the NUL padding after the terminator aside).
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		"\x00", "\x00\x00",
		"libfoo.so\x00=/s/a/libfoo.so\x00\x00",
		"libbar.so.1\x00?$ORIGIN/../lib:=/s/b/libbar.so.1\x00libcuda.so.1\x00=/c/libcuda.so.1:?/run/opengl-driver/lib\x00\x00",
		"libfoo.so\x00?:=/a/libfoo.so\x00\x00",
		"b\x00=/b\x00a\x00=/a\x00\x00",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, desc []byte) {
		c, err := ldcache.Decode(desc)
		if err != nil {
			return
		}
		enc := c.Encode()
		if !bytes.HasPrefix(desc, enc) {
			t.Fatalf("Decode(%q) = %v, which encodes to %q", desc, c, enc)
		}
		if _, err := ldcache.Decode(enc); err != nil {
			t.Fatalf("re-decoding %q: %v", enc, err)
		}
	})
}

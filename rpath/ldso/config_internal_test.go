package ldso

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestGlibcRelease reads the release from the text a loader's --version
// prints, as distributions and development snapshots word it.
func TestGlibcRelease(t *testing.T) {
	tests := []struct {
		text         string
		major, minor int
		ok           bool
	}{
		{"\x00ld.so (Debian GLIBC 2.36-9+deb12u14) stable release version 2.36.\n", 2, 36, true},
		{"ld.so (Ubuntu GLIBC 2.35-0ubuntu3.8) stable release version 2.35.", 2, 35, true},
		{"ld.so (GNU libc) development release version 2.37.9000.", 2, 37, true},
		{"ld.so (GNU libc) stable release version 2.40.", 2, 40, true},
		{"stable release version 2.", 0, 0, false},
		{"stable release version x.36.", 0, 0, false},
		{"release version 2.36.", 0, 0, false}, // not after a word
		{"no version here", 0, 0, false},
		{"", 0, 0, false},
	}
	for _, tt := range tests {
		major, minor, ok := glibcRelease([]byte(tt.text))
		assert.Equal(t, []any{tt.major, tt.minor, tt.ok}, []any{major, minor, ok}, "%q", tt.text)
	}
}

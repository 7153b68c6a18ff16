package printable_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/cudapatch/cudapatch/internal/printable"
)

func TestString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/nix/store/abc-cuda/lib:$ORIGIN", "/nix/store/abc-cuda/lib:$ORIGIN"},
		{"section 7 \nrela.plt", `section 7 \nrela.plt`},
		{"lib\x1b[31mred.so", `lib\x1b[31mred.so`},
		{"tab\there, nul\x00, cr\r, del\x7f", `tab\there, nul\x00, cr\r, del\x7f`},
		{"bad \xff\xfe utf-8", `bad \xff\xfe utf-8`},
		{"valid \uFFFD stays", "valid \uFFFD stays"},
		{`quoted "libfoo.so", a \ and ü ✓`, `quoted "libfoo.so", a \ and ü ✓`},
		{"", ""},
	} {
		assert.Equal(t, tc.want, printable.String(tc.in), "%q", tc.in)
	}
}

func TestFprintf(t *testing.T) {
	var b strings.Builder
	_, err := printable.Fprintf(&b, "%s: %v (%d)\n", "a\nb", errors.New("c\x1bd"), 3)
	assert.NoError(t, err)
	assert.Equal(t, "a\\nb: c\\x1bd (3)\n", b.String())
}

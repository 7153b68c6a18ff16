package elfedit

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestCommonText: the text namesAt scans for is the longest every name
// holds; with none shared (or an empty name) there is nothing to scan for.
func TestCommonText(t *testing.T) {
	tests := []struct {
		names []string
		want  string
	}{
		{[]string{"dlopen", "dlmopen"}, "open"},
		{[]string{"dlopen", "dlmopen", "g_module_open", "g_module_open_full", "lt_dlopen", "lt_dlopenext", "lt_dlopenadvise"}, "open"},
		{[]string{"dlopen"}, "dlopen"},
		{[]string{"lt_dlopen", "lt_dlopenext"}, "lt_dlopen"},
		{[]string{"foo", "bar"}, ""},
		{[]string{"dlopen", ""}, ""},
		{nil, ""},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, commonText(tt.names), "%q", tt.names)
	}
}

package policy

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestUnversioned(t *testing.T) {
	for _, c := range []struct{ name, want string }{
		{"libcudnn_graph.so", "libcudnn_graph.so."},
		{"libx.so", "libx.so."},
		{"libcudnn_graph.so.9", ""}, // has a version: resolved exactly or not at all
		{"libfoo.so.1.2", ""},
		{"libfoo.so.%d", ""},
		{"/opt/libfoo.so", ""},
		{"foo.so", ""},
		{"", ""},
	} {
		require.Equal(t, c.want, Unversioned(c.name), c.name)
	}
}

func TestIsVersionOf(t *testing.T) {
	for _, c := range []struct {
		file, prefix string
		want         bool
	}{
		{"libcudnn_graph.so.9", "libcudnn_graph.so.", true},
		{"libcudnn_graph.so.9.19.0", "libcudnn_graph.so.", true},
		{"libcudnn_graph.so.", "libcudnn_graph.so.", false},   // no version
		{"libcudnn_graph.so.9.", "libcudnn_graph.so.", false}, // an empty part
		{"libcudnn_graph.so.9a", "libcudnn_graph.so.", false},
		{"libcudnn_graph.so.9.bak", "libcudnn_graph.so.", false},
		{"libcudnn_graph.so", "libcudnn_graph.so.", false},
		{"libcudnn_graph_x.so.9", "libcudnn_graph.so.", false},
		{"libcudnn.so.9", "libcudnn_graph.so.", false},
	} {
		require.Equal(t, c.want, IsVersionOf(c.file, c.prefix), "%s %s", c.file, c.prefix)
	}
}

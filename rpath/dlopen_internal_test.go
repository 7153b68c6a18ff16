package rpath

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
		require.Equal(t, c.want, unversioned(c.name), c.name)
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
		require.Equal(t, c.want, isVersionOf(c.file, c.prefix), "%s %s", c.file, c.prefix)
	}
}

// TestClosureWhere: the callers of a holder are what its DT_NEEDED
// closure reaches and keep accepts, itself excluded, through cycles.
func TestClosureWhere(t *testing.T) {
	// 0 → 1 → 2 → 0 (a cycle), 1 → 3; 4 alone; 5 → 4.
	adj := [][]int{{1}, {2, 3}, {0}, nil, nil, {4}}
	all := func(int) bool { return true }
	odd := func(j int) bool { return j%2 == 1 }
	for _, c := range []struct {
		from int
		keep func(int) bool
		want []int
	}{
		{0, all, []int{1, 2, 3}},
		{0, odd, []int{1, 3}},
		{2, all, []int{0, 1, 3}},
		{3, all, nil},
		{4, all, nil},
		{5, all, []int{4}},
		{5, odd, nil},
	} {
		require.Equal(t, c.want, closureWhere(adj, c.from, c.keep), "from %d", c.from)
	}
}

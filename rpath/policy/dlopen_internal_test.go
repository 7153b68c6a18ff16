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

// TestIsSonamePrefix: the start of the names a caller builds at run
// time, and the strings that would match libraries it never asks for.
func TestIsSonamePrefix(t *testing.T) {
	for _, c := range []struct {
		s    string
		want bool
	}{
		{"libnvrtc.so.", true},  // torch's lazy NVRTC: + the CUDA major
		{"libnvrtc-", true},     // + "<hash>.so.13" (pip's NVRTC)
		{"libcudnn_", true},     // + "graph.so.9"
		{"libGLX_", true},       // libglvnd: + the vendor + ".so.0"
		{"libz.so.", true},      // ".so." alone is specific enough
		{"libstdc++.so.", true}, //
		{"lib", false},          // every library
		{"lib_", false},         // no stem
		{"lib-", false},         //
		{"libc_", false},        // a stem too short: libc_*, libcrypto_*...
		{"libc-", false},        //
		{"libgl_", false},       //
		{"libc.", false},        // '.' only as ".so."
		{"libfoo.", false},      //
		{"libfoo.so", false},    // a whole name (IsSonameShaped)
		{"libfoo.so.1", false},  //
		{"libfoo.so.1.", false}, // one version part, then another: not a prefix form
		{"libfoo.so..", false},  //
		{"lib.so.", false},      // no stem
		{"libfoo__", false},     // the stem ends at a separator
		{"libfoo-_", false},     //
		{"lib123_", false},      // no letter
		{"libfoo.bar_", false},  // a '.' in the stem
		{"libfoo bar_", false},  // a space: a sentence
		{"libfoo%s_", false},    // a format
		{"/usr/lib/libfoo_", false},
		{"library-", true}, // the shape; it matches only a real "library-*.so" offered
		{"", false},
	} {
		require.Equal(t, c.want, IsSonamePrefix([]byte(c.s)), "%q", c.s)
	}
}

func TestMatchesPrefix(t *testing.T) {
	for _, c := range []struct {
		file, prefix string
		want         bool
	}{
		{"libnvrtc.so.13", "libnvrtc.so.", true},
		{"libnvrtc.so.13.0.88", "libnvrtc.so.", true},
		{"libnvrtc.so", "libnvrtc.so.", false},
		{"libnvrtc.so.13.bak", "libnvrtc.so.", false},
		{"libnvrtc-builtins.so.13", "libnvrtc.so.", false},
		{"libnvrtc-builtins.so.13.0", "libnvrtc-", true},
		{"libnvrtc-a1b2c3.so.13", "libnvrtc-", true},
		{"libnvrtc.so.13", "libnvrtc-", false},
		{"libcudnn_graph.so.9", "libcudnn_", true},
		{"libcudnn_graph.so", "libcudnn_", true},
		{"libcudnn.so.9", "libcudnn_", false},
		{"libcudnnx_graph.so.9", "libcudnn_", false},
		{"libcudnn_graph.so.9.txt", "libcudnn_", false}, // no library name
		{"libcudnn_", "libcudnn_", false},
	} {
		require.Equal(t, c.want, MatchesPrefix(c.file, c.prefix), "%s %s", c.file, c.prefix)
	}
}

// TestServes: what of a file's own strings each library of a directory
// answers, of every kind, and nothing for a library only another file
// names.
func TestServes(t *testing.T) {
	d := Discovered{Names: []string{"libplugin.so.1", "libcudnn_graph.so"}, Prefixes: []string{"libnvrtc.so.", "libnvrtc-"}}
	libs := []string{"libfoo.so.1", "libbar.so.2", "libplugin.so.1", "libcudnn_graph.so.9", "libnvrtc.so.13", "libnvrtc-builtins.so.13.0", "libother.so.1", "libnvrtc.so"}
	got := Serves("/f", []string{"libfoo.so.1"}, [][]string{{"libbaz.so", "libbar.so.2"}}, d, libs)
	var s []string
	for _, x := range got {
		require.Equal(t, "/f", x.File)
		s = append(s, x.Library+" "+x.Kind+" "+x.String)
	}
	require.Equal(t, []string{
		"libfoo.so.1 needed libfoo.so.1",
		"libbar.so.2 note libbar.so.2",
		"libplugin.so.1 whole libplugin.so.1",
		"libcudnn_graph.so.9 whole libcudnn_graph.so",
		"libnvrtc.so.13 prefix libnvrtc.so.",
		"libnvrtc-builtins.so.13.0 prefix libnvrtc-",
	}, s)
}

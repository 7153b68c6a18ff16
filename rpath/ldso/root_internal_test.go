package ldso

import (
	"os"
	"path"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCanonicalIsEvalSymlinks: canonical, which takes a path whose last
// component is no link as its directory's canonical path and that name,
// gives what filepath.EvalSymlinks gives (or the cleaned path where that
// fails), with and without the identity cache, for links at every level,
// a link as the last component, ".." after a link, relative paths and
// paths that do not exist.
func TestCanonicalIsEvalSymlinks(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	p := func(s string) string { return filepath.Join(dir, s) }
	require.NoError(t, os.MkdirAll(p("real/a/b"), 0o755))
	require.NoError(t, os.MkdirAll(p("other"), 0o755))
	require.NoError(t, os.WriteFile(p("real/a/b/file"), nil, 0o644))
	for link, target := range map[string]string{
		"link":                 "real",
		"real/a/up":            "../../other",
		"other/deep":           p("link/a"),
		"real/a/b/filelink":    "file",
		"real/a/b/chain":       "filelink",
		"real/a/b/dangling":    "nowhere",
		"real/a/b/loop":        "loop",
		"real/a/b/dirlink":     ".",
		"other/abs-file-link":  p("real/a/b/file"),
		"other/link-to-a-link": "deep",
	} {
		require.NoError(t, os.Symlink(target, p(link)))
	}
	paths := []string{
		"/", dir, p("real/a/b/file"), p("link/a/b/file"), p("other/deep/b/file"),
		p("real/a/b/filelink"), p("real/a/b/chain"), p("real/a/b/dangling"), p("real/a/b/loop"),
		p("real/a/b/dirlink/dirlink/file"), p("other/abs-file-link"), p("other/link-to-a-link/b/chain"),
		dir + "/link/a/up/../b/file", dir + "/real/a/up/..", dir + "/link//a/./b/file",
		p("missing/file"), p("real/a/b/file/below"), "real/a/b/file", "link/a/b/../b/file", ".",
	}
	for _, ids := range []*IdentityCache{nil, {}} {
		f := &fsys{wd: dir, ids: ids}
		for range 2 { // the second time from the cache
			for _, q := range paths {
				want, err := filepath.EvalSymlinks(f.abs(q))
				if err != nil {
					want = path.Clean(f.abs(q))
				}
				require.Equal(t, want, f.canonical(q), "%s (cache %v)", q, ids != nil)
			}
		}
	}
}

package ldcache_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/ldcache"
)

// TestDynamicToken holds glibc's is_dst: $NAME ended by anything that
// cannot continue an identifier, or ${NAME}; ORIGIN, PLATFORM and LIB only.
func TestDynamicToken(t *testing.T) {
	for s, want := range map[string]string{
		"/a/$LIB":          "$LIB",
		"/a/$LIB/b":        "$LIB",
		"/a/$LIB-b":        "$LIB",
		"/a/$LIB.d":        "$LIB",
		"/a/${LIB}x":       "${LIB}",
		"/a/$ORIGIN":       "$ORIGIN",
		"$ORIGIN/../lib":   "$ORIGIN",
		"/a/${PLATFORM}":   "${PLATFORM}",
		"/a/$$PLATFORM":    "$PLATFORM",
		"/a/$LIBx":         "",
		"/a/$LIB_":         "",
		"/a/$LIB9":         "",
		"/a/${LIB":         "",
		"/a/${ LIB}":       "",
		"/a/$lib":          "",
		"/a/$FOO/$LIBRARY": "",
		"/a/$":             "",
		"/a/$FOO/${LIB}":   "${LIB}",
	} {
		require.Equal(t, want, ldcache.DynamicToken(s), s)
	}
	require.Equal(t, "the loader splits entries at ':'", ldcache.Unnameable("/a/x:."))
	require.Equal(t, `the loader expands "$LIB" in it`, ldcache.Unnameable("/a/$LIB"))
	require.Empty(t, ldcache.Unnameable("/a/$LIBx"))
}

// TestMisreadDirs: the directories a written search path seems to name
// and the loader reads otherwise, where they exist.
func TestMisreadDirs(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"x:.", "a:b:c", "$LIB", "bin/$PLATFORM", "lib"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	isDir := func(d string) bool {
		if r := ldcache.OriginRest(d); r != d {
			d = filepath.Join(root, "bin") + r
		}
		st, err := os.Stat(d)
		return err == nil && st.IsDir()
	}
	path := root + "/x:.:" + root + "/a:b:c:" + root + "/$LIB:$ORIGIN/$PLATFORM:" + root + "/lib:$ORIGIN/../$LIB/nothing"
	got := ldcache.MisreadDirs(path, isDir)
	require.Equal(t, []ldcache.MisreadDir{
		{Dir: root + "/x:.", Entries: []string{root + "/x", "."}, Why: "the loader splits entries at ':'"},
		{Dir: root + "/a:b:c", Entries: []string{root + "/a", "b", "c"}, Why: "the loader splits entries at ':'"},
		{Dir: root + "/$LIB", Entries: []string{root + "/$LIB"}, Why: `the loader expands "$LIB" in it`},
		{Dir: "$ORIGIN/$PLATFORM", Entries: []string{"$ORIGIN/$PLATFORM"}, Why: `the loader expands "$PLATFORM" in it`},
	}, got)
}

// TestBuildNameWithColon: a needed name with a ':' gets "?DIR" elements,
// never an "=" element the loader would cut at the ':'.
func TestBuildNameWithColon(t *testing.T) {
	root := t.TempDir()
	for _, f := range []string{"A/libx:y.so", "A/libz.so"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, filepath.Dir(f)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, f), nil, 0o644))
	}
	c, _ := ldcache.Build([]string{"libx:y.so", "libz.so"}, root+"/A", ldcache.OS{}, ldcache.Rules{})
	e, ok := c.Lookup("libx:y.so")
	require.True(t, ok)
	require.Equal(t, "?"+root+"/A", e.PathList())
	e, ok = c.Lookup("libz.so")
	require.True(t, ok)
	require.Equal(t, "="+root+"/A/libz.so", e.PathList())
}

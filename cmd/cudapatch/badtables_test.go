package main

import (
	"debug/elf"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCorruptHashDependencyFails: a build input whose .gnu.hash claims
// 2^32-1 buckets (ld.so crashes binding through it; TestCorruptHashHeader-
// IsLoadFatal in rpath/patch runs it) fails the main job under the
// default --symbols error in one line naming the library and the table,
// and nothing is written; under --symbols warn it is a warning.
func TestCorruptHashDependencyFails(t *testing.T) {
	c := newCLITree(t)
	c.place("out/bin/app", cExe("", "libdep.so"))
	c.place("deps/libdep.so", cLib("libdep.so"))
	dep, app := c.p("deps/libdep.so"), c.p("out/bin/app")
	ef, err := elf.Open(dep)
	require.NoError(t, err)
	sec := ef.Section(".gnu.hash")
	require.NotNil(t, sec)
	off := int64(sec.Offset)
	ef.Close()
	f, err := os.OpenFile(dep, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte{0xff, 0xff, 0xff, 0xff}, off) // nbuckets
	require.NoError(t, err)
	require.NoError(t, f.Close())
	before, err := os.ReadFile(app)
	require.NoError(t, err)

	_, stderr, code := runFixed(t, nil, "--search", c.p("deps"), c.p("out"))
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, "error: "+app+": fails-at-load: "+dep+": DT_GNU_HASH: 4294967295 buckets and 1 Bloom words run past the end of its segment: the loader reads it out of bounds\n")
	assert.Contains(t, stderr, "nothing written")
	after, err := os.ReadFile(app)
	require.NoError(t, err)
	assert.Equal(t, before, after)

	_, stderr, code = runFixed(t, nil, "--symbols", "warn", "--search", c.p("deps"), c.p("out"))
	assert.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "warning: "+app+": fails-at-load: "+dep+": DT_GNU_HASH: ")
}

package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUnnameableDirsAgree: on a tree whose library lies in a directory no
// RUNPATH entry can name, the main job refuses it, and lint and explain,
// on the RUNPATH the job wrote before (set here with patchelf), say the
// same: the directory, "no RUNPATH entry can name", and the loader's
// reason. Before, the job wrote it and exited 0, while lint and explain
// said only "not found" (or, for x:., a relative entry ".").
func TestUnnameableDirsAgree(t *testing.T) {
	for _, tc := range []struct{ dir, why string }{
		{"x:.", "the loader splits entries at ':'"},
		{"$LIB", `the loader expands "$LIB" in it`},
		{"${ORIGIN}", `the loader expands "${ORIGIN}" in it`},
	} {
		c := newCLITree(t)
		c.place("out/bin/app", cExe("", "libbar.so"))
		c.place("out/"+tc.dir+"/libbar.so", cLib("libbar.so"))
		dir, app := c.p("out/"+tc.dir), c.p("out/bin/app")

		_, stderr, code := runFixed(t, nil, "--driver-link-for", "none", c.p("out"))
		assert.Equal(t, 1, code, stderr) // the audit's exit, as for a build-directory entry
		assert.Contains(t, stderr, "error: "+app+": RUNPATH audit failed: libbar.so is in "+dir+", which no RUNPATH entry can name: "+tc.why)
		assert.Contains(t, stderr, "nothing written")

		_, stderr, code = runFixed(t, nil, "patchelf", "--set-rpath", dir, app)
		require.Equal(t, 0, code, stderr)
		stdout, _, code := runFixed(t, nil, "lint", c.p("out"))
		assert.Equal(t, 1, code)
		if strings.Contains(tc.dir, ":") {
			assert.Contains(t, stdout, "CP025 misread-entry: DT_RUNPATH entries "+c.p("out/x")+" and . spell the directory "+dir+", which no RUNPATH entry can name: "+tc.why, stdout)
		} else {
			assert.Contains(t, stdout, "CP025 misread-entry: DT_RUNPATH entry "+dir+" names a directory that exists, but no RUNPATH entry can name it: "+tc.why, stdout)
		}
		stdout, _, code = runFixed(t, nil, "explain", app)
		assert.Equal(t, 1, code)
		assert.Contains(t, stdout, "libbar.so => not found")
		assert.Contains(t, stdout, dir+"/libbar.so exists, but no RUNPATH entry can name "+dir+": "+tc.why, stdout)
	}
}

package layers_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/cudapatch/cudapatch"

// deps lists the non-test dependencies of a package, standard library
// included.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", module+"/"+pkg).CombinedOutput()
	require.NoError(t, err, "%s", out)
	var ds []string
	for _, l := range strings.Fields(string(out)) {
		if l != module+"/"+pkg {
			ds = append(ds, l)
		}
	}
	return ds
}

func TestLayers(t *testing.T) {
	tests := []struct {
		pkg     string
		allowed []string // non-standard imports allowed (prefixes)
	}{
		// Bytes: the standard library only (and the leaves below).
		{"rpath/elfedit", nil},
		{"rpath/fnmatch", nil},
		// Facts about an installed NVIDIA driver, read from files.
		{"rpath/nvdriver", nil},
		// The resolution-cache format and rules: no bytes of files, no policy.
		{"rpath/ldcache", []string{module + "/rpath/elfedit"}},
		// The loader simulation reads ELF through elfedit and nothing else,
		// and resolution-cache notes through ldcache.
		{"rpath/ldso", []string{module + "/rpath/elfedit", module + "/rpath/ldcache"}},
		// The symbol check binds over the loader simulation's closures and
		// reads its tables through elfedit.
		{"rpath/symcheck", []string{module + "/rpath/ldso", module + "/rpath/elfedit", module + "/rpath/ldcache"}},
		// Policy: the engine, fnmatch, and the loader simulation and symbol
		// check the main job runs over its decisions; no CLI, no terminal,
		// no progress bars.
		{"rpath", []string{module + "/rpath/elfedit", module + "/rpath/fnmatch", module + "/rpath/ldcache", module + "/rpath/ldso", module + "/rpath/symcheck"}},
		// The drop-in patchelf: its command line and messages, edits through
		// elfedit, and what it shares with the main job (shrink-rpath, the
		// resolution-cache rules) through rpath.
		{"rpath/patchelf", []string{module + "/rpath"}},
		// Lint builds on the policy and the loader simulation.
		{"rpath/lint", []string{module + "/rpath", "github.com/bmatcuk/doublestar/v4"}},
	}
	// Every layer may escape what files hold for its messages, and open
	// paths below a directory without following links: leaves with the
	// standard library only, and no knowledge of ELF or Nix.
	leaves := []string{module + "/internal/printable", module + "/internal/confine"}
	for _, tt := range tests {
		t.Run(tt.pkg, func(t *testing.T) {
			for _, d := range deps(t, tt.pkg) {
				ok := false
				for _, a := range append(leaves, tt.allowed...) {
					if d == a || strings.HasPrefix(d, a+"/") {
						ok = true
					}
				}
				require.True(t, ok, "%s must not import %s", tt.pkg, d)
			}
		})
	}
}

// TestLeaves: a leaf imports nothing of this module nor outside the
// standard library.
func TestLeaves(t *testing.T) {
	for _, pkg := range []string{"internal/printable", "internal/confine"} {
		require.Empty(t, deps(t, pkg), "%s is a leaf", pkg)
	}
}

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
	m := func(pkgs ...string) []string {
		var out []string
		for _, p := range pkgs {
			out = append(out, module+"/"+p)
		}
		return out
	}
	// The engine and what only reads: bytes and loader knowledge.
	engine := m("rpath/elfedit", "rpath/fnmatch")
	loader := append(m("rpath/ldcache", "rpath/ldso", "rpath/symcheck", "rpath/nvdriver"), engine...)
	tests := []struct {
		pkg     string
		allowed []string // non-standard imports allowed (prefixes)
	}{
		// Bytes: the standard library only (and the leaves below).
		{"rpath/elfedit", nil},
		{"rpath/fnmatch", nil},
		// Facts about an installed NVIDIA driver, read from files.
		{"rpath/nvdriver", nil},
		// The run-time compat-or-driver selector: generates and builds a
		// libcuda.so.1 from nvdriver's decision; no policy, no job.
		{"rpath/selector", m("rpath/nvdriver")},
		// The resolution-cache format and rules: no bytes of files, no policy.
		{"rpath/ldcache", m("rpath/elfedit")},
		// The loader simulation reads ELF through elfedit and nothing else,
		// resolution-cache notes through ldcache, and the CPU's x86-64
		// level through its own leaf.
		{"rpath/ldso", m("rpath/elfedit", "rpath/ldcache", "rpath/ldso/internal/x86isa")},
		// CPUID and glibc's level rules: the standard library only.
		{"rpath/ldso/internal/x86isa", nil},
		// The symbol check binds over the loader simulation's closures and
		// reads its tables through elfedit.
		{"rpath/symcheck", m("rpath/ldso", "rpath/elfedit", "rpath/ldcache")},
		// The shared policy: what the RUNPATH must be, which libraries are
		// the driver's, what is skipped; no CLI, no job, no writes.
		{"rpath/policy", m("rpath/elfedit", "rpath/fnmatch", "rpath/ldcache")},
		// The siblings above the policy: the main job, lint, doctor and the
		// drop-in patchelf. None imports another.
		{"rpath/patch", append(m("rpath/policy", "rpath/selector"), loader...)},
		{"rpath/lint", append(append(m("rpath/policy", "rpath/selector"), loader...), "github.com/bmatcuk/doublestar/v4")},
		{"rpath/doctor", append(m("rpath/policy", "rpath/selector"), loader...)},
		{"rpath/patchelf", append(m("rpath/policy", "rpath/ldcache"), engine...)},
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

// TestNoParentImports: no package imports the package of a folder above
// it, so the folders show the layers (a parent that imports its children
// and is imported by them does not). A test-helper package (doctortest,
// linttest) builds fixtures for its parent's tests, as net/http/httptest
// does for net/http: it may.
func TestNoParentImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"/...").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		if strings.HasSuffix(f[0], "test") {
			continue
		}
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, module) {
				require.False(t, strings.HasPrefix(f[0], imp+"/"), "%s imports its parent folder's package %s", f[0], imp)
			}
		}
	}
}

// TestCommandWiring: the command imports the siblings and the policy for
// their options, never the main job's helpers below them; the loader
// knowledge it shows (print, verify, explain) it imports directly.
func TestCommandWiring(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{join .Imports " "}}`, module+"/cmd/cudapatch").CombinedOutput()
	require.NoError(t, err, "%s", out)
	allowed := []string{"rpath/patchelf", "internal/printable", "rpath/patch", "rpath/lint", "rpath/doctor", "rpath/policy",
		"rpath/elfedit", "rpath/ldcache", "rpath/ldso", "rpath/symcheck", "rpath/nvdriver", "rpath/selector"}
	for _, imp := range strings.Fields(string(out)) {
		if p, ok := strings.CutPrefix(imp, module+"/"); ok {
			require.Contains(t, allowed, p, "cmd/cudapatch imports %s", imp)
		}
	}
}

// TestInternalIsBelow: internal/ holds the leaves every layer may use and
// the tests' own helpers, nothing that imports a layer (the drop-in
// patchelf, a sibling of the main job, lives in rpath/patchelf), so that
// no import from a layer into internal/ climbs back up.
func TestInternalIsBelow(t *testing.T) {
	out, err := exec.Command("go", "list", module+"/internal/...").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, pkg := range strings.Fields(string(out)) {
		p := strings.TrimPrefix(pkg, module+"/")
		for _, d := range deps(t, p) {
			if strings.HasPrefix(d, module+"/") {
				require.True(t, strings.HasPrefix(d, module+"/internal/"), "%s imports %s, a layer above internal/", p, d)
			}
		}
	}
}

// TestLeaves: a leaf imports nothing of this module nor outside the
// standard library.
func TestLeaves(t *testing.T) {
	for _, pkg := range []string{"internal/printable", "internal/confine"} {
		require.Empty(t, deps(t, pkg), "%s is a leaf", pkg)
	}
}

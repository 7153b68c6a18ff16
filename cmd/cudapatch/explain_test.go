package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/ldso"
	"github.com/cudapatch/cudapatch/rpath/lint/linttest"
)

// hostLoader is the x86-64 loader the agreement tests take as the oracle.
const hostLoader = "/lib64/ld-linux-x86-64.so.2"

var listLine = regexp.MustCompile(`^\t(\S+)(?: => (.*?))?(?: \(0x[0-9a-f]+\))?$`)

// ldList runs the real loader in trace mode and returns its (name, path)
// pairs in load order, without the vdso and the interpreter. `ld.so --list`
// stops at the first missing library, so when it fails the loader is run
// with LD_TRACE_LOADED_OBJECTS=1, as ldd does. ok is false when the loader
// refuses the file both ways; list is true when --list accepted it.
func ldList(t testing.TB, exe string, env ...string) (pairs [][2]string, list, ok bool) {
	return ldListBy(t, func(args, env []string) ([]byte, error) { return runLoader(t, args, env) }, exe, env...)
}

// ldListBy is ldList with the loader run by run, given the loader's
// arguments and the environment.
func ldListBy(t testing.TB, run func(args, env []string) ([]byte, error), exe string, env ...string) (pairs [][2]string, list, ok bool) {
	out, err := run([]string{"--list", exe}, env)
	if err != nil {
		env = append(env, "LD_TRACE_LOADED_OBJECTS=1")
		if out, err = run([]string{exe}, env); err != nil {
			return nil, false, false
		}
	} else {
		list = true
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if sc.Text() == "\tstatically linked" {
			return nil, false, false
		}
		m := listLine.FindStringSubmatch(sc.Text())
		require.NotNil(t, m, "unexpected ld.so line %q for %s", sc.Text(), exe)
		name, path := m[1], m[2]
		if path == "" {
			if strings.HasPrefix(name, "linux-vdso") || name == hostLoader {
				continue
			}
			path = name
		}
		if path == "not found" {
			path = ""
		}
		pairs = append(pairs, [2]string{name, path})
	}
	return pairs, list, true
}

func runLoader(t testing.TB, args, env []string) ([]byte, error) {
	return runChecked(t, exec.Command(hostLoader, args...), env)
}

// runChecked runs cmd in / with env and PATH, failing the test when it
// cannot be run at all; a non-zero exit is returned as an error.
func runChecked(t testing.TB, cmd *exec.Cmd, env []string) ([]byte, error) {
	cmd.Dir = "/"
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "running %s: %v", cmd.Path, err)
	}
	return out, err
}

// explainPairs runs `cudapatch explain --json` and returns what it loads,
// in load order, as ld.so --list prints it. The oracle is the host's stock
// glibc, so explain simulates that loader.
func explainPairs(t *testing.T, file string, env ...string) [][2]string {
	t.Helper()
	return explainPairsArgs(t, env, "--loader", "stock", "--workdir", "/", file)
}

// explainPairsArgs is explainPairs with explain's arguments given.
func explainPairsArgs(t *testing.T, env []string, args ...string) [][2]string {
	t.Helper()
	out, errOut, code := runCLI(t, env, append([]string{"explain", "--json"}, args...)...)
	require.Contains(t, []int{exitOK, exitFindings}, code, "%v: %s", args, errOut)
	var doc struct {
		Tree struct {
			Needs []struct {
				Name          string `json:"name"`
				Path          string `json:"path"`
				AlreadyLoaded bool   `json:"already_loaded"`
				Dlopen        bool   `json:"dlopen"`
			} `json:"needs"`
		} `json:"tree"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &doc), "%v", args)
	var pairs [][2]string
	for _, n := range doc.Tree.Needs {
		// The loader lists what loads at start; explain's dlopen names
		// (and what they load) come after all of that.
		if n.Dlopen {
			break
		}
		if !n.AlreadyLoaded {
			pairs = append(pairs, [2]string{n.Name, n.Path})
		}
	}
	return pairs
}

// agree compares explain with the loader on one file; it returns false when
// the loader refuses the file.
func agree(t *testing.T, file string, env ...string) bool {
	t.Helper()
	want, _, ok := ldList(t, file, env...)
	if !ok {
		return false
	}
	assert.Equal(t, want, explainPairs(t, file, env...), file)
	return true
}

// TestExplainAgreesOnFixtures: the shared x86-64 fixtures, patched to run,
// with and without LD_LIBRARY_PATH, and every file of the lint tree.
func TestExplainAgreesOnFixtures(t *testing.T) {
	compared := 0
	for _, f := range fixtures.Native(t) {
		if f.Static {
			continue
		}
		f := f.Copy(t)
		for _, p := range []string{f.Exe, f.Libs[0]} {
			_, err := elfedit.EditFile(p, elfedit.Edit{SetPath: &f.LibDir, Tag: elfedit.TagKeep}, elfedit.Options{})
			require.NoError(t, err)
		}
		for _, file := range []string{f.Exe, f.LoadLib} {
			if agree(t, file) {
				compared++
			}
		}
		// LD_LIBRARY_PATH comes before DT_RUNPATH but after DT_RPATH.
		other := t.TempDir()
		for _, l := range f.Libs {
			data, err := os.ReadFile(l)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(other, filepath.Base(l)), data, 0o755))
		}
		if agree(t, f.Exe, "LD_LIBRARY_PATH="+other) {
			compared++
		}
	}
	tr := linttest.Build(t)
	for _, c := range tr.Cases {
		if agree(t, c.Host) {
			compared++
		}
	}
	t.Logf("%d fixture files compared with ld.so --list", compared)
	assert.GreaterOrEqual(t, compared, 30)
}

// TestExplainAgreesOnUsrBin runs explain on every program of /usr/bin that
// ld.so --list accepts, through the CLI and the elfedit reader.
func TestExplainAgreesOnUsrBin(t *testing.T) {
	ents, err := os.ReadDir("/usr/bin")
	require.NoError(t, err)
	seen := map[string]bool{}
	var files []string
	for _, e := range ents {
		p, err := filepath.EvalSymlinks(filepath.Join("/usr/bin", e.Name()))
		if err != nil || seen[p] {
			continue
		}
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		seen[p] = true
		files = append(files, p)
	}
	sort.Strings(files)
	var (
		mu                  sync.Mutex
		compared, disagreed int
	)
	work := make(chan string)
	var wg sync.WaitGroup
	for range runtime.NumCPU() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				want, list, ok := ldList(t, p)
				if !ok || !list {
					continue
				}
				got := explainPairs(t, p)
				mu.Lock()
				compared++
				if !assert.Equal(t, want, got, p) {
					disagreed++
				}
				mu.Unlock()
			}
		}()
	}
	for _, f := range files {
		work <- f
	}
	close(work)
	wg.Wait()
	t.Logf("/usr/bin: %d files, %d accepted by ld.so --list and compared, %d disagreed", len(files), compared, disagreed)
	assert.GreaterOrEqual(t, compared, 100)
}

func TestExplainRootAndErrors(t *testing.T) {
	tr := linttest.Build(t)
	var clean string
	for _, c := range tr.Cases {
		if c.Name == "clean" {
			clean = c.Host
		}
	}
	// Inside the root, the clean program finds libcuda in the driver link:
	// through its note's "?" hint under nixpkgs' loader, through the
	// RUNPATH under the stock one.
	out, errOut, code := runCLI(t, nil, "explain", "--root", tr.Root, clean)
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, out, "libcuda.so.1 => /run/opengl-driver/lib/libcuda.so.1 (ldcache ?/run/opengl-driver/lib of ")
	assert.Contains(t, out, "libfoo.so => "+linttest.LibFoo+"/libfoo.so (ldcache of ")
	stock, errOut, code := runCLI(t, nil, "explain", "--loader", "stock", "--root", tr.Root, clean)
	require.Equal(t, exitOK, code, errOut)
	assert.Contains(t, stock, "libcuda.so.1 => /run/opengl-driver/lib/libcuda.so.1 (runpath of ")
	assert.Contains(t, stock, "libfoo.so => "+linttest.LibFoo+"/libfoo.so (runpath of ")
	// The same by logical path.
	out2, _, code := runCLI(t, nil, "explain", "--root", tr.Root, strings.TrimPrefix(clean, tr.Root))
	assert.Equal(t, exitOK, code)
	assert.Equal(t, out, out2)
	// Outside the root nothing is found: exit 1, with what was tried.
	out, _, code = runCLI(t, nil, "explain", clean)
	assert.Equal(t, exitFindings, code)
	assert.Contains(t, out, "libfoo.so => not found")
	assert.Contains(t, out, "tried "+linttest.LibFoo+"/libfoo.so (runpath of ")

	for _, args := range [][]string{{"explain"}, {"explain", "a", "b"}, {"explain", "/nonexistent"}, {"explain", "/etc/passwd"}, {"explain", "--loader", "musl", clean}} {
		_, errOut, code := runCLI(t, nil, args...)
		assert.Equal(t, exitUsage, code, "%v", args)
		assert.NotEmpty(t, errOut)
	}
}

// TestExplainLoader: which step finds each library, under nixpkgs' loader
// (the default, also --loader nixos) and the stock one, in text and JSON,
// on the lint tree's programs with resolution-cache notes.
func TestExplainLoader(t *testing.T) {
	tr := linttest.Build(t)
	host := func(name string) string {
		for _, c := range tr.Cases {
			if c.Name == name {
				return c.Host
			}
		}
		t.Fatalf("no case %s", name)
		return ""
	}
	exe := func(name string) string {
		return "/nix/store/99999999999999999999999999999999-" + name + "/bin/" + name
	}
	foo, foo2 := linttest.LibFoo+"/libfoo.so", "/nix/store/66666666666666666666666666666666-libfoo2/lib/libfoo.so"
	tests := []struct {
		name   string
		file   string
		loader []string
		text   string
		steps  map[string]string // JSON: name → step
		notes  map[string]string // JSON: name → note verdict
	}{
		{
			// The stale note: a directory ahead in the RUNPATH
			// now holds libfoo, but the note still names the old one.
			name: "stale note wins", file: "ldcache-stale",
			text:  exe("ldcache-stale") + "\n    libfoo.so => " + foo + " (ldcache of " + exe("ldcache-stale") + ")\n",
			steps: map[string]string{"libfoo.so": "ldcache"},
		},
		{
			name: "stale note, explicit nixos", file: "ldcache-stale", loader: []string{"--loader", "nixos"},
			text:  exe("ldcache-stale") + "\n    libfoo.so => " + foo + " (ldcache of " + exe("ldcache-stale") + ")\n",
			steps: map[string]string{"libfoo.so": "ldcache"},
		},
		{
			name: "stock loader walks the RUNPATH", file: "ldcache-stale", loader: []string{"--loader", "stock"},
			text:  exe("ldcache-stale") + "\n    libfoo.so => " + foo2 + " (runpath of " + exe("ldcache-stale") + ")\n",
			steps: map[string]string{"libfoo.so": "runpath"},
		},
		{
			// The note elfedit wrote with the first RUNPATH, left by a
			// later RUNPATH rewrite that did not drop it.
			name: "note older than the RUNPATH", file: "ldcache-stale-rewrite",
			text:  exe("ldcache-stale-rewrite") + "\n    libfoo.so => " + foo + " (ldcache of " + exe("ldcache-stale-rewrite") + ")\n",
			steps: map[string]string{"libfoo.so": "ldcache"},
		},
		{
			name: "note older than the RUNPATH, stock", file: "ldcache-stale-rewrite", loader: []string{"--loader", "stock"},
			text:  exe("ldcache-stale-rewrite") + "\n    libfoo.so => " + foo2 + " (runpath of " + exe("ldcache-stale-rewrite") + ")\n",
			steps: map[string]string{"libfoo.so": "runpath"},
		},
		{
			name: "gone file: next element", file: "ldcache-stale-gone",
			text:  exe("ldcache-stale-gone") + "\n    libfoo.so => " + foo + " (ldcache of " + exe("ldcache-stale-gone") + ")\n",
			steps: map[string]string{"libfoo.so": "ldcache"},
		},
		{
			name: "no entry: the RUNPATH", file: "ldcache-needed",
			text:  exe("ldcache-needed") + "\n    libfoo.so => " + foo + " (runpath of " + exe("ldcache-needed") + "; no entry in the note)\n",
			steps: map[string]string{"libfoo.so": "runpath"},
			notes: map[string]string{"libfoo.so": ldso.NoteNoEntry},
		},
		{
			name: "unloaded note is never read", file: "ldcache-unloaded",
			text:  exe("ldcache-unloaded") + "\n    libfoo.so => " + foo + " (runpath of " + exe("ldcache-unloaded") + "; " + ldso.NoteUnloaded + ")\n",
			steps: map[string]string{"libfoo.so": "runpath"},
			notes: map[string]string{"libfoo.so": ldso.NoteUnloaded},
		},
		{
			name: "empty note is rejected", file: "ldcache-empty",
			text:  exe("ldcache-empty") + "\n    libfoo.so => " + foo + " (runpath of " + exe("ldcache-empty") + "; " + ldso.NoteRejected + ")\n",
			steps: map[string]string{"libfoo.so": "runpath"},
			notes: map[string]string{"libfoo.so": ldso.NoteRejected},
		},
		{
			name: "stub entry loads the stub", file: "ldcache-stub",
			text: exe("ldcache-stub") + "\n    libcuda.so.1 => " + linttest.Stubs + "/libcuda.so (ldcache of " + exe("ldcache-stub") + ")\n" +
				"    libfoo.so => " + foo + " (ldcache of " + exe("ldcache-stub") + ")\n",
			steps: map[string]string{"libcuda.so.1": "ldcache", "libfoo.so": "ldcache"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append(append([]string{"explain", "--root", tr.Root}, tt.loader...), host(tt.file))
			out, errOut, code := runCLI(t, nil, args...)
			require.Equal(t, exitOK, code, errOut)
			assert.Equal(t, tt.text, out)

			out, errOut, code = runCLI(t, nil, append(args[:len(args)-1:len(args)-1], "--json", host(tt.file))...)
			require.Equal(t, exitOK, code, errOut)
			var doc struct {
				Config struct {
					Loader string `json:"loader"`
				} `json:"config"`
				Tree struct {
					Needs []struct {
						Name  string `json:"name"`
						Step  string `json:"step"`
						Note  string `json:"note"`
						Tried []struct {
							Step    string `json:"step"`
							Element string `json:"element"`
						} `json:"tried"`
					} `json:"needs"`
				} `json:"tree"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &doc))
			wantLoader := "nixos"
			if len(tt.loader) > 0 {
				wantLoader = tt.loader[1]
			}
			assert.Equal(t, wantLoader, doc.Config.Loader)
			steps, notes := map[string]string{}, map[string]string{}
			for _, n := range doc.Tree.Needs {
				steps[n.Name] = n.Step
				if n.Note != "" {
					notes[n.Name] = n.Note
				}
				for _, a := range n.Tried {
					if a.Step == "ldcache" {
						assert.NotEmpty(t, a.Element, "a note attempt names its element")
					}
				}
			}
			assert.Equal(t, tt.steps, steps)
			if tt.notes == nil {
				tt.notes = map[string]string{}
			}
			assert.Equal(t, tt.notes, notes)
		})
	}
}

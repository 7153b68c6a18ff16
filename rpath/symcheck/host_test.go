package symcheck_test

import (
	"debug/elf"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/ldso"
	"github.com/cudapatch/cudapatch/rpath/symcheck"
)

// lddFindings runs glibc's own check (ldd -r: LD_TRACE_LOADED_OBJECTS with
// LD_WARN and LD_BIND_NOW) on file, through runPrefix for a foreign
// machine, and returns what it reports failing: "undef NAME" and
// "version V", each with the base name of the object that needs it, and
// whether every library was found.
func lddFindings(t testing.TB, run runner, file string) (map[string]bool, bool, error) {
	t.Helper()
	out, err := run.command(file, []string{"LD_TRACE_LOADED_OBJECTS=1", "LD_WARN=yes", "LD_BIND_NOW=1"}).CombinedOutput()
	if err != nil {
		return nil, false, fmt.Errorf("%s: %v: %s", file, err, out)
	}
	got := map[string]bool{}
	complete := true
	for _, l := range strings.Split(string(out), "\n") {
		if m := lddUndef.FindStringSubmatch(l); m != nil {
			got["undef "+m[1]+" "+filepath.Base(m[2])] = true
		}
		if m := lddVersion.FindStringSubmatch(l); m != nil {
			got["version "+m[1]+" "+filepath.Base(m[2])] = true
		}
		if strings.Contains(l, "=> not found") {
			complete = false
		}
	}
	return got, complete, nil
}

// runner starts a program of one machine: directly through its loader,
// or under qemu-user with a sysroot, where the environment goes to the
// guest with -E (qemu itself may be a dynamic program).
type runner struct {
	prefix []string
	qemu   bool
}

func (r runner) command(file string, env []string, args ...string) *exec.Cmd {
	a := append([]string{}, r.prefix...)
	if r.qemu {
		for _, e := range env {
			a = append(a, "-E", e)
		}
	}
	a = append(append(a, file), args...)
	cmd := exec.Command(a[0], a[1:]...)
	cmd.Env = os.Environ()
	if !r.qemu {
		cmd.Env = append(cmd.Env, env...)
	}
	return cmd
}

var (
	lddUndef   = regexp.MustCompile(`undefined symbol: ([^\s,]+)(?:, version \S+)?\s+\((.*)\)$`)
	lddVersion = regexp.MustCompile("version `([^']+)' not found \\(required by (.*)\\)$")
)

// findings is the same set from the symbol check.
func findings(r *symcheck.Result) map[string]bool {
	got := map[string]bool{}
	vs, bs := r.Failures()
	for _, v := range vs {
		got["version "+v.Version+" "+filepath.Base(v.Object)] = true
	}
	for _, b := range bs {
		got["undef "+b.Name+" "+filepath.Base(b.Object)] = true
	}
	return got
}

// TestLoaderAgreesOnHost: over a sample of this machine's programs and
// libraries that load today, the check reports exactly what glibc's ldd -r
// does: no false failure, none missed. CUDAPATCH_SYMCHECK_SAMPLE sets the
// sample size (default 40).
func TestLoaderAgreesOnHost(t *testing.T) {
	if _, err := os.Stat("/lib64/ld-linux-x86-64.so.2"); err != nil {
		t.Skip("not an x86_64 glibc host")
	}
	n := 40
	if s := os.Getenv("CUDAPATCH_SYMCHECK_SAMPLE"); s != "" {
		var err error
		n, err = strconv.Atoi(s)
		require.NoError(t, err)
	}
	// Programs, libraries, and the plugins below the library directory
	// (perl and python modules, gconv…), whose undefined symbols ldd -r
	// reports: the sample holds failures as well as clean files.
	var files []string
	ents, err := os.ReadDir("/usr/bin")
	require.NoError(t, err)
	for _, e := range ents {
		if e.Type().IsRegular() {
			files = append(files, filepath.Join("/usr/bin", e.Name()))
		}
	}
	require.NoError(t, filepath.WalkDir("/usr/lib/x86_64-linux-gnu", func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && strings.Contains(d.Name(), ".so") {
			files = append(files, p)
		}
		return nil
	}))
	sort.Strings(files)
	// An even spread over both trees, the same every run.
	step := max(1, len(files)/n)
	// OnlyProblems and a small cache: the memo and the eviction lose nothing.
	chk := symcheck.New(symcheck.Options{BindNow: true, OnlyProblems: true, CacheBytes: 1 << 20})
	checked, agreed, withFindings := 0, 0, 0
	var checkTime time.Duration
	for i := 0; i < len(files) && checked < n; i += step {
		f := files[i]
		ef, err := elf.Open(f)
		if err != nil {
			continue
		}
		dyn := ef.Class == elf.ELFCLASS64 && ef.Machine == elf.EM_X86_64 && ef.Section(".dynamic") != nil
		ef.Close()
		if !dyn {
			continue
		}
		want, complete, err := lddFindings(t, runner{prefix: []string{"/lib64/ld-linux-x86-64.so.2"}}, f)
		if err != nil || !complete {
			continue // does not load today
		}
		start := time.Now()
		cfg, err := ldso.DefaultConfig("", elf.ELFCLASS64, elf.EM_X86_64)
		require.NoError(t, err)
		cfg.Loader = ldso.LoaderStock
		tr, err := ldso.Resolve(cfg, ldso.ElfReader(), f)
		require.NoError(t, err)
		r, err := chk.Check(cfg, tr)
		require.NoError(t, err, f)
		checkTime += time.Since(start)
		got := findings(r)
		checked++
		if len(want) > 0 {
			withFindings++
		}
		if assertSameFindings(t, f, want, got) {
			agreed++
		}
	}
	t.Logf("%d files checked, %d agree with ldd -r (%d with findings per ldd -r); check time %v", checked, agreed, withFindings, checkTime)
	require.Greater(t, checked, n/2, "too few files load on this machine")
}

func assertSameFindings(t *testing.T, f string, want, got map[string]bool) bool {
	t.Helper()
	ok := true
	for k := range got {
		if !want[k] {
			t.Errorf("%s: false finding: %s", f, k)
			ok = false
		}
	}
	for k := range want {
		if !got[k] {
			t.Errorf("%s: missed: %s", f, k)
			ok = false
		}
	}
	return ok
}

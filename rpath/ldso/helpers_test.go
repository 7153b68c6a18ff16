package ldso_test

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	fx "github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/ldso"
)

// hostLoader is the x86-64 interpreter the agreement tests run.
const hostLoader = "/lib64/ld-linux-x86-64.so.2"

// readELF is a Reader over debug/elf, good enough for tests.
func readELF(path string) (*ldso.Object, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	o := &ldso.Object{Class: f.Class, Machine: f.Machine, OSABI: f.OSABI}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return nil, err
			}
			o.Interp = string(bytes.TrimRight(b, "\x00"))
		}
	}
	if f.Section(".dynamic") == nil {
		return o, nil
	}
	str := func(tag elf.DynTag) ([]string, error) { return f.DynString(tag) }
	if o.Needed, err = str(elf.DT_NEEDED); err != nil {
		return nil, err
	}
	if s, err := str(elf.DT_SONAME); err == nil && len(s) > 0 {
		o.Soname = s[0]
	}
	if s, err := str(elf.DT_RPATH); err == nil && len(s) > 0 {
		o.RPath, o.HasRPath = s[0], true
	}
	if s, err := str(elf.DT_RUNPATH); err == nil && len(s) > 0 {
		o.RunPath, o.HasRunPath = s[0], true
	}
	if v, err := f.DynValue(elf.DT_FLAGS_1); err == nil && len(v) > 0 {
		o.Flags1 = v[0]
	}
	return o, nil
}

// cachedReader memoizes readELF; safe for concurrent use.
func cachedReader() ldso.Reader {
	type res struct {
		o   *ldso.Object
		err error
	}
	var m sync.Map
	return func(path string) (*ldso.Object, error) {
		if v, ok := m.Load(path); ok {
			r := v.(res)
			return r.o, r.err
		}
		o, err := readELF(path)
		m.Store(path, res{o, err})
		return o, err
	}
}

var listLine = regexp.MustCompile(`^\t(\S+)(?: => (.*?))?(?: \(0x[0-9a-f]+\))?$`)

// ldList runs the real loader in trace mode and returns its (name, path)
// pairs in load order, the vdso and the interpreter aside. It runs
// `ld.so --list`, which stops at the first missing library; when that
// fails it runs ld.so with LD_TRACE_LOADED_OBJECTS=1, as ldd does, which
// reports missing libraries and goes on. ok is false when the loader
// refuses the file both ways; list is true when --list accepted it.
func ldList(t testing.TB, dir, exe string, env ...string) (pairs [][2]string, list, ok bool) {
	out, err := runLoader(t, dir, []string{"--list", exe}, env)
	if err != nil {
		env = append(env, "LD_TRACE_LOADED_OBJECTS=1")
		if out, err = runLoader(t, dir, []string{exe}, env); err != nil {
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

func runLoader(t testing.TB, dir string, args, env []string) ([]byte, error) {
	cmd := exec.Command(hostLoader, args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "running %s: %v", hostLoader, err)
	}
	return out, err
}

// resolvedPairs lists what Resolve loads, in load order, as ld.so --list
// prints it.
func resolvedPairs(tr *ldso.Tree) [][2]string {
	var out [][2]string
	for _, n := range tr.Needs {
		if n.AlreadyLoaded {
			continue
		}
		out = append(out, [2]string{n.Name, n.Path})
	}
	return out
}

// hostConfig is the configuration of the host's x86-64 loader, glibc as
// released.
func hostConfig(t testing.TB) ldso.Config {
	cfg, err := ldso.DefaultConfig("", elf.ELFCLASS64, elf.EM_X86_64)
	require.NoError(t, err)
	cfg.Loader = ldso.LoaderStock
	return cfg
}

// cc compiles C source src into out with gcc, position-independent.
func cc(t testing.TB, out, src string, args ...string) {
	t.Helper()
	fx.Place(t, fx.C{Source: src, Args: append(slices.Clip(args), "-fPIC")}, out)
}

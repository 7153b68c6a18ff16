package ldso_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/ldso"
)

// fakeFS is a Reader over objects keyed by path.
type fakeFS map[string]*ldso.Object

func (f fakeFS) read(p string) (*ldso.Object, error) {
	o, ok := f[path.Clean(p)] // the kernel resolves "..": so does the fake
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
	}
	if o.Class == 0 {
		return nil, errors.New("invalid ELF header")
	}
	return o, nil
}

// noDir says no file of f lies below dir, as Config.NoDir must agree
// with the reader.
func (f fakeFS) noDir(dir string) bool {
	for k := range f {
		if strings.HasPrefix(k, dir+"/") {
			return false
		}
	}
	return true
}

// lib builds an x86-64 object with the given needs.
func lib(needed ...string) *ldso.Object {
	return &ldso.Object{Class: elf.ELFCLASS64, Machine: elf.EM_X86_64, Needed: needed}
}

func withRPath(o *ldso.Object, p string) *ldso.Object   { o.RPath, o.HasRPath = p, true; return o }
func withRunPath(o *ldso.Object, p string) *ldso.Object { o.RunPath, o.HasRunPath = p, true; return o }

// got is the short form of one resolved need for table rows.
type got struct {
	Name, Path string
	Step       ldso.Step
	Owner      string
}

func TestResolveRules(t *testing.T) {
	exe := "/opt/app/bin/exe"
	base := func() fakeFS {
		return fakeFS{
			"/lib/libA.so":         lib(),
			"/opt/app/lib/libA.so": lib(),
			"/llp/libA.so":         lib(),
		}
	}
	cacheData := newPart(binary.LittleEndian, 0, []ent{
		{"libC.so", "/opt/cached/libC.so", libc6x8664, 0},
		{"libA.so", "/lib/libA.so", libc6x8664, 0},
	}, nil, "")
	cache, err := ldso.ParseCache(cacheData)
	require.NoError(t, err)

	tests := []struct {
		name  string
		files fakeFS
		exe   *ldso.Object
		cfg   func(*ldso.Config)
		want  []got
	}{
		{
			name: "origin",
			exe:  withRunPath(lib("libA.so"), "$ORIGIN/../lib"),
			want: []got{{"libA.so", "/opt/app/bin/../lib/libA.so", ldso.StepRunPath, ""}},
		},
		{
			name: "secure drops untrusted origin",
			exe:  withRunPath(lib("libA.so"), "$ORIGIN/../lib"),
			cfg:  func(c *ldso.Config) { c.Secure = true },
			want: []got{{"libA.so", "/lib/libA.so", ldso.StepDefault, ""}},
		},
		{
			name:  "secure keeps trusted origin",
			files: fakeFS{"/opt/app/bin/sub/libA.so": lib(), "/x/opt/app/bin/libA.so": lib()},
			exe:   withRunPath(lib("libA.so"), "/x/$ORIGIN:$ORIGIN/sub"),
			cfg:   func(c *ldso.Config) { c.Secure = true; c.DefaultDirs = append(c.DefaultDirs, "/opt/app") },
			want:  []got{{"libA.so", "/opt/app/bin/sub/libA.so", ldso.StepRunPath, ""}},
		},
		{
			name: "LD_LIBRARY_PATH before runpath",
			exe:  withRunPath(lib("libA.so"), "/opt/app/lib"),
			cfg:  func(c *ldso.Config) { c.LDLibraryPath = "/nowhere;/llp" },
			want: []got{{"libA.so", "/llp/libA.so", ldso.StepLDLibraryPath, ""}},
		},
		{
			name: "secure ignores LD_LIBRARY_PATH",
			exe:  withRunPath(lib("libA.so"), "/opt/app/lib"),
			cfg:  func(c *ldso.Config) { c.LDLibraryPath = "/llp"; c.Secure = true },
			want: []got{{"libA.so", "/opt/app/lib/libA.so", ldso.StepRunPath, ""}},
		},
		{
			name: "rpath before LD_LIBRARY_PATH",
			exe:  withRPath(lib("libA.so"), "/opt/app/lib"),
			cfg:  func(c *ldso.Config) { c.LDLibraryPath = "/llp" },
			want: []got{{"libA.so", "/opt/app/lib/libA.so", ldso.StepRPath, exe}},
		},
		{
			name: "rpath ignored when runpath present",
			exe:  withRunPath(withRPath(lib("libA.so"), "/opt/app/lib"), "/nowhere"),
			cfg:  func(c *ldso.Config) { c.LDLibraryPath = "/llp" },
			want: []got{{"libA.so", "/llp/libA.so", ldso.StepLDLibraryPath, ""}},
		},
		{
			name:  "LD_LIBRARY_PATH origin and empty element",
			files: fakeFS{"/opt/app/bin/libB.so": lib(), "/w/libC.so": lib()},
			exe:   lib("libB.so", "libC.so"),
			cfg:   func(c *ldso.Config) { c.LDLibraryPath = "$ORIGIN::" },
			want: []got{
				{"libB.so", "/opt/app/bin/libB.so", ldso.StepLDLibraryPath, ""},
				{"libC.so", "libC.so", ldso.StepLDLibraryPath, ""},
			},
		},
		{
			name: "rpath chain innermost first",
			files: fakeFS{
				"/r1/libK.so": withRPath(lib("libL.so", "libN.so"), "/kr"),
				"/kr/libL.so": lib(),
				"/r1/libN.so": lib(),
				"/r1/libM.so": withRunPath(withRPath(lib("libO.so"), "/r1"), "/m"),
				"/r1/libO.so": lib(),
			},
			exe: withRPath(lib("libK.so", "libM.so"), "/r1"),
			want: []got{
				{"libK.so", "/r1/libK.so", ldso.StepRPath, exe},
				{"libM.so", "/r1/libM.so", ldso.StepRPath, exe},
				{"libL.so", "/kr/libL.so", ldso.StepRPath, "/r1/libK.so"},
				{"libN.so", "/r1/libN.so", ldso.StepRPath, exe},
				{"libO.so", "", "", ""},
			},
		},
		{
			name:  "dst forms",
			files: fakeFS{"/opt/$FOO/libB.so": lib(), "/p/x86_64/lib64/libC.so": lib()},
			exe:   withRunPath(lib("libB.so", "libC.so"), "/q/$PLATFORMX:/opt/$FOO:/p/${PLATFORM}/$LIB"),
			want: []got{
				{"libB.so", "/opt/$FOO/libB.so", ldso.StepRunPath, ""},
				{"libC.so", "/p/x86_64/lib64/libC.so", ldso.StepRunPath, ""},
			},
		},
		{
			name:  "no platform drops the element",
			files: fakeFS{"/p/x86_64/libB.so": lib(), "/lib/libB.so": lib()},
			exe:   withRunPath(lib("libB.so"), "/p/$PLATFORM"),
			cfg:   func(c *ldso.Config) { c.Platform = "" },
			want:  []got{{"libB.so", "/lib/libB.so", ldso.StepDefault, ""}},
		},
		{
			name: "cache",
			exe:  lib("libA.so", "libC.so"),
			cfg:  func(c *ldso.Config) { c.Cache = cache },
			want: []got{
				{"libA.so", "/lib/libA.so", ldso.StepCache, ""},
				{"libC.so", "", "", ""},
			},
		},
		{
			name:  "nodeflib skips default dirs, not other cache entries",
			files: fakeFS{"/opt/cached/libC.so": lib()},
			exe:   &ldso.Object{Class: elf.ELFCLASS64, Machine: elf.EM_X86_64, Needed: []string{"libA.so", "libC.so"}, Flags1: uint64(elf.DF_1_NODEFLIB)},
			cfg:   func(c *ldso.Config) { c.Cache = cache },
			want: []got{
				{"libA.so", "", "", ""},
				{"libC.so", "/opt/cached/libC.so", ldso.StepCache, ""},
			},
		},
		{
			name: "wrong class and machine are skipped",
			files: fakeFS{
				"/a/libB.so": {Class: elf.ELFCLASS32, Machine: elf.EM_386},
				"/b/libB.so": {Class: elf.ELFCLASS64, Machine: elf.EM_AARCH64},
				"/c/libB.so": lib(),
			},
			exe:  withRunPath(lib("libB.so"), "/a:/b:/c"),
			want: []got{{"libB.so", "/c/libB.so", ldso.StepRunPath, ""}},
		},
		{
			name:  "hwcaps subdirectories first",
			files: fakeFS{"/c/libB.so": lib(), "/c/glibc-hwcaps/x86-64-v2/libB.so": lib(), "/c/tls/libB.so": lib()},
			exe:   withRunPath(lib("libB.so", "libB.so"), "/c"),
			cfg: func(c *ldso.Config) {
				c.Loader, c.Hwcaps, c.LegacyHwcaps = ldso.LoaderStock, []string{"x86-64-v3", "x86-64-v2"}, []string{"tls"}
			},
			want: []got{
				{"libB.so", "/c/glibc-hwcaps/x86-64-v2/libB.so", ldso.StepRunPath, ""},
				{"libB.so", "/c/glibc-hwcaps/x86-64-v2/libB.so", ldso.StepLoaded, ""},
			},
		},
		{
			name:  "legacy hwcaps",
			files: fakeFS{"/c/libB.so": lib(), "/c/tls/libB.so": lib()},
			exe:   withRunPath(lib("libB.so"), "/c"),
			cfg:   func(c *ldso.Config) { c.Loader, c.LegacyHwcaps = ldso.LoaderStock, []string{"tls/"} },
			want:  []got{{"libB.so", "/c/tls/libB.so", ldso.StepRunPath, ""}},
		},
		{
			name:  "legacy hwcaps: not nixpkgs' loader's",
			files: fakeFS{"/c/libB.so": lib(), "/c/tls/libB.so": lib()},
			exe:   withRunPath(lib("libB.so"), "/c"),
			cfg:   func(c *ldso.Config) { c.Loader, c.LegacyHwcaps = ldso.LoaderNixOS, []string{"tls/"} },
			want:  []got{{"libB.so", "/c/libB.so", ldso.StepRunPath, ""}},
		},
		{
			name: "interpreter by soname",
			files: fakeFS{"/lib64/ld-linux-x86-64.so.2": func() *ldso.Object {
				o := lib()
				o.Soname = "ld-linux-x86-64.so.2"
				return o
			}()},
			exe:  &ldso.Object{Class: elf.ELFCLASS64, Machine: elf.EM_X86_64, Needed: []string{"ld-linux-x86-64.so.2"}, Interp: "/lib64/ld-linux-x86-64.so.2"},
			want: []got{{"ld-linux-x86-64.so.2", "/lib64/ld-linux-x86-64.so.2", ldso.StepInterp, ""}},
		},
		{
			name:  "absolute name with origin",
			files: fakeFS{"/opt/app/plugins/p.so": lib()},
			exe:   lib("$ORIGIN/../plugins/p.so", "/nope/q.so"),
			want: []got{
				{"$ORIGIN/../plugins/p.so", "/opt/app/bin/../plugins/p.so", ldso.StepAbsolute, ""},
				{"/nope/q.so", "", "", ""},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := base()
			for k, v := range tt.files {
				files[k] = v
			}
			files[exe] = tt.exe
			cfg := ldso.Config{
				WorkDir:     "/w",
				DefaultDirs: []string{"/lib", "/usr/lib"},
				Platform:    "x86_64",
				Lib:         "lib64",
			}
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			tr, err := ldso.Resolve(cfg, files.read, exe)
			require.NoError(t, err)
			var g []got
			for _, n := range tr.Needs {
				g = append(g, got{n.Name, n.Path, n.Step, n.RPathOwner})
				assert.Empty(t, n.Error)
			}
			assert.Equal(t, tt.want, g)
			// Untraced: the same resolution, no attempts recorded, with
			// and without the subdirectories below absent ones skipped.
			cfg.Untraced = true
			for _, noDir := range []func(string) bool{nil, files.noDir} {
				cfg.NoDir = noDir
				tr, err = ldso.Resolve(cfg, files.read, exe)
				require.NoError(t, err)
				g = nil
				for _, n := range tr.Needs {
					g = append(g, got{n.Name, n.Path, n.Step, n.RPathOwner})
					assert.Empty(t, n.Tried)
				}
				assert.Equal(t, tt.want, g)
			}
		})
	}
}

// TestResolveSkipsAbsentSubdirs: an untraced resolution with Config.NoDir
// asks the reader for nothing below a first component NoDir calls absent
// (tls, haswell, glibc-hwcaps here), and finds what a traced one finds.
func TestResolveSkipsAbsentSubdirs(t *testing.T) {
	exe := "/bin/exe"
	files := fakeFS{
		exe:                    withRunPath(lib("libB.so"), "/c"),
		"/c/libB.so":           lib(),
		"/c/x86_64/libB.so":    lib(),
		"/lib/x86_64/libc.so":  lib(),
		"/c/avx512_1/other.so": lib(),
	}
	cfg := ldso.Config{
		DefaultDirs:  []string{"/lib"},
		Loader:       ldso.LoaderStock,
		Hwcaps:       []string{"x86-64-v2"},
		LegacyHwcaps: ldso.LegacySubdirs([]string{"tls", "haswell", "avx512_1", "x86_64"}),
	}
	traced, err := ldso.Resolve(cfg, files.read, exe)
	require.NoError(t, err)
	require.Equal(t, "/c/x86_64/libB.so", traced.Needs[0].Path)
	assert.Len(t, traced.Needs[0].Tried, 1+len(cfg.LegacyHwcaps), "glibc-hwcaps/x86-64-v2, then every legacy one up to x86_64, the last")

	var asked []string
	read := func(p string) (*ldso.Object, error) {
		asked = append(asked, p)
		return files.read(p)
	}
	cfg.Untraced, cfg.NoDir = true, files.noDir
	tr, err := ldso.Resolve(cfg, read, exe)
	require.NoError(t, err)
	assert.Equal(t, traced.Needs[0].Path, tr.Needs[0].Path)
	// Only avx512_1's subdirectories (avx512_1 exists) and x86_64's.
	assert.Equal(t, []string{"/c/avx512_1/x86_64/libB.so", "/c/avx512_1/libB.so", "/c/x86_64/libB.so"}, asked[1:])
}

func TestResolveErrors(t *testing.T) {
	exe := "/bin/exe"
	files := fakeFS{
		exe:               withRunPath(lib("libbad.so", "libabi.so"), "/bad:/good"),
		"/bad/libbad.so":  {}, // not an ELF file
		"/good/libbad.so": lib(),
		"/bad/libabi.so":  {Class: elf.ELFCLASS64, Machine: elf.EM_X86_64, OSABI: elf.ELFOSABI_FREEBSD},
	}
	tr, err := ldso.Resolve(ldso.Config{DefaultDirs: []string{"/lib"}}, files.read, exe)
	require.NoError(t, err)
	require.Len(t, tr.Needs, 2)
	// ld.so stops at a file it cannot load, even with a good one later.
	assert.False(t, tr.Needs[0].Found())
	assert.Contains(t, tr.Needs[0].Error, "/bad/libbad.so: invalid ELF header")
	assert.Contains(t, tr.Needs[1].Error, "OS ABI invalid")
	assert.Len(t, tr.Missing(), 2)

	_, err = ldso.Resolve(ldso.Config{}, files.read, "/bin/none")
	require.ErrorIs(t, err, fs.ErrNotExist)
}

func TestFormatAndJSON(t *testing.T) {
	exe := "/bin/exe"
	files := fakeFS{
		exe:            withRPath(lib("liba.so", "libb.so"), "/r"),
		"/r/liba.so":   lib("libb.so", "libc.so"),
		"/lib/libb.so": lib(),
		"/lib/libc.so": lib(),
	}
	cfg := ldso.Config{DefaultDirs: []string{"/lib"}, WorkDir: "/"}
	tr, err := ldso.Resolve(cfg, files.read, exe)
	require.NoError(t, err)
	files["/r/liba.so"].Needed = append(files["/r/liba.so"].Needed, "libmissing.so")
	tr2, err := ldso.Resolve(cfg, files.read, exe)
	require.NoError(t, err)

	tests := []struct {
		name string
		tree *ldso.Tree
		want string
	}{
		{"found", tr, `/bin/exe
    liba.so => /r/liba.so (rpath of /bin/exe)
        libb.so => /lib/libb.so (loaded)
        libc.so => /lib/libc.so (default)
    libb.so => /lib/libb.so (default)
`},
		{"missing", tr2, `/bin/exe
    liba.so => /r/liba.so (rpath of /bin/exe)
        libb.so => /lib/libb.so (loaded)
        libc.so => /lib/libc.so (default)
        libmissing.so => not found
            tried /r/libmissing.so (rpath of /bin/exe: missing)
            tried /lib/libmissing.so (default: missing)
    libb.so => /lib/libb.so (default)
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			require.NoError(t, tt.tree.Format(&buf))
			assert.Equal(t, tt.want, buf.String())
		})
	}

	b, err := json.Marshal(tr)
	require.NoError(t, err)
	var back ldso.Tree
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, tr, &back)
	assert.Contains(t, string(b), `"step":"rpath","rpath_owner":"/bin/exe"`)
}

// TestResolveInRoot resolves inside another root: absolute symlinks and
// ".." stay inside it, and nothing is taken from the host.
func TestResolveInRoot(t *testing.T) {
	tmp := t.TempDir()
	root := filepath.Join(tmp, "root")
	cc(t, filepath.Join(root, "usr/lib/libx.so"), leafSrc, "-shared", "-nostdlib", "-Wl,-soname,libx.so")
	cc(t, filepath.Join(tmp, "outside/liby.so"), leafSrc, "-shared", "-nostdlib", "-Wl,-soname,liby.so")
	cc(t, filepath.Join(tmp, "stub/liby.so"), leafSrc, "-shared", "-nostdlib", "-Wl,-soname,liby.so")
	cc(t, filepath.Join(root, "opt/bin/exe"), mainSrc, "-Wl,--no-as-needed",
		"-L"+filepath.Join(root, "usr/lib"), "-lx", "-L"+filepath.Join(tmp, "stub"), "-ly",
		"-Wl,--enable-new-dtags,-rpath,/lnk:/escape:/opt/bin/../../../../usr/lib")
	require.NoError(t, os.Symlink("/usr/lib", filepath.Join(root, "lnk")))
	require.NoError(t, os.Symlink("../../outside", filepath.Join(root, "escape")))
	require.NoError(t, os.Symlink("/opt/bin/exe", filepath.Join(root, "exe")))

	cfg, err := ldso.DefaultConfig(root, elf.ELFCLASS64, elf.EM_X86_64)
	require.NoError(t, err)
	assert.Equal(t, []string{"/lib", "/usr/lib"}, cfg.DefaultDirs)
	assert.Nil(t, cfg.Cache)

	tr, err := ldso.Resolve(cfg, readELF, "/exe")
	require.NoError(t, err)
	var g []got
	for _, n := range tr.Needs {
		if n.Step == ldso.StepInterp {
			continue
		}
		g = append(g, got{n.Name, n.Path, n.Step, n.RPathOwner})
	}
	assert.Equal(t, []got{
		{"libx.so", "/lnk/libx.so", ldso.StepRunPath, ""},
		{"liby.so", "", "", ""},
		{"libc.so.6", "", "", ""},
	}, g)
	// /escape/liby.so would be tmp/outside/liby.so on the host.
	var escaped []string
	for _, a := range tr.Needs[1].Tried {
		if a.Path == "/escape/liby.so" {
			escaped = append(escaped, a.Result)
		}
	}
	assert.Equal(t, []string{ldso.ResultMissing}, escaped)
}

// TestResolveDlopen: an object's Dlopen names are opened after every
// DT_NEEDED, as dlopen from that object: its own DT_RUNPATH (never the
// executable's), then what the dlopened object needs. A name found
// nowhere is no missing library.
func TestResolveDlopen(t *testing.T) {
	exe := "/app/bin/exe"
	libX := withRunPath(lib("libY.so"), "/x:/plug")
	libX.Dlopen = []string{"libP.so.1", "libY.so", "libnone.so.2"}
	files := fakeFS{
		exe:                      withRunPath(lib("libX.so"), "/x:/exe-only"),
		"/x/libX.so":             libX,
		"/x/libY.so":             lib(),
		"/plug/libP.so.1":        lib("libQ.so"),
		"/plug/libQ.so":          lib(),
		"/exe-only/libnone.so.2": lib(),
	}
	tr, err := ldso.Resolve(ldso.Config{DefaultDirs: []string{"/lib"}}, files.read, exe)
	require.NoError(t, err)
	type row struct {
		Name, Path, Requester string
		Step                  ldso.Step
		Dlopen                bool
	}
	var rows []row
	for _, n := range tr.Needs {
		rows = append(rows, row{n.Name, n.Path, n.Requester, n.Step, n.Dlopen})
	}
	assert.Equal(t, []row{
		{"libX.so", "/x/libX.so", exe, ldso.StepRunPath, false},
		{"libY.so", "/x/libY.so", "/x/libX.so", ldso.StepRunPath, false},
		{"libP.so.1", "/plug/libP.so.1", "/x/libX.so", ldso.StepRunPath, true},
		{"libY.so", "/x/libY.so", "/x/libX.so", ldso.StepLoaded, true},
		{"libnone.so.2", "", "/x/libX.so", "", true},  // not in libX's RUNPATH
		{"libQ.so", "", "/plug/libP.so.1", "", false}, // libP has no RUNPATH
	}, rows)
	missing := tr.Missing()
	require.Len(t, missing, 1)
	assert.Equal(t, "libQ.so", missing[0].Name, "a dlopened library's own DT_NEEDED is needed")
	var out bytes.Buffer
	require.NoError(t, tr.Format(&out))
	assert.Contains(t, out.String(), "    dlopen libP.so.1 => /plug/libP.so.1 (runpath of /x/libX.so)\n")
	assert.Contains(t, out.String(), "    dlopen libnone.so.2 => not found\n")
}

// TestResolveHardLink: one file under two names, by a hard link, is loaded
// once: ld.so compares st_dev and st_ino of what it opens with every
// object loaded, and so does Resolve (comparing paths with links resolved
// tells a symbolic link from its target, not a hard link). The loader's
// own trace lists the file once.
func TestResolveHardLink(t *testing.T) {
	dir := t.TempDir()
	cc(t, filepath.Join(dir, "a/libx.so"), leafSrc, "-shared", "-Wl,-soname,libx.so")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "b"), 0o755))
	require.NoError(t, os.Link(filepath.Join(dir, "a/libx.so"), filepath.Join(dir, "b/liby.so")))
	// The executable is linked against a copy named liby.so (a link-time
	// stand-in): it needs both names.
	cc(t, filepath.Join(dir, "stub/liby.so"), leafSrc, "-shared", "-Wl,-soname,liby.so")
	exe := filepath.Join(dir, "exe")
	cc(t, exe, mainSrc, "-Wl,--no-as-needed", "-L"+filepath.Join(dir, "a"), "-lx", "-L"+filepath.Join(dir, "stub"), "-ly",
		"-Wl,--enable-new-dtags,-rpath,"+filepath.Join(dir, "a")+":"+filepath.Join(dir, "b"))

	cfg, err := ldso.DefaultConfig("", elf.ELFCLASS64, elf.EM_X86_64)
	require.NoError(t, err)
	for _, ids := range []*ldso.IdentityCache{nil, {}} {
		cfg.Identities = ids
		tr, err := ldso.Resolve(cfg, readELF, exe)
		require.NoError(t, err)
		var y *ldso.Need
		for _, n := range tr.Needs {
			if n.Name == "liby.so" {
				y = n
			}
		}
		require.NotNil(t, y)
		assert.True(t, y.AlreadyLoaded, "liby.so is libx.so's file")
		assert.Equal(t, filepath.Join(dir, "a/libx.so"), y.Path)
	}

	cmd := exec.Command(exe)
	cmd.Env = []string{"LD_TRACE_LOADED_OBJECTS=1"}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, 1, strings.Count(string(out), dir), "the loader maps the file once:\n%s", out)
}

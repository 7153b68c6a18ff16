package ldso_test

import (
	"bytes"
	"debug/elf"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/ldso"
)

// desc builds a raw note descriptor from (name, path list) pairs, ended by
// the empty name, as patchelf writes it. The pairs are written in the
// order given, sorted or not.
func desc(pairs ...string) []byte {
	var b bytes.Buffer
	for _, p := range pairs {
		b.WriteString(p)
		b.WriteByte(0)
	}
	b.WriteByte(0)
	return b.Bytes()
}

func withNote(o *ldso.Object, d []byte) *ldso.Object { o.Note = ldso.NewNote(d, true); return o }

// noteGot is one resolved need with the note's verdict.
type noteGot struct {
	Name, Path string
	Step       ldso.Step
	Note       string
}

// TestResolveNote checks the patched loader's note step against the rules
// of nixpkgs' ldcache.patch (elf/dl-load.c, _dl_map_new_object): after
// the DT_RPATH chain and LD_LIBRARY_PATH, before DT_RUNPATH; "=FILE"
// opened as is, "?DIR" searched like a DT_RUNPATH entry; a name whose
// elements all fail falls back to the walk.
func TestResolveNote(t *testing.T) {
	exe := "/opt/app/bin/exe"
	tests := []struct {
		name  string
		files fakeFS
		exe   *ldso.Object
		cfg   func(*ldso.Config)
		want  []noteGot
		// tried is the candidates of the first need, when given.
		tried []string
	}{
		{
			name:  "exact entry wins over an earlier runpath directory",
			files: fakeFS{"/stubs/libcuda.so.1": lib(), "/drv/libcuda.so.1": lib()},
			exe:   withNote(withRunPath(lib("libcuda.so.1"), "/drv:/stubs"), desc("libcuda.so.1", "=/stubs/libcuda.so.1")),
			want:  []noteGot{{"libcuda.so.1", "/stubs/libcuda.so.1", ldso.StepNote, ""}},
			tried: []string{"/stubs/libcuda.so.1"},
		},
		{
			name:  "stock loader ignores the note",
			files: fakeFS{"/stubs/libcuda.so.1": lib(), "/drv/libcuda.so.1": lib()},
			exe:   withNote(withRunPath(lib("libcuda.so.1"), "/drv:/stubs"), desc("libcuda.so.1", "=/stubs/libcuda.so.1")),
			cfg:   func(c *ldso.Config) { c.Loader = ldso.LoaderStock },
			want:  []noteGot{{"libcuda.so.1", "/drv/libcuda.so.1", ldso.StepRunPath, ""}},
		},
		{
			name: "LD_LIBRARY_PATH before the note",
			exe:  withNote(withRunPath(lib("libA.so"), "/opt/app/lib"), desc("libA.so", "=/opt/app/lib/libA.so")),
			cfg:  func(c *ldso.Config) { c.LDLibraryPath = "/llp" },
			want: []noteGot{{"libA.so", "/llp/libA.so", ldso.StepLDLibraryPath, ""}},
		},
		{
			name: "secure mode: LD_LIBRARY_PATH ignored, the note used",
			exe:  withNote(withRunPath(lib("libA.so"), "/opt/app/lib"), desc("libA.so", "=/opt/app/lib/libA.so")),
			cfg:  func(c *ldso.Config) { c.LDLibraryPath = "/llp"; c.Secure = true },
			want: []noteGot{{"libA.so", "/opt/app/lib/libA.so", ldso.StepNote, ""}},
		},
		{
			name: "missing, wrong class, wrong machine: next element",
			files: fakeFS{
				"/c32/libB.so": {Class: elf.ELFCLASS32, Machine: elf.EM_386},
				"/arm/libB.so": {Class: elf.ELFCLASS64, Machine: elf.EM_AARCH64},
				"/ok/libB.so":  lib(),
				"/rp/libB.so":  lib(),
			},
			exe:   withNote(withRunPath(lib("libB.so"), "/rp"), desc("libB.so", "=/gone/libB.so:=/c32/libB.so:=/arm/libB.so:=/ok/libB.so")),
			want:  []noteGot{{"libB.so", "/ok/libB.so", ldso.StepNote, ""}},
			tried: []string{"/gone/libB.so", "/c32/libB.so", "/arm/libB.so", "/ok/libB.so"},
		},
		{
			name:  "every element fails: the runpath walk",
			files: fakeFS{"/rp/libB.so": lib()},
			exe:   withNote(withRunPath(lib("libB.so"), "/rp"), desc("libB.so", "=/gone/libB.so:?/none")),
			want:  []noteGot{{"libB.so", "/rp/libB.so", ldso.StepRunPath, ldso.NoteFailed}},
			tried: []string{"/gone/libB.so", "/none/libB.so", "/rp/libB.so"},
		},
		{
			name: "search hint with $ORIGIN",
			exe:  withNote(withRunPath(lib("libA.so"), "/nowhere:$ORIGIN/../lib"), desc("libA.so", "?$ORIGIN/../lib")),
			want: []noteGot{{"libA.so", "/opt/app/bin/../lib/libA.so", ldso.StepNote, ""}},
		},
		{
			name:  "search hint with glibc-hwcaps",
			files: fakeFS{"/h/libB.so": lib(), "/h/glibc-hwcaps/x86-64-v2/libB.so": lib()},
			exe:   withNote(withRunPath(lib("libB.so"), "/h"), desc("libB.so", "?/h")),
			cfg:   func(c *ldso.Config) { c.Hwcaps = []string{"x86-64-v3", "x86-64-v2"} },
			want:  []noteGot{{"libB.so", "/h/glibc-hwcaps/x86-64-v2/libB.so", ldso.StepNote, ""}},
			tried: []string{"/h/glibc-hwcaps/x86-64-v3/libB.so", "/h/glibc-hwcaps/x86-64-v2/libB.so"},
		},
		{
			name:  "empty search hint is the current directory, before an exact entry",
			files: fakeFS{"/w/libB.so": lib(), "/r/libB.so": lib()},
			exe:   withNote(withRunPath(lib("libB.so"), ":/r"), desc("libB.so", "?:=/r/libB.so")),
			want:  []noteGot{{"libB.so", "libB.so", ldso.StepNote, ""}},
		},
		{
			name:  "search hint whose token has no value is skipped",
			files: fakeFS{"/r/libB.so": lib()},
			exe:   withNote(withRunPath(lib("libB.so"), "/r"), desc("libB.so", "?/p/$PLATFORM:=/r/libB.so")),
			cfg:   func(c *ldso.Config) { c.Platform = "" },
			want:  []noteGot{{"libB.so", "/r/libB.so", ldso.StepNote, ""}},
			tried: []string{"/r/libB.so"},
		},
		{
			name:  "no entry: the runpath walk",
			files: fakeFS{"/rp/libB.so": lib()},
			exe:   withNote(withRunPath(lib("libB.so", "libA.so"), "/rp:/opt/app/lib"), desc("libA.so", "=/opt/app/lib/libA.so")),
			want: []noteGot{
				{"libB.so", "/rp/libB.so", ldso.StepRunPath, ldso.NoteNoEntry},
				{"libA.so", "/opt/app/lib/libA.so", ldso.StepNote, ""},
			},
		},
		{
			name:  "a note no PT_NOTE covers is never read",
			files: fakeFS{"/rp/libB.so": lib(), "/n/libB.so": lib()},
			exe: func() *ldso.Object {
				o := withRunPath(lib("libB.so"), "/rp")
				o.Note = ldso.NewNote(desc("libB.so", "=/n/libB.so"), false)
				return o
			}(),
			want: []noteGot{{"libB.so", "/rp/libB.so", ldso.StepRunPath, ldso.NoteUnloaded}},
		},
		{
			name:  "a descriptor without the final empty name is rejected whole",
			files: fakeFS{"/rp/libB.so": lib(), "/n/libB.so": lib()},
			exe:   withNote(withRunPath(lib("libB.so"), "/rp"), []byte("libB.so\x00=/n/libB.so\x00")),
			want:  []noteGot{{"libB.so", "/rp/libB.so", ldso.StepRunPath, ldso.NoteRejected}},
		},
		{
			name:  "the bare empty cache is rejected",
			files: fakeFS{"/rp/libB.so": lib()},
			exe:   withNote(withRunPath(lib("libB.so"), "/rp"), []byte{0, 0}),
			want:  []noteGot{{"libB.so", "/rp/libB.so", ldso.StepRunPath, ldso.NoteRejected}},
		},
		{
			// The walk is linear: libB.so is found before the bad pair when
			// looked up first; looked up after a walk past it, it is not.
			name:  "an empty path list disables the note from the lookup that meets it",
			files: fakeFS{"/n/libB.so": lib(), "/n/libD.so": lib(), "/rp/libB.so": lib(), "/rp/libD.so": lib()},
			exe:   withNote(withRunPath(lib("libB.so", "libD.so", "libB2.so"), "/rp"), desc("libB.so", "=/n/libB.so", "libC.so", "", "libD.so", "=/n/libD.so")),
			want: []noteGot{
				{"libB.so", "/n/libB.so", ldso.StepNote, ""},
				{"libD.so", "/rp/libD.so", ldso.StepRunPath, ldso.NoteDisabled},
				{"libB2.so", "", "", ldso.NoteDisabled},
			},
		},
		{
			name:  "after the note is disabled, earlier names miss too",
			files: fakeFS{"/n/libB.so": lib(), "/n/libD.so": lib(), "/rp/libB.so": lib(), "/rp/libD.so": lib()},
			exe:   withNote(withRunPath(lib("libD.so", "libB.so"), "/rp"), desc("libB.so", "=/n/libB.so", "libC.so", "", "libD.so", "=/n/libD.so")),
			want: []noteGot{
				{"libD.so", "/rp/libD.so", ldso.StepRunPath, ldso.NoteDisabled},
				{"libB.so", "/rp/libB.so", ldso.StepRunPath, ldso.NoteDisabled},
			},
		},
		{
			name:  "unsorted names and unknown elements: the loader does not care",
			files: fakeFS{"/n/libB.so": lib(), "/n/libA.so": lib()},
			exe:   withNote(withRunPath(lib("libA.so", "libB.so"), "/opt/app/lib"), desc("libB.so", "x:=/n/libB.so", "libA.so", "=/n/libA.so")),
			want: []noteGot{
				{"libA.so", "/n/libA.so", ldso.StepNote, ""},
				{"libB.so", "/n/libB.so", ldso.StepNote, ""},
			},
		},
		{
			name:  "first matching pair wins",
			files: fakeFS{"/n/libB.so": lib(), "/m/libB.so": lib()},
			exe:   withNote(withRunPath(lib("libB.so"), "/rp"), desc("libB.so", "=/m/libB.so", "libB.so", "=/n/libB.so")),
			want:  []noteGot{{"libB.so", "/m/libB.so", ldso.StepNote, ""}},
		},
		{
			// ldcache.patch reads the note after LD_LIBRARY_PATH, and glibc
			// walks DT_RPATH before that: for a DT_RPATH-only object the
			// note only answers what the DT_RPATH chain does not find.
			name:  "DT_RPATH before the note",
			files: fakeFS{"/rp/libB.so": lib(), "/n/libB.so": lib(), "/n/libE.so": lib()},
			exe:   withNote(withRPath(lib("libB.so", "libE.so"), "/rp"), desc("libB.so", "=/n/libB.so", "libE.so", "=/n/libE.so")),
			want: []noteGot{
				{"libB.so", "/rp/libB.so", ldso.StepRPath, ""},
				{"libE.so", "/n/libE.so", ldso.StepNote, ""},
			},
		},
		{
			name: "a note serves its own object's needs only",
			files: fakeFS{
				"/r/libK.so":  withRunPath(lib("libL.so"), "/r2"),
				"/r2/libL.so": lib(),
				"/n/libL.so":  lib(),
			},
			exe: withNote(withRunPath(lib("libK.so"), "/r"), desc("libK.so", "=/r/libK.so", "libL.so", "=/n/libL.so")),
			want: []noteGot{
				{"libK.so", "/r/libK.so", ldso.StepNote, ""},
				{"libL.so", "/r2/libL.so", ldso.StepRunPath, ""},
			},
		},
		{
			name:  "names with a slash never reach the note",
			files: fakeFS{"/opt/app/plugins/p.so": lib(), "/n/p.so": lib()},
			exe:   withNote(lib("$ORIGIN/../plugins/p.so"), desc("$ORIGIN/../plugins/p.so", "=/n/p.so")),
			want:  []noteGot{{"$ORIGIN/../plugins/p.so", "/opt/app/bin/../plugins/p.so", ldso.StepAbsolute, ""}},
		},
		{
			name:  "an already loaded name is not looked up",
			files: fakeFS{"/r/libK.so": lib("libA.so"), "/n/libA.so": lib()},
			exe:   withNote(withRunPath(lib("libA.so", "libK.so"), "/r:/opt/app/lib"), desc("libK.so", "=/r/libK.so")),
			want: []noteGot{
				{"libA.so", "/opt/app/lib/libA.so", ldso.StepRunPath, ldso.NoteNoEntry},
				{"libK.so", "/r/libK.so", ldso.StepNote, ""},
				{"libA.so", "/opt/app/lib/libA.so", ldso.StepLoaded, ""},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := fakeFS{
				"/lib/libA.so":         lib(),
				"/opt/app/lib/libA.so": lib(),
				"/llp/libA.so":         lib(),
			}
			for k, v := range tt.files {
				files[k] = v
			}
			files[exe] = tt.exe
			cfg := ldso.Config{WorkDir: "/w", DefaultDirs: []string{"/lib"}, Platform: "x86_64", Lib: "lib64"}
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			tr, err := ldso.Resolve(cfg, files.read, exe)
			require.NoError(t, err)
			var g []noteGot
			for _, n := range tr.Needs {
				g = append(g, noteGot{n.Name, n.Path, n.Step, n.Note})
				assert.Empty(t, n.Error)
			}
			assert.Equal(t, tt.want, g)
			if tt.tried != nil {
				var paths []string
				for _, a := range tr.Needs[0].Tried {
					paths = append(paths, a.Path)
				}
				assert.Equal(t, tt.tried, paths)
			}
		})
	}
}

// TestResolveNoteError: a note element that is not a loadable ELF file
// stops the loader, as any candidate does.
func TestResolveNoteError(t *testing.T) {
	exe := "/bin/exe"
	files := fakeFS{
		exe:               withNote(withRunPath(lib("libbad.so"), "/good"), desc("libbad.so", "=/bad/libbad.so:=/good/libbad.so")),
		"/bad/libbad.so":  {}, // not an ELF file
		"/good/libbad.so": lib(),
	}
	tr, err := ldso.Resolve(ldso.Config{DefaultDirs: []string{"/lib"}}, files.read, exe)
	require.NoError(t, err)
	require.Len(t, tr.Needs, 1)
	assert.False(t, tr.Needs[0].Found())
	assert.Contains(t, tr.Needs[0].Error, "/bad/libbad.so: invalid ELF header")
}

func TestNewNote(t *testing.T) {
	n := ldso.NewNote(desc("libB.so", "=/n/libB.so:?$ORIGIN"), true)
	require.NoError(t, n.Err)
	require.Len(t, n.Cache, 1)
	assert.Equal(t, "=/n/libB.so:?$ORIGIN", n.Cache[0].PathList())

	n = ldso.NewNote(desc("libB.so", "=/n", "libA.so", "=/m"), false)
	require.Error(t, n.Err, "unsorted names are malformed for ldcache.Decode")
	assert.Nil(t, n.Cache)
	assert.False(t, n.Loaded)
}

func TestParseLoader(t *testing.T) {
	for in, want := range map[string]ldso.Loader{"": ldso.LoaderNixOS, "nixos": ldso.LoaderNixOS, "stock": ldso.LoaderStock} {
		got, err := ldso.ParseLoader(in)
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
	_, err := ldso.ParseLoader("musl")
	require.ErrorContains(t, err, `unknown loader "musl"`)
}

func TestFormatNote(t *testing.T) {
	exe := "/bin/exe"
	files := fakeFS{
		exe:          withNote(withRunPath(lib("liba.so", "libb.so", "libc.so", "libm.so"), "/r"), desc("liba.so", "=/n/liba.so", "libb.so", "?$ORIGIN/../n", "libm.so", "=/gone/libm.so")),
		"/n/liba.so": lib(),
		"/n/libb.so": lib(),
		"/r/libc.so": lib(),
	}
	tr, err := ldso.Resolve(ldso.Config{DefaultDirs: []string{"/lib"}, WorkDir: "/"}, files.read, exe)
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, tr.Format(&buf))
	assert.Equal(t, strings.Join([]string{
		"/bin/exe",
		"    liba.so => /n/liba.so (ldcache of /bin/exe)",
		"    libb.so => /bin/../n/libb.so (ldcache ?$ORIGIN/../n of /bin/exe)",
		"    libc.so => /r/libc.so (runpath of /bin/exe; no entry in the note)",
		"    libm.so => not found",
		"        tried /gone/libm.so (ldcache of /bin/exe: missing)",
		"        tried /r/libm.so (runpath of /bin/exe: missing)",
		"        tried /lib/libm.so (default: missing)",
		"        every note element failed",
		"",
	}, "\n"), buf.String())
}

// FuzzNoteWalk feeds hostile descriptors to the simulated loader's note
// walk: it must never panic, whatever the bytes.
func FuzzNoteWalk(f *testing.F) {
	f.Add(desc("libB.so", "=/n/libB.so:?$ORIGIN"), "libB.so")
	f.Add([]byte("a\x00\x00\x00"), "a")
	f.Add([]byte("\x00\x00"), "")
	f.Add([]byte("a\x00b\x00c\x00\x00"), "c")
	f.Fuzz(func(t *testing.T, d []byte, name string) {
		if name == "" || strings.ContainsAny(name, "/\x00") {
			name = "libB.so"
		}
		files := fakeFS{
			"/bin/exe":   withNote(withRunPath(lib(name, name+".1"), "/r"), d),
			"/n/libB.so": lib(),
		}
		_, err := ldso.Resolve(ldso.Config{DefaultDirs: []string{"/lib"}, WorkDir: "/", Platform: "x86_64", Lib: "lib"}, files.read, "/bin/exe")
		require.NoError(t, err)
	})
}

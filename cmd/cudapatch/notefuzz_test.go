package main

import (
	"encoding/json"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/ldcache"
	"github.com/cudapatch/cudapatch/rpath/lint"
)

// Running it longer:
//
//	go test ./cmd/cudapatch -run=- -fuzz=FuzzExplainAgreesNote -fuzztime=10m
//
// FuzzExplainAgrees' oracle is the host's stock glibc, so it never sees
// the step explain simulates by default: nixpkgs' loader reading the
// requesting object's resolution-cache note after LD_LIBRARY_PATH and
// before DT_RUNPATH. This one gives the shaped trees notes (files, some
// missing or of the wrong class, directories, relative and unknown
// elements, empty lists, malformed descriptors) and compares explain with
// a loader that reads them (fixtures.NoteLoader), run in a root of its
// own so that its libc and default directories are the ones explain is
// told of with --root.

// noteRoot makes a root for the note-reading loader: its lib64 holds
// that glibc's loader and libc, and nothing else is there.
func noteRoot(t *testing.T, lib string) string {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(root, "lib64")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ld-linux-x86-64.so.2", "libc.so.6"} {
		if os.Link(filepath.Join(lib, name), filepath.Join(dst, name)) != nil {
			fixtures.CopyFile(t, filepath.Join(lib, name), filepath.Join(dst, name))
		}
	}
	return root
}

// chrootLoader runs the loader of root inside root: the child chroots
// before it executes the loader, so nothing of the host runs in between
// (a chroot program would itself obey LD_TRACE_LOADED_OBJECTS). Not as
// root, the child gets a user namespace in which it is.
func chrootLoader(t testing.TB, root string) func(args, env []string) ([]byte, error) {
	return func(args, env []string) ([]byte, error) {
		cmd := exec.Command(hostLoader, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
		if uid, gid := os.Geteuid(), os.Getegid(); uid != 0 {
			cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWUSER
			cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}}
			cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}}
		}
		return runChecked(t, cmd, env)
	}
}

// FuzzExplainAgreesNote: on any tree the bytes shape, with the
// resolution-cache notes they shape, explain's load order (--loader
// nixos, the default) is the one the note-reading loader lists, name for
// name and path for path.
func FuzzExplainAgreesNote(f *testing.F) {
	if _, err := os.Stat(hostLoader); err != nil {
		f.Skip("not an x86_64 glibc host")
	}
	lib := fixtures.NoteLoader(f)
	sh := shapeTemplates(f, true)
	addTreeSeeds(f, 31, 16, 96)
	f.Fuzz(func(t *testing.T, data []byte) {
		root := noteRoot(t, lib)
		exe, env := shapedTree(t, filepath.Join(root, "t"), "/t", treeBytes(data), sh)
		want, _, ok := ldListBy(t, chrootLoader(t, root), exe, env...)
		if !ok {
			return
		}
		args := []string{"--root", root, "--workdir", "/"}
		// shapedTree sets LD_LIBRARY_PATH or nothing; explain --root
		// takes it as a flag.
		var ldPath string
		if len(env) > 0 {
			ldPath, _ = strings.CutPrefix(env[0], "LD_LIBRARY_PATH=")
		}
		args = append(args, "--ld-library-path", ldPath, exe)
		assert.Equal(t, want, explainPairsArgs(t, nil, args...), "tree %q", data)
	})
}

// TestNoteLoader: the oracle of FuzzExplainAgreesNote reads notes. A
// program whose RUNPATH misses its library loads it through a note that
// names the file, and not without one; explain says the same both ways.
// scripts/test.sh runs it first, as the step that builds the loader.
func TestNoteLoader(t *testing.T) {
	if _, err := os.Stat(hostLoader); err != nil {
		t.Skip("not an x86_64 glibc host")
	}
	root := noteRoot(t, fixtures.NoteLoader(t))
	for _, d := range []string{"t/A", "t/C", "t/bin"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	libfoo := fixtures.C{Source: "int foo(void) { return 1; }\n", Args: []string{"-shared", "-fPIC", "-Wl,-soname,libfoo.so.1"}}
	fixtures.Place(t, libfoo, filepath.Join(root, "t/C/libfoo.so.1"))
	app := fixtures.Compile(t, fixtures.C{Source: "int main(void) { return 0; }\n"})
	runpath := "/t/A"
	note := func(list string) *elfedit.Note {
		return &elfedit.Note{NoteID: ldcache.NoteID, Desc: []byte("libfoo.so.1\x00" + list + "\x00\x00"), Section: ".note.nixos.ldcache"}
	}
	for _, tc := range []struct {
		name string
		note *elfedit.Note
		want string
	}{
		{"note", note("=/t/C/libfoo.so.1"), "/t/C/libfoo.so.1"},
		{"no note", nil, ""},
		// open("") fails with ENOENT: the loader tries the next element.
		{"empty file element", note("=:=/t/C/libfoo.so.1"), "/t/C/libfoo.so.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exe := filepath.Join(root, "t/bin/app")
			fixtures.CopyFile(t, app, exe)
			_, err := elfedit.EditFile(exe, elfedit.Edit{AddNeeded: []string{"libfoo.so.1"}, SetPath: &runpath, Tag: elfedit.TagRunPath, SetNote: tc.note}, elfedit.Options{})
			require.NoError(t, err)
			got, _, ok := ldListBy(t, chrootLoader(t, root), "/t/bin/app")
			require.True(t, ok, "the loader refused /t/bin/app")
			want := [][2]string{{"libfoo.so.1", tc.want}, {"libc.so.6", "/lib64/libc.so.6"}}
			assert.Equal(t, want, got, "the note-reading loader")
			assert.Equal(t, want, explainPairsArgs(t, nil, "--root", root, "--workdir", "/", "--ld-library-path", "", "/t/bin/app"), "explain")
		})
	}
}

// noteFlags are the main job's option sets FuzzNoteTrue picks from.
var noteFlags = [][]string{
	nil,
	{"--preserve-origin"},
	{"--append-rpath", "$ORIGIN"},
	{"--relativize-rpath"},
	{"--ignore-existing"},
}

// FuzzNoteTrue: the main job leaves every file's resolution-cache note
// true. On any tree the bytes shape (old notes included), after one
// patch run, the note-reading loader lists the same libraries at the same
// paths as it does once every note is removed: the note only saves the
// search. The tree stays at its path on the host (the notes name it), so
// the job keeps the note-reading glibc's libc directory in each RUNPATH
// (--keep-libc), as the scripts of bench/glibc-ldcache do; the host's own
// libraries answer none of the tree's names.
//
// The driver link is a directory beside the tree that the build does not
// see filled: after the run it stays absent, empty, or gets a libcuda.so.1
// (in a glibc-hwcaps subdirectory or not), as a machine's driver would;
// the notes must be true in each case, and no library of the tree's stub
// directory (d0/stubs) may load unless LD_LIBRARY_PATH names it.
func FuzzNoteTrue(f *testing.F) {
	if _, err := os.Stat(hostLoader); err != nil {
		f.Skip("not an x86_64 glibc host")
	}
	lib := fixtures.NoteLoader(f)
	loader := filepath.Join(lib, "ld-linux-x86-64.so.2")
	sh := shapeTemplates(f, true)
	addTreeSeeds(f, 32, 16, 96)
	driverDirs := []string{"", ".", "glibc-hwcaps/x86-64-v2"}
	f.Fuzz(func(t *testing.T, data []byte) {
		run := func(args, env []string) ([]byte, error) {
			return runChecked(t, exec.Command(loader, args...), env)
		}
		base, err := filepath.EvalSymlinks(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		root, drv := filepath.Join(base, "t"), filepath.Join(base, "drv")
		b := treeBytes(data)
		flags := noteFlags[b.pick(len(noteFlags))]
		driver := b.pick(len(driverDirs) + 1)
		exe, env := shapedTree(t, root, "", b, sh)
		args := append([]string{"--libc", lib, "--keep-libc", "--search", lib, "--driver-link", drv,
			"--ignore-missing", "*", "--symbols", "off", "--dlopen", "off"}, flags...)
		_, errOut, code := runCLI(t, nil, append(args, root)...)
		if code != exitOK && code != exitFindings {
			t.Fatalf("cudapatch %v: exit %d: %s", args, code, errOut)
		}
		// The machine's driver, after the build.
		if driver < len(driverDirs) {
			require.NoError(t, os.MkdirAll(filepath.Join(drv, driverDirs[driver]), 0o755))
			if driverDirs[driver] != "" {
				soname := "libcuda.so.1"
				p := filepath.Join(drv, driverDirs[driver], soname)
				require.NoError(t, os.WriteFile(p, sh.lib, 0o755))
				_, err := elfedit.EditFile(p, elfedit.Edit{Soname: &soname}, elfedit.Options{})
				require.NoError(t, err)
			}
		}
		withNotes, _, ok := ldListBy(t, run, exe, env...)
		if !ok {
			return
		}
		stubs := filepath.Join(root, "d0", "stubs")
		if !slices.Contains(env, "LD_LIBRARY_PATH="+stubs) {
			for _, p := range withNotes {
				assert.False(t, strings.HasPrefix(filepath.Clean(p[1]), stubs+"/"), "a stub loads (%s): tree %q, flags %q", p[1], data, flags)
			}
		}
		removeNotes(t, root)
		without, _, _ := ldListBy(t, run, exe, env...)
		assert.Equal(t, without, withNotes, "tree %q, flags %q, driver %d", data, flags, driver)
	})
}

// removeNotes removes the resolution-cache note of every ELF file below
// root.
func removeNotes(t *testing.T, root string) {
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		_, err = elfedit.EditFile(p, elfedit.Edit{RemoveNotes: []elfedit.NoteID{ldcache.NoteID}}, elfedit.Options{})
		return err
	})
	require.NoError(t, err)
}

// noteErrors are lint's rules on a note the loader may act on wrongly.
var noteErrors = []string{"CP014", "CP016", "CP017", "CP018"}

// FuzzLintNote: the notes lint accepts are true. On
// FuzzExplainAgreesNote's trees, once the notes of every file lint --root
// reports a note error on (noteErrors) are removed, the note-reading
// loader lists the same files at the same paths as with no note at all:
// no note lint lets pass changes what loads.
func FuzzLintNote(f *testing.F) {
	if _, err := os.Stat(hostLoader); err != nil {
		f.Skip("not an x86_64 glibc host")
	}
	lib := fixtures.NoteLoader(f)
	sh := shapeTemplates(f, true)
	addTreeSeeds(f, 33, 16, 96)
	f.Fuzz(func(t *testing.T, data []byte) {
		root := noteRoot(t, lib)
		exe, env := shapedTree(t, filepath.Join(root, "t"), "/t", treeBytes(data), sh)
		out, errOut, code := runCLI(t, nil, "lint", "--root", root, "--format", "json", filepath.Join(root, "t"))
		require.Contains(t, []int{exitOK, exitFindings}, code, "lint: %s", errOut)
		var rep lint.Report
		require.NoError(t, json.Unmarshal([]byte(out), &rep))
		flagged := map[string]bool{}
		for _, fd := range rep.Findings {
			if slices.Contains(noteErrors, fd.Rule) {
				flagged[fd.Path] = true
			}
		}
		for p := range flagged {
			_, err := elfedit.EditFile(p, elfedit.Edit{RemoveNotes: []elfedit.NoteID{ldcache.NoteID}}, elfedit.Options{})
			require.NoError(t, err)
		}
		accepted, _, ok := ldListBy(t, chrootLoader(t, root), exe, env...)
		if !ok {
			return
		}
		removeNotes(t, filepath.Join(root, "t"))
		none, _, _ := ldListBy(t, chrootLoader(t, root), exe, env...)
		assert.Equal(t, none, accepted, "tree %q: lint flagged %v", data, slices.Sorted(maps.Keys(flagged)))
	})
}

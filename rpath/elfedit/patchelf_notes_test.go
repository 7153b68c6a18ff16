package elfedit_test

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// patchelfNoted are the committed files with patchelf master's note
// (testdata/patchelf-master/README.md says how they were made).
var patchelfNoted = []struct {
	file, arch, libdir string
	run                []string
}{
	{"hello-pie", "x86_64", "/lib/x86_64-linux-gnu", nil},
	{"hello-nopie", "x86_64", "/lib/x86_64-linux-gnu", nil},
	{"hello-i686", "i686", "/usr/i686-linux-gnu/lib", []string{"qemu-i386", "-L", "/usr/i686-linux-gnu"}},
}

const patchelfNotedWant = "hello from a patchelf-noted binary\n"

// runNoted runs a copy of one of the patchelfNoted files.
func runNoted(run []string) func(path string) error {
	return func(path string) error {
		argv := append(slices.Clone(run), path)
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return err
		}
		if string(out) != patchelfNotedWant {
			return fmt.Errorf("%s printed %q", path, out)
		}
		return nil
	}
}

var elflintIndex = regexp.MustCompile(`\[\s*\d+\]|\d+`)

// elflintLines is eu-elflint's report as a set of lines with the numbers
// (section and segment indices, offsets) taken out: a removed section
// renumbers the ones after it.
func elflintLines(t testing.TB, path string) []string {
	t.Helper()
	out, _ := exec.Command("eu-elflint", "--gnu-ld", path).CombinedOutput()
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l == "" || strings.HasPrefix(l, "No errors") || unknownNote.MatchString(l) {
			continue
		}
		l = strings.ReplaceAll(l, path, "FILE")
		lines = append(lines, elflintIndex.ReplaceAllString(l, "N"))
	}
	slices.Sort(lines)
	return slices.Compact(lines)
}

// patchelfLoad reports whether a PT_LOAD maps exactly the bytes of the
// cache note (patchelf master's layout).
func patchelfLoad(t testing.TB, path string, n *elfedit.Note) bool {
	t.Helper()
	ef, err := elf.Open(path)
	require.NoError(t, err)
	defer ef.Close()
	return slices.ContainsFunc(ef.Progs, func(p *elf.Prog) bool {
		return p.Type == elf.PT_LOAD && p.Off == uint64(n.Off) && p.Filesz == uint64(len(noteBytes(ef.ByteOrder, "NixOS", cacheID.Type, n.Desc)))
	})
}

// TestPatchelfMasterNotes reads, replaces and removes the note of files
// patchelf master wrote, and makes it stale with a RUNPATH change. The note
// reads back with its section name and patchelf's descriptor; after each
// edit patchelf's PT_LOAD and PT_NOTE are gone (not left beside ours), the
// old descriptor's bytes are zeroed, readelf -W -a is quiet, eu-elflint
// finds nothing it did not find before, the program runs, and strip and
// objcopy give programs that run.
func TestPatchelfMasterNotes(t *testing.T) {
	t.Parallel()
	for _, pn := range patchelfNoted {
		orig := filepath.Join("testdata", "patchelf-master", pn.file)
		oldDesc := []byte("libc.so.6\x00=" + pn.libdir + "/libc.so.6\x00\x00")
		t.Run(pn.file+"/read", func(t *testing.T) {
			t.Parallel()
			f, err := elfedit.Open(orig)
			require.NoError(t, err)
			defer f.Close()
			n, ok, err := f.Note(cacheID)
			require.NoError(t, err)
			require.True(t, ok)
			assert.True(t, n.Loaded)
			assert.Equal(t, cacheSection, n.Section)
			assert.Equal(t, oldDesc, n.Desc)
			assert.True(t, patchelfLoad(t, orig, n), "patchelf's own PT_LOAD maps the note")
			assert.NoError(t, runNoted(pn.run)(orig))
		})
		for _, op := range []struct {
			name string
			edit elfedit.Edit
			want []byte // the note after, nil if none
		}{
			{"replace", elfedit.Edit{SetNote: cacheNote("pmpm", 700), Derived: []elfedit.NoteID{cacheID}}, cacheDesc("pmpm", 700)},
			{"replace-smaller", elfedit.Edit{SetNote: &elfedit.Note{NoteID: cacheID, Desc: []byte("x\x00\x00"), Section: cacheSection}}, []byte("x\x00\x00")},
			{"remove", elfedit.Edit{RemoveNotes: []elfedit.NoteID{cacheID}}, nil},
			{"derived-runpath", elfedit.Edit{SetPath: str(pn.libdir + ":/nonexistent/x"), Derived: []elfedit.NoteID{cacheID}}, nil},
			// Removing the linker's ABI tag keeps the cache (nothing it is
			// derived from changes) and exercises a shared PT_NOTE.
			{"remove-abi-tag", elfedit.Edit{Derived: []elfedit.NoteID{cacheID}, RemoveNotes: []elfedit.NoteID{{Owner: "GNU", Type: 1}}}, oldDesc},
		} {
			t.Run(pn.file+"/"+op.name, func(t *testing.T) {
				t.Parallel()
				path := filepath.Join(t.TempDir(), pn.file)
				copyFile(t, orig, path)
				before := info(t, path)
				lint := elflintLines(t, path)
				_, rerr := fixtures.Readelf(t, path)
				probs := problems(t, path)
				res, err := elfedit.EditFile(path, op.edit, elfedit.Options{})
				require.NoError(t, err)
				t.Logf("%s: %d -> %d bytes, %d written", planString(res.Plan), res.Plan.OldSize, res.Plan.NewSize, res.Plan.Written)
				checkWant(t, path, expect(before, op.edit))
				f, err := elfedit.Open(path)
				require.NoError(t, err)
				n, ok, err := f.Note(cacheID)
				f.Close()
				require.NoError(t, err)
				b := readFile(t, path)
				if op.want == nil {
					assert.False(t, ok, "note still there")
					o, _, _ := run("readelf", "-SW", path)
					assert.NotContains(t, o, cacheSection, "readelf -S")
					assert.Equal(t, elfedit.Region, res.Plan.Strategy, "a removed section header moves the table")
				} else {
					require.True(t, ok)
					assert.Equal(t, op.want, n.Desc)
					assert.True(t, n.Loaded)
					assert.Equal(t, cacheSection, n.Section)
				}
				if !bytes.Equal(op.want, oldDesc) {
					assert.False(t, bytes.Contains(b, []byte("="+pn.libdir+"/libc.so.6")), "the old descriptor is still in the file")
					ef, err := elf.Open(path)
					require.NoError(t, err)
					// patchelf's PT_LOAD and PT_NOTE went: none maps a page of
					// its own at the old note's offset.
					for _, p := range ef.Progs {
						if p.Type == elf.PT_LOAD || p.Type == elf.PT_NOTE {
							assert.False(t, p.Off%0x1000 == 0 && p.Filesz == uint64(len(noteBytes(ef.ByteOrder, "NixOS", cacheID.Type, oldDesc))),
								"patchelf's %v at 0x%x is still there", p.Type, p.Off)
						}
					}
					ef.Close()
				}
				assert.Subset(t, lint, elflintLines(t, path), "eu-elflint: new complaints")
				noNewProblems(t, probs, path)
				toolsAccept(t, fixtures.Fixture{Arch: pn.arch}, path, rerr, runNoted(pn.run))
				assert.NoError(t, runNoted(pn.run)(path))
			})
		}
	}
}

// TestObjcopyNote: a note objcopy --add-section added (unloaded, in no
// segment) is replaced by a loaded one or removed, its bytes zeroed; the
// file runs and passes the tools after each.
func TestObjcopyNote(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"bfd-pie", "lld-nopie", "i686-bfd-pie", "s390x-bfd-pie"} {
		for _, op := range []string{"replace", "remove", "derived"} {
			t.Run(name+"/"+op, func(t *testing.T) {
				t.Parallel()
				fx := fixtures.ByName(t, name).Copy(t)
				for path, p := range map[string]string{fx.Exe: originMain, fx.Libs[0]: originLib} {
					_, err := elfedit.EditFile(path, elfedit.Edit{SetPath: str(p)}, elfedit.Options{})
					require.NoError(t, err)
				}
				stale := cacheDesc("objc", 120)
				addUnloadedNote(t, fx, fx.Exe, cacheSection, noteBytes(byteOrder(t, fx.Exe), cacheID.Owner, cacheID.Type, stale))
				m := modelOf(t, fx.Exe)
				require.Equal(t, stale, m.cache)
				_, rerr := fixtures.Readelf(t, fx.Exe)
				probs := problems(t, fx.Exe)
				e := elfedit.Edit{Derived: []elfedit.NoteID{cacheID}}
				switch op {
				case "replace":
					e.SetNote = cacheNote("objd", 300)
				case "remove":
					e.RemoveNotes = []elfedit.NoteID{cacheID}
				case "derived":
					e.SetPath = str(originMain + ":/x")
				}
				before := info(t, fx.Exe)
				_, err := elfedit.EditFile(fx.Exe, e, elfedit.Options{})
				require.NoError(t, err)
				m.apply(e, isDerivedChange(before, e))
				checkWant(t, fx.Exe, expect(before, e))
				checkNotesModel(t, fx.Exe, m, true)
				noNewProblems(t, probs, fx.Exe)
				toolsAccept(t, fx, fx.Exe, rerr, runs(t, fx))
				assert.NoError(t, runs(t, fx)(fx.Exe))
			})
		}
	}
}

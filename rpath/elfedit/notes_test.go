package elfedit_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// cacheID is the id of the resolution-cache note nixpkgs' loader reads
// (patchelf --build-resolution-cache); the engine treats it like any other.
var cacheID = elfedit.NoteID{Owner: "NixOS", Type: 0x63a86cb6}

const cacheSection = ".note.nixos.ldcache"

// readelfNote is one note as `readelf -n` lists it.
type readelfNote struct {
	Section string // "" when listed by segment (no section headers)
	Owner   string
	Size    int
}

var (
	readelfNoteHead = regexp.MustCompile(`^Displaying notes found (?:in: (\S+)|at file offset)`)
	readelfNoteLine = regexp.MustCompile(`^  (\S+)\s+0x([0-9a-f]+)\t`)
)

// readelfNotes runs `readelf -nW` (which lists SHT_NOTE sections when the
// file has section headers, PT_NOTE segments otherwise) and parses it.
func readelfNotes(t testing.TB, path string) []readelfNote {
	t.Helper()
	o, e, err := run("readelf", "-nW", path)
	require.NoError(t, err, "readelf -n %s: %s", path, e)
	assert.Empty(t, e, "readelf -n %s warnings", path)
	var out []readelfNote
	sec := ""
	for _, line := range strings.Split(o, "\n") {
		if m := readelfNoteHead.FindStringSubmatch(line); m != nil {
			sec = m[1]
			continue
		}
		if m := readelfNoteLine.FindStringSubmatch(line); m != nil && m[1] != "Owner" {
			n, err := strconv.ParseInt(m[2], 16, 64)
			require.NoError(t, err)
			out = append(out, readelfNote{Section: sec, Owner: m[1], Size: int(n)})
		}
	}
	return out
}

func sortedNotes(ns []readelfNote) []readelfNote {
	ns = slices.Clone(ns)
	slices.SortFunc(ns, func(a, b readelfNote) int {
		return strings.Compare(fmt.Sprint(a), fmt.Sprint(b))
	})
	return ns
}

// ourNotes lists the notes of path as readelf would: by section where the
// file has section headers.
func ourNotes(t testing.TB, path string) ([]elfedit.Note, []readelfNote) {
	t.Helper()
	f, err := elfedit.Open(path)
	require.NoError(t, err)
	defer f.Close()
	ns, err := f.Notes()
	require.NoError(t, err, "Notes %s", path)
	var out []readelfNote
	for _, n := range ns {
		out = append(out, readelfNote{Section: n.Section, Owner: n.Owner, Size: len(n.Desc)})
	}
	return ns, out
}

// TestNotesMatchReadelf reads the notes of every file of every variant
// (every linker, both classes and byte orders, static ones too) and
// compares them with what readelf -n lists, and each descriptor with the
// bytes debug/elf reads from the section; a note is loaded exactly when
// its section is allocated, and Note finds the first of its id. (mold puts
// notes of both alignments under one PT_NOTE of p_align 8; gold adds an
// unallocated .note.gnu.gold-version.)
func TestNotesMatchReadelf(t *testing.T) {
	t.Parallel()
	for _, fx := range fixtures.All(t) {
		files := append([]string{fx.Exe}, fx.Libs...)
		for _, path := range files {
			t.Run(fx.Name+"/"+filepath.Base(path), func(t *testing.T) {
				t.Parallel()
				ns, got := ourNotes(t, path)
				require.NotEmpty(t, ns, "every fixture has at least a build-id or ABI-tag note")
				assert.Equal(t, sortedNotes(readelfNotes(t, path)), sortedNotes(got))
				ef, err := elf.Open(path)
				require.NoError(t, err)
				defer ef.Close()
				for _, n := range ns {
					s := ef.Section(n.Section)
					require.NotNil(t, s, "section %q", n.Section)
					// gold's .note.gnu.gold-version is not allocated.
					assert.Equal(t, s.Flags&elf.SHF_ALLOC != 0, n.Loaded, "%s: %s note: loaded", n.Section, n.Owner)
					data, err := s.Data()
					require.NoError(t, err)
					at := n.Off - int64(s.Offset)
					require.True(t, at >= 0 && at < int64(len(data)), "note at 0x%x outside %s", n.Off, n.Section)
					assert.True(t, bytes.Contains(data[at:], n.Desc), "%s: descriptor not in the section's bytes", n.Section)
				}
				f, err := elfedit.Open(path)
				require.NoError(t, err)
				defer f.Close()
				first, ok, err := f.Note(ns[0].NoteID)
				require.NoError(t, err)
				require.True(t, ok)
				assert.Equal(t, ns[0], *first)
				_, ok, err = f.Note(cacheID)
				require.NoError(t, err)
				assert.False(t, ok, "no fixture carries a resolution cache as built")
			})
		}
	}
}

// TestNotesWithoutSections: with the section header table gone (sstrip),
// the notes come from the PT_NOTE segments alone, with no section names,
// and match readelf's by-segment listing.
func TestNotesWithoutSections(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"bfd-pie", "lld-nopie", "mold-pie", "i686-bfd-pie", "s390x-bfd-pie"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fx := fixtures.ByName(t, name).Copy(t)
			withSecs, _ := ourNotes(t, fx.Exe)
			dropSections(t, fx, fx.Exe)
			ns, got := ourNotes(t, fx.Exe)
			require.Len(t, ns, len(withSecs))
			for i := range ns {
				assert.Empty(t, ns[i].Section)
				assert.True(t, ns[i].Loaded)
				withSecs[i].Section = ""
				assert.Equal(t, withSecs[i], ns[i])
			}
			if fx.Linker == "mold" {
				// mold puts the 4-aligned build-id after the 8-aligned
				// property note under one PT_NOTE of p_align 8: readelf
				// walks it with 8 and stops with a warning; we read it
				// with 4, which gives the same notes as the sections.
				return
			}
			assert.Equal(t, sortedNotes(readelfNotes(t, fx.Exe)), sortedNotes(got))
		})
	}
}

// noteBytes encodes a note as patchelf and the gABI lay it out.
func noteBytes(o binary.ByteOrder, owner string, typ uint32, desc []byte) []byte {
	name := append([]byte(owner), 0)
	b := make([]byte, 12)
	o.PutUint32(b, uint32(len(name)))
	o.PutUint32(b[4:], uint32(len(desc)))
	o.PutUint32(b[8:], typ)
	b = append(b, name...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	b = append(b, desc...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// addUnloadedNote adds a note section with objcopy --add-section, as
// patchelf's stale-cache test does: a SHT_NOTE section no PT_NOTE covers.
func addUnloadedNote(t testing.TB, fx fixtures.Fixture, path, section string, note []byte) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "note.bin")
	require.NoError(t, os.WriteFile(src, note, 0o644))
	o, e, err := run(binutilsPrefix[fx.Arch]+"objcopy", "--add-section", section+"="+src, path)
	require.NoError(t, err, "objcopy: %s%s", o, e)
}

func byteOrder(t testing.TB, path string) binary.ByteOrder {
	f, err := elfedit.Open(path)
	require.NoError(t, err)
	defer f.Close()
	return f.ByteOrder()
}

// TestNotesUnloaded: a note added by objcopy --add-section is found, with
// its section name, Loaded false, and its exact descriptor.
func TestNotesUnloaded(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"bfd-pie", "i686-bfd-pie", "s390x-bfd-pie"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fx := fixtures.ByName(t, name).Copy(t)
			desc := []byte("libfoo.so\x00=/nix/store/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-foo/lib/libfoo.so\x00\x00")
			addUnloadedNote(t, fx, fx.Exe, cacheSection, noteBytes(byteOrder(t, fx.Exe), cacheID.Owner, cacheID.Type, desc))
			f, err := elfedit.Open(fx.Exe)
			require.NoError(t, err)
			defer f.Close()
			n, ok, err := f.Note(cacheID)
			require.NoError(t, err)
			require.True(t, ok)
			assert.False(t, n.Loaded)
			assert.Equal(t, cacheSection, n.Section)
			assert.Equal(t, desc, n.Desc)
			ns, got := ourNotes(t, fx.Exe)
			assert.Equal(t, cacheID, ns[len(ns)-1].NoteID, "unloaded notes come last")
			assert.Equal(t, sortedNotes(readelfNotes(t, fx.Exe)), sortedNotes(got))
		})
	}
}

// TestNoteEditNoOp: an edit whose note operations change nothing plans a
// no-op: Derived notes when nothing derived changes, RemoveNotes of notes
// the file does not have, SetNote of the note the file already has.
func TestNoteEditNoOp(t *testing.T) {
	t.Parallel()
	fx := fixtures.ByName(t, "bfd-pie")
	f, err := elfedit.Open(fx.Exe)
	require.NoError(t, err)
	defer f.Close()
	ns, err := f.Notes()
	require.NoError(t, err)
	var abi elfedit.Note
	for _, n := range ns {
		if n.Section == ".note.ABI-tag" {
			abi = n
		}
	}
	require.Equal(t, "GNU", abi.Owner)
	in := f.Info()
	for name, e := range map[string]elfedit.Edit{
		"derived-alone":     {Derived: []elfedit.NoteID{cacheID, abi.NoteID}},
		"derived-same-path": {Derived: []elfedit.NoteID{abi.NoteID}, SetPath: in.RunPath},
		"remove-absent":     {RemoveNotes: []elfedit.NoteID{cacheID}},
		"set-same":          {SetNote: &elfedit.Note{NoteID: abi.NoteID, Desc: abi.Desc, Section: ".note.ABI-tag"}},
		"set-same-derived":  {SetNote: &elfedit.Note{NoteID: abi.NoteID, Desc: abi.Desc, Section: ".note.ABI-tag"}, Derived: []elfedit.NoteID{abi.NoteID}, SetPath: in.RunPath},
	} {
		p, err := f.Plan(e)
		require.NoError(t, err, name)
		assert.True(t, p.IsNoOp(), "%s: %s", name, planString(p))
	}
}

// TestNoteEditValidate: note edits with NUL bytes in names, or that set
// and remove the same note, are refused before anything is read.
func TestNoteEditValidate(t *testing.T) {
	for name, e := range map[string]elfedit.Edit{
		"owner-nul":       {SetNote: &elfedit.Note{NoteID: elfedit.NoteID{Owner: "a\x00b"}}},
		"section-nul":     {SetNote: &elfedit.Note{NoteID: cacheID, Section: ".note\x00x"}},
		"set-and-remove":  {SetNote: &elfedit.Note{NoteID: cacheID}, RemoveNotes: []elfedit.NoteID{cacheID}},
		"remove-nul-name": {RemoveNotes: []elfedit.NoteID{{Owner: "x\x00"}}},
	} {
		assert.Error(t, e.Validate(), name)
	}
	assert.NoError(t, (&elfedit.Edit{SetNote: &elfedit.Note{NoteID: cacheID, Desc: []byte("x"), Section: cacheSection}, Derived: []elfedit.NoteID{cacheID}}).Validate())
	assert.False(t, (&elfedit.Edit{SetNote: &elfedit.Note{NoteID: cacheID}}).IsZero())
	assert.False(t, (&elfedit.Edit{RemoveNotes: []elfedit.NoteID{cacheID}}).IsZero())
	assert.True(t, (&elfedit.Edit{Derived: []elfedit.NoteID{cacheID}}).IsZero(), "Derived alone asks for nothing")
}

// noteHostiles corrupt the notes of a real file.
func noteHostiles() []hostile {
	// notePhdr is the last 4-aligned PT_NOTE.
	notePhdr := func(t testing.TB, x *elfBytes) (int, *elf.Prog) {
		i := -1
		for j, p := range x.ef.Progs {
			if p.Type == elf.PT_NOTE && p.Align == 4 {
				i = j
			}
		}
		require.GreaterOrEqual(t, i, 0, "no 4-aligned PT_NOTE")
		return i, x.ef.Progs[i]
	}
	return []hostile{
		{name: "namesz-huge", mutate: func(t testing.TB, x *elfBytes) { _, p := notePhdr(t, x); x.put(p.Off, 4, 0xffffffff) }, readOK: true},
		{name: "descsz-huge", mutate: func(t testing.TB, x *elfBytes) { _, p := notePhdr(t, x); x.put(p.Off+4, 4, 0xfffffff0) }, readOK: true},
		{name: "descsz-overrun", mutate: func(t testing.TB, x *elfBytes) {
			_, p := notePhdr(t, x)
			x.put(p.Off+4, 4, uint64(x.o.Uint32(x.b[p.Off+4:]))+p.Filesz)
		}, readOK: true},
		{name: "descsz-short", mutate: func(t testing.TB, x *elfBytes) { _, p := notePhdr(t, x); x.put(p.Off+4, 4, 1) }, readOK: true},
		{name: "note-outside-loads", mutate: func(t testing.TB, x *elfBytes) {
			i, _ := notePhdr(t, x)
			x.prog(i, "off", uint64(len(x.b))-64)
			x.prog(i, "filesz", 64)
		}, readOK: true},
		{name: "note-past-eof", mutate: func(t testing.TB, x *elfBytes) {
			i, _ := notePhdr(t, x)
			x.prog(i, "filesz", uint64(len(x.b))*4)
		}, readOK: true},
		{name: "notes-overlap", mutate: func(t testing.TB, x *elfBytes) {
			// A second PT_NOTE (in place of PT_GNU_STACK) covering the
			// first one shifted by 4 bytes.
			i, p := notePhdr(t, x)
			j := x.progIndex(t, elf.PT_GNU_STACK)
			for _, f := range []string{"off", "vaddr", "paddr", "filesz", "memsz", "align"} {
				v := map[string]uint64{"off": p.Off + 4, "vaddr": p.Vaddr + 4, "paddr": p.Paddr + 4, "filesz": p.Filesz - 4, "memsz": p.Memsz - 4, "align": 4}[f]
				x.prog(j, f, v)
			}
			x.prog(j, "type", uint64(elf.PT_NOTE))
			_ = i
		}, readOK: true},
		{name: "note-align-odd", mutate: func(t testing.TB, x *elfBytes) { i, _ := notePhdr(t, x); x.prog(i, "align", 3) }, readOK: true},
	}
}

// TestHostileNotes: notes whose sizes lie, PT_NOTEs outside every PT_LOAD,
// past the end of the file, or overlapping. Reading the notes gives a
// one-line error or the notes, never a panic; every note edit is refused
// with a one-line error naming the file (which stays byte for byte as it
// was) or gives a file that reads back and has no new problem.
func TestHostileNotes(t *testing.T) {
	t.Parallel()
	for _, base := range hostileBases {
		for _, h := range noteHostiles() {
			t.Run(base.variant+"-"+base.file+"/"+h.name, func(t *testing.T) {
				t.Parallel()
				fx, path := baseFile(t, base.variant, base.file)
				orig := readFile(t, path)
				x := newElfBytes(t, orig)
				h.mutate(t, x)
				require.False(t, bytes.Equal(orig, x.b), "mutation changed nothing")
				bad := x.b
				f, err := elfedit.NewFile(bytes.NewReader(bad), int64(len(bad)))
				require.NoError(t, err, "NewFile does not read notes")
				if _, err := f.Notes(); err != nil {
					assert.NotContains(t, err.Error(), "\n")
				}
				_, _, _ = f.Note(cacheID)
				_ = f.Verify()
				_, _ = f.DlopenNotes()
				p := filepath.Join(t.TempDir(), filepath.Base(path))
				edits := []elfedit.Edit{
					{SetNote: cacheNote("host", 100), Derived: []elfedit.NoteID{cacheID}},
					{RemoveNotes: []elfedit.NoteID{{Owner: "GNU", Type: 3}}},
					{SetPath: str(pad(300, fx.LibDir)), Derived: []elfedit.NoteID{cacheID}},
				}
				for i, e := range edits {
					require.NoError(t, os.WriteFile(p, bad, 0o755))
					res, err := elfedit.EditFile(p, e, elfedit.Options{})
					if err != nil {
						oneLine(t, err, p)
						assert.True(t, bytes.Equal(bad, readFile(t, p)), "edit %d: refused edit changed the file", i)
						continue
					}
					t.Logf("edit %d accepted: %s", i, planString(res.Plan))
					checkWantElfedit(t, p, expect(res.Before, e))
					noNewProblems(t, problemsOf(t, bad), p)
				}
			})
		}
	}
}

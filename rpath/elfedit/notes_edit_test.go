package elfedit_test

import (
	"bytes"
	"debug/elf"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// cacheDesc makes a descriptor shaped like a resolution cache (what the
// engine writes is opaque bytes to it): one name and a store-path-like
// element carrying marker, so that a test can tell whether those bytes
// are still anywhere in the file, and about n bytes long.
func cacheDesc(marker string, n int) []byte {
	var b bytes.Buffer
	b.WriteString("libfoo.so\x00=/nix/store/")
	b.WriteString(marker)
	b.WriteString("-foo/lib/libfoo.so")
	for b.Len() < n-2 {
		b.WriteString(":?/x")
	}
	b.WriteString("\x00\x00")
	return b.Bytes()
}

func cacheNote(marker string, n int) *elfedit.Note {
	return &elfedit.Note{NoteID: cacheID, Desc: cacheDesc(marker, n), Section: cacheSection}
}

// noteModel is what the notes of a file must read back as: the linker's
// notes as built, and the cache note's descriptor (nil: none).
type noteModel struct {
	others []elfedit.Note
	cache  []byte
	// dead are descriptors that were replaced or removed: no byte of
	// their marker may remain in the file.
	dead [][]byte
}

func modelOf(t testing.TB, path string) *noteModel {
	ns, _ := ourNotes(t, path)
	m := &noteModel{}
	for _, n := range ns {
		if n.NoteID == cacheID {
			m.cache = n.Desc
		} else {
			m.others = append(m.others, n)
		}
	}
	return m
}

// apply folds an edit into the model, given whether it changes what the
// cache is derived from.
func (m *noteModel) apply(e elfedit.Edit, derived bool) {
	kill := func() {
		if m.cache != nil {
			m.dead = append(m.dead, m.cache)
		}
		m.cache = nil
	}
	if slices.Contains(e.RemoveNotes, cacheID) {
		kill()
	}
	if derived && slices.Contains(e.Derived, cacheID) && e.SetNote == nil {
		kill()
	}
	if e.SetNote != nil && e.SetNote.NoteID == cacheID && !bytes.Equal(e.SetNote.Desc, m.cache) {
		kill()
		m.cache = e.SetNote.Desc
	}
}

// deadMarker is the part of a cache descriptor that must not outlive it.
func deadMarker(desc []byte) []byte {
	i := bytes.Index(desc, []byte("/nix/store/"))
	j := bytes.Index(desc, []byte("-foo/lib"))
	return desc[i:j]
}

// checkNotes reads the notes of path with elfedit, debug/elf and readelf and
// compares them with the model.
func checkNotesModel(t testing.TB, path string, m *noteModel, sections bool) {
	t.Helper()
	f, err := elfedit.Open(path)
	require.NoError(t, err)
	ns, err := f.Notes()
	require.NoError(t, err, "Notes")
	f.Close()
	var others []elfedit.Note
	var caches []elfedit.Note
	for _, n := range ns {
		if n.NoteID == cacheID {
			caches = append(caches, n)
		} else {
			others = append(others, n)
		}
	}
	strip := func(ns []elfedit.Note) []string {
		var out []string
		for _, n := range ns {
			out = append(out, fmt.Sprintf("%s %s/%#x %v %x", n.Section, n.Owner, n.Type, n.Loaded, n.Desc))
		}
		slices.Sort(out) // moved notes may change order
		return out
	}
	assert.Equal(t, strip(m.others), strip(others), "the linker's notes")
	var b []byte
	if len(m.dead) > 0 {
		b = readFile(t, path)
	}
	for _, d := range m.dead {
		if i := bytes.Index(b, deadMarker(d)); i >= 0 && (m.cache == nil || !bytes.Contains(m.cache, deadMarker(d))) {
			t.Errorf("a removed note's %q is still in the file at 0x%x", deadMarker(d), i)
		}
	}
	re := readelfNotes(t, path)
	if m.cache == nil {
		assert.Empty(t, caches, "cache note")
		assert.False(t, slices.ContainsFunc(re, func(n readelfNote) bool { return n.Owner == "NixOS" }), "readelf -n lists a cache note: %v", re)
		return
	}
	if !assert.Len(t, caches, 1, "cache notes") {
		return
	}
	c := caches[0]
	assert.True(t, c.Loaded, "cache note loaded")
	assert.Equal(t, m.cache, c.Desc, "cache descriptor")
	want := readelfNote{Owner: "NixOS", Size: len(m.cache)}
	if sections {
		want.Section = cacheSection
		assert.Equal(t, cacheSection, c.Section)
	}
	assert.Contains(t, re, want, "readelf -n")
	// debug/elf: the section's bytes are the note, and a PT_NOTE maps it.
	ef, err := elf.Open(path)
	require.NoError(t, err)
	defer ef.Close()
	covered := slices.ContainsFunc(ef.Progs, func(p *elf.Prog) bool {
		return p.Type == elf.PT_NOTE && uint64(c.Off) >= p.Off && uint64(c.Off) < p.Off+p.Filesz
	})
	assert.True(t, covered, "debug/elf: no PT_NOTE covers the cache note at 0x%x", c.Off)
	if sections {
		s := ef.Section(cacheSection)
		require.NotNil(t, s, "debug/elf: section %s", cacheSection)
		assert.Equal(t, elf.SHT_NOTE, s.Type)
		assert.NotZero(t, s.Flags&elf.SHF_ALLOC, "SHF_ALLOC")
		data, err := s.Data()
		require.NoError(t, err)
		assert.Equal(t, noteBytes(f.ByteOrder(), "NixOS", cacheID.Type, m.cache), data)
		// readelf -p prints the descriptor's strings.
		o, e, err := run("readelf", "-p", cacheSection, path)
		require.NoError(t, err, e)
		assert.Empty(t, e, "readelf -p warnings")
		first, _, _ := bytes.Cut(m.cache, []byte{0})
		assert.Contains(t, o, string(first), "readelf -p %s", cacheSection)
	}
}

// checkNotesLight is checkNotesModel through elfedit only (no readelf, no
// debug/elf): cheap enough for every step of the property test.
func checkNotesLight(t testing.TB, path string, m *noteModel) {
	t.Helper()
	ns, _ := ourNotes(t, path)
	var others []string
	var caches []elfedit.Note
	for _, n := range ns {
		if n.NoteID == cacheID {
			caches = append(caches, n)
		} else {
			others = append(others, fmt.Sprintf("%s %s/%#x %v %x", n.Section, n.Owner, n.Type, n.Loaded, n.Desc))
		}
	}
	var want []string
	for _, n := range m.others {
		want = append(want, fmt.Sprintf("%s %s/%#x %v %x", n.Section, n.Owner, n.Type, n.Loaded, n.Desc))
	}
	slices.Sort(want)
	slices.Sort(others)
	assert.Equal(t, want, others, "the linker's notes")
	if m.cache == nil {
		assert.Empty(t, caches, "cache note")
	} else if assert.Len(t, caches, 1, "cache notes") {
		assert.True(t, caches[0].Loaded)
		assert.Equal(t, m.cache, caches[0].Desc)
	}
	if len(m.dead) > 0 {
		b := readFile(t, path)
		for _, d := range m.dead {
			if i := bytes.Index(b, deadMarker(d)); i >= 0 && (m.cache == nil || !bytes.Contains(m.cache, deadMarker(d))) {
				t.Errorf("a removed note's %q is still in the file at 0x%x", deadMarker(d), i)
			}
		}
	}
}

// noteCase is one row of TestNoteMatrix.
type noteCase struct {
	name string
	// steps returns the edits, applied in order to main and to libfoo.
	steps func(fx fixtures.Fixture, file string) []elfedit.Edit
}

func noteCases() []noteCase {
	derived := []elfedit.NoteID{cacheID}
	set := func(marker string, n int) elfedit.Edit {
		return elfedit.Edit{SetNote: cacheNote(marker, n), Derived: derived}
	}
	return []noteCase{
		{name: "set", steps: func(fixtures.Fixture, string) []elfedit.Edit { return []elfedit.Edit{set("aaaa", 100)} }},
		{name: "set+path", steps: func(fx fixtures.Fixture, file string) []elfedit.Edit {
			e := set("bbbb", 300)
			e.SetPath = str(pad(400, fx.LibDir))
			return []elfedit.Edit{e}
		}},
		{name: "replace-same", steps: func(fixtures.Fixture, string) []elfedit.Edit {
			return []elfedit.Edit{set("cccc", 200), set("cccc", 200)}
		}},
		{name: "replace-bigger-smaller", steps: func(fixtures.Fixture, string) []elfedit.Edit {
			return []elfedit.Edit{set("dddd", 100), set("eeee", 3000), set("ffff", 60)}
		}},
		{name: "remove", steps: func(fixtures.Fixture, string) []elfedit.Edit {
			return []elfedit.Edit{set("gggg", 200), {RemoveNotes: derived}, {RemoveNotes: derived}}
		}},
		{name: "derived-runpath", steps: func(fx fixtures.Fixture, file string) []elfedit.Edit {
			return []elfedit.Edit{set("hhhh", 200), {SetPath: str(pad(300, fx.LibDir)), Derived: derived}}
		}},
		{name: "derived-runpath-in-place", steps: func(fx fixtures.Fixture, file string) []elfedit.Edit {
			short := originMain
			if file == "libfoo" {
				short = originLib
			}
			return []elfedit.Edit{set("iiii", 200), {SetPath: str(short + ":/x"), Derived: derived}}
		}},
		{name: "derived-needed", steps: func(fx fixtures.Fixture, file string) []elfedit.Edit {
			return []elfedit.Edit{set("jjjj", 200), {AddNeeded: []string{"libbar.so"}, Derived: derived}}
		}},
		{name: "derived-kept", steps: func(fx fixtures.Fixture, file string) []elfedit.Edit {
			in := elfedit.Edit{Soname: str("libsoname-" + file + ".so"), Derived: derived}
			return []elfedit.Edit{set("kkkk", 200), in, {SetPath: str(pad(300, fx.LibDir)), SetNote: cacheNote("llll", 250), Derived: derived}}
		}},
	}
}

// isDerivedChange reports whether an edit changes DT_NEEDED, the search
// path or the interpreter of a file that reads as before.
func isDerivedChange(before elfedit.Info, e elfedit.Edit) bool {
	w0, w1 := wantOf(before), expect(before, e)
	return w0.Interp != w1.Interp || !slices.Equal(w0.Needed, w1.Needed) || deref(w0.RunPath) != deref(w1.RunPath) || deref(w0.RPath) != deref(w1.RPath)
}

// TestNoteMatrix writes, replaces and removes a resolution-cache note in
// bin/main and lib/libfoo.so of every variant (static ones: main only,
// without search-path edits), alone and together with RUNPATH and
// DT_NEEDED edits. After every edit the notes read back (elfedit, debug/elf,
// readelf -n and -p) as the model says, the dynamic values as expect says,
// no removed descriptor's bytes remain, Verify finds nothing new, readelf
// -W -a is as quiet as before, eu-elflint as clean, strip and objcopy give
// files that still run or load; and the file itself runs or loads.
func TestNoteMatrix(t *testing.T) {
	t.Parallel()
	for _, orig := range fixtures.All(t) {
		for _, c := range noteCases() {
			t.Run(orig.Name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				fx := orig.Copy(t)
				files := map[string]string{"main": fx.Exe}
				if !fx.Static {
					files["libfoo"] = fx.Libs[0]
					for file, p := range map[string]string{"main": originMain, "libfoo": originLib} {
						_, err := elfedit.EditFile(files[file], elfedit.Edit{SetPath: str(p), Tag: elfedit.TagKeep}, elfedit.Options{})
						require.NoError(t, err, "base RUNPATH of %s", file)
					}
				}
				use := map[string]func(string) error{"main": runs(t, fx), "libfoo": loads(t, fx)}
				for _, file := range []string{"main", "libfoo"} {
					path, ok := files[file]
					if !ok {
						continue
					}
					m := modelOf(t, path)
					sections := len(m.others) > 0 && m.others[0].Section != ""
					probs := problems(t, path)
					_, rerr := fixtures.Readelf(t, path)
					for i, e := range c.steps(fx, file) {
						if fx.Static && (e.SetPath != nil || len(e.AddNeeded) > 0 || e.Soname != nil) {
							continue
						}
						before := info(t, path)
						derived := isDerivedChange(before, e)
						res, err := elfedit.EditFile(path, e, elfedit.Options{})
						require.NoError(t, err, "%s step %d", file, i)
						t.Logf("%s step %d: %s, %d -> %d bytes, %d written", file, i, planString(res.Plan), res.Plan.OldSize, res.Plan.NewSize, res.Plan.Written)
						m.apply(e, derived)
						checkWant(t, path, expect(before, e))
						checkNotesModel(t, path, m, sections)
						noNewProblems(t, probs, path)
						toolsAccept(t, fx, path, rerr, use[file])
						assert.NoError(t, use[file](path), "%s step %d", file, i)
						if t.Failed() {
							keepOnFailure(t, fx)
							t.FailNow()
						}
					}
				}
			})
		}
	}
}

var _ = filepath.Join
var _ = strings.Contains

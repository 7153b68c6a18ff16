package elfedit_test

import (
	"bytes"
	"debug/elf"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// Fuzzing (one target at a time):
//
//	go test ./rpath/elfedit -run=- -fuzz=FuzzRead -fuzztime=5m
//	go test ./rpath/elfedit -run=- -fuzz=FuzzEdit -fuzztime=5m
//
// Crashers land in testdata/fuzz/<target>/ and are committed with the fix.
// The seeds there are small real files; -update-fuzz-seeds rewrites them
// from the fixture matrix.
var updateSeeds = flag.Bool("update-fuzz-seeds", false, "rewrite testdata/fuzz seed files from the fixtures")

// seedFiles are the small real files the fuzz corpora start from: three
// linkers, both classes, both byte orders, one file edited before (with a
// region), one with a resolution-cache note in its region and one with
// patchelf master's.
var seedFiles = []struct{ name, variant, file string }{
	{"bfd-main-note", "bfd-pie", "main-note"},
	{"patchelf-hello-pie", "", "patchelf-master/hello-pie"},
	{"lld-libbar", "lld-pie", "libbar"},
	{"lld-main", "lld-pie", "main"},
	{"mold-libfoo", "mold-pie", "libfoo"},
	{"i686-libbar", "i686-bfd-pie", "libbar"},
	{"s390x-libbar", "s390x-bfd-pie", "libbar"},
	{"bfd-main-region", "bfd-pie", "main-edited"},
}

func seedBytes(t testing.TB, variant, file string) []byte {
	if variant == "" {
		return readFile(t, filepath.Join("testdata", file))
	}
	fx := fixtures.ByName(t, variant)
	switch file {
	case "main":
		return readFile(t, fx.Exe)
	case "libfoo":
		return readFile(t, fx.Libs[0])
	case "libbar":
		return readFile(t, fx.Libs[1])
	case "main-note":
		fx = fx.Copy(t)
		_, err := elfedit.EditFile(fx.Exe, elfedit.Edit{SetNote: cacheNote("seed", 120)}, elfedit.Options{})
		require.NoError(t, err)
		return readFile(t, fx.Exe)
	case "main-edited":
		fx = fx.Copy(t)
		_, err := elfedit.EditFile(fx.Exe, elfedit.Edit{SetPath: str(pad(300, "/x")), Interpreter: str("/lib64/../lib64/ld-linux-x86-64.so.2")}, elfedit.Options{})
		require.NoError(t, err)
		return readFile(t, fx.Exe)
	}
	t.Fatalf("no seed file %q", file)
	return nil
}

// corpusFile is the text of a Go fuzz corpus entry.
func corpusFile(args ...any) string {
	var b strings.Builder
	b.WriteString("go test fuzz v1\n")
	for _, a := range args {
		switch v := a.(type) {
		case []byte:
			fmt.Fprintf(&b, "[]byte(%s)\n", strconv.Quote(string(v)))
		case string:
			fmt.Fprintf(&b, "string(%s)\n", strconv.Quote(v))
		case uint8:
			fmt.Fprintf(&b, "byte(%d)\n", v)
		}
	}
	return b.String()
}

// editSeeds are the edit arguments of FuzzEdit's seeds.
var editSeeds = []struct {
	path, interp, soname, needed string
	tag, flags                   uint8
}{
	{"/short", "", "", "", 0, 1},
	{strings.Repeat("/long", 100), "/lib64/../lib64/ld-linux-x86-64.so.2", "libx.so.1", "libnew.so", 0, 0xff},
	{"$ORIGIN", "", "libfoo.so", "libbar.so", 2, 1 | 4 | 32},
	{"/a:/b", "/x", "", "libc.so.6", 1, 1 | 2 | 16},
	{"", "", "", "", 1, 64},
	// Note operations (the high bits of tag).
	{"libfoo.so\x00=/nix/store/x-foo/lib/libfoo.so\x00\x00", "", "", "", 0x10 | 0x40, 0},
	{strings.Repeat("/long", 100), "", "", "", 0x10 | 0x40, 1},
	{"", "", "", "", 0x20 | 0x80, 0},
	{"/a:/b", "", "", "", 0x40 | 0x80, 1 | 8},
}

// TestFuzzSeeds keeps the committed seeds meaningful: each must still be an
// ELF file NewFile accepts. With -update-fuzz-seeds it rewrites them.
func TestFuzzSeeds(t *testing.T) {
	for _, s := range seedFiles {
		readPath := filepath.Join("testdata", "fuzz", "FuzzRead", s.name)
		if *updateSeeds {
			b := seedBytes(t, s.variant, s.file)
			require.NoError(t, os.MkdirAll(filepath.Dir(readPath), 0o755))
			require.NoError(t, os.WriteFile(readPath, []byte(corpusFile(b)), 0o644))
			// One committed edit seed per file (every field set); FuzzEdit
			// adds the other combinations from the fixtures itself.
			e := editSeeds[1]
			p := filepath.Join("testdata", "fuzz", "FuzzEdit", s.name)
			require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
			require.NoError(t, os.WriteFile(p, []byte(corpusFile(b, e.path, e.interp, e.soname, e.needed, e.tag, e.flags)), 0o644))
		}
		b := corpusArgs(t, readPath)[0].(string)
		_, err := elfedit.NewFile(strings.NewReader(b), int64(len(b)))
		assert.NoError(t, err, readPath)
	}
}

// FuzzRead: NewFile, Info, Verify, DlopenNotes and Notes on arbitrary bytes never
// panic, errors are one line, and they allocate at most allocFactor × the
// input + allocConst.
func FuzzRead(f *testing.F) {
	for _, s := range seedFiles {
		if s.file != "main-edited" {
			f.Add(seedBytes(f, s.variant, s.file))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		ef, err := elfedit.NewFile(bytes.NewReader(data), int64(len(data)))
		if err == nil {
			in := ef.Info()
			_ = ef.Verify()
			_, _ = ef.RunPath()
			_, _ = ef.DlopenNotes()
			_, _ = ef.Notes()
			_ = in.Kind
		}
		runtime.ReadMemStats(&m1)
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("error message of more than one line: %q", err)
		}
		if n := m1.TotalAlloc - m0.TotalAlloc; n > allocFactor*uint64(len(data))+allocConst {
			t.Errorf("%d bytes allocated reading %d bytes", n, len(data))
		}
	})
}

// memTarget is an in-memory Target.
type memTarget struct{ b []byte }

func (m *memTarget) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(m.b)) {
		return 0, io.EOF
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (m *memTarget) WriteAt(p []byte, off int64) (int, error) {
	if end := off + int64(len(p)); end > int64(len(m.b)) {
		m.b = append(m.b, make([]byte, end-int64(len(m.b)))...)
	}
	return copy(m.b[off:], p), nil
}

func (m *memTarget) Truncate(size int64) error {
	if size <= int64(len(m.b)) {
		m.b = m.b[:size]
		return nil
	}
	m.b = append(m.b, make([]byte, size-int64(len(m.b)))...)
	return nil
}

// fuzzEdit builds an Edit from FuzzEdit's arguments: flags selects the
// fields, needed names the DT_NEEDED to add, and the replacement of the
// file's first DT_NEEDED.
func fuzzEdit(in elfedit.Info, path, interp, soname, needed string, tag, flags uint8) elfedit.Edit {
	e := elfedit.Edit{Tag: elfedit.PathTag(tag % 3)}
	if flags&1 != 0 {
		e.SetPath = &path
	}
	if flags&2 != 0 {
		e.Interpreter = &interp
	}
	if flags&4 != 0 {
		e.Soname = &soname
	}
	if flags&8 != 0 {
		e.AddNeeded = []string{needed}
	}
	if flags&16 != 0 && len(in.Needed) > 0 {
		e.RemoveNeeded = []string{in.Needed[len(in.Needed)-1]}
	}
	if flags&32 != 0 && len(in.Needed) > 0 {
		e.ReplaceNeeded = []elfedit.Replace{{Old: in.Needed[0], New: needed}}
	}
	if flags&64 != 0 && e.SetPath == nil {
		e.RemovePath = true
	}
	// The high bits of tag (tag%3 is the PathTag) pick note operations:
	// write a resolution cache whose descriptor is the path, remove it,
	// name it derived, remove the linker's build-id note.
	if tag&0x10 != 0 {
		e.SetNote = &elfedit.Note{NoteID: cacheID, Desc: []byte(path), Section: cacheSection}
	}
	if tag&0x20 != 0 {
		e.RemoveNotes = append(e.RemoveNotes, cacheID)
	}
	if tag&0x40 != 0 {
		e.Derived = []elfedit.NoteID{cacheID}
	}
	if tag&0x80 != 0 {
		e.RemoveNotes = append(e.RemoveNotes, elfedit.NoteID{Owner: "GNU", Type: 3})
	}
	return e
}

// FuzzEdit plans an edit of an ELF file (a real one, or what the fuzzer
// made of it) with fuzzed strings. Whenever Plan succeeds, the planned
// result must read back with the requested values, Verify must find no
// problem in it that the original did not have, and applying the plan to
// a copy of the bytes must give exactly what Result read.
func FuzzEdit(f *testing.F) {
	for _, s := range seedFiles {
		b := seedBytes(f, s.variant, s.file)
		for _, e := range editSeeds {
			f.Add(b, e.path, e.interp, e.soname, e.needed, e.tag, e.flags)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, path, interp, soname, needed string, tag, flags uint8) {
		checkEdit(t, data, path, interp, soname, needed, tag, flags)
	})
}

// checkEdit is FuzzEdit's property. It reports whether it found no fault.
func checkEdit(t *testing.T, data []byte, path, interp, soname, needed string, tag, flags uint8) bool {
	t.Helper()
	ok := true
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf(format, args...)
		ok = false
	}
	ef, err := elfedit.NewFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return true
	}
	in := ef.Info()
	e := fuzzEdit(in, path, interp, soname, needed, tag, flags)
	if e.Validate() != nil {
		return true
	}
	p, err := ef.Plan(e)
	if err != nil {
		if strings.Contains(err.Error(), "\n") {
			fail("error message of more than one line: %q", err)
		}
		return ok
	}
	res, err := p.Result()
	if err != nil {
		fail("planned result does not read back: %v: %s", err, planString(p))
		return false
	}
	if want, got := expect(in, e), wantOf(res.Info()); !assert.Equal(t, want, got, "planned result: %s", planString(p)) {
		ok = false
	}
	// EditFile's own check: the requested values, and the notes (set,
	// removed, stale derived ones gone, the others as they were).
	if err := elfedit.CheckResult(ef, res, &e); err != nil {
		fail("%v (planned result: %s)", err, planString(p))
	}
	// Section names read as before: a note edit may add its section's
	// name and drop a note section's, nothing else changes. (Not where
	// the names are unreadable or ambiguous to begin with, which Verify
	// names: a name table past the end of the file reads once the file
	// grows.)
	namesOK := !slices.ContainsFunc(ef.Verify(), func(p elfedit.Problem) bool { return p.Rule == "section-name" || p.Rule == "section-headers" })
	count := func(f *elfedit.File) map[string]int {
		m := map[string]int{}
		for _, s := range f.Sections {
			m[s.Name]++
		}
		return m
	}
	was, now := count(ef), count(res)
	for name, n := range was {
		note := slices.ContainsFunc(ef.Sections, func(s elfedit.Section) bool { return s.Name == name && s.Type == elf.SHT_NOTE })
		if namesOK && now[name] < n && !note {
			fail("section name %q: %d sections before, %d after (%s)", name, n, now[name], planString(p))
		}
	}
	for name, n := range now {
		if namesOK && n > was[name] && (e.SetNote == nil || name != e.SetNote.Section) {
			fail("section name %q: %d sections before, %d after (%s)", name, was[name], n, planString(p))
		}
	}
	had := map[string]bool{}
	for _, pr := range ef.Verify() {
		had[pr.Rule] = true
	}
	for _, pr := range res.Verify() {
		if !had[pr.Rule] {
			fail("new problem %s: %s (%s)", pr.Rule, pr.Msg, planString(p))
		}
	}
	m := &memTarget{b: bytes.Clone(data)}
	if err := p.Apply(m, false); err != nil {
		fail("apply: %v", err)
		return false
	}
	if int64(len(m.b)) != p.NewSize {
		fail("applied size %d, planned %d", len(m.b), p.NewSize)
	}
	applied, err := elfedit.NewFile(bytes.NewReader(m.b), int64(len(m.b)))
	if err != nil {
		fail("applied result does not read: %v", err)
		return false
	}
	if !assert.Equal(t, res.Info(), applied.Info(), "Result and Apply disagree") {
		ok = false
	}
	return ok
}

// TestEditMutatedHeaders runs FuzzEdit's property over seed files whose
// program and section headers are mutated the way the fuzzer finds hard to
// (a word of a header set to a power of two, nudged, or a byte flipped; a
// bit of the ELF header now and then),
// from a fixed seed so that a failure reproduces. Each mutation is planned
// with a few random edits. Inputs like these (CI's FuzzEdit crasher of
// 2026-11-24 among them: a region edit that moved notes under a PT_NOTE
// too short for them) found 40 faults in 2,435 mutations before the
// planner refused or handled them.
func TestEditMutatedHeaders(t *testing.T) {
	mutationSweep(t, "ELFEDIT_MUTATIONS_PER_SEED", 1500, 20261124, mutateHeader)
}

// mutateHeader changes a word of a program or section header of data (or
// a bit of the ELF header) and says where.
func mutateHeader(rng *rand.Rand, ef *elfedit.File, data []byte) string {
	h := ef.Header
	word := 8
	if h.Class == elf.ELFCLASS32 {
		word = 4
	}
	order := ef.ByteOrder()
	var at int
	switch r := rng.IntN(9); {
	case r == 0:
		// A byte of the ELF header past e_ident (an e_shstrndx past
		// the table, say).
		at = 16 + rng.IntN(36)
		data[at] ^= 1 << rng.IntN(8)
		return fmt.Sprintf("0x%x", at)
	case r <= 4:
		at = int(h.Phoff) + int(h.Phentsize)*rng.IntN(int(h.Phnum)) + word*rng.IntN(int(h.Phentsize)/word)
	default:
		at = int(h.Shoff) + int(h.Shentsize)*rng.IntN(int(h.Shnum)) + word*rng.IntN(int(h.Shentsize)/word)
	}
	if at+word > len(data) {
		return ""
	}
	put := func(v uint64) {
		if word == 8 {
			order.PutUint64(data[at:], v)
		} else {
			order.PutUint32(data[at:], uint32(v))
		}
	}
	get := func() uint64 {
		if word == 8 {
			return order.Uint64(data[at:])
		}
		return uint64(order.Uint32(data[at:]))
	}
	switch rng.IntN(4) {
	case 0:
		data[at] = byte(rng.IntN(256))
	case 1:
		put(1 << rng.IntN(13))
	case 2:
		put(get() + uint64(rng.IntN(64)) - 32)
	case 3:
		data[at+rng.IntN(word)] ^= 1 << rng.IntN(8)
	}
	return fmt.Sprintf("0x%x", at)
}

// TestEditMutatedBodies is TestEditMutatedHeaders for the bytes the
// headers point at: a byte of the file set, zeroed or flipped, most often
// in the sections an edit reads and rewrites (.dynamic, the string tables,
// the version needs, notes, .interp). A sweep like this one, over the
// whole file, found replaced DT_NEEDED names that read back truncated
// ("libn") or as scrub bytes after the string-table layout trusted a
// mutated .dynstr.
func TestEditMutatedBodies(t *testing.T) {
	mutationSweep(t, "ELFEDIT_BODY_MUTATIONS_PER_SEED", 1500, 20261125, mutateBody)
}

// mutateBody changes a byte of data, most often in a section an edit
// reads, and says where.
func mutateBody(rng *rand.Rand, ef *elfedit.File, data []byte) string {
	at := rng.IntN(len(data))
	if rng.IntN(4) != 0 {
		var hot []elfedit.Section
		for _, s := range ef.Sections {
			switch s.Type {
			case elf.SHT_DYNAMIC, elf.SHT_STRTAB, elf.SHT_GNU_VERNEED, elf.SHT_NOTE, elf.SHT_GNU_VERSYM, elf.SHT_DYNSYM:
			default:
				if s.Name != ".interp" {
					continue
				}
			}
			if s.Size > 0 && s.Offset+s.Size <= uint64(len(data)) {
				hot = append(hot, s)
			}
		}
		if len(hot) > 0 {
			s := hot[rng.IntN(len(hot))]
			at = int(s.Offset) + rng.IntN(int(s.Size))
		}
	}
	switch rng.IntN(3) {
	case 0:
		data[at] = byte(rng.IntN(256))
	case 1:
		data[at] = 0
	case 2:
		data[at] ^= 1 << rng.IntN(8)
	}
	return fmt.Sprintf("0x%x", at)
}

// mutationSweep runs FuzzEdit's property over rounds mutations of each
// seed file (env, when set, says how many), each mutation one to three
// calls of mutate on a fresh copy of the seed, planned with eight random
// edits, all from a fixed seed so that a failure reproduces. A seed stops
// at its third fault. ELFEDIT_MUTATION_SEED=N explores other mutations;
// ELFEDIT_MUTATIONS=DIR writes each failing input there (named sweep-id-pathlen-tag-flags.bin) to look at with readelf.
func mutationSweep(t *testing.T, env string, rounds int, seed uint64, mutate func(rng *rand.Rand, ef *elfedit.File, data []byte) string) {
	paths := []string{"", "/a", strings.Repeat("/x", 50), strings.Repeat("/long", 100)}
	if v, err := strconv.Atoi(os.Getenv(env)); err == nil {
		rounds = v
	}
	if v, err := strconv.ParseUint(os.Getenv("ELFEDIT_MUTATION_SEED"), 10, 64); err == nil {
		seed = v
	}
	for si, s := range seedFiles {
		t.Run(s.name, func(t *testing.T) {
			orig := seedBytes(t, s.variant, s.file)
			ef, err := elfedit.NewFile(bytes.NewReader(orig), int64(len(orig)))
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(seed, uint64(si)))
			faults := 0
			for n := 0; n < rounds && faults < 3; n++ {
				data := bytes.Clone(orig)
				var what []string
				for k := 1 + rng.IntN(3); k > 0; k-- {
					if at := mutate(rng, ef, data); at != "" {
						what = append(what, at)
					}
				}
				for j := 0; j < 8; j++ {
					tag, flags := uint8(rng.IntN(256)), uint8(rng.IntN(256))
					path := paths[rng.IntN(len(paths))]
					if !checkEdit(t, data, path, "/lib64/../lib64/ld-linux-x86-64.so.2", "libx.so.1", "libnew.so", tag, flags) {
						t.Logf("mutation %d (at %s), path of %d bytes, tag 0x%x, flags 0x%x", n, strings.Join(what, " "), len(path), tag, flags)
						if dir := os.Getenv("ELFEDIT_MUTATIONS"); dir != "" {
							name := fmt.Sprintf("%s-%d-%d-%d-%d.bin", env, si*10000+n, len(path), tag, flags)
							require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o644))
						}
						faults++
						break
					}
				}
			}
		})
	}
}

// TestEditShstrndxPastTable: an e_shstrndx past the section header table
// (the names unreadable) made every region edit of an lld or mold file
// that sorts its section headers index out of range (the main job turned
// the panic into "internal error" for the file). Each edit FuzzEdit can
// make of each seed with such an e_shstrndx either fails or passes its
// property.
func TestEditShstrndxPastTable(t *testing.T) {
	for _, s := range seedFiles {
		t.Run(s.name, func(t *testing.T) {
			data := seedBytes(t, s.variant, s.file)
			ef, err := elfedit.NewFile(bytes.NewReader(data), int64(len(data)))
			require.NoError(t, err)
			at := 0x3e // e_shstrndx
			if ef.Header.Class == elf.ELFCLASS32 {
				at = 0x32
			}
			ef.ByteOrder().PutUint16(data[at:], uint16(ef.Header.Shnum+62))
			checkEdits(t, data, []string{"", strings.Repeat("/long", 100)}, []uint8{0, 0x10})
		})
	}
}

// checkEdits runs FuzzEdit's property over data with every flags value,
// each path and each tag, and stops the test at the first edit that
// breaks it.
func checkEdits(t *testing.T, data []byte, paths []string, tags []uint8) {
	t.Helper()
	for _, path := range paths {
		for _, tag := range tags {
			for flags := range 256 {
				if !checkEdit(t, data, path, "/lib64/../lib64/ld-linux-x86-64.so.2", "libx.so.1", "libnew.so", tag, uint8(flags)) {
					t.Fatalf("path of %d bytes, tag 0x%x, flags 0x%x", len(path), tag, flags)
				}
			}
		}
	}
}

// TestEditUnterminatedSectionName: a section name table whose last name
// lost its NUL (its last byte made ';') read that name as nothing; an
// edit that added a section name appended to the table after a NUL of its
// own, and the old name then read as something (".note.nixos.ldcache;"
// in TestEditMutatedBodies with ELFEDIT_MUTATION_SEED=7). Such a table
// now takes no new name (a one-line error), Verify names it, and an edit
// that writes a note of a new section either fails or leaves every
// section's name as it read.
func TestEditUnterminatedSectionName(t *testing.T) {
	for _, s := range seedFiles {
		t.Run(s.name, func(t *testing.T) {
			data := seedBytes(t, s.variant, s.file)
			ef, err := elfedit.NewFile(bytes.NewReader(data), int64(len(data)))
			require.NoError(t, err)
			st := ef.Sections[ef.Header.Shstrndx]
			last := st.Offset + st.Size - 1
			require.Zero(t, data[last], "the name table does not end in a NUL")
			data[last] = ';'
			ef, err = elfedit.NewFile(bytes.NewReader(data), int64(len(data)))
			require.NoError(t, err)
			assert.True(t, slices.ContainsFunc(ef.Verify(), func(p elfedit.Problem) bool { return p.Rule == "section-name" }), "Verify: %v", ef.Verify())
			var names []string
			for _, s := range ef.Sections {
				names = append(names, s.Name)
			}
			if p, err := ef.Plan(elfedit.Edit{SetNote: &elfedit.Note{NoteID: elfedit.NoteID{Owner: "Test", Type: 7}, Desc: []byte("x"), Section: ".note.test"}}); err != nil {
				assert.NotContains(t, err.Error(), "\n")
			} else {
				res, err := p.Result()
				require.NoError(t, err)
				for i, s := range res.Sections {
					if s.Name != ".note.test" {
						assert.Contains(t, names, s.Name, "section %d's name changed", i)
					}
				}
			}
			checkEdits(t, data, []string{"", strings.Repeat("/x", 50)}, []uint8{0x10, 0x30, 0x90})
		})
	}
}

package elfedit_test

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
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
	{"", "", "", "", 1, 64 | 128},
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
		text := string(readFile(t, readPath))
		line, _, _ := strings.Cut(strings.TrimPrefix(text, "go test fuzz v1\n"), "\n")
		q := strings.TrimSuffix(strings.TrimPrefix(line, "[]byte("), ")")
		b, err := strconv.Unquote(q)
		require.NoError(t, err, readPath)
		_, err = elfedit.NewFile(strings.NewReader(b), int64(len(b)))
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
	e.Retag = flags&128 != 0
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
		ef, err := elfedit.NewFile(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		in := ef.Info()
		e := fuzzEdit(in, path, interp, soname, needed, tag, flags)
		if e.Validate() != nil {
			return
		}
		p, err := ef.Plan(e)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error message of more than one line: %q", err)
			}
			return
		}
		res, err := p.Result()
		require.NoError(t, err, "planned result does not read back: %s", planString(p))
		assert.Equal(t, expect(in, e), wantOf(res.Info()), "planned result: %s", planString(p))
		// EditFile's own check: the requested values, and the notes (set,
		// removed, stale derived ones gone, the others as they were).
		assert.NoError(t, elfedit.CheckResult(ef, res, &e), "planned result: %s", planString(p))
		had := map[string]bool{}
		for _, pr := range ef.Verify() {
			had[pr.Rule] = true
		}
		for _, pr := range res.Verify() {
			if !had[pr.Rule] {
				t.Errorf("new problem %s: %s (%s)", pr.Rule, pr.Msg, planString(p))
			}
		}
		m := &memTarget{b: bytes.Clone(data)}
		require.NoError(t, p.Apply(m, false))
		assert.Equal(t, p.NewSize, int64(len(m.b)), "applied size")
		applied, err := elfedit.NewFile(bytes.NewReader(m.b), int64(len(m.b)))
		require.NoError(t, err, "applied result does not read")
		assert.Equal(t, res.Info(), applied.Info(), "Result and Apply disagree")
	})
}

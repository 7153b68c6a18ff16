package elfedit_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// watch reports what happens to a file through inotify: IN_CLOSE_WRITE
// means it was opened for writing, whether or not a byte changed, which
// the mtime cannot show.
type watch struct {
	fd     int
	closes int // IN_CLOSE_NOWRITE events seen so far
}

func watchFile(t *testing.T, path string) *watch {
	t.Helper()
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	require.NoError(t, err)
	t.Cleanup(func() { syscall.Close(fd) })
	_, err = syscall.InotifyAddWatch(fd, path, syscall.IN_OPEN|syscall.IN_MODIFY|syscall.IN_ATTRIB|syscall.IN_CLOSE_WRITE|syscall.IN_CLOSE_NOWRITE)
	require.NoError(t, err)
	return &watch{fd: fd}
}

// events returns the union of the event masks seen since the last call.
func (w *watch) events(t *testing.T) uint32 {
	t.Helper()
	var mask uint32
	buf := make([]byte, 64*1024)
	for {
		n, err := syscall.Read(w.fd, buf)
		if errors.Is(err, syscall.EINTR) {
			continue // the Go runtime's preemption signal: not the end of the queue
		}
		if errors.Is(err, syscall.EAGAIN) {
			return mask
		}
		require.NoError(t, err)
		if n <= 0 {
			return mask
		}
		for off := 0; off+syscall.SizeofInotifyEvent <= n; {
			m := binary.NativeEndian.Uint32(buf[off+4:])
			mask |= m
			if m&syscall.IN_CLOSE_NOWRITE != 0 {
				w.closes++
			}
			off += syscall.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(buf[off+12:]))
		}
	}
}

// settle returns the events seen until the closes of n reads have been
// reported. A close is reported when the last reference to the open file
// goes, and a process that parallel tests fork holds a copy of every
// descriptor open at the fork until it execs: so events may come late.
func (w *watch) settle(t *testing.T, n int) uint32 {
	t.Helper()
	var mask uint32
	deadline := time.Now().Add(10 * time.Second)
	for w.closes < n {
		if time.Now().After(deadline) {
			t.Fatalf("inotify reported %d closes of reads in 10 s, want %d (mask 0x%x)", w.closes, n, mask)
		}
		mask |= w.events(t)
		time.Sleep(time.Millisecond)
	}
	w.closes -= n
	return mask
}

// noOpEdits returns edits that ask for what the file already has.
func noOpEdits(in elfedit.Info) map[string]elfedit.Edit {
	es := map[string]elfedit.Edit{"zero": {}}
	all := elfedit.Edit{}
	if in.RunPath != nil {
		es["runpath"] = elfedit.Edit{SetPath: in.RunPath}
		es["runpath-keep"] = elfedit.Edit{SetPath: in.RunPath, Tag: elfedit.TagKeep}
		all.SetPath = in.RunPath
	}
	if in.RPath != nil {
		es["rpath"] = elfedit.Edit{SetPath: in.RPath, Tag: elfedit.TagRPath}
		es["rpath-keep"] = elfedit.Edit{SetPath: in.RPath, Tag: elfedit.TagKeep}
		all.SetPath, all.Tag = in.RPath, elfedit.TagRPath
	}
	if in.RunPath == nil && in.RPath == nil {
		es["remove-path"] = elfedit.Edit{RemovePath: true}
	}
	if in.Interpreter != "" {
		es["interpreter"] = elfedit.Edit{Interpreter: &in.Interpreter}
		all.Interpreter = &in.Interpreter
	}
	if in.Soname != "" {
		es["soname"] = elfedit.Edit{Soname: &in.Soname}
		all.Soname = &in.Soname
	}
	if len(in.Needed) > 0 {
		es["add-needed"] = elfedit.Edit{AddNeeded: in.Needed[:1]}
		es["replace-needed"] = elfedit.Edit{ReplaceNeeded: []elfedit.Replace{{Old: in.Needed[0], New: in.Needed[0]}}}
		all.AddNeeded = in.Needed
		all.ReplaceNeeded = []elfedit.Replace{{Old: in.Needed[len(in.Needed)-1], New: in.Needed[len(in.Needed)-1]}}
	}
	// Note operations that change nothing: a derived note when nothing it
	// derives from changes, removing a note the file does not have.
	es["derived-alone"] = elfedit.Edit{Derived: []elfedit.NoteID{cacheID}}
	es["derived-same-values"] = elfedit.Edit{Derived: []elfedit.NoteID{cacheID}, SetPath: all.SetPath, Tag: all.Tag, Interpreter: all.Interpreter}
	es["remove-absent-note"] = elfedit.Edit{RemoveNotes: []elfedit.NoteID{{Owner: "absent", Type: 1}}}
	es["remove-absent-needed"] = elfedit.Edit{RemoveNeeded: []string{"libabsent.so"}}
	es["replace-absent-needed"] = elfedit.Edit{ReplaceNeeded: []elfedit.Replace{{Old: "libabsent.so", New: "libother.so"}}}
	all.RemoveNeeded = []string{"libabsent.so"}
	es["all"] = all
	return es
}

// TestNoOp asks every file of every variant, as built and after an edit
// that moved its tables into a region, for the values it already has.
// EditFile must plan a no-op, report nothing changed, and leave the file
// alone: same bytes, same mtime, and (inotify) never opened for writing.
func TestNoOp(t *testing.T) {
	t.Parallel()
	t.Run("watch-sees-an-open-for-writing", func(t *testing.T) {
		// Up to three tries, each with its own file and watch: one CI run
		// of the whole package saw no event once (a parallel test's
		// descriptor traffic is the suspect), which the next runs never
		// reproduced. A harness that cannot see the event fails all three.
		var seen uint32
		for try := 0; try < 3 && seen&syscall.IN_CLOSE_WRITE == 0; try++ {
			path := t.TempDir() + "/f"
			require.NoError(t, os.WriteFile(path, []byte("x"), 0o644))
			w := watchFile(t, path)
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			require.NoError(t, err)
			require.NoError(t, f.Close())
			seen = w.events(t)
			if seen&syscall.IN_CLOSE_WRITE == 0 {
				t.Logf("try %d: events %#x, no IN_CLOSE_WRITE", try, seen)
			}
		}
		assert.NotZero(t, seen&syscall.IN_CLOSE_WRITE)
	})
	for _, orig := range dynamic(t) {
		t.Run(orig.Name, func(t *testing.T) {
			t.Parallel()
			fx := orig.Copy(t)
			files := append([]string{fx.Exe, fx.LoadLib}, fx.Libs...)
			// A copy of main and libfoo with a resolution-cache note.
			for _, p := range []string{fx.Exe, fx.Libs[0]} {
				withNote := p + ".note"
				copyFile(t, p, withNote)
				_, err := elfedit.EditFile(withNote, elfedit.Edit{SetNote: cacheNote("noop", 150)}, elfedit.Options{})
				require.NoError(t, err)
				files = append(files, withNote)
			}
			// A second copy of main and libfoo with region-laid-out tables.
			for _, p := range []string{fx.Exe, fx.Libs[0]} {
				edited := p + ".edited"
				copyFile(t, p, edited)
				e := elfedit.Edit{SetPath: str(pad(3000, fx.LibDir))}
				if p == fx.Exe {
					e.Interpreter = str(longInterp(t, fx, 300))
				}
				_, err := elfedit.EditFile(edited, e, elfedit.Options{})
				require.NoError(t, err)
				files = append(files, edited)
			}
			old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
			for _, path := range files {
				require.NoError(t, os.Chtimes(path, old, old))
				w := watchFile(t, path)
				es := noOpEdits(info(t, path))
				if n := cacheNoteOf(t, path); n != nil {
					// The note the file has, alone or with what it derives
					// from.
					es["set-note-same"] = elfedit.Edit{SetNote: n, Derived: []elfedit.NoteID{cacheID}}
					all := es["all"]
					all.SetNote, all.Derived = n, []elfedit.NoteID{cacheID}
					es["all"] = all
				}
				for name, e := range es {
					before := readFile(t, path)
					res, err := elfedit.EditFile(path, e, elfedit.Options{})
					require.NoError(t, err, "%s: %s", path, name)
					assert.True(t, res.Plan.IsNoOp(), "%s: %s: planned %s", path, name, planString(res.Plan))
					assert.False(t, res.Changed, "%s: %s", path, name)
					assert.Equal(t, res.Before, res.After, "%s: %s", path, name)
					assert.True(t, bytes.Equal(before, readFile(t, path)), "%s: %s: bytes changed", path, name)
					// Three reads: the test's, EditFile's, the test's.
					ev := w.settle(t, 3)
					assert.Zero(t, ev&(syscall.IN_CLOSE_WRITE|syscall.IN_MODIFY|syscall.IN_ATTRIB), "%s: %s: file opened for writing or touched (inotify mask 0x%x)", path, name, ev)
					st, err := os.Stat(path)
					require.NoError(t, err)
					assert.True(t, st.ModTime().Equal(old), "%s: %s: mtime changed to %v", path, name, st.ModTime())
				}
			}
		})
	}
}

// cacheNoteOf returns the resolution-cache note of the file, as an edit
// would set it, or nil.
func cacheNoteOf(t testing.TB, path string) *elfedit.Note {
	f, err := elfedit.Open(path)
	require.NoError(t, err)
	defer f.Close()
	n, ok, err := f.Note(cacheID)
	require.NoError(t, err)
	if !ok {
		return nil
	}
	return &elfedit.Note{NoteID: n.NoteID, Desc: n.Desc, Section: n.Section}
}

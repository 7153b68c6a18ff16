package elfedit_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// crashCase is one layout whose crash safety TestCrash checks.
type crashCase struct {
	name    string
	variant string
	lib     bool // edit libfoo.so (and load it) instead of bin/main (and run it)
	// prep turns the file as built into the one the plan is made from:
	// earlier edits applied in full, or section headers dropped.
	prep     func(t *testing.T, fx fixtures.Fixture, path string)
	edit     func(t *testing.T, fx fixtures.Fixture) elfedit.Edit
	strategy elfedit.Strategy
	// phdrMoves: the program header table moves into the region.
	phdrMoves bool
}

// editWith returns a prep step that applies e in full.
func editWith(mk ...func(t *testing.T, fx fixtures.Fixture) elfedit.Edit) func(*testing.T, fixtures.Fixture, string) {
	return func(t *testing.T, fx fixtures.Fixture, path string) {
		for _, m := range mk {
			_, err := elfedit.EditFile(path, m(t, fx), elfedit.Options{})
			require.NoError(t, err)
		}
	}
}

func setPathEdit(n int) func(*testing.T, fixtures.Fixture) elfedit.Edit {
	return func(_ *testing.T, fx fixtures.Fixture) elfedit.Edit {
		if n == 0 {
			return elfedit.Edit{SetPath: str(originMain)}
		}
		return elfedit.Edit{SetPath: str(pad(n, fx.LibDir))}
	}
}

// dropSections makes the file look sstrip'ed: no section header table, so
// the planner sees only the program headers and cannot tell what lies after
// the program header table (so that table moves into the region).
func dropSections(t *testing.T, _ fixtures.Fixture, path string) {
	b := readFile(t, path)
	o, class := headerCoding(t, b)
	if class == elf.ELFCLASS64 {
		o.PutUint64(b[40:], 0)
		o.PutUint16(b[60:], 0)
		o.PutUint16(b[62:], 0)
	} else {
		o.PutUint32(b[32:], 0)
		o.PutUint16(b[48:], 0)
		o.PutUint16(b[50:], 0)
	}
	require.NoError(t, os.WriteFile(path, b, 0o755))
}

// headerCoding is the byte order and class of the ELF file b, whose header
// fields a prep step rewrites in place.
func headerCoding(t *testing.T, b []byte) (binary.ByteOrder, elf.Class) {
	t.Helper()
	ef, err := elf.NewFile(bytes.NewReader(b))
	require.NoError(t, err)
	if ef.Data == elf.ELFDATA2MSB {
		return binary.BigEndian, ef.Class
	}
	return binary.LittleEndian, ef.Class
}

func crashCases() []crashCase { return append(layoutCrashCases(), noteCrashCases()...) }

func layoutCrashCases() []crashCase {
	interp := func(t *testing.T, fx fixtures.Fixture) elfedit.Edit {
		return elfedit.Edit{Interpreter: str(longInterp(t, fx, 200))}
	}
	both := func(t *testing.T, fx fixtures.Fixture) elfedit.Edit {
		return elfedit.Edit{SetPath: str(pad(4096, fx.LibDir)), Interpreter: str(longInterp(t, fx, 300))}
	}
	// small moves to a region that fits in the slot before a live region
	// of 4 KiB or more, so the file is cut back.
	small := func(t *testing.T, fx fixtures.Fixture) elfedit.Edit {
		return elfedit.Edit{SetPath: str(pad(300, fx.LibDir)), Interpreter: str(longInterp(t, fx, 100))}
	}
	smallLib := func(_ *testing.T, fx fixtures.Fixture) elfedit.Edit {
		return elfedit.Edit{SetPath: str(pad(300, fx.LibDir)), Soname: str("libfoo-with-a-soname-longer-than-before.so")}
	}
	return []crashCase{
		{name: "in-place", variant: "bfd-pie", edit: func(*testing.T, fixtures.Fixture) elfedit.Edit {
			return elfedit.Edit{SetPath: str(originMain)}
		}, strategy: elfedit.InPlace},
		{name: "in-place-lib", variant: "gold-pie", lib: true, edit: func(*testing.T, fixtures.Fixture) elfedit.Edit {
			return elfedit.Edit{SetPath: str(originLib)}
		}, strategy: elfedit.InPlace},
		{name: "in-place-interp", variant: "bfd-pie", prep: editWith(interp), edit: func(t *testing.T, fx fixtures.Fixture) elfedit.Edit {
			return elfedit.Edit{Interpreter: str(dotdotInterp(t, fx))}
		}, strategy: elfedit.InPlace},
		{name: "slack", variant: "bfd-pie", edit: setPathEdit(200), strategy: elfedit.Slack},
		{name: "slack-lib", variant: "bfd-pie", lib: true, edit: setPathEdit(200), strategy: elfedit.Slack},
		{name: "slack-lib-aarch64", variant: "aarch64-bfd-pie", lib: true, edit: setPathEdit(4096), strategy: elfedit.Slack},
		{name: "region", variant: "bfd-pie", edit: both, strategy: elfedit.Region},
		{name: "region-interp", variant: "bfd-pie", edit: interp, strategy: elfedit.Region},
		{name: "region-lib", variant: "bfd-pie", lib: true, edit: setPathEdit(4096), strategy: elfedit.Region},
		{name: "region-lld", variant: "lld-pie", edit: both, strategy: elfedit.Region},
		{name: "region-mold-lib", variant: "mold-nopie", lib: true, edit: setPathEdit(4096), strategy: elfedit.Region},
		// A second region goes after the live one; a third, smaller one
		// into the slot before it, and the file is cut back.
		{name: "region-re-edit-after", variant: "bfd-pie", prep: editWith(setPathEdit(300)), edit: both, strategy: elfedit.Region},
		{name: "region-re-edit-truncate", variant: "bfd-pie", prep: editWith(setPathEdit(4096), setPathEdit(6000)), edit: small, strategy: elfedit.Region},
		{name: "region-re-edit-lib", variant: "bfd-pie", lib: true, prep: editWith(setPathEdit(4096)), edit: setPathEdit(5000), strategy: elfedit.Region},
		{name: "region-re-edit-truncate-lib", variant: "bfd-pie", lib: true, prep: editWith(setPathEdit(4096), setPathEdit(6000)), edit: smallLib, strategy: elfedit.Region},
		{name: "phdr-in-region-lib", variant: "bfd-pie", lib: true, prep: dropSections, edit: setPathEdit(4096), strategy: elfedit.Region, phdrMoves: true},
		{name: "phdr-in-region-re-edit", variant: "bfd-pie", lib: true, prep: func(t *testing.T, fx fixtures.Fixture, path string) {
			dropSections(t, fx, path)
			editWith(setPathEdit(4096), setPathEdit(6000))(t, fx, path)
		}, edit: smallLib, strategy: elfedit.Region, phdrMoves: true},
		{name: "region-aarch64", variant: "aarch64-bfd-pie", edit: both, strategy: elfedit.Region},
		{name: "region-lib-aarch64", variant: "aarch64-bfd-pie", lib: true, edit: setPathEdit(70000), strategy: elfedit.Region},
		{name: "region-i686", variant: "i686-bfd-pie", edit: both, strategy: elfedit.Region},
		{name: "region-s390x", variant: "s390x-bfd-pie", edit: both, strategy: elfedit.Region},
		// patchelf's other options: fields changed where they are (one
		// write, the commit), and entries added to .dynamic.
		{name: "osabi", variant: "bfd-pie", edit: func(*testing.T, fixtures.Fixture) elfedit.Edit {
			abi := elf.ELFOSABI_LINUX
			return elfedit.Edit{OSABI: &abi}
		}, strategy: elfedit.InPlace},
		{name: "execstack-lib", variant: "gold-pie", lib: true, edit: func(*testing.T, fixtures.Fixture) elfedit.Edit {
			return elfedit.Edit{ExecStack: ptr(true)}
		}, strategy: elfedit.InPlace},
		{name: "clear-symbol-version", variant: "bfd-pie", edit: func(*testing.T, fixtures.Fixture) elfedit.Edit {
			return elfedit.Edit{ClearSymbolVersion: []string{"printf", "puts", "__libc_start_main"}}
		}, strategy: elfedit.InPlace},
		{name: "add-debug-lib", variant: "bfd-pie", lib: true, edit: func(*testing.T, fixtures.Fixture) elfedit.Edit {
			return elfedit.Edit{AddDebug: true}
		}, strategy: elfedit.InPlace},
		{name: "no-default-lib-region", variant: "bfd-pie", lib: true, prep: editWith(setPathEdit(4096)), edit: func(_ *testing.T, fx fixtures.Fixture) elfedit.Edit {
			return elfedit.Edit{NoDefaultLib: true, AddDebug: true, SetPath: str(pad(5000, fx.LibDir))}
		}, strategy: elfedit.Region},
		// A renamed library that symbol versions are needed from (libc):
		// .gnu.version_r moves with .dynamic and switches with it.
		{name: "replace-needed-versioned", variant: "bfd-pie", prep: func(t *testing.T, fx fixtures.Fixture, _ string) {
			require.NoError(t, os.Symlink("/lib/x86_64-linux-gnu/libc.so.6", fx.LibDir+"/libc-renamed.so.6"))
		}, edit: func(*testing.T, fixtures.Fixture) elfedit.Edit {
			return elfedit.Edit{ReplaceNeeded: []elfedit.Replace{{Old: "libc.so.6", New: "libc-renamed.so.6"}}}
		}, strategy: elfedit.Region},
		// Renamed dynamic symbols: .dynsym and the hash tables rewritten
		// into the region (a weak undefined symbol, which the program runs
		// without).
		{name: "rename-symbols", variant: "bfd-pie", edit: func(*testing.T, fixtures.Fixture) elfedit.Edit {
			return elfedit.Edit{RenameSymbols: map[string]string{"__gmon_start__": "__gmon_start_renamed_by_cudapatch__"}}
		}, strategy: elfedit.Region},
		{name: "rename-symbols-lld", variant: "lld-pie", edit: func(*testing.T, fixtures.Fixture) elfedit.Edit {
			return elfedit.Edit{RenameSymbols: map[string]string{"__gmon_start__": "__gmon_start_renamed_by_cudapatch__"}}
		}, strategy: elfedit.Region},
		{name: "phdr-in-region-ppc64", variant: "ppc64-bfd-pie", lib: true, prep: dropSections, edit: setPathEdit(70000), strategy: elfedit.Region, phdrMoves: true},
	}
}

// noteCrashCases are the note layouts: a note written alone or with other
// changes, replaced, removed, made stale by a RUNPATH change that would
// otherwise be laid out in place or in the slack (its commit would be a
// write of .dynstr or .dynamic, not of the program header table), on a
// static executable (the note joins the linker's PT_NOTE), with the
// program header table in the region, and an unloaded note objcopy added.
func noteCrashCases() []crashCase {
	set := func(marker string, n int) func(*testing.T, fixtures.Fixture) elfedit.Edit {
		return func(*testing.T, fixtures.Fixture) elfedit.Edit {
			return elfedit.Edit{SetNote: cacheNote(marker, n), Derived: []elfedit.NoteID{cacheID}}
		}
	}
	derived := func(e func(*testing.T, fixtures.Fixture) elfedit.Edit) func(*testing.T, fixtures.Fixture) elfedit.Edit {
		return func(t *testing.T, fx fixtures.Fixture) elfedit.Edit {
			x := e(t, fx)
			x.Derived = []elfedit.NoteID{cacheID}
			return x
		}
	}
	remove := func(*testing.T, fixtures.Fixture) elfedit.Edit {
		return elfedit.Edit{RemoveNotes: []elfedit.NoteID{cacheID}}
	}
	unloaded := func(t *testing.T, fx fixtures.Fixture, path string) {
		addUnloadedNote(t, fx, path, cacheSection, noteBytes(byteOrder(t, path), cacheID.Owner, cacheID.Type, cacheDesc("unld", 90)))
	}
	return []crashCase{
		{name: "note-set", variant: "bfd-pie", edit: set("aaaa", 200), strategy: elfedit.Region},
		{name: "note-set-lib-aarch64", variant: "aarch64-bfd-pie", lib: true, edit: set("aaaa", 200), strategy: elfedit.Region},
		{name: "note-set-i686", variant: "i686-bfd-pie", edit: set("aaaa", 200), strategy: elfedit.Region},
		{name: "note-set+path", variant: "lld-pie", edit: func(t *testing.T, fx fixtures.Fixture) elfedit.Edit {
			e := set("bbbb", 300)(t, fx)
			e.SetPath = str(pad(400, fx.LibDir))
			return e
		}, strategy: elfedit.Region},
		{name: "note-replace", variant: "bfd-pie", prep: editWith(set("cccc", 100)), edit: set("dddd", 3000), strategy: elfedit.Region},
		{name: "note-replace-s390x", variant: "s390x-bfd-pie", lib: true, prep: editWith(set("cccc", 3000)), edit: set("dddd", 100), strategy: elfedit.Region},
		{name: "note-remove", variant: "bfd-pie", prep: editWith(set("eeee", 200)), edit: remove, strategy: elfedit.Region},
		{name: "note-derived-in-place", variant: "bfd-pie", prep: editWith(set("ffff", 200)), edit: derived(setPathEdit(0)), strategy: elfedit.Region},
		{name: "note-derived-slack", variant: "bfd-pie", lib: true, prep: editWith(set("gggg", 200)), edit: derived(setPathEdit(200)), strategy: elfedit.Region},
		{name: "note-static", variant: "static", edit: set("hhhh", 200), strategy: elfedit.Region},
		{name: "note-phdr-in-region", variant: "bfd-pie", lib: true, prep: dropSections, edit: set("iiii", 200), strategy: elfedit.Region, phdrMoves: true},
		{name: "note-remove-unloaded", variant: "bfd-pie", prep: unloaded, edit: remove, strategy: elfedit.Region},
		{name: "note-replace-unloaded", variant: "gold-pie", lib: true, prep: unloaded, edit: set("jjjj", 200), strategy: elfedit.Region},
	}
}

// The RUNPATHs the files have before a crash case: they work (their first
// entry is lib/) and leave room to shorten them in place.
const (
	preMain = originMain + ":/x/y"
	preLib  = originLib + ":/x/y"
)

// crashSetup makes a fresh copy of the case's variant, prepares the file
// under test and plans the edit. It returns the fixture, the file's path,
// its prepared bytes and the plan (made from a separate copy, so that
// rewriting path does not change what the plan reads).
func crashSetup(t *testing.T, c crashCase) (fixtures.Fixture, string, []byte, *elfedit.Plan, elfedit.Info, want, elfedit.Edit) {
	t.Helper()
	fx := fixtures.ByName(t, c.variant).Copy(t)
	path := fx.Exe
	if !fx.Static {
		_, err := elfedit.EditFile(fx.Libs[0], elfedit.Edit{SetPath: str(preLib)}, elfedit.Options{})
		require.NoError(t, err)
	}
	if c.lib {
		path = fx.Libs[0]
	} else if !fx.Static {
		_, err := elfedit.EditFile(fx.Exe, elfedit.Edit{SetPath: str(preMain)}, elfedit.Options{})
		require.NoError(t, err)
	}
	if c.prep != nil {
		c.prep(t, fx, path)
	}
	prepared := readFile(t, path)
	planFrom := path + ".plan-source"
	require.NoError(t, os.WriteFile(planFrom, prepared, 0o644))
	f, err := elfedit.Open(planFrom)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	e := c.edit(t, fx)
	p, err := f.Plan(e)
	require.NoError(t, err)
	require.Equal(t, c.strategy, p.Strategy, "strategy: %s", planString(p))
	res, err := p.Result()
	require.NoError(t, err)
	if c.phdrMoves {
		require.NotEqual(t, f.Header.Phoff, res.Header.Phoff, "the program header table should move: %s", planString(p))
	}
	before := f.Info()
	return fx, path, prepared, p, before, expect(before, e), e
}

// works checks that the file at path loads: main runs, a library loads.
func works(t *testing.T, fx fixtures.Fixture, lib bool, path string) error {
	if lib {
		return fx.Load(t, path)
	}
	return runs(t, fx)(path)
}

// TestCrash simulates a crash after every step of each layout's plan: the
// file must then still load and run, and read as entirely the old or
// entirely the new values, switching exactly at the commit step.
func TestCrash(t *testing.T) {
	t.Parallel()
	for _, c := range crashCases() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fx, path, prepared, p, before, after, _ := crashSetup(t, c)
			old := wantOf(before)
			probs := problemsOf(t, prepared)
			oldNotes := loadedNotes(t, bytes.NewReader(prepared), int64(len(prepared)))
			res, err := p.Result()
			require.NoError(t, err)
			newNotes := loadedNotesOf(t, res)
			committed := false
			for n := 0; n <= len(p.Steps); n++ {
				if n > 0 && p.Steps[n-1].Kind == elfedit.StepCommit {
					committed = true
				}
				require.NoError(t, os.WriteFile(path, prepared, 0o755))
				f, err := os.OpenFile(path, os.O_RDWR, 0)
				require.NoError(t, err)
				require.NoError(t, elfedit.ApplyPrefix(p, f, n))
				require.NoError(t, f.Close())
				what := fmt.Sprintf("crash after %d of %d steps (%s)", n, len(p.Steps), planString(p))
				got := wantOf(info(t, path))
				b := readFile(t, path)
				gotNotes := loadedNotes(t, bytes.NewReader(b), int64(len(b)))
				// The notes the loader sees switch with the values they are
				// derived from, in the same write.
				if committed {
					assert.Equal(t, after, got, "%s: want the new values", what)
					assert.Equal(t, newNotes, gotNotes, "%s: want the new notes", what)
				} else {
					assert.Equal(t, old, got, "%s: want the old values", what)
					assert.Equal(t, oldNotes, gotNotes, "%s: want the old notes", what)
				}
				assert.NoError(t, works(t, fx, c.lib, path), what)
				// Section headers and .symtab are rewritten before the commit
				// (neutral for the loaders), so between those writes and the
				// commit only the loader rules must hold.
				loaderOnly := 0 < n && n < len(p.Steps)
				for rule, msg := range problems(t, path) {
					if _, had := probs[rule]; !had && !(loaderOnly && strings.HasPrefix(rule, "section-")) {
						t.Errorf("%s: Verify: new problem %s: %s", what, rule, msg)
					}
				}
				if t.Failed() {
					keepOnFailure(t, fx)
					t.FailNow()
				}
			}
			assert.True(t, committed, "plan has no commit step: %s", planString(p))
			assert.Equal(t, p.NewSize, fileSize(t, path), "size after the whole plan")

			// A process killed in the middle of a write leaves a prefix of
			// it, cut at a page boundary. The commit's own bytes are taken
			// to be written whole (they lie in the first page in every
			// case here); past them, and in every other write, any cut
			// leaves the original or the result. In a commit that took in
			// the clearing after it, the cuts past its own bytes leave the
			// result.
			committed = false
			for n, st := range p.Steps {
				if st.Kind == elfedit.StepTruncate {
					continue
				}
				from := st.Off
				if st.Kind == elfedit.StepCommit {
					own := st.Len
					if h := elfedit.CommitHead(st); h > 0 {
						own = h
					}
					from += own
				}
				cuts := 0
				for k := (from+4095)&^4095 - st.Off; k < st.Len && cuts < 3; k += 4096 {
					if k <= 0 {
						continue
					}
					cuts++
					require.NoError(t, os.WriteFile(path, prepared, 0o755))
					f, err := os.OpenFile(path, os.O_RDWR, 0)
					require.NoError(t, err)
					require.NoError(t, elfedit.ApplyTorn(p, f, n, k))
					require.NoError(t, f.Close())
					what := fmt.Sprintf("killed in step %d of %d after 0x%x of 0x%x bytes (%s)", n, len(p.Steps), k, st.Len, planString(p))
					want := old
					if committed || st.Kind == elfedit.StepCommit {
						want = after
					}
					assert.Equal(t, want, wantOf(info(t, path)), what)
					assert.NoError(t, works(t, fx, c.lib, path), what)
					if t.Failed() {
						keepOnFailure(t, fx)
						t.FailNow()
					}
				}
				if st.Kind == elfedit.StepCommit {
					committed = true
				}
			}
		})
	}
}

func problemsOf(t *testing.T, b []byte) map[string]string {
	t.Helper()
	ps, err := elfedit.Verify(bytes.NewReader(b), int64(len(b)))
	require.NoError(t, err)
	m := map[string]string{}
	for _, p := range ps {
		m[p.Rule] = p.Msg
	}
	return m
}

var errInjected = errors.New("injected write failure")

// faultyTarget fails its failAt-th write (1-based) after writing half of it,
// as a full disk or an I/O error mid-write would, and, with failTruncate
// (and no write failing, so no rollback), every Truncate.
type faultyTarget struct {
	*os.File
	failAt, writes int
	failTruncate   bool
}

func (f *faultyTarget) WriteAt(b []byte, off int64) (int, error) {
	f.writes++
	if f.writes == f.failAt {
		n, _ := f.File.WriteAt(b[:len(b)/2], off)
		return n, errInjected
	}
	return f.File.WriteAt(b, off)
}

func (f *faultyTarget) Truncate(size int64) error {
	if f.failTruncate {
		return errInjected
	}
	return f.File.Truncate(size)
}

// TestWriteFailure makes each write of each plan fail half way, the
// journal's two first (its trailer, then its body). A failure before or at the commit must leave the file
// byte-identical to the original (rolled back, truncated to its old
// size); a failure of a hygiene step after the commit leaves the new,
// working file and says so. A failed cut (of an old region, or of the
// journal) leaves the result too, and the journal, which a next run
// finishes: it leaves the bytes of one clean run.
func TestWriteFailure(t *testing.T) {
	t.Parallel()
	for _, c := range crashCases() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fx, path, prepared, p, _, after, e := crashSetup(t, c)
			var writes []elfedit.Step
			journaled := len(p.Steps) > 1
			if journaled {
				writes = append(writes, elfedit.Step{Kind: "journal", What: "the journal's reservation"}, elfedit.Step{Kind: "journal", What: "the journal"})
				if at, _ := elfedit.JournalPlace(t, p, path); min(p.NewSize, at) > p.OldSize {
					writes = append(writes, elfedit.Step{Kind: "journal", What: "zeros where the file grows"})
				}
			}
			for _, s := range p.Steps {
				if s.Kind != elfedit.StepTruncate {
					writes = append(writes, s)
				}
			}
			for k := 1; k <= len(writes); k++ {
				require.NoError(t, os.WriteFile(path, prepared, 0o755))
				f, err := os.OpenFile(path, os.O_RDWR, 0)
				require.NoError(t, err)
				ft := &faultyTarget{File: f, failAt: k}
				err = p.Apply(ft, false)
				require.NoError(t, f.Close())
				what := fmt.Sprintf("write %d of %d fails (%s %q)", k, len(writes), writes[k-1].Kind, writes[k-1].What)
				require.ErrorIs(t, err, errInjected, what)
				assert.NotContains(t, err.Error(), "\n", "%s: error message is one line", what)
				if writes[k-1].Kind == elfedit.StepHygiene {
					assert.Equal(t, after, wantOf(info(t, path)), "%s: the result stands", what)
					assert.NoError(t, works(t, fx, c.lib, path), what)
					continue
				}
				assert.Contains(t, err.Error(), "restored", what)
				assert.True(t, bytes.Equal(prepared, readFile(t, path)), "%s: file not restored byte for byte", what)
			}
			if journaled {
				require.NoError(t, os.WriteFile(path, prepared, 0o755))
				f, err := os.OpenFile(path, os.O_RDWR, 0)
				require.NoError(t, err)
				require.NoError(t, p.Apply(f, false))
				require.NoError(t, f.Close())
				clean := readFile(t, path)
				require.NoError(t, os.WriteFile(path, prepared, 0o755))
				f, err = os.OpenFile(path, os.O_RDWR, 0)
				require.NoError(t, err)
				err = p.Apply(&faultyTarget{File: f, failTruncate: true}, false)
				require.NoError(t, f.Close())
				require.ErrorIs(t, err, errInjected, "truncate fails")
				assert.Equal(t, after, wantOf(info(t, path)), "truncate fails: the result stands")
				assert.NoError(t, works(t, fx, c.lib, path), "truncate fails")
				rerun(t, path, e)
				assert.True(t, bytes.Equal(clean, readFile(t, path)), "truncate fails: the next run does not leave the bytes of a clean run")
			}
			keepOnFailure(t, fx)
		})
	}
}

// syncTarget records the order of writes and syncs.
type syncTarget struct {
	*os.File
	ops []string
}

func (s *syncTarget) WriteAt(b []byte, off int64) (int, error) {
	s.ops = append(s.ops, fmt.Sprintf("write 0x%x", off))
	return s.File.WriteAt(b, off)
}

func (s *syncTarget) Truncate(size int64) error {
	s.ops = append(s.ops, fmt.Sprintf("truncate 0x%x", size))
	return s.File.Truncate(size)
}

func (s *syncTarget) Sync() error {
	s.ops = append(s.ops, "sync")
	return s.File.Sync()
}

// TestApplySync checks that Apply with sync flushes right after the
// journal (so that no write it undoes or finishes reaches the disk
// before it), right before the commit write (so that a power loss cannot
// reorder the unused and neutral writes after it), right after it when
// anything follows (so that clearing the old bytes cannot reach the disk
// before the switch; a commit that took in the clearing after it is
// written in two parts around that flush), before the cut that drops the
// journal (so that what it would finish is on disk first), and after the
// last step.
func TestApplySync(t *testing.T) {
	t.Parallel()
	var joined atomic.Int32
	t.Cleanup(func() {
		if joined.Load() == 0 {
			t.Error("no case has a commit that took in the clearing after it")
		}
	})
	for _, c := range crashCases() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, path, _, p, _, _, _ := crashSetup(t, c)
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			require.NoError(t, err)
			defer f.Close()
			st := &syncTarget{File: f}
			require.NoError(t, p.Apply(st, true))
			var want []string
			journaled := len(p.Steps) > 1 || len(p.Steps) == 1 && elfedit.CommitHead(p.Steps[0]) > 0
			if journaled {
				// The reservation from the old end (the fill pattern, then
				// the trailer), then the body it vouches for.
				// Where the file grows, zeros again over the pattern.
				at, _ := elfedit.JournalPlace(t, p, path)
				want = append(want, fmt.Sprintf("write 0x%x", p.OldSize), fmt.Sprintf("write 0x%x", at))
				if min(p.NewSize, at) > p.OldSize {
					want = append(want, fmt.Sprintf("write 0x%x", p.OldSize))
				}
				want = append(want, "sync")
			}
			for i, s := range p.Steps {
				switch {
				case s.Kind == elfedit.StepCommit:
					want = append(want, "sync", fmt.Sprintf("write 0x%x", s.Off))
					head := elfedit.CommitHead(s)
					if head > 0 {
						joined.Add(1)
					}
					if head > 0 || i < len(p.Steps)-1 {
						want = append(want, "sync")
					}
					if head > 0 {
						want = append(want, fmt.Sprintf("write 0x%x", s.Off+head))
					}
				case s.Kind == elfedit.StepTruncate:
					want = append(want, "sync", fmt.Sprintf("truncate 0x%x", s.Len))
				default:
					want = append(want, fmt.Sprintf("write 0x%x", s.Off))
				}
			}
			if journaled && p.Steps[len(p.Steps)-1].Kind != elfedit.StepTruncate {
				want = append(want, "sync", fmt.Sprintf("truncate 0x%x", p.NewSize))
			}
			want = append(want, "sync")
			assert.Equal(t, strings.Join(want, "; "), strings.Join(st.ops, "; "))
			assert.True(t, slices.Contains(st.ops, "sync"))
		})
	}
}

// loadedNotes lists the notes a loader sees (those in PT_NOTE segments)
// by id and descriptor.
func loadedNotes(t testing.TB, r io.ReaderAt, size int64) []string {
	t.Helper()
	f, err := elfedit.NewFile(r, size)
	require.NoError(t, err)
	return loadedNotesOf(t, f)
}

func loadedNotesOf(t testing.TB, f *elfedit.File) []string {
	t.Helper()
	ns, err := f.Notes()
	require.NoError(t, err)
	var out []string
	for _, n := range ns {
		if n.Loaded {
			out = append(out, fmt.Sprintf("%s/%#x %q", n.Owner, n.Type, n.Desc))
		}
	}
	slices.Sort(out)
	return out
}

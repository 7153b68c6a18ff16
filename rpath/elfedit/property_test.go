package elfedit_test

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// The property test's knobs. CI runs the defaults; a long run sets them:
//
//	CUDAPATCH_PROPERTY_STEPS=2000 CUDAPATCH_PROPERTY_SEED=$RANDOM \
//	  go test ./rpath/elfedit -run 'TestProperty$' -timeout 2h -v
//
// A failure prints the seed, the variant and every step up to the failing
// one, so it replays with the same two variables and -run
// 'TestProperty$/VARIANT'.
const (
	propertyStepsEnv = "CUDAPATCH_PROPERTY_STEPS"
	propertySeedEnv  = "CUDAPATCH_PROPERTY_SEED"
	// defaultSteps per variant keeps the whole test near 20 s of wall time
	// on an idle 2-core machine (well under 60 s beside the other packages'
	// tests): native steps cost a few ms (the program runs after every one),
	// foreign ones run the program under qemu only every qemuEvery steps.
	defaultSteps = 200
	defaultSeed  = 1
	qemuEvery    = 5
)

func propertyKnobs(t *testing.T) (steps int, seed uint64) {
	t.Helper()
	steps, seed = defaultSteps, defaultSeed
	if v := os.Getenv(propertyStepsEnv); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, propertyStepsEnv)
		require.Positive(t, n, propertyStepsEnv)
		steps = n
	}
	if v := os.Getenv(propertySeedEnv); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, propertySeedEnv)
		seed = n
	}
	return steps, seed
}

// propFile is one file of a variant under test and the model of what it
// must read back as.
type propFile struct {
	role string // "main", "libfoo" or "libbar"
	path string
	w    want
	// notes models the file's notes: the linker's, and the resolution
	// cache the steps write, replace, remove or make stale.
	notes *noteModel
	// need is the DT_NEEDED name the file's loader asks for: the file name
	// of this file (main has none).
	need string
	// extras are the DT_NEEDED names added by the test (copies of libbar
	// with a SONAME of their own), which a remove may take out again.
	extras []string
	// probs are the problems Verify found before the first edit; no step
	// may add one.
	probs map[string]string
	// origSize is the size before the first edit; growth is bounded.
	origSize int64
	// readelfErr is readelf's stderr before the first edit.
	readelfErr string
}

// propVariant is the state of one variant during a run.
type propVariant struct {
	t       *testing.T
	rng     *rand.Rand
	fx      fixtures.Fixture
	orig    fixtures.Fixture // the shared cache: the pristine libbar to copy
	files   map[string]*propFile
	interps []string // interpreters main may be given, all naming its real loader
	page    int64
	serial  int
	history []string
	// largest is the largest block a plan appended, for the growth bound.
	largest int64
}

// TestProperty applies random sequences of edits to every variant of the
// fixture matrix (every linker, layout option and cross architecture) and
// checks after every step that
//
//   - EditFile succeeds, and the file reads back (through elfedit and
//     debug/elf) with exactly the values of a model that folds the Edit
//     documentation over every step since the original;
//   - Verify finds no problem the original did not have;
//   - no replaced RUNPATH or interpreter lingers in the file (Nix hygiene);
//   - the file does not grow without bound: at most the original size plus
//     three times the largest region a plan appended and a page. The live
//     region is always last; a new one goes into the dead space D before
//     it when it fits (and the file is cut after it), else after it. So it
//     goes after only when D < new <= largest, and the file is then at
//     most original + D + live + new < original + 3 × largest, plus the
//     page alignment of each;
//   - an edit to the values the file already has is a no-op that leaves
//     the bytes and the modification time alone;
//   - bin/main runs and prints its line exactly when the model says the
//     loader can find its libraries (after every step natively, every
//     fifth step under qemu), and fails with the loader's "cannot open
//     shared object file" otherwise;
//
// and at the end that readelf prints no new warning and strip and objcopy
// accept each file, as in TestMatrix. Edits: set RUNPATH (DT_RUNPATH,
// DT_RPATH or the file's own tag) to 0 bytes up to 4 KiB, add an entry,
// drop entries, remove it; set main's interpreter to longer and
// shorter names of the same loader; set a SONAME; add and remove DT_NEEDED
// entries naming copies of libbar, and replace the NEEDED entry of libfoo
// or libbar with a copy of that library under another name (the old file is
// deleted, so the program runs only if the rename took); write a
// resolution-cache note of up to 4 KiB or remove it. One Edit may combine
// up to three of these, and three in four name the cache Derived: the
// notes must then read back as a model says (written, replaced, removed,
// dropped when stale, the linker's untouched), and no removed descriptor's
// bytes may remain. Static variants must refuse dynamic edits
// with ErrNotDynamic, ErrSelfRelocating or ErrNoInterpreter and stay byte-identical, or give a
// correct result that still runs.
func TestProperty(t *testing.T) {
	t.Parallel()
	steps, seed := propertyKnobs(t)
	t.Logf("%s=%d %s=%d", propertyStepsEnv, steps, propertySeedEnv, seed)
	for _, orig := range fixtures.All(t) {
		t.Run(orig.Name, func(t *testing.T) {
			t.Parallel()
			h := fnv.New64a()
			h.Write([]byte(orig.Name))
			v := &propVariant{t: t, rng: rand.New(rand.NewPCG(seed, h.Sum64())), orig: orig, fx: orig.Copy(t)}
			defer func() {
				if t.Failed() {
					t.Logf("seed %d, variant %s (%s); steps so far:\n%s", seed, orig.Name, orig.Flags, strings.Join(v.history, "\n"))
					keepOnFailure(t, v.fx)
				}
			}()
			if orig.Static {
				v.runStatic(steps)
				return
			}
			v.setup()
			for i := range steps {
				v.step(i, i == steps-1)
				if t.Failed() {
					t.FailNow()
				}
			}
			v.finish()
		})
	}
}

// setup points the RUNPATHs at lib/ so that main runs, and records what
// every file looks like before the random steps.
func (v *propVariant) setup() {
	t, fx := v.t, v.fx
	for path, p := range map[string]string{fx.Exe: "$ORIGIN/../lib", fx.Libs[0]: "$ORIGIN"} {
		_, err := elfedit.EditFile(path, elfedit.Edit{SetPath: str(p), Tag: elfedit.TagKeep}, elfedit.Options{})
		require.NoError(t, err, "setup %s", path)
	}
	v.files = map[string]*propFile{
		"main":   {role: "main", path: fx.Exe},
		"libfoo": {role: "libfoo", path: fx.Libs[0], need: "libfoo.so"},
		"libbar": {role: "libbar", path: fx.Libs[1], need: "libbar.so"},
	}
	for _, f := range v.files {
		f.w = wantOf(info(t, f.path))
		f.notes = modelOf(t, f.path)
		f.probs = problems(t, f.path)
		st, err := os.Stat(f.path)
		require.NoError(t, err)
		f.origSize = st.Size()
		_, f.readelfErr = fixtures.Readelf(t, f.path)
	}
	require.NoError(t, v.runsAsModelled(), "after setup")
	v.page = propPage(t, fx.Exe)
	v.interps = []string{info(t, fx.Exe).Interpreter, realInterp(t, fx), dotdotInterp(t, fx),
		longInterp(t, fx, 80), longInterp(t, fx, 300), longInterp(t, fx, 700)}
}

// propPage is the alignment a region of the file gets: the largest page
// size of its machine, or a larger p_align of its own segments.
func propPage(t testing.TB, path string) int64 {
	f, err := elfedit.Open(path)
	require.NoError(t, err)
	defer f.Close()
	page := uint64(4 << 10)
	switch f.Header.Machine {
	case elf.EM_AARCH64, elf.EM_PPC64, elf.EM_PPC, elf.EM_ARM, elf.EM_LOONGARCH, elf.EM_MIPS, elf.EM_IA_64:
		page = 64 << 10
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			page = max(page, p.Align)
		}
	}
	return int64(page)
}

// name makes a fresh file or SONAME: prefix, a run of letters of random
// length (0 to max), a serial number that keeps it unique, suffix.
func (v *propVariant) name(prefix string, max int, suffix string) string {
	v.serial++
	return prefix + strings.Repeat(string(rune('a'+v.rng.IntN(26))), v.rng.IntN(max+1)) + strconv.Itoa(v.serial) + suffix
}

// good reports whether a search-path entry of the file in role names lib/.
func (v *propVariant) good(role, entry string) bool {
	if entry == v.fx.LibDir || entry == "$ORIGIN/../lib" {
		return true
	}
	return role != "main" && entry == "$ORIGIN"
}

// finds reports whether the search path p (nil: none) of the file in role
// has an entry naming lib/.
func (v *propVariant) finds(role string, p *string) bool {
	if p == nil || *p == "" {
		return false
	}
	return slices.ContainsFunc(strings.Split(*p, ":"), func(e string) bool { return v.good(role, e) })
}

// runnable is glibc's search order reduced to this tree: the executable's
// dependencies come from its DT_RUNPATH if it has one, else its DT_RPATH;
// libfoo's from its DT_RUNPATH if it has one, else its DT_RPATH and then the
// executable's DT_RPATH (ignored when the executable has a DT_RUNPATH).
// Every library the test makes lives in lib/, and no name the test uses is
// the SONAME of another library, so nothing is found by SONAME either.
func (v *propVariant) runnable() bool {
	m, foo := v.files["main"].w, v.files["libfoo"].w
	mainOK := v.finds("main", m.RPath)
	if m.RunPath != nil {
		mainOK = v.finds("main", m.RunPath)
	}
	fooOK := v.finds("libfoo", foo.RPath) || m.RunPath == nil && v.finds("main", m.RPath)
	if foo.RunPath != nil {
		fooOK = v.finds("libfoo", foo.RunPath)
	}
	return mainOK && fooOK
}

// runsAsModelled runs main and compares the outcome with the model.
func (v *propVariant) runsAsModelled() error {
	out, err := v.fx.Run(v.t, v.fx.Exe)
	switch {
	case v.runnable() && err != nil:
		return fmt.Errorf("main should run: %w", err)
	case v.runnable() && out != v.fx.Want+"\n":
		return fmt.Errorf("main printed %q, want %q", out, v.fx.Want+"\n")
	case !v.runnable() && err == nil:
		return fmt.Errorf("main ran (%q) though the model says the loader cannot find a library", out)
	case !v.runnable() && !strings.Contains(out, "cannot open shared object file"):
		return fmt.Errorf("main failed other than by a missing library: %w", err)
	}
	return nil
}

// searchPath makes a search path of n bytes (about; 0 gives "") of entries
// naming directories that do not exist, with an entry naming lib/ at a
// random place unless broken.
func (v *propVariant) searchPath(role string, n int, broken bool) string {
	if n == 0 {
		return ""
	}
	goodEntries := []string{v.fx.LibDir, "$ORIGIN/../lib"}
	if role != "main" {
		goodEntries = append(goodEntries, "$ORIGIN")
	}
	g := goodEntries[v.rng.IntN(len(goodEntries))]
	var ents []string
	size := 0
	if !broken {
		size = len(g)
	}
	for size < n || len(ents) == 0 && broken {
		e := "/nonexistent/" + v.name("d", min(60, max(0, n-size-15)), "")
		ents = append(ents, e)
		size += len(e) + 1
	}
	if !broken {
		ents = slices.Insert(ents, v.rng.IntN(len(ents)+1), g)
	}
	return strings.Join(ents, ":")
}

// pathLen picks a search-path length: empty, short, the long tail of real
// Nix RUNPATHs, exactly 4 KiB, or anything up to 4 KiB.
func (v *propVariant) pathLen() int {
	switch v.rng.IntN(6) {
	case 0:
		return 0
	case 1:
		return 1 + v.rng.IntN(40)
	case 2:
		return 40 + v.rng.IntN(400)
	case 3:
		return 4096
	default:
		return v.rng.IntN(4097)
	}
}

func (v *propVariant) current(f *propFile) *string {
	if f.w.RunPath != nil {
		return f.w.RunPath
	}
	return f.w.RPath
}

// op is one random change; it fills e and may return work to do before the
// edit (making library copies) and after it succeeds (deleting a library
// that is no longer needed).
type op struct {
	name string
	path bool // touches the search path (at most one such op per Edit)
	gen  func(v *propVariant, f *propFile, e *elfedit.Edit) (desc string, pre, post func())
}

func ops() []op {
	tags := []elfedit.PathTag{elfedit.TagRunPath, elfedit.TagRunPath, elfedit.TagKeep, elfedit.TagRPath}
	return []op{
		{name: "set-path", path: true, gen: func(v *propVariant, f *propFile, e *elfedit.Edit) (string, func(), func()) {
			n := v.pathLen()
			p := v.searchPath(f.role, n, v.rng.IntN(8) == 0)
			e.SetPath, e.Tag = &p, tags[v.rng.IntN(len(tags))]
			return fmt.Sprintf("set-path %s %d bytes %.60q", e.Tag, len(p), p), nil, nil
		}},
		{name: "add-entry", path: true, gen: func(v *propVariant, f *propFile, e *elfedit.Edit) (string, func(), func()) {
			var ents []string
			if c := v.current(f); c != nil && *c != "" {
				ents = strings.Split(*c, ":")
			}
			add := v.searchPath(f.role, 1+v.rng.IntN(100), v.rng.IntN(2) == 0)
			ents = slices.Insert(ents, v.rng.IntN(len(ents)+1), add)
			p := strings.Join(ents, ":")
			e.SetPath, e.Tag = &p, elfedit.TagKeep
			return fmt.Sprintf("add-entry %q -> %d bytes", add, len(p)), nil, nil
		}},
		{name: "shrink", path: true, gen: func(v *propVariant, f *propFile, e *elfedit.Edit) (string, func(), func()) {
			c := v.current(f)
			if c == nil || *c == "" {
				return "", nil, nil
			}
			ents := strings.Split(*c, ":")
			kept := slices.DeleteFunc(slices.Clone(ents), func(s string) bool { return !v.good(f.role, s) && v.rng.IntN(2) == 0 })
			if len(kept) == 0 {
				kept = ents[:1]
			}
			p := strings.Join(kept, ":")
			e.SetPath, e.Tag = &p, elfedit.TagKeep
			return fmt.Sprintf("shrink %d -> %d bytes", len(*c), len(p)), nil, nil
		}},
		{name: "remove-path", path: true, gen: func(v *propVariant, f *propFile, e *elfedit.Edit) (string, func(), func()) {
			e.RemovePath = true
			return "remove-path", nil, nil
		}},
		{name: "interp", gen: func(v *propVariant, f *propFile, e *elfedit.Edit) (string, func(), func()) {
			if f.role != "main" || e.Interpreter != nil {
				return "", nil, nil
			}
			p := v.interps[v.rng.IntN(len(v.interps))]
			e.Interpreter = &p
			return fmt.Sprintf("interp %d bytes %q", len(p), p), nil, nil
		}},
		{name: "add-debug", gen: func(v *propVariant, f *propFile, e *elfedit.Edit) (string, func(), func()) {
			if v.rng.IntN(3) != 0 {
				return "", nil, nil
			}
			e.AddDebug = true
			return "add-debug", nil, nil
		}},
		{name: "soname", gen: func(v *propVariant, f *propFile, e *elfedit.Edit) (string, func(), func()) {
			if e.Soname != nil {
				return "", nil, nil
			}
			s := v.name("soname-", 120, ".so")
			e.Soname = &s
			return "soname " + s, nil, nil
		}},
		{name: "add-needed", gen: func(v *propVariant, f *propFile, e *elfedit.Edit) (string, func(), func()) {
			if f.role == "libbar" || len(e.AddNeeded) > 0 || len(f.extras) > 6 {
				return "", nil, nil
			}
			n := v.name("libx", 40, ".so")
			e.AddNeeded = []string{n}
			pre := func() {
				// A copy of the pristine libbar with its own SONAME, so that
				// the loader does not take it for libbar.so.
				p := filepath.Join(v.fx.LibDir, n)
				copyFile(v.t, v.orig.Libs[1], p)
				_, err := elfedit.EditFile(p, elfedit.Edit{Soname: str("soname-of-" + n)}, elfedit.Options{})
				require.NoError(v.t, err, "soname of the copy %s", n)
			}
			return "add-needed " + n, pre, func() { f.extras = append(f.extras, n) }
		}},
		{name: "remove-needed", gen: func(v *propVariant, f *propFile, e *elfedit.Edit) (string, func(), func()) {
			if len(f.extras) == 0 || len(e.RemoveNeeded) > 0 || len(e.AddNeeded) > 0 {
				return "", nil, nil
			}
			i := v.rng.IntN(len(f.extras))
			n := f.extras[i]
			e.RemoveNeeded = []string{n}
			return "remove-needed " + n, nil, func() { f.extras = slices.Delete(f.extras, i, i+1) }
		}},
		{name: "set-note", gen: func(v *propVariant, f *propFile, e *elfedit.Edit) (string, func(), func()) {
			if e.SetNote != nil || len(e.RemoveNotes) > 0 {
				return "", nil, nil
			}
			// Up to 4 KiB, the size of a cache for tens of libraries.
			v.serial++
			e.SetNote = cacheNote(fmt.Sprintf("p%03d", v.serial%1000), 3+v.rng.IntN(4096))
			return fmt.Sprintf("set-note %d bytes", len(e.SetNote.Desc)), nil, nil
		}},
		{name: "remove-note", gen: func(v *propVariant, f *propFile, e *elfedit.Edit) (string, func(), func()) {
			if e.SetNote != nil || len(e.RemoveNotes) > 0 {
				return "", nil, nil
			}
			e.RemoveNotes = []elfedit.NoteID{cacheID}
			return "remove-note", nil, nil
		}},
		{name: "replace-needed", gen: func(v *propVariant, f *propFile, e *elfedit.Edit) (string, func(), func()) {
			dep := map[string]string{"main": "libfoo", "libfoo": "libbar"}[f.role]
			if dep == "" || len(e.ReplaceNeeded) > 0 {
				return "", nil, nil
			}
			d := v.files[dep]
			n := v.name("lib"+dep[3:4], 30, ".so")
			e.ReplaceNeeded = []elfedit.Replace{{Old: d.need, New: n}}
			oldPath, newPath := d.path, filepath.Join(v.fx.LibDir, n)
			pre := func() { copyFile(v.t, oldPath, newPath) }
			post := func() {
				// The old file goes: main runs only if the new name took.
				require.NoError(v.t, os.Remove(oldPath))
				d.path, d.need = newPath, n
			}
			return fmt.Sprintf("replace-needed %s -> %s", d.need, n), pre, post
		}},
	}
}

// step makes one random Edit of one random file, applies it and checks
// every property.
func (v *propVariant) step(i int, last bool) {
	t := v.t
	roles := []string{"main", "main", "main", "main", "libfoo", "libfoo", "libfoo", "libbar", "libbar"}
	f := v.files[roles[v.rng.IntN(len(roles))]]
	all := ops()
	var e elfedit.Edit
	var descs []string
	var pres, posts []func()
	hasPath := false
	same := v.rng.IntN(12) == 0
	if same {
		// Ask for what the file already has: a no-op.
		if c := v.current(f); c != nil {
			e.SetPath, e.Tag = c, elfedit.TagKeep
		}
		if f.role == "main" {
			e.Interpreter = &f.w.Interp
		}
		if f.w.Soname != "" {
			e.Soname = &f.w.Soname
		}
		if len(f.w.Needed) > 0 {
			e.AddNeeded = []string{f.w.Needed[v.rng.IntN(len(f.w.Needed))]}
		}
		if f.notes.cache != nil {
			e.SetNote = &elfedit.Note{NoteID: cacheID, Desc: f.notes.cache, Section: cacheSection}
		}
		descs = append(descs, "same values")
	}
	for n := 1 + v.rng.IntN(3); !same && len(descs) < n; {
		o := all[v.rng.IntN(len(all))]
		if o.path && hasPath {
			continue
		}
		d, pre, post := o.gen(v, f, &e)
		if d == "" {
			if len(descs) == 0 {
				continue
			}
			break
		}
		hasPath = hasPath || o.path
		descs = append(descs, d)
		if pre != nil {
			pres = append(pres, pre)
		}
		if post != nil {
			posts = append(posts, post)
		}
	}
	// Most edits name the cache as derived, as the patch job does.
	if v.rng.IntN(4) != 0 {
		e.Derived = []elfedit.NoteID{cacheID}
		descs = append(descs, "derived")
	}
	v.history = append(v.history, fmt.Sprintf("step %d: %s: %s", i, f.role, strings.Join(descs, "; ")))
	for _, p := range pres {
		p()
	}

	before := info(t, f.path)
	require.Equal(t, f.w, wantOf(before), "step %d: the file drifted from the model before the edit", i)
	oldBytes := readFile(t, f.path)
	oldSt, err := os.Stat(f.path)
	require.NoError(t, err)
	if same {
		time.Sleep(10 * time.Millisecond) // so that a write would show in the mtime
	}
	res, err := elfedit.EditFile(f.path, e, elfedit.Options{})
	require.NoError(t, err, "step %d: EditFile", i)
	v.history[len(v.history)-1] += fmt.Sprintf(" => %s, %d -> %d bytes", res.Plan.Strategy, res.Plan.OldSize, res.Plan.NewSize)
	if same {
		assert.Equal(t, elfedit.NoOp, res.Plan.Strategy, "step %d: an edit to the current values", i)
		st, err := os.Stat(f.path)
		require.NoError(t, err)
		assert.Equal(t, oldSt.ModTime(), st.ModTime(), "step %d: a no-op edit touched the file", i)
		assert.True(t, bytes.Equal(oldBytes, readFile(t, f.path)), "step %d: a no-op edit changed the bytes", i)
	}
	for _, p := range posts {
		p()
	}
	if res.Plan.Strategy == elfedit.Region {
		var n int64
		for _, s := range res.Plan.Steps {
			if s.Kind == elfedit.StepUnused {
				n += s.Len
			}
		}
		v.largest = max(v.largest, n)
	}

	f.notes.dead = nil
	f.notes.apply(e, isDerivedChange(before, e))
	f.w = expect(infoOf(f.w), e)
	checkWant(t, f.path, f.w)
	checkNotesLight(t, f.path, f.notes)
	noStale(t, f.path, wantOf(before), f.w)
	noNewProblems(t, f.probs, f.path)
	st, err := os.Stat(f.path)
	require.NoError(t, err)
	bound := f.origSize + 3*(v.largest+v.page)
	assert.LessOrEqual(t, st.Size(), bound, "step %d: %s grew past the original %d + 3 × (the largest region %d + page %d)", i, f.role, f.origSize, v.largest, v.page)
	if len(v.fx.RunPrefix) == 0 || i%qemuEvery == qemuEvery-1 || last {
		assert.NoError(t, v.runsAsModelled(), "step %d", i)
	}
}

// infoOf turns a model back into the Info that expect folds an Edit over.
func infoOf(w want) elfedit.Info {
	in := elfedit.Info{Interpreter: w.Interp, Soname: w.Soname, Needed: slices.Clone(w.Needed), RunPath: w.RunPath, RPath: w.RPath,
		OSABI: w.OSABI, ExecStack: w.ExecStack, Debug: w.Debug}
	if w.NoDefLib {
		in.Flags1 = uint64(elf.DF_1_NODEFLIB)
	}
	return in
}

// finish puts a working RUNPATH back where the random walk left none, and
// checks the files against readelf, strip and objcopy.
func (v *propVariant) finish() {
	t := v.t
	for _, role := range []string{"main", "libfoo"} {
		f := v.files[role]
		if v.finds(role, f.w.RunPath) || f.w.RunPath == nil && v.finds(role, f.w.RPath) {
			continue
		}
		e := elfedit.Edit{SetPath: str(v.searchPath(role, 100, false))}
		_, err := elfedit.EditFile(f.path, e, elfedit.Options{})
		require.NoError(t, err, "finish: %s", role)
		f.w = expect(infoOf(f.w), e)
		checkWant(t, f.path, f.w)
	}
	require.NoError(t, v.runsAsModelled(), "finish")
	use := map[string]func(string) error{"main": runs(t, v.fx), "libfoo": loads(t, v.fx), "libbar": loads(t, v.fx)}
	for _, role := range []string{"main", "libfoo", "libbar"} {
		f := v.files[role]
		checkNotesModel(t, f.path, f.notes, f.notes.others[0].Section != "")
		toolsAccept(t, v.fx, f.path, f.readelfErr, use[role])
	}
}

// runStatic tries random edits on a static executable: each must be
// refused, the file byte-identical, or give a file that reads back right
// and still runs.
func (v *propVariant) runStatic(steps int) {
	t, fx := v.t, v.fx
	in := info(t, fx.Exe)
	probs := problems(t, fx.Exe)
	w := wantOf(in)
	for i := range max(steps/5, 4) {
		var e elfedit.Edit
		k := v.rng.IntN(4)
		if i == 0 {
			k = 0 // a search path first: glibc's static-PIE startup asserts it has none
		}
		switch k {
		case 0:
			e.SetPath = str(v.searchPath("main", v.pathLen(), true)) // no lib/ to name
		case 1:
			e.Interpreter = str("/lib64/ld-linux-x86-64.so.2")
		case 2:
			e.Soname = str(v.name("soname-", 60, ".so"))
		default:
			e.AddNeeded = []string{v.name("libx", 20, ".so")}
		}
		v.history = append(v.history, fmt.Sprintf("step %d: %+v", i, e))
		old := readFile(t, fx.Exe)
		_, err := elfedit.EditFile(fx.Exe, e, elfedit.Options{})
		if err != nil {
			assert.True(t, errors.Is(err, elfedit.ErrNotDynamic) || errors.Is(err, elfedit.ErrSelfRelocating) || errors.Is(err, elfedit.ErrNoInterpreter), "step %d: %v", i, err)
			assert.True(t, bytes.Equal(old, readFile(t, fx.Exe)), "step %d: refused, but the file changed", i)
		} else {
			w = expect(infoOf(w), e)
			checkWant(t, fx.Exe, w)
			noNewProblems(t, probs, fx.Exe)
		}
		out, err := fx.Run(t, fx.Exe)
		require.NoError(t, err, "step %d", i)
		require.Equal(t, fx.Want+"\n", out, "step %d", i)
	}
}

// TestRemoveSharedNeededWithRegion is a case the property test found
// around: DT_NEEDED "libc.so.6" shares its bytes with the vn_file of the
// version references. Removing it together with an interpreter change takes
// the region layout with the string table left in place, which must not
// scrub the shared string (glibc then stops on "_dl_check_map_versions:
// Assertion `needed != NULL' failed").
func TestRemoveSharedNeededWithRegion(t *testing.T) {
	t.Parallel()
	for _, orig := range dynamic(t) {
		t.Run(orig.Name, func(t *testing.T) {
			t.Parallel()
			fx := orig.Copy(t)
			for path, p := range map[string]string{fx.Exe: "$ORIGIN/../lib", fx.Libs[0]: "$ORIGIN"} {
				_, err := elfedit.EditFile(path, elfedit.Edit{SetPath: str(p), Tag: elfedit.TagKeep}, elfedit.Options{})
				require.NoError(t, err)
			}
			before := info(t, fx.Exe)
			var libc string
			for _, n := range before.Needed {
				if strings.HasPrefix(n, "libc.so") {
					libc = n
				}
			}
			require.NotEmpty(t, libc, "main needs no libc: %q", before.Needed)
			probs := problems(t, fx.Exe)
			e := elfedit.Edit{RemoveNeeded: []string{libc}, Interpreter: str(dotdotInterp(t, fx))}
			res, err := elfedit.EditFile(fx.Exe, e, elfedit.Options{})
			require.NoError(t, err)
			assert.Equal(t, elfedit.Region, res.Plan.Strategy)
			checkWant(t, fx.Exe, expect(before, e))
			noNewProblems(t, probs, fx.Exe)
			out, _ := fixtures.Readelf(t, fx.Exe)
			assert.Contains(t, out, "File: "+libc, "readelf -V: the version references lost their file name")
			assert.NoError(t, runs(t, fx)(fx.Exe))
		})
	}
}

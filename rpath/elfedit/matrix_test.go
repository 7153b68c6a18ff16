package elfedit_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// step is one EditFile call of a matrix case.
type step struct {
	file string // "main", "libfoo", "libbar": which file of the variant
	edit elfedit.Edit
	// strategy, when set, is the layout the plan must take: it is
	// deterministic given the file and the edit.
	strategy func(orig elfedit.Info) elfedit.Strategy
}

// matrixCase is one row of TestMatrix: steps applied in order to a fresh
// copy of a variant, after which bin/main must run and the libraries load.
type matrixCase struct {
	name string
	// base first points the RUNPATHs at lib/ with a short $ORIGIN path (in
	// place, keeping the tag), so that cases about other edits can run main.
	base bool
	// prep runs before the steps (it makes library copies), after runs
	// after them (it removes a library to prove it is no longer used).
	prep, after func(t *testing.T, fx fixtures.Fixture)
	steps       func(t *testing.T, fx fixtures.Fixture) []step
	// libs lists the libraries loadlib must load at the end, by file name;
	// nil means libfoo.so and libbar.so.
	libs []string
}

const (
	originMain = "$ORIGIN/../lib" // 14 bytes: fits over OldRunpath (20)
	originLib  = "$ORIGIN"
)

// moved: a string that does not fit needs a grown copy of the string
// table: after the first PT_LOAD (Slack) where the padding allows, which
// depends on the linker and the page size, else in a new PT_LOAD.
func moved(elfedit.Info) elfedit.Strategy { return "slack or region" }

func always(s elfedit.Strategy) func(elfedit.Info) elfedit.Strategy {
	return func(elfedit.Info) elfedit.Strategy { return s }
}

// inPlaceIfHas: a short value replaces the existing one in place; a file
// without one needs a new string, which the string table has no room for.
func inPlaceIfRunPath(in elfedit.Info) elfedit.Strategy {
	if in.RunPath != nil {
		return elfedit.InPlace
	}
	return ""
}

func matrixCases() []matrixCase {
	lib := func(fx fixtures.Fixture, name string) string { return filepath.Join(fx.LibDir, name) }
	cp := func(names ...string) func(t *testing.T, fx fixtures.Fixture) {
		return func(t *testing.T, fx fixtures.Fixture) {
			for _, n := range names {
				copyFile(t, lib(fx, "libbar.so"), lib(fx, n))
			}
		}
	}
	rm := func(names ...string) func(t *testing.T, fx fixtures.Fixture) {
		return func(t *testing.T, fx fixtures.Fixture) {
			for _, n := range names {
				require.NoError(t, os.Remove(lib(fx, n)))
			}
		}
	}
	setPath := func(main, foo string, tag elfedit.PathTag, s func(elfedit.Info) elfedit.Strategy) func(*testing.T, fixtures.Fixture) []step {
		return func(_ *testing.T, fx fixtures.Fixture) []step {
			return []step{
				{file: "libfoo", edit: elfedit.Edit{SetPath: str(foo), Tag: tag}, strategy: s},
				{file: "main", edit: elfedit.Edit{SetPath: str(main), Tag: tag}, strategy: s},
			}
		}
	}
	return []matrixCase{
		{name: "runpath-short", steps: setPath(originMain, originLib, elfedit.TagRunPath, inPlaceIfRunPath)},
		{name: "runpath-long", steps: func(_ *testing.T, fx fixtures.Fixture) []step {
			return []step{
				{file: "libfoo", edit: elfedit.Edit{SetPath: str(pad(200, fx.LibDir))}, strategy: moved},
				{file: "main", edit: elfedit.Edit{SetPath: str(pad(200, fx.LibDir))}, strategy: moved},
			}
		}},
		{name: "runpath-4k", steps: func(_ *testing.T, fx fixtures.Fixture) []step {
			return []step{
				{file: "libfoo", edit: elfedit.Edit{SetPath: str(pad(4096, fx.LibDir))}, strategy: moved},
				{file: "main", edit: elfedit.Edit{SetPath: str(pad(4096, fx.LibDir))}, strategy: moved},
			}
		}},
		{name: "interp-dotdot", base: true, steps: func(t *testing.T, fx fixtures.Fixture) []step {
			return []step{{file: "main", edit: elfedit.Edit{Interpreter: str(dotdotInterp(t, fx))}, strategy: always(elfedit.Region)}}
		}},
		{name: "interp-long", base: true, steps: func(t *testing.T, fx fixtures.Fixture) []step {
			return []step{{file: "main", edit: elfedit.Edit{Interpreter: str(longInterp(t, fx, 200))}, strategy: always(elfedit.Region)}}
		}},
		{name: "interp-shorter", base: true, steps: func(t *testing.T, fx fixtures.Fixture) []step {
			return []step{
				{file: "main", edit: elfedit.Edit{Interpreter: str(longInterp(t, fx, 200))}, strategy: always(elfedit.Region)},
				// The region's PT_INTERP has room for any shorter name.
				{file: "main", edit: elfedit.Edit{Interpreter: str(dotdotInterp(t, fx))}, strategy: always(elfedit.InPlace)},
			}
		}},
		{name: "runpath+interp", steps: func(t *testing.T, fx fixtures.Fixture) []step {
			return []step{
				{file: "libfoo", edit: elfedit.Edit{SetPath: str(originLib)}, strategy: inPlaceIfRunPath},
				{file: "main", edit: elfedit.Edit{SetPath: str(originMain), Interpreter: str(dotdotInterp(t, fx))}, strategy: always(elfedit.Region)},
			}
		}},
		{name: "runpath+interp-long", steps: func(t *testing.T, fx fixtures.Fixture) []step {
			return []step{
				{file: "libfoo", edit: elfedit.Edit{SetPath: str(pad(300, fx.LibDir))}},
				{file: "main", edit: elfedit.Edit{SetPath: str(pad(300, fx.LibDir)), Interpreter: str(longInterp(t, fx, 300))}, strategy: always(elfedit.Region)},
			}
		}},
		{name: "soname", base: true, steps: func(_ *testing.T, fx fixtures.Fixture) []step {
			return []step{
				{file: "libbar", edit: elfedit.Edit{Soname: str("libba.so")}, strategy: always(elfedit.InPlace)},
				{file: "libfoo", edit: elfedit.Edit{Soname: str("libfoo.so.1.2.3")}},
				{file: "main", edit: elfedit.Edit{Soname: str("main-soname")}},
			}
		}},
		{name: "needed-replace", base: true, prep: cp("libbaz.so"), after: rm("libbar.so"), libs: []string{"libfoo.so", "libbaz.so"},
			steps: func(_ *testing.T, fx fixtures.Fixture) []step {
				// Same length and unshared: overwritten in place.
				return []step{{file: "libfoo", edit: elfedit.Edit{ReplaceNeeded: []elfedit.Replace{{Old: "libbar.so", New: "libbaz.so"}}}, strategy: always(elfedit.InPlace)}}
			}},
		{name: "needed-replace-longer", base: true, prep: cp("libbar-with-a-longer-name.so"), after: rm("libbar.so"), libs: []string{"libfoo.so"},
			steps: func(_ *testing.T, fx fixtures.Fixture) []step {
				return []step{{file: "libfoo", edit: elfedit.Edit{ReplaceNeeded: []elfedit.Replace{{Old: "libbar.so", New: "libbar-with-a-longer-name.so"}}}}}
			}},
		{name: "needed-add", base: true, prep: cp("libbaz.so"), libs: []string{"libfoo.so", "libbar.so", "libbaz.so"},
			steps: func(_ *testing.T, fx fixtures.Fixture) []step {
				return []step{{file: "main", edit: elfedit.Edit{AddNeeded: []string{"libbaz.so", "libbar.so"}}}}
			}},
		{name: "needed-remove", base: true, prep: cp("libbaz.so"), after: rm("libbaz.so"),
			steps: func(_ *testing.T, fx fixtures.Fixture) []step {
				return []step{
					{file: "main", edit: elfedit.Edit{AddNeeded: []string{"libbaz.so"}}},
					{file: "main", edit: elfedit.Edit{RemoveNeeded: []string{"libbaz.so"}}},
				}
			}},
		{name: "needed-all", base: true, prep: cp("libbaz.so", "libqux.so"), after: rm("libbaz.so", "libfoo.so"),
			libs: []string{"libfoo2.so", "libbar.so", "libqux.so"},
			steps: func(t *testing.T, fx fixtures.Fixture) []step {
				copyFile(t, lib(fx, "libfoo.so"), lib(fx, "libfoo2.so"))
				return []step{
					{file: "main", edit: elfedit.Edit{AddNeeded: []string{"libbaz.so"}}},
					{file: "main", edit: elfedit.Edit{
						AddNeeded:     []string{"libqux.so"},
						RemoveNeeded:  []string{"libbaz.so"},
						ReplaceNeeded: []elfedit.Replace{{Old: "libfoo.so", New: "libfoo2.so"}},
					}},
				}
			}},
		{name: "tag-runpath", steps: setPath(originMain, originLib, elfedit.TagRunPath, nil)},
		{name: "tag-keep", steps: setPath(originMain, originLib, elfedit.TagKeep, func(in elfedit.Info) elfedit.Strategy {
			if in.RunPath != nil || in.RPath != nil {
				return elfedit.InPlace
			}
			return ""
		})},
		{name: "tag-rpath", steps: setPath(originMain, originLib, elfedit.TagRPath, nil)},
	}
}

// TestMatrix applies every case to every dynamic variant of the fixture
// matrix. After each EditFile the file must read back (through elfedit and
// debug/elf) with exactly the values the edit asked for, Verify must find no
// problem the file did not have, readelf must print no warning, eu-elflint
// must stay clean where it was, and strip and objcopy must accept the file
// and give a result that still runs. After all steps of a case main must
// print its line and loadlib must load the libraries.
func TestMatrix(t *testing.T) {
	t.Parallel()
	for _, orig := range dynamic(t) {
		for _, c := range matrixCases() {
			t.Run(orig.Name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				fx := orig.Copy(t)
				files := map[string]string{
					"main":   fx.Exe,
					"libfoo": fx.Libs[0],
					"libbar": fx.Libs[1],
				}
				if c.base {
					for file, p := range map[string]string{"main": originMain, "libfoo": originLib} {
						if _, err := elfedit.EditFile(files[file], elfedit.Edit{SetPath: str(p), Tag: elfedit.TagKeep}, elfedit.Options{}); err != nil {
							t.Fatalf("base RUNPATH of %s: %v", file, err)
						}
					}
				}
				if c.prep != nil {
					c.prep(t, fx)
				}
				use := map[string]func(string) error{"main": runs(t, fx), "libfoo": loads(t, fx), "libbar": loads(t, fx)}
				for i, s := range c.steps(t, fx) {
					path := files[s.file]
					before := info(t, path)
					probs := problems(t, path)
					_, rerr := fixtures.Readelf(t, path)
					res, err := elfedit.EditFile(path, s.edit, elfedit.Options{})
					require.NoError(t, err, "step %d (%s)", i, s.file)
					t.Logf("step %d: %s: %s, %d -> %d bytes, %d written", i, s.file, res.Plan.Strategy, res.Plan.OldSize, res.Plan.NewSize, res.Plan.Written)
					if s.strategy != nil {
						switch want := s.strategy(before); want {
						case "":
						case "slack or region":
							assert.Contains(t, []elfedit.Strategy{elfedit.Slack, elfedit.Region}, res.Plan.Strategy, "step %d (%s): strategy", i, s.file)
						default:
							assert.Equal(t, want, res.Plan.Strategy, "step %d (%s): strategy", i, s.file)
						}
					}
					after := expect(before, s.edit)
					checkWant(t, path, after)
					noStale(t, path, wantOf(before), after)
					noNewProblems(t, probs, path)
					toolsAccept(t, fx, path, rerr, use[s.file])
				}
				if c.after != nil {
					c.after(t, fx)
				}
				assert.NoError(t, runs(t, fx)(fx.Exe))
				libs := c.libs
				if libs == nil {
					libs = []string{"libfoo.so", "libbar.so"}
				}
				for _, l := range libs {
					assert.NoError(t, fx.Load(t, filepath.Join(fx.LibDir, l)))
				}
				keepOnFailure(t, fx)
			})
		}
	}
}

var _ = slices.Contains[[]string]

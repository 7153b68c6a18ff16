package docs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Bounds on the documents a newcomer reads first (issue 42).
const (
	maxREADMELines    = 250
	maxCHANGELOGLines = 300
	maxBenchNotes     = 3 // RESULTS.md, README.md (how to run), HISTORY.md
)

// lines counts a text's lines.
func lines(text string) int { return strings.Count(strings.TrimSuffix(text, "\n"), "\n") + 1 }

// testCommand returns the README's test command: the last command line of
// the code block under "## Two commands for a fresh machine".
func testCommand(readme string) (string, error) {
	// Not section(): the block's comment lines start with "# ".
	_, sec, ok := strings.Cut(readme, "\n## Two commands for a fresh machine\n")
	if !ok {
		return "", fmt.Errorf("README.md: no Two commands for a fresh machine section")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	_, block, ok := strings.Cut(sec, "```sh\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		return "", fmt.Errorf("README.md: Two commands: no sh code block")
	}
	var cmds []string
	for _, l := range strings.Split(block, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			cmds = append(cmds, l)
		}
	}
	if len(cmds) != 2 {
		return "", fmt.Errorf("README.md: Two commands: %d commands (%q), want 2", len(cmds), cmds)
	}
	return cmds[1], nil
}

// checkCI lists how .ci/run differs from running exactly the README's
// test command: its one command line must exec it.
func checkCI(readme, ci string) []string {
	cmd, err := testCommand(readme)
	if err != nil {
		return []string{err.Error()}
	}
	var run []string
	for _, l := range strings.Split(ci, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "set ") ||
			strings.HasPrefix(l, "cd ") || strings.HasPrefix(l, "export ") {
			continue
		}
		run = append(run, l)
	}
	if len(run) != 1 || run[0] != "exec "+cmd {
		return []string{fmt.Sprintf(".ci/run runs %q, not exactly the README's test command %q", run, cmd)}
	}
	return nil
}

// TestCIRunsREADMECommand: .ci/run runs exactly the README's test command.
func TestCIRunsREADMECommand(t *testing.T) {
	assert.Empty(t, checkCI(read(t, "README.md"), read(t, ".ci/run")))
}

// orderLine matches the RUNPATH order written out as a search path of
// named parts: the driver link between two " : ".
var orderLine = regexp.MustCompile(`\S+ : (?:/run/opengl-driver/lib|driver link) : \S`)

// orderHomes are the two places that state the RUNPATH order; every other
// document and comment links to one of them.
var orderHomes = []string{"README.md", "rpath/policy/decide.go"}

// checkOrderOnce lists the files (name → text) other than orderHomes
// that write the RUNPATH order out, and the homes that do not.
func checkOrderOnce(files map[string]string) []string {
	var probs []string
	for name, text := range files {
		home := false
		for _, h := range orderHomes {
			home = home || name == h
		}
		switch found := orderLine.MatchString(text); {
		case home && !found:
			probs = append(probs, name+" no longer states the RUNPATH order")
		case !home && found:
			probs = append(probs, fmt.Sprintf("%s restates the RUNPATH order (%q): link to README.md or policy.Decide instead",
				name, orderLine.FindString(text)))
		}
	}
	return probs
}

// machinePath matches an absolute path into a home or work directory of
// some machine, which no document or comment of the repository should name.
var machinePath = regexp.MustCompile("(?:^|[\\s(`\"'=])/(?:home|root|work)/[A-Za-z0-9_.-]")

// commentary is what of a file is prose: a document whole, a script's
// comment lines (its code may name paths inside a root it made).
func commentary(name, text string) string {
	if !strings.HasSuffix(name, ".sh") && !strings.HasSuffix(name, ".py") {
		return text
	}
	var b strings.Builder
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// sources reads the repository's documents, production Go files, Nix
// files and scripts (relative path → text), as documents does.
func sources(t *testing.T) map[string]string {
	t.Helper()
	r := root(t)
	out := map[string]string{}
	err := filepath.WalkDir(r, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(r, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() && rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || rel == "bench/out") {
			return filepath.SkipDir
		}
		ext := filepath.Ext(p)
		if !d.Type().IsRegular() || strings.HasSuffix(p, "_test.go") ||
			(ext != ".md" && ext != ".go" && ext != ".nix" && ext != ".sh" && ext != ".py") {
			return nil
		}
		b, err := os.ReadFile(p)
		out[rel] = string(b)
		return err
	})
	require.NoError(t, err)
	return out
}

// TestShape: the README and CHANGELOG stay within their bounds, bench/
// keeps at most three notes and no run logs, the RUNPATH order is stated
// in the README and policy.Decide only, and no machine's home or work
// directory is named.
func TestShape(t *testing.T) {
	assert.LessOrEqual(t, lines(read(t, "README.md")), maxREADMELines, "README.md: the rest belongs in docs/")
	assert.LessOrEqual(t, lines(read(t, "CHANGELOG.md")), maxCHANGELOGLines, "CHANGELOG.md: what a user needs per release")
	ents, err := os.ReadDir(filepath.Join(root(t), "bench"))
	require.NoError(t, err)
	var notes []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".md") {
			notes = append(notes, e.Name())
		}
	}
	assert.LessOrEqual(t, len(notes), maxBenchNotes, "bench/ notes %q: RESULTS.md, README.md, HISTORY.md", notes)

	for _, doc := range documents(t) {
		assert.NotContains(t, doc, ".log", "%s: a run's log is an artifact, not kept in the tree", doc)
	}
	err = filepath.WalkDir(root(t), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && p != root(t) || strings.HasSuffix(p, "bench/out") || strings.HasSuffix(p, "testdata/build")) {
			return filepath.SkipDir
		}
		assert.False(t, d.Type().IsRegular() && strings.HasSuffix(d.Name(), ".log"),
			"%s: a run's log is an artifact, not kept in the tree", p)
		return nil
	})
	require.NoError(t, err)

	files := sources(t)
	assert.Empty(t, checkOrderOnce(files))
	for name, text := range files {
		assert.Empty(t, machinePath.FindAllString(commentary(name, text), -1), "%s names a machine's directory", name)
	}
}

// TestShapeCatches: each check of TestShape and TestCIRunsREADMECommand
// reports a change that breaks it, made on the real files.
func TestShapeCatches(t *testing.T) {
	readme, ci := read(t, "README.md"), read(t, ".ci/run")
	cmd, err := testCommand(readme)
	require.NoError(t, err)
	assert.Equal(t, "bash scripts/test.sh", cmd)
	for name, mut := range map[string]func() (string, string){
		"another command in CI": func() (string, string) {
			return readme, strings.Replace(ci, "exec "+cmd, "exec go test ./...", 1)
		},
		"a step before it": func() (string, string) {
			return readme, strings.Replace(ci, "exec "+cmd, "go vet ./...\nexec "+cmd, 1)
		},
		"another README command": func() (string, string) {
			return strings.Replace(readme, "\n"+cmd+"\n", "\nbash scripts/test.sh --quick\n", 1), ci
		},
	} {
		t.Run(name, func(t *testing.T) {
			r, c := mut()
			require.True(t, r != readme || c != ci, "the mutation changed nothing")
			assert.NotEmpty(t, checkCI(r, c))
		})
	}

	files := sources(t)
	require.Empty(t, checkOrderOnce(files))
	restated := map[string]string{}
	for k, v := range files {
		restated[k] = v
	}
	restated["hooks/README.md"] += "\n```\n[selector] : /run/opengl-driver/lib : [runtimeDependencies]\n```\n"
	assert.Contains(t, strings.Join(checkOrderOnce(restated), "\n"), "hooks/README.md restates")
	restated = map[string]string{}
	for k, v := range files {
		restated[k] = v
	}
	restated["rpath/policy/decide.go"] = "package policy\n"
	assert.Contains(t, strings.Join(checkOrderOnce(restated), "\n"), "rpath/policy/decide.go no longer states")

	assert.NotEmpty(t, machinePath.FindAllString(commentary("x.sh", "# in /home/alice/w\n"), -1))
	assert.Empty(t, machinePath.FindAllString(commentary("x.sh", "cd /root/cudapatch\n"), -1))
	for _, s := range []string{"see /home/alice/cp", "`/root/cudapatch/x`", "(/work/wt/docs3)", "WORK=/work/x"} {
		assert.Regexp(t, machinePath, s)
	}
	for _, s := range []string{"WORKDIR/root/lib", "/tmp/cpcorpus", "$root/root/cudapatch", "/nix/store/x-work/lib"} {
		assert.NotRegexp(t, machinePath, s)
	}
	assert.Greater(t, lines(strings.Repeat("x\n", maxREADMELines+1)), maxREADMELines)
}

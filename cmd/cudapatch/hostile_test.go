package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestHostileNamesStayOneLine: a DT_NEEDED name, a RUNPATH and a file name
// may hold any byte but NUL ('/' aside): a newline or an escape sequence in
// one reached the terminal raw and broke the main job's list, lint's and
// explain's lines. Every text output escapes them (internal/printable);
// the files themselves keep their bytes.
func TestHostileNamesStayOneLine(t *testing.T) {
	c := newCLITree(t)
	const (
		name = "lib\x1b[31mred\nx.so"
		path = "/old\x1b]0;title\x07\n/lib"
		file = "out/bin/ap\np"
	)
	c.place(file, cExe(path, name))
	c.place("deps/libdep.so", cLib("libdep.so"))
	t.Chdir(c.root)
	escaped := []string{`lib\x1b[31mred\nx.so`, `ap\np`}
	for _, tc := range []struct {
		args []string
		want []string // escaped forms the output must show
		// lines is how many lines stdout+stderr have, hostile names or not.
		lines int
	}{
		{[]string{"print", "out/bin/ap\np"}, append(escaped, `/old\x1b]0;title\a\n/lib`), 6},
		{[]string{"verify", "out/bin/ap\np"}, []string{`ap\np: ok`}, 1},
		{[]string{"lint", "out"}, escaped, 0},
		{[]string{"explain", "out/bin/ap\np"}, escaped, 0},
		{[]string{"--dry-run", "--search", "deps", "out"}, append(escaped, `/old\x1b]0;title\a\n/lib ->`), 3},
		{[]string{"nonexistent\x1b[2J.so"}, []string{`nonexistent\x1b[2J.so: no such file`}, 1},
	} {
		stdout, stderr, _ := runFixed(t, nil, tc.args...)
		out := stdout + stderr
		assert.NotContains(t, out, "\x1b", "%q: an escape reached the output:\n%s", tc.args, out)
		assert.NotContains(t, out, "\x07", "%q", tc.args)
		for _, w := range tc.want {
			assert.Contains(t, out, w, "%q", tc.args)
		}
		if tc.lines > 0 {
			assert.Equal(t, tc.lines, strings.Count(out, "\n"), "%q:\n%s", tc.args, out)
		}
		for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			// A hostile name's tail never starts a line of its own.
			assert.False(t, strings.HasPrefix(l, "x.so") || strings.HasPrefix(l, "p:") || strings.HasPrefix(l, "/lib"), "%q: line %q", tc.args, l)
		}
	}
}

package docs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The README block that quotes bench/RESULTS.md; bench/report.py writes it.
const (
	blockBegin = "<!-- bench/RESULTS.md: begin -->"
	blockEnd   = "<!-- bench/RESULTS.md: end -->"
)

// root is the repository's top directory.
func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	return r
}

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), rel))
	require.NoError(t, err)
	return string(b)
}

// table is a Markdown table: its header cells and its rows, keyed by header.
type table struct {
	head  []string
	rows  []map[string]string
	cells [][]string // the rows' cells in order, for a table without a header
}

func cells(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(strings.TrimSuffix(line, "|"), "|")
	cs := strings.Split(line, "|")
	for i := range cs {
		cs[i] = strings.TrimSpace(cs[i])
	}
	return cs
}

// firstTable parses the first table in text: its first line, the
// separator, then every line that starts with "|".
func firstTable(text string) (table, error) {
	lines := strings.Split(text, "\n")
	for i := 0; i+1 < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "|") || !strings.HasPrefix(lines[i+1], "| ---") {
			continue
		}
		tb := table{head: cells(lines[i])}
		for _, l := range lines[i+2:] {
			if !strings.HasPrefix(l, "|") {
				break
			}
			cs := cells(l)
			if len(cs) != len(tb.head) {
				return tb, fmt.Errorf("row %q has %d cells, the header %d", l, len(cs), len(tb.head))
			}
			row := map[string]string{}
			for j, h := range tb.head {
				row[h] = cs[j]
			}
			tb.rows = append(tb.rows, row)
			tb.cells = append(tb.cells, cs)
		}
		return tb, nil
	}
	return table{}, fmt.Errorf("no table")
}

// section returns the text after the line heading and before the next
// heading of the same or a higher level.
func section(text, heading string) (string, bool) {
	level := strings.Index(heading, " ")
	_, rest, ok := strings.Cut(text, "\n"+heading+"\n")
	if !ok {
		return "", false
	}
	for i, l := range strings.Split(rest, "\n") {
		if n := strings.Index(l, " "); n > 0 && n <= level && strings.Trim(l[:n], "#") == "" {
			return strings.Join(strings.Split(rest, "\n")[:i], "\n"), true
		}
	}
	return rest, true
}

var (
	// The line above the README's table, as report.py writes it.
	runLine = regexp.MustCompile(`\(commit ([0-9a-f]+(?:\+dirty)?), (\d{4}-\d\d-\d\d \d\d:\d\d UTC); (.+), (\d+) cores; (patchelf [^;)]+)\):`)
	// A measured figure: a ratio, a time or a size.
	figure = regexp.MustCompile(`\d[\d,.]*\s?(?:×|(?:ms|µs|s|MiB|KiB|GiB|MB|GB|kB)\b)`)
)

// checkFigures lists where readme's quoted figures differ from results
// (bench/RESULTS.md): the run (commit, date, CPU, cores, patchelf) and
// every cell of the quoted table, found by case and column in RESULTS.md's
// headline. Outside the block, the Speed section quotes no figure.
func checkFigures(readme, results string) []string {
	var probs []string
	bad := func(f string, a ...any) { probs = append(probs, fmt.Sprintf(f, a...)) }

	machine := map[string]string{}
	if m, ok := section(results, "## Machine"); !ok {
		bad("bench/RESULTS.md: no Machine section")
	} else if tb, err := firstTable(m); err != nil {
		bad("bench/RESULTS.md: Machine: %v", err)
	} else {
		for _, cs := range tb.cells {
			machine[cs[0]] = cs[1]
		}
	}
	head := map[string]map[string]string{}
	if h, ok := section(results, "## Headline"); !ok {
		bad("bench/RESULTS.md: no Headline section")
	} else if tb, err := firstTable(h); err != nil {
		bad("bench/RESULTS.md: Headline: %v", err)
	} else {
		for _, r := range tb.rows {
			head[r["case"]] = r
		}
	}

	_, after, ok := strings.Cut(readme, blockBegin)
	block, _, ok2 := strings.Cut(after, blockEnd)
	if !ok || !ok2 {
		return append(probs, "README.md: no "+blockBegin+" … "+blockEnd+" block")
	}
	if m := runLine.FindStringSubmatch(block); m == nil {
		bad("README.md: the block does not name its run as (commit C, DATE UTC; CPU, N cores; patchelf V):")
	} else {
		for i, k := range []string{"cudapatch commit", "date", "CPU", "cores"} {
			if m[i+1] != machine[k] {
				bad("README.md: %s %q, bench/RESULTS.md %q", k, m[i+1], machine[k])
			}
		}
		if !strings.HasPrefix(machine["patchelf"], m[5]+" ") {
			bad("README.md: %q, bench/RESULTS.md's patchelf %q", m[5], machine["patchelf"])
		}
	}
	tb, err := firstTable(block)
	if err != nil {
		bad("README.md: the block's table: %v", err)
	} else if len(tb.rows) == 0 {
		bad("README.md: the block's table has no rows")
	}
	for _, r := range tb.rows {
		want, ok := head[r["case"]]
		if !ok {
			bad("README.md: case %q is not in bench/RESULTS.md's headline", r["case"])
			continue
		}
		for _, col := range tb.head {
			if w, ok := want[col]; !ok {
				bad("README.md: column %q is not in bench/RESULTS.md's headline", col)
			} else if r[col] != w {
				bad("README.md: %s, %s: %q, bench/RESULTS.md %q", r["case"], col, r[col], w)
			}
		}
	}

	if speed, ok := section(readme, "### Speed"); !ok {
		bad("README.md: no Speed section")
	} else {
		b, _, _ := strings.Cut(speed, blockBegin)
		_, a, _ := strings.Cut(speed, blockEnd)
		for _, f := range figure.FindAllString(b+a, -1) {
			bad("README.md: Speed quotes %q outside the block from bench/RESULTS.md", f)
		}
	}
	return probs
}

// TestREADMEQuotesResults: the README's measured figures are those of
// bench/RESULTS.md, cell for cell, with its run.
func TestREADMEQuotesResults(t *testing.T) {
	assert.Empty(t, checkFigures(read(t, "README.md"), read(t, "bench/RESULTS.md")))
}

// TestCheckFiguresCatches: each way the README can drift from
// bench/RESULTS.md, made on the real files, is reported.
func TestCheckFiguresCatches(t *testing.T) {
	readme, results := read(t, "README.md"), read(t, "bench/RESULTS.md")
	_, after, _ := strings.Cut(readme, blockBegin)
	block, _, _ := strings.Cut(after, blockEnd)
	tb, err := firstTable(block)
	require.NoError(t, err)
	require.NotEmpty(t, tb.rows)
	row := tb.rows[0]
	// line is the first row as report.py writes it, with column col set to v.
	line := func(col, v string) string {
		var cs []string
		for _, h := range tb.head {
			if h == col {
				cs = append(cs, v)
			} else {
				cs = append(cs, row[h])
			}
		}
		return "| " + strings.Join(cs, " | ") + " |"
	}
	rowLine := line("", "")
	require.Contains(t, readme, rowLine)
	cell := func(col, v string) func(string) string {
		return func(s string) string { return strings.Replace(s, rowLine, line(col, v), 1) }
	}
	m := runLine.FindStringSubmatch(block)
	require.NotNil(t, m)

	tests := []struct {
		name           string
		readme, result func(string) string
		want           string
	}{
		{"a ratio", cell("ratio", "**1,040×**"), nil, "ratio"},
		{"a peak RSS", cell("peak RSS cudapatch", "14.1 MiB"), nil, "peak RSS cudapatch"},
		{"a time", cell("cudapatch", "13 ms"), nil, "cudapatch"},
		{"a case RESULTS.md lacks", cell("case", "another tree"), nil, "another tree"},
		{"the commit", func(s string) string {
			return strings.Replace(s, "(commit "+m[1]+",", "(commit 34a468f,", 1)
		}, nil, "cudapatch commit"},
		{"a new run in RESULTS.md", nil, func(s string) string {
			return strings.Replace(s, "| date | "+m[2]+" |", "| date | 2099-01-01 00:00 UTC |", 1)
		}, "date"},
		{"a figure in the Speed prose", func(s string) string {
			return strings.Replace(s, blockEnd+"\n", blockEnd+"\n\nIt was **1,040× faster**.\n", 1)
		}, nil, "1,040×"},
		{"no block", func(s string) string {
			return strings.Replace(s, blockBegin, "", 1)
		}, nil, "no " + blockBegin},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, res := readme, results
			if tt.readme != nil {
				r = tt.readme(r)
				require.NotEqual(t, readme, r, "the mutation changed nothing")
			}
			if tt.result != nil {
				res = tt.result(res)
				require.NotEqual(t, results, res, "the mutation changed nothing")
			}
			probs := checkFigures(r, res)
			require.NotEmpty(t, probs)
			assert.Contains(t, strings.Join(probs, "\n"), tt.want)
		})
	}
}

// TestNotes: bench/README.md's *Reading the numbers* is copied into every
// RESULTS.md, so it must not quote a run's ratios (earlier runs' readings
// are in bench/HISTORY.md), and RESULTS.md must hold it as it is now.
func TestNotes(t *testing.T) {
	notes, ok := section(read(t, "bench/README.md"), "## Reading the numbers")
	require.True(t, ok, "bench/README.md has no Reading the numbers section")
	ratio := regexp.MustCompile(`\d[\d,.]*\s?×`)
	assert.Empty(t, ratio.FindAllString(notes, -1))
	reading, ok := section(read(t, "bench/RESULTS.md"), "## Reading the numbers")
	require.True(t, ok, "bench/RESULTS.md has no Reading the numbers section")
	assert.Equal(t, strings.TrimSpace(notes), strings.TrimSpace(reading),
		"bench/RESULTS.md's Reading the numbers is not bench/README.md's (bench/report.py copies it)")
}

// documents lists the Markdown files of the repository (relative paths),
// leaving out build outputs and hidden directories.
func documents(t *testing.T) []string {
	t.Helper()
	r := root(t)
	var docs []string
	err := filepath.WalkDir(r, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(r, p)
		if d.IsDir() && rel != "." && (strings.HasPrefix(d.Name(), ".") || rel == "bench/out" || rel == "testdata/build") {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() && strings.HasSuffix(p, ".md") {
			docs = append(docs, filepath.ToSlash(rel))
		}
		return nil
	})
	require.NoError(t, err)
	return docs
}

var (
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	fence  = regexp.MustCompile("(?s)```.*?```")
)

// links returns the relative link targets of a document, resolved against
// its directory, outside code blocks; URLs and anchors are left out.
func links(doc, text string) []string {
	var out []string
	for _, m := range mdLink.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
		l := m[1]
		if strings.HasPrefix(l, "#") || regexp.MustCompile(`^[a-z]+:`).MatchString(l) {
			continue
		}
		l, _, _ = strings.Cut(l, "#")
		out = append(out, filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(doc), l))))
	}
	return out
}

// TestLinksResolve: every relative link in every document names a file or
// directory of the repository.
func TestLinksResolve(t *testing.T) {
	for _, doc := range documents(t) {
		for _, l := range links(doc, read(t, doc)) {
			_, err := os.Stat(filepath.Join(root(t), l))
			assert.NoError(t, err, "%s links to %s", doc, l)
		}
	}
}

// TestDocsMap: docs/README.md lists every document, and docs/ holds
// documents only: a run's log is an artifact, summarized in a document.
func TestDocsMap(t *testing.T) {
	listed := links("docs/README.md", read(t, "docs/README.md"))
	for _, doc := range documents(t) {
		if doc != "docs/README.md" {
			assert.Contains(t, listed, doc, "docs/README.md does not list %s", doc)
		}
	}
	ents, err := os.ReadDir(filepath.Join(root(t), "docs"))
	require.NoError(t, err)
	for _, e := range ents {
		ok := !e.IsDir() && strings.HasSuffix(e.Name(), ".md")
		assert.True(t, ok, "docs/%s: docs/ holds documents only; a run's log is an artifact", e.Name())
	}
	assert.False(t, slices.Contains(listed, "docs/README.md"), "docs/README.md lists itself")
}

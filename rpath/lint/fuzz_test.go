package lint_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/ldso"
	"github.com/cudapatch/cudapatch/rpath/lint"
	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/policy"
	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

// Fuzzing (slow: a tree is written and linted each time):
//
//	go test ./rpath/lint -run=- -fuzz=FuzzLint -fuzztime=10m
//
// lint reads any tree, one an adversary shaped included: every rule,
// the symbol check among them, runs over a file the fuzzer shapes.

// lintFuzzFiles are a patched program, the versioned library it needs and
// the library it dlopens, their search paths relative ($ORIGIN).
var lintFuzzFiles = []string{"out/bin/app", "out/lib/libfz.so.1", "out/plugins/libplugin.so.1"}

// FuzzLint replaces one file of a patched tree (which, modulo their
// count) with data and lints the tree with every rule on. Whatever the
// bytes: no panic, no error (a file's faults are findings), and every
// finding one line, in String and in the text report, sorted by file.
func FuzzLint(f *testing.F) {
	host, err := ldso.FindHost("")
	if err != nil {
		f.Skipf("no host loader: %v", err)
	}
	tmpl := f.TempDir()
	cfix.Place(f, cfix.FuzzApp(f), filepath.Join(tmpl, lintFuzzFiles[0]))
	cfix.Place(f, cfix.FuzzLib, filepath.Join(tmpl, lintFuzzFiles[1]))
	cfix.Place(f, cfix.Spec{Soname: "libplugin.so.1", Source: "int plugin(void) { return 7; }\n"}, filepath.Join(tmpl, lintFuzzFiles[2]))
	pol := policy.Config{Interpreter: host.Interpreter, DriverLinkFor: policy.DriverLinkNone, Dlopen: policy.DlopenResolve, RelativizeRoot: true}
	if _, err := patch.Run(context.Background(), &patch.Config{
		Policy: pol,
		Libc:   host.LibcDir,
	}, []string{filepath.Join(tmpl, "out")}); err != nil {
		f.Fatal(err)
	}
	seeds := make([][]byte, len(lintFuzzFiles))
	for i, rel := range lintFuzzFiles {
		b, err := os.ReadFile(filepath.Join(tmpl, rel))
		if err != nil {
			f.Fatal(err)
		}
		seeds[i] = b
		f.Add(uint8(i), b)
	}
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		root := t.TempDir()
		fixtures.WriteTree(t, root, lintFuzzFiles, seeds, which, data)
		rep, err := lint.Lint(context.Background(), &lint.Options{Policy: pol, Enable: []string{"all"}, Jobs: 1},
			[]string{filepath.Join(root, "out")})
		if err != nil {
			t.Fatalf("a file's bytes made an error: %v", err)
		}
		for _, fd := range rep.Findings {
			if strings.ContainsAny(fd.String(), "\n\r") {
				t.Errorf("finding of more than one line: %q", fd.String())
			}
		}
		// The text report: a line a finding, a header a file, blank
		// lines between files and after the findings, a line a skipped
		// file, the summary.
		var text bytes.Buffer
		if err := lint.WriteText(&text, rep, false); err != nil {
			t.Fatal(err)
		}
		files := 0
		for i, fd := range rep.Findings {
			if i == 0 || fd.Path != rep.Findings[i-1].Path {
				files++
			}
		}
		want := len(rep.Findings) + 2*files + len(rep.Skipped) + 1
		if got := strings.Count(text.String(), "\n"); got != want || strings.Contains(text.String(), "\r") {
			t.Errorf("text report of %d lines, want %d:\n%s", got, want, text.String())
		}
		if !slices.IsSortedFunc(rep.Findings, func(a, b lint.Finding) int { return strings.Compare(a.Path, b.Path) }) {
			t.Errorf("findings not sorted by file")
		}
	})
}

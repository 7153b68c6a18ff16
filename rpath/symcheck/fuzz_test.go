package symcheck_test

import (
	"debug/elf"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/ldso"
	"github.com/cudapatch/cudapatch/rpath/symcheck"
	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

// Fuzzing:
//
//	go test ./rpath/symcheck -run=- -fuzz=FuzzCheck -fuzztime=10m
//
// The check keeps what it reads (summaries made once and again for names
// learned later, a memo of each library's own unresolved references, a
// budget that drops tables) so that a tree costs little more than its
// files; none of that may change an answer. FuzzCheck is the oracle
// test's agreement of checkers (oracle_test.go) over files the fuzzer
// shapes.

// checkFuzzFiles are a program (RUNPATH $ORIGIN/../lib) that uses a
// versioned function and data of libfz, which needs libmid, whose data
// libfz uses.
var checkFuzzFiles = []struct {
	rel  string
	spec func(t testing.TB) cfix.Spec
}{
	{"bin/prog", func(t testing.TB) cfix.Spec {
		return cfix.Spec{Exe: true, Libc: true, RunPath: "$ORIGIN/../lib", Link: []string{cfix.Build(t, checkFuzzLib(t))},
			Source: "#include <stdio.h>\nextern int fz_data; int fz_get(void); __attribute__((weak)) int fz_maybe(void);\n" +
				"int main(void) { printf(\"%d\\n\", fz_get() + fz_data + (fz_maybe ? fz_maybe() : 0)); return 0; }\n"}
	}},
	{"lib/libfz.so.1", checkFuzzLib},
	{"lib/libmid.so.1", func(testing.TB) cfix.Spec { return checkFuzzMid }},
}

var checkFuzzMid = cfix.Spec{Soname: "libmid.so.1", Libc: true, Source: "#include <stdio.h>\nint mid_val = 4; void mid_say(void) { puts(\"mid\"); }\n"}

func checkFuzzLib(t testing.TB) cfix.Spec {
	return cfix.Spec{Soname: "libfz.so.1", RunPath: "$ORIGIN", Link: []string{cfix.Build(t, checkFuzzMid)},
		Source:        "extern int mid_val; void mid_say(void); int fz_data = 3; int fz_get(void) { mid_say(); return fz_data + mid_val; }\n",
		VersionScript: "FZ_1 { global: fz_get; fz_data; local: *; };"}
}

// FuzzCheck replaces one file of the tree (which, modulo their count)
// with data, resolves the program's closure and checks it with the
// oracle test's checkers: all bindings, problems only, a budget of one
// byte, every file read first, every file read through an open. Whatever
// the bytes: no panic, errors of one line, and every checker fails or
// passes as the first does, with the same findings.
func FuzzCheck(f *testing.F) {
	if _, err := os.Stat("/lib64/ld-linux-x86-64.so.2"); err != nil {
		f.Skip("not an x86_64 glibc host")
	}
	cfg, err := ldso.DefaultConfig("", elf.ELFCLASS64, elf.EM_X86_64)
	if err != nil {
		f.Fatal(err)
	}
	seeds := make([][]byte, len(checkFuzzFiles))
	rels := make([]string, len(checkFuzzFiles))
	for i, ff := range checkFuzzFiles {
		b, err := os.ReadFile(cfix.Build(f, ff.spec(f)))
		if err != nil {
			f.Fatal(err)
		}
		seeds[i], rels[i] = b, ff.rel
		f.Add(uint8(i), b)
	}
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		root := t.TempDir()
		fixtures.WriteTree(t, root, rels, seeds, which, data)
		prog := filepath.Join(root, "bin/prog")
		tr, err := ldso.Resolve(cfg, ldso.ElfReader(), prog)
		if err != nil {
			return // no program to check
		}
		oneLine := func(what string, err error) {
			if err != nil && strings.ContainsAny(err.Error(), "\n\r") {
				t.Errorf("%s: error of more than one line: %q", what, err)
			}
		}
		read := symcheck.New(symcheck.Options{BindNow: true, OnlyProblems: true})
		open := symcheck.New(symcheck.Options{BindNow: true, OnlyProblems: true})
		files := []string{prog}
		for _, n := range tr.Needs {
			if n.Found() && n.Step != ldso.StepInterp {
				files = append(files, n.Path)
			}
		}
		for i := len(files) - 1; i >= 0; i-- {
			oneLine("Read", read.Read(files[i]))
			if ef, err := elfedit.Open(files[i]); err == nil {
				oneLine("ReadFile", open.ReadFile(files[i], ef))
				ef.Close()
			}
		}
		checkers := []struct {
			name string
			c    *symcheck.Checker
		}{
			{"all bindings", symcheck.New(symcheck.Options{BindNow: true})},
			{"problems only", symcheck.New(symcheck.Options{BindNow: true, OnlyProblems: true})},
			{"one-byte budget", symcheck.New(symcheck.Options{BindNow: true, OnlyProblems: true, CacheBytes: 1})},
			{"read first", read},
			{"read through an open", open},
		}
		first, firstErr := checkers[0].c.Check(cfg, tr)
		oneLine(checkers[0].name, firstErr)
		for range 2 { // the second time from what the first kept
			for _, ck := range checkers[1:] {
				res, err := ck.c.Check(cfg, tr)
				oneLine(ck.name, err)
				if (err == nil) != (firstErr == nil) {
					t.Fatalf("%s: error %v, where %s gave %v", ck.name, err, checkers[0].name, firstErr)
				}
				if err != nil {
					continue
				}
				if want, got := findings(first), findings(res); !equalSets(want, got) {
					t.Fatalf("%s found %v, %s %v", ck.name, got, checkers[0].name, want)
				}
			}
		}
	})
}

func equalSets(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

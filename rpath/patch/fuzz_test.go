package patch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/policy"
	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

// Fuzzing the whole job (slow: a tree is written and patched each time):
//
//	go test ./rpath/patch -run=- -fuzz=FuzzRun -fuzztime=10m
//
// elfedit's fuzz targets cover reading and editing one file; this one
// covers what reads other files' tables too: the resolution of each
// closure, the symbol check and dlopen discovery, over a file the fuzzer
// shapes, as an output or as a library an output loads.

// fuzzFiles are the tree FuzzRun patches: a program in the outputs that
// needs a library of the outputs (versioned, with a data and a function
// symbol) and dlopens one of a search directory, by a string constant;
// beside them two libraries that reach that plugin otherwise.
var fuzzFiles = []struct {
	rel  string
	spec func(t testing.TB) cfix.Spec
}{
	{"out/bin/app", cfix.FuzzApp},
	{"out/lib/libfz.so.1", func(testing.TB) cfix.Spec { return cfix.FuzzLib }},
	{"plug/lib/libplugin.so.1", func(testing.TB) cfix.Spec {
		return cfix.Spec{Soname: "libplugin.so.1", Source: "int plugin(void) { return 7; }\n"}
	}},
	// A library that builds the plugin's name from a prefix (as PyTorch
	// builds NVRTC's), and one whose .note.dlopen names it.
	{"out/lib/libprefix.so.1", func(testing.TB) cfix.Spec {
		return cfix.Spec{Soname: "libprefix.so.1", Libc: true, Source: srcFuzzPrefix}
	}},
	{"out/lib/libnote.so.1", func(testing.TB) cfix.Spec {
		return cfix.Spec{Soname: "libnote.so.1", Dlopen: `[{"soname":["libplugin.so.1"],"feature":"fz","priority":"recommended"}]`,
			Source: "int note(void) { return 1; }\n"}
	}},
}

const srcFuzzPrefix = `#include <dlfcn.h>
#include <stdio.h>
static const char prefix[] = "libplugin.so.";
void *load(int major) {
	char name[64];
	snprintf(name, sizeof name, "%s%d", prefix, major);
	return dlopen(name, RTLD_NOW);
}
`

// FuzzRun replaces one file of the tree (which, modulo its size) with
// data and runs the main job, both checks on. Whatever the bytes: no
// panic; every error of a file is one line; a file whose row has an error
// is left as it was, and nothing is written unless the write phase ran;
// and after a run without error, a second run changes nothing and finds
// no error (what was written is what was decided and checked).
func FuzzRun(f *testing.F) {
	rels, seeds := fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		root := t.TempDir()
		fixtures.WriteTree(t, root, rels, seeds, which, data)
		before := readTree(t, root)
		cfg := fuzzConfig(root, 1)
		out := []string{filepath.Join(root, "out")}
		rep, err := patch.Run(context.Background(), &cfg, out)
		if rep == nil {
			if err == nil {
				t.Fatal("no report and no error")
			}
			return
		}
		after := readTree(t, root)
		for _, fr := range rep.Files {
			for _, e := range fr.Errors {
				if strings.Contains(e.Error(), "\n") {
					t.Errorf("%s: error of more than one line: %q", fr.Path, e.Error())
				}
			}
			if len(fr.Errors) > 0 && !bytes.Equal(before[fr.Path], after[fr.Path]) {
				t.Errorf("%s: changed, though its row has errors: %v", fr.Path, fr.Errors)
			}
		}
		if !rep.WritePhase {
			for p, b := range before {
				if !bytes.Equal(b, after[p]) {
					t.Errorf("%s: changed without a write phase (error: %v)", p, err)
				}
			}
		}
		if err != nil {
			return
		}
		again, err := patch.Run(context.Background(), &cfg, out)
		if err != nil {
			t.Fatalf("a second run failed where the first did not: %v", err)
		}
		if again.Changed != 0 {
			var changed []string
			for _, fr := range again.Files {
				if fr.Changed {
					changed = append(changed, fr.Path)
				}
			}
			t.Fatalf("a second run changed %v", changed)
		}
	})
}

// fuzzSeeds builds fuzzFiles and adds each as a seed (the file to
// replace, its bytes).
func fuzzSeeds(f *testing.F) (rels []string, seeds [][]byte) {
	for i, ff := range fuzzFiles {
		b, err := os.ReadFile(cfix.Build(f, ff.spec(f)))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(i), b)
		seeds, rels = append(seeds, b), append(rels, ff.rel)
	}
	return rels, seeds
}

// fuzzConfig is the main job over fuzzFiles written at root, both checks
// on.
func fuzzConfig(root string, jobs int) patch.Config {
	return patch.Config{
		Search: []string{filepath.Join(root, "plug/lib")},
		Policy: policy.Config{Interpreter: hostLoader, DriverLinkFor: policy.DriverLinkNone, Dlopen: policy.DlopenResolve},
		Libc:   hostLibcDir,
		Jobs:   jobs,
	}
}

// FuzzJobs runs the job of FuzzRun on the same tree with one job and with
// four, from the same bytes at the same path: whatever the bytes, both
// must write the same bytes and give the same report and error. Files
// are decided, checked and written in parallel, and the report is sorted
// and tallied after; an answer that hangs on which job came first is a
// fault (run it with -race too).
func FuzzJobs(f *testing.F) {
	rels, seeds := fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		root := t.TempDir()
		out := []string{filepath.Join(root, "out")}
		var trees []map[string][]byte
		var reports []string
		for _, jobs := range []int{1, 4} {
			if err := os.RemoveAll(root); err != nil {
				t.Fatal(err)
			}
			fixtures.WriteTree(t, root, rels, seeds, which, data)
			cfg := fuzzConfig(root, jobs)
			rep, err := patch.Run(context.Background(), &cfg, out)
			js, jerr := json.Marshal(rep)
			if jerr != nil {
				t.Fatal(jerr)
			}
			trees = append(trees, readTree(t, root))
			reports = append(reports, fmt.Sprintf("error: %v\nreport: %s", err, js))
		}
		if reports[0] != reports[1] {
			t.Errorf("the report with 1 job and with 4 differ:\n%s\n%s", reports[0], reports[1])
		}
		for p, b := range trees[0] {
			if !bytes.Equal(b, trees[1][p]) {
				t.Errorf("%s: 1 job and 4 wrote different bytes", p)
			}
		}
	})
}

// readTree maps each regular file below root to its bytes.
func readTree(t *testing.T, root string) map[string][]byte {
	t.Helper()
	m := map[string][]byte{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		m[p] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

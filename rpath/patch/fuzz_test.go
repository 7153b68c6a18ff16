package patch_test

import (
	"bytes"
	"context"
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
	seeds := make([][]byte, len(fuzzFiles))
	rels := make([]string, len(fuzzFiles))
	for i, ff := range fuzzFiles {
		b, err := os.ReadFile(cfix.Build(f, ff.spec(f)))
		if err != nil {
			f.Fatal(err)
		}
		seeds[i], rels[i] = b, ff.rel
	}
	for i, b := range seeds {
		f.Add(uint8(i), b)
	}
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		root := t.TempDir()
		fixtures.WriteTree(t, root, rels, seeds, which, data)
		before := readTree(t, root)
		cfg := patch.Config{
			Search: []string{filepath.Join(root, "plug/lib")},
			Policy: policy.Config{Interpreter: hostLoader, DriverLinkFor: policy.DriverLinkNone, Dlopen: policy.DlopenResolve},
			Libc:   hostLibcDir,
			Jobs:   1,
		}
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

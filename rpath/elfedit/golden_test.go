package elfedit_test

import (
	"bytes"
	"crypto/sha256"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

var update = flag.Bool("update", false, "rewrite testdata/fuzz-outputs.golden")

const goldenPath = "testdata/fuzz-outputs.golden"

// TestFuzzCorpusOutputs pins the bytes every edit writes: each committed
// fuzz input (FuzzEdit's with its own arguments and with each of
// editSeeds, FuzzRead's with each of editSeeds, every field combination
// and fixed mutations) is planned and applied as FuzzEdit does, and the
// SHA-256 of the result, or the error, must match
// testdata/fuzz-outputs.golden. FuzzRead's inputs include real fixtures
// (fx-*: non-PIE executables of bfd, lld and mold, gold, DT_RPATH, armhf,
// riscv64), committed so that the golden does not depend on the fixture
// cache's toolchains.
// A refactoring of the engine must leave this file unchanged; -update
// rewrites it when a change of output is meant.
func TestFuzzCorpusOutputs(t *testing.T) {
	var lines []string
	add := func(name string, data []byte, path, interp, soname, needed string, tag, flags uint8) {
		lines = append(lines, name+" "+editOutcome(data, path, interp, soname, needed, tag, flags))
	}
	for _, target := range []string{"FuzzEdit", "FuzzRead"} {
		dir := filepath.Join("testdata", "fuzz", target)
		ents, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, ent := range ents {
			args := corpusArgs(t, filepath.Join(dir, ent.Name()))
			data := []byte(args[0].(string))
			name := target + "/" + ent.Name()
			if target == "FuzzEdit" {
				add(name, data, args[1].(string), args[2].(string), args[3].(string), args[4].(string), args[5].(uint8), args[6].(uint8))
			}
			for i, e := range editSeeds {
				add(fmt.Sprintf("%s/seed%d", name, i), data, e.path, e.interp, e.soname, e.needed, e.tag, e.flags)
			}
			if target == "FuzzRead" {
				lines = append(lines, sweptOutcomes(name, data)...)
				lines = append(lines, mutatedOutcomes(name, data)...)
			}
		}
	}
	got := strings.Join(lines, "\n") + "\n"
	if *update {
		require.NoError(t, os.WriteFile(goldenPath, []byte(got), 0o644))
		return
	}
	want := string(readFile(t, goldenPath))
	if got != want {
		wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
		n := 0
		for i := range max(len(wl), len(gl)) {
			w, g := at(wl, i), at(gl, i)
			if w != g && n < 20 {
				t.Errorf("line %d:\n want %s\n got  %s", i+1, w, g)
				n++
			}
		}
		assert.Equal(t, len(wl), len(gl), "number of outcomes")
	}
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return ""
}

// editOutcome plans and applies FuzzEdit's edit of data: the SHA-256 of
// the written bytes, or the step and error that stopped it.
func editOutcome(data []byte, path, interp, soname, needed string, tag, flags uint8) string {
	ef, err := elfedit.NewFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return "read: " + err.Error()
	}
	e := fuzzEdit(ef.Info(), path, interp, soname, needed, tag, flags)
	if err := e.Validate(); err != nil {
		return "validate"
	}
	p, err := ef.Plan(e)
	if err != nil {
		return "plan: " + err.Error()
	}
	m := &memTarget{b: bytes.Clone(data)}
	if err := p.Apply(m, false); err != nil {
		return "apply: " + err.Error()
	}
	return fmt.Sprintf("%x %d", sha256.Sum256(m.b), len(m.b))
}

// sweptOutcomes: for a few paths and tags, the outcomes of every flags
// value (every combination of edited fields), one line of their SHA-256
// per path and tag.
func sweptOutcomes(name string, data []byte) []string {
	var out []string
	for _, path := range []string{"/a", strings.Repeat("/long", 100)} {
		for _, tag := range []uint8{0, 2, 0x10, 0x52, 0xa1} {
			h := sha256.New()
			for flags := range 256 {
				fmt.Fprintln(h, editOutcome(data, path, "/lib64/../lib64/ld-linux-x86-64.so.2", "libx.so.1", "libnew.so", tag, uint8(flags)))
			}
			out = append(out, fmt.Sprintf("%s/sweep-%d-%x %x", name, len(path), tag, h.Sum(nil)))
		}
	}
	return out
}

// mutatedOutcomes: the outcomes of fixed mutations of data (a word of a
// program or section header, or a byte of a section an edit reads), each
// planned with a few edits from a fixed seed.
func mutatedOutcomes(name string, data []byte) []string {
	ef, err := elfedit.NewFile(bytes.NewReader(data), int64(len(data)))
	if h := ef.Header; err != nil || h.Phnum == 0 || h.Shnum == 0 || h.Phentsize < 8 || h.Shentsize < 8 {
		return nil
	}
	var out []string
	paths := []string{"", "/a", strings.Repeat("/x", 50), strings.Repeat("/long", 100)}
	rng := rand.New(rand.NewPCG(20261127, uint64(len(data))))
	for n := range 60 {
		m := bytes.Clone(data)
		var what []string
		for k := 1 + rng.IntN(3); k > 0; k-- {
			if n%2 == 0 {
				what = append(what, mutateHeader(rng, ef, m))
			} else {
				what = append(what, mutateBody(rng, ef, m))
			}
		}
		for range 4 {
			tag, flags := uint8(rng.IntN(256)), uint8(rng.IntN(256))
			path := paths[rng.IntN(len(paths))]
			o := editOutcome(m, path, "/lib64/../lib64/ld-linux-x86-64.so.2", "libx.so.1", "libnew.so", tag, flags)
			out = append(out, fmt.Sprintf("%s/mut%d[%s]/%d-%x-%x %s", name, n, strings.Join(slices.DeleteFunc(what, func(s string) bool { return s == "" }), ","), len(path), tag, flags, o))
		}
	}
	return out
}

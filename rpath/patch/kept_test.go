package patch_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/policy"
	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

// TestPlansKeptForTheWrite: on a tree of small files, the write phase
// writes every file with the plan decide made and kept (the debug log's
// "planned" is "once"), instead of reading, planning and verifying it a
// second time: a kept plan holds its file's bytes by offset, so the
// budget takes every small file's, at one job as at several, with the
// symbol check (which runs between decide and the write) off or on.
func TestPlansKeptForTheWrite(t *testing.T) {
	// Libraries with 3,000 exported names (a 200 KB string table that
	// moves when rewritten), stripped as installed libraries are: copies
	// of what their plans write would take 10 MB, past the budget of one
	// job.
	var src strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&src, "void kept_plan_test_function_with_a_long_exported_name_%04d(void) {}\n", i)
	}
	big := cfix.Spec{Soname: "libbig.so", Needed: []string{"libk0.so"}, Source: src.String(), Strip: true}
	for _, tc := range []struct {
		jobs    int
		symbols patch.SymbolsMode
		want    string
	}{{1, patch.SymbolsOff, "once"}, {4, patch.SymbolsOff, "once"}, {1, patch.SymbolsError, "once"}} {
		jobs := tc.jobs
		tr := newTree(t)
		for i := range 60 {
			tr.place(fmt.Sprintf("lib/libk%d.so", i), lib(fmt.Sprintf("libk%d.so", i), "libk0.so"))
		}
		for i := range 20 {
			tr.place(fmt.Sprintf("bin/e%d", i), exe("libk1.so", "libk2.so"))
		}
		for i := range 50 {
			tr.place(fmt.Sprintf("big/%d/libbig.so", i), big)
		}
		var logs bytes.Buffer
		log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		rep := tr.mustPatch([]string{"."}, patch.Config{Jobs: jobs, Logger: log, Policy: policy.Config{DriverLinkFor: policy.DriverLinkAll}, Symbols: tc.symbols})
		require.Equal(t, 130, rep.Changed, "%d jobs: every file rewritten", jobs)
		planned := map[string]int{}
		sc := bufio.NewScanner(&logs)
		for sc.Scan() {
			var rec struct{ Msg, Planned string }
			require.NoError(t, json.Unmarshal(sc.Bytes(), &rec))
			if rec.Msg == "patched" {
				planned[rec.Planned]++
			}
		}
		assert.Equal(t, map[string]int{tc.want: 130}, planned, "%d jobs, symbols %s", jobs, tc.symbols)
	}
}

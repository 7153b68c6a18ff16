package elfedit_test

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// TestKeepOldSections: with Options.KeepOldSections (patchelf
// --no-clobber-old-sections) the bytes an edit moves or replaces stay as
// they were, in every layout, including the hygiene writes a commit would
// take in (joinCommit); without it they are cleared (the control). Either
// way the result verifies and runs.
func TestKeepOldSections(t *testing.T) {
	old := []byte(fixtures.OldRunpath)
	for _, name := range []string{"bfd-pie", "bfd-nopie", "lld-pie", "mold-pie", "aarch64-bfd-pie"} {
		for _, tc := range []struct {
			layout string
			edit   func(fx fixtures.Fixture) elfedit.Edit
		}{
			// A longer RUNPATH: a new .dynstr, in the padding or a region.
			{"runpath", func(fx fixtures.Fixture) elfedit.Edit {
				return elfedit.Edit{SetPath: str(fx.LibDir + ":" + pad(200, "/nix/store/keep-old"))}
			}},
			// With a note: always the region layout.
			{"runpath and note", func(fx fixtures.Fixture) elfedit.Edit {
				return elfedit.Edit{SetPath: str(fx.LibDir), SetNote: cacheNote("keepold", 300)}
			}},
		} {
			for _, keep := range []bool{true, false} {
				t.Run(name+"/"+tc.layout+"/keep="+map[bool]string{true: "yes", false: "no"}[keep], func(t *testing.T) {
					fx := fixtures.ByName(t, name).Copy(t)
					for _, p := range []string{fx.Exe, filepath.Join(fx.LibDir, "libfoo.so")} {
						require.True(t, bytes.Contains(readFile(t, p), old), "%s lacks its old RUNPATH before the edit", p)
						res, err := elfedit.EditFile(p, tc.edit(fx), elfedit.Options{KeepOldSections: keep})
						require.NoError(t, err)
						require.True(t, res.Changed)
						for _, st := range res.Plan.Steps {
							if keep {
								assert.NotEqual(t, elfedit.StepHygiene, st.Kind, "%s: %s", p, st.What)
							}
						}
						assert.Equal(t, keep, bytes.Contains(readFile(t, p), old), "%s: old RUNPATH bytes still there (%s layout)", p, res.Plan.Strategy)
						assert.Empty(t, problems(t, p), p)
					}
					assert.NoError(t, runs(t, fx)(fx.Exe))
				})
			}
		}
	}
}

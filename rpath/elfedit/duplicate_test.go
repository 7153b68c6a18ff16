package elfedit_test

import (
	"debug/elf"
	"os"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// TestEditDuplicateTags: of a DT_RUNPATH, DT_RPATH or DT_SONAME given
// twice, the loaders (glibc, musl) keep the last entry, and so must this
// package's reader (it read the first). Verify names such a file, and an
// edit that sets the value leaves one entry, so the loader sees what was
// set: before, SetPath rewrote the first DT_RUNPATH and the loader went
// on reading the stale second one. The executables are made from the
// fixtures by turning their DT_DEBUG into the second entry (its string
// the first DT_NEEDED's), then patched and run.
func TestEditDuplicateTags(t *testing.T) {
	for _, variant := range []string{"bfd-pie", "gold-pie", "lld-pie", "mold-pie", "i686-bfd-pie", "s390x-bfd-pie"} {
		for _, tc := range []struct {
			name string
			dup  elf.DynTag // the tag DT_DEBUG becomes
			// retag makes the fixture's DT_RUNPATH this tag first (the
			// executable then has no RUNPATH when it is DT_SONAME).
			retag elf.DynTag
			edit  func(fx fixtures.Fixture) elfedit.Edit
			// want is the tag readelf must show once; gone one it must not.
			want, gone string
		}{
			{"runpath", elf.DT_RUNPATH, elf.DT_RUNPATH,
				func(fx fixtures.Fixture) elfedit.Edit { return elfedit.Edit{SetPath: &fx.LibDir} }, "RUNPATH", "RPATH"},
			{"rpath-to-runpath", elf.DT_RPATH, elf.DT_RPATH,
				func(fx fixtures.Fixture) elfedit.Edit { return elfedit.Edit{SetPath: &fx.LibDir} }, "RUNPATH", "RPATH"},
			{"rpath-kept", elf.DT_RPATH, elf.DT_RPATH,
				func(fx fixtures.Fixture) elfedit.Edit {
					return elfedit.Edit{SetPath: &fx.LibDir, Tag: elfedit.TagRPath}
				}, "RPATH", "RUNPATH"},
			{"soname", elf.DT_SONAME, elf.DT_SONAME,
				func(fx fixtures.Fixture) elfedit.Edit {
					return elfedit.Edit{SetPath: &fx.LibDir, Soname: str("libmain.so.1")}
				}, "SONAME", ""},
		} {
			t.Run(variant+"/"+tc.name, func(t *testing.T) {
				fx := fixtures.ByName(t, variant).Copy(t)
				x := newElfBytes(t, readFile(t, fx.Exe))
				orig, err := x.ef.DynString(elf.DT_RUNPATH)
				require.NoError(t, err)
				require.Len(t, orig, 1)
				var path uint64
				x.dyn(t, func(off uint64, tag elf.DynTag, val uint64) {
					if tag == elf.DT_RUNPATH {
						x.setDyn(off, tc.retag, val)
						path = val
					}
				})
				require.NotZero(t, path, "no DT_RUNPATH")
				var second uint64
				x.dyn(t, func(off uint64, tag elf.DynTag, val uint64) {
					if tag == elf.DT_NEEDED && second == 0 {
						second = val
					}
				})
				x.setTag(t, elf.DT_DEBUG, second)
				x.dyn(t, func(off uint64, tag elf.DynTag, val uint64) {
					if tag == elf.DT_DEBUG {
						x.setDyn(off, tc.dup, val)
					}
				})
				// The value of the later entry (gold writes DT_DEBUG first).
				var lastVal uint64
				x.dyn(t, func(off uint64, tag elf.DynTag, val uint64) {
					if tag == tc.dup {
						lastVal = val
					}
				})
				require.NoError(t, os.WriteFile(fx.Exe, x.b, 0o755))
				assert.Contains(t, problems(t, fx.Exe), "dynamic-duplicate")
				ef, err := elfedit.Open(fx.Exe)
				require.NoError(t, err)
				in := ef.Info()
				require.NoError(t, ef.Close())
				last := map[elf.DynTag]*string{elf.DT_RUNPATH: in.RunPath, elf.DT_RPATH: in.RPath, elf.DT_SONAME: &in.Soname}[tc.dup]
				want := map[uint64]string{path: orig[0], second: in.Needed[0]}[lastVal]
				if assert.NotNil(t, last) {
					assert.Equal(t, want, *last, "the value of the last entry, as the loaders read it")
				}

				_, err = elfedit.EditFile(fx.Exe, tc.edit(fx), elfedit.Options{})
				require.NoError(t, err)
				out, _ := fixtures.Readelf(t, fx.Exe)
				assert.Len(t, regexp.MustCompile(`\(`+tc.want+`\)`).FindAllString(out, -1), 1, "readelf -d:\n%s", out)
				if tc.gone != "" {
					assert.NotRegexp(t, `\(`+tc.gone+`\)`, out)
				}
				assert.NotContains(t, problems(t, fx.Exe), "dynamic-duplicate")
				for _, lib := range fx.Libs {
					_, err := elfedit.EditFile(lib, elfedit.Edit{SetPath: &fx.LibDir}, elfedit.Options{})
					require.NoError(t, err)
				}
				got, err := fx.Run(t, fx.Exe)
				require.NoError(t, err)
				assert.Equal(t, fx.Want+"\n", got)
			})
		}
	}
}

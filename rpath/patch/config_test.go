package patch_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/policy"
)

// TestConfigValidate: Validate reports every bad value at once, Run
// refuses the Config with that error before reading anything, and the
// zero Config is valid.
func TestConfigValidate(t *testing.T) {
	require.NoError(t, (&patch.Config{}).Validate())
	bad := patch.Config{
		Policy: policy.Config{
			CudaCompat:     "compat",
			DriverLink:     "run/opengl-driver/lib",
			DriverLinkFor:  "some",
			AppendRunpaths: []string{""},
			RelativeStore:  "nix/store",
			IgnoreMissing:  []string{""},
			Dlopen:         "maybe",
		},
		Search:        []string{""},
		Selector:      patch.CompatSelector{Dir: "sel"},
		Symbols:       "loud",
		IgnoreSymbols: []string{""},
		Write:         patch.WriteOptions{PageSize: 12288},
		Jobs:          -1,
	}
	err := bad.Validate()
	for _, want := range []string{
		"search directory: empty directory",
		`cuda_compat directory "compat" is not absolute`,
		`driver link "run/opengl-driver/lib" is not absolute`,
		`driver link policy "some": want all, needed or none`,
		`store directory "nix/store" is not absolute`,
		"empty ignore-missing pattern",
		`dlopen mode "maybe": want off, report or resolve`,
		"empty RUNPATH entry to append",
		`selector directory "sel" is not absolute`,
		`symbols mode "loud": want off, warn or error`,
		"empty ignore-symbol pattern",
		"page size 12288 is not a power of two",
		"jobs -1: want at least 1",
	} {
		require.ErrorContains(t, err, want)
	}
	before := bad
	rep, rerr := patch.Run(context.Background(), &bad, []string{"/nonexistent"})
	require.Nil(t, rep)
	require.EqualError(t, rerr, err.Error())
	require.Equal(t, before.Policy, bad.Policy, "Run changes no field of the Config")
}

// TestRunLeavesConfig: a run that patches files fills in its defaults
// (driver link, build directories, jobs, symbols mode) and compiles its
// patterns in a copy of its own: every field of the caller's Config,
// slices included, is as it was, and a second run with it decides the
// same.
func TestRunLeavesConfig(t *testing.T) {
	tr := newTree(t)
	tr.place("out/bin/app", exe("libaa.so", "libzz.so"))
	tr.place("deps/a/libaa.so", lib("libaa.so"))
	mk := func() patch.Config {
		return patch.Config{
			Policy: policy.Config{
				RuntimeDeps:    []string{"/rt/lib"},
				AppendRunpaths: []string{"$ORIGIN/../share"},
				IgnoreMissing:  []string{"libzz*"},
			},
			Search:        tr.ps("deps/a"),
			IgnoreSymbols: []string{"*"},
		}
	}
	cfg := mk()
	rep, err := patch.Run(context.Background(), &cfg, tr.ps("out"))
	require.NoError(t, err)
	require.Equal(t, 1, rep.Changed)
	require.Equal(t, mk(), cfg)
	require.Equal(t, drv+":/rt/lib:"+tr.p("deps/a")+":$ORIGIN/../share", tr.runpathOf("out/bin/app"))

	rep, err = patch.Run(context.Background(), &cfg, tr.ps("out"))
	require.NoError(t, err)
	require.Equal(t, 0, rep.Changed, "the second run decides as the first did")
	require.Equal(t, mk(), cfg)
}

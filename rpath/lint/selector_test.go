package lint_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/lint"
	"github.com/cudapatch/cudapatch/rpath/nvdriver/nvdrivertest"
	"github.com/cudapatch/cudapatch/rpath/policy"
	"github.com/cudapatch/cudapatch/rpath/selector"
)

// gcc builds a shared library or, with no soname, a program.
func gcc(t *testing.T, out, src string, args ...string) {
	t.Helper()
	fixtures.Place(t, fixtures.C{Source: src, Args: args}, out)
}

// TestSelectorChoice: with --driver-version, a file whose search path
// starts with a libcuda selector is told which libcuda it takes with that
// driver, and why (CP026, info), as nvdriver.Choose decides at run time;
// a driver compat cannot serve and the driver cannot replace is CP021.
func TestSelectorChoice(t *testing.T) {
	root := t.TempDir()
	compat := filepath.Join(root, "nix/store/c-cuda_compat/compat")
	sel := filepath.Join(root, "nix/store/s-cuda-compat-selector/lib")
	drv := filepath.Join(root, "run/opengl-driver/lib")
	for _, d := range []string{compat, sel, drv, filepath.Join(root, "nix/store/p-app/bin")} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	note := nvdrivertest.NoteAsm(`{"format":1,"driver":[535,580]}`)
	gcc(t, filepath.Join(compat, "libcuda.so.580.95.05"), "int cuInit(unsigned f) { return 0; }\n"+note, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1")
	require.NoError(t, os.Symlink("libcuda.so.580.95.05", filepath.Join(compat, "libcuda.so.1")))
	spec, err := selector.ForCompat(compat, []string{filepath.Join(drv, selector.Name)})
	require.NoError(t, err)
	require.NoError(t, selector.Build(context.Background(), spec, []string{"gcc"}, sel))
	app := filepath.Join(root, "nix/store/p-app/bin/app")
	gcc(t, app, "int cuInit(unsigned); int main(void) { return cuInit(0); }\n", "-Wl,--enable-new-dtags,-rpath,"+sel+":"+drv, "-L"+sel, "-l:libcuda.so.1")

	for _, tc := range []struct {
		driver, rule, use string
	}{
		{"535.261.03", lint.CompatChoice, "takes the compat with driver 535.261.03: the driver 535.261.03 is older than cuda_compat 580.95.05"},
		{"580.159.04", lint.CompatChoice, "takes the driver with driver 580.159.04: the driver 580.159.04 is not older than cuda_compat 580.95.05"},
		{"590.10.01", lint.CompatChoice, "takes the driver with driver 590.10.01"},
		{"550.54.15", lint.CompatTooOld, "takes the driver 550.54.15, as cuda_compat 580.95.05 cannot serve it (cuda_compat 580.95.05 supports drivers of branches 535, 580; the driver 550.54.15 is of none of them)"},
	} {
		rep, err := lint.Lint(context.Background(), &lint.Options{DriverVersion: tc.driver, Policy: policy.Config{DriverLink: drv}}, []string{app})
		require.NoError(t, err)
		var msgs []string
		for _, f := range rep.Findings {
			if f.Rule == lint.CompatChoice || f.Rule == lint.CompatTooOld {
				assert.Equal(t, tc.rule, f.Rule, "driver %s: %s", tc.driver, f.Message)
				msgs = append(msgs, f.Message)
			}
		}
		require.Len(t, msgs, 1, "driver %s: %v", tc.driver, rep.Findings)
		assert.Contains(t, msgs[0], tc.use)
	}
}

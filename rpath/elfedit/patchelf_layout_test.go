package elfedit_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/stretchr/testify/require"
)

// TestReadsPatchelfNonPIELayout: patchelf 0.14 grows a big non-PIE
// executable by mapping new pages below its first segment, and its .dynstr
// then runs across three PT_LOADs that continue each other in memory and in
// the file. nixpkgs holds many such files; they must read, edit and run.
// The subject is the cross gcc's lto-dump, a large non-PIE program that
// Debian's gcc-12-aarch64-linux-gnu installs (CI installs it for the
// fixtures).
func TestReadsPatchelfNonPIELayout(t *testing.T) {
	src := "/usr/bin/aarch64-linux-gnu-lto-dump-12"
	exe := filepath.Join(t.TempDir(), "lto-dump")
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(exe, b, 0o755))
	longInterp := "/nix/store/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-glibc-2.40/lib/ld-linux-x86-64.so.2"
	longPath := "/nix/store/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-x/lib:/nix/store/cccccccccccccccccccccccccccccccc-y/lib"
	out, err := exec.Command("patchelf", "--set-interpreter", longInterp, "--set-rpath", longPath, exe).CombinedOutput()
	require.NoError(t, err, "%s", out)

	f, err := elfedit.Open(exe)
	require.NoError(t, err, "reading what patchelf wrote")
	in := f.Info()
	require.NoError(t, f.Close())
	require.Equal(t, longInterp, in.Interpreter)
	require.NotNil(t, in.RunPath)
	require.Equal(t, longPath, *in.RunPath)

	host := "/lib64/ld-linux-x86-64.so.2"
	lib := "/usr/lib/x86_64-linux-gnu"
	_, err = elfedit.EditFile(exe, elfedit.Edit{Interpreter: &host, SetPath: &lib}, elfedit.Options{})
	require.NoError(t, err)
	ps, err := elfedit.VerifyFile(exe)
	require.NoError(t, err)
	require.Empty(t, ps)
	cmd := exec.Command(exe, "-help")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.True(t, strings.Contains(string(out), "Usage: lto-dump"), "%s", out)
}

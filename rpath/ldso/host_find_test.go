package ldso_test

import (
	"debug/elf"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	fx "github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/ldso"
)

// TestFindHost: this machine's loader is /bin/sh's interpreter, its libc
// directory the one holding the libc.so.6 the shell loads; the same inside
// a root holding copies of the three; and none, with the reason, where the
// shell is static or absent.
func TestFindHost(t *testing.T) {
	h, err := ldso.FindHost("")
	require.NoError(t, err)
	sh, err := elf.Open(ldso.HostShell)
	require.NoError(t, err)
	var interp string
	for _, p := range sh.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			_, err := p.ReadAt(b, 0)
			require.NoError(t, err)
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	sh.Close()
	assert.Equal(t, interp, h.Interpreter)
	assert.FileExists(t, filepath.Join(h.LibcDir, "libc.so.6"))
	ld, err := elf.Open(interp)
	require.NoError(t, err)
	assert.Equal(t, ld.Class, h.Class)
	assert.Equal(t, ld.Machine, h.Machine)
	ld.Close()

	cp := func(root, from, to string) {
		b, err := os.ReadFile(from)
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(filepath.Join(root, filepath.Dir(to)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, to), b, 0o755))
	}
	root := t.TempDir()
	cp(root, ldso.HostShell, "/bin/sh")
	cp(root, interp, interp)
	cp(root, filepath.Join(h.LibcDir, "libc.so.6"), "/usr/lib/x86_64-linux-gnu/libc.so.6")
	got, err := ldso.FindHost(root)
	require.NoError(t, err)
	assert.Equal(t, ldso.Host{Interpreter: interp, LibcDir: "/usr/lib/x86_64-linux-gnu", Class: h.Class, Machine: h.Machine, OSABI: h.OSABI}, got)

	static := t.TempDir()
	cp(static, fx.ByName(t, "static").Exe, "/bin/sh")
	_, err = ldso.FindHost(static)
	assert.EqualError(t, err, "/bin/sh has no interpreter (statically linked)")

	nolibc := t.TempDir()
	cp(nolibc, ldso.HostShell, "/bin/sh")
	cp(nolibc, interp, interp)
	_, err = ldso.FindHost(nolibc)
	assert.EqualError(t, err, "/bin/sh loads no libc.so.6 this loader finds (not a glibc system)")

	_, err = ldso.FindHost(t.TempDir())
	assert.ErrorContains(t, err, "/bin/sh: ")
}

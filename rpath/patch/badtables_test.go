package patch_test

import (
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

// TestCorruptHashHeaderIsLoadFatal: a build input whose .gnu.hash header
// makes the loader read outside the table (symoffset 2^31-1, nbuckets
// 2^32-1, 2^31 Bloom words) crashes ld.so when the program binds through
// it (checked: SIGSEGV). Under --symbols error the program is refused
// with a load-fatal finding naming the library and DT_GNU_HASH, and
// nothing is written; under --symbols warn it is a warning.
func TestCorruptHashHeaderIsLoadFatal(t *testing.T) {
	for _, tc := range []struct {
		name  string
		field int // byte offset in the header
		value uint32
		want  string
	}{
		{"symoffset", 4, 1<<31 - 1, "below symoffset 2147483647"},
		{"nbuckets", 0, 1<<32 - 1, "4294967295 buckets and"},
		{"bloom", 8, 1 << 31, "2147483648 Bloom words run past the end of its segment"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			lib := filepath.Join(root, "deps/lib/libbar.so")
			prog := filepath.Join(root, "out/bin/prog")
			bar := cfix.Build(t, cfix.Spec{Soname: "libbar.so", Source: "int bar(void) { return 2; }\n"})
			cfix.Copy(t, bar, lib)
			cfix.Place(t, cfix.Spec{Exe: true, Libc: true, Source: srcBarMain, Link: []string{bar}}, prog)
			corruptHashHeader(t, lib, tc.field, tc.value)

			// The loader crashes on it.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, prog)
			cmd.Env = []string{"LD_LIBRARY_PATH=" + filepath.Dir(lib)}
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			require.True(t, errors.As(err, &ee), "the program ran: %v %q", err, out)
			ws := ee.Sys().(syscall.WaitStatus)
			require.True(t, ws.Signaled() && (ws.Signal() == syscall.SIGSEGV || ws.Signal() == syscall.SIGBUS), "want a crash, got %v %q", err, out)

			before, err := os.ReadFile(prog)
			require.NoError(t, err)
			cfg := symbolConfig(root)
			rep, err := patch.Run(context.Background(), &cfg, []string{filepath.Join(root, "out")})
			require.ErrorIs(t, err, patch.ErrSymbols)
			require.False(t, rep.Written)
			after, err := os.ReadFile(prog)
			require.NoError(t, err)
			require.Equal(t, before, after, "the program was written")
			var msgs []string
			for _, f := range rep.Files {
				for _, s := range f.Symbols {
					if s.Class == patch.ClassFailsAtLoad {
						require.Equal(t, patch.SeverityError, s.Severity)
						msgs = append(msgs, s.Message)
					}
				}
			}
			require.Len(t, msgs, 1, "%v", findings(rep))
			require.True(t, strings.HasPrefix(msgs[0], lib+": DT_GNU_HASH: "), msgs[0])
			require.Contains(t, msgs[0], tc.want)
			require.True(t, strings.HasSuffix(msgs[0], ": the loader reads it out of bounds"), msgs[0])

			cfg.Symbols = patch.SymbolsWarn
			rep, err = patch.Run(context.Background(), &cfg, []string{filepath.Join(root, "out")})
			require.NoError(t, err)
			require.True(t, rep.Written)
			require.Equal(t, []string{"prog fails-at-load  warning"}, findings(rep))
		})
	}
}

// corruptHashHeader sets the 32-bit word at byte field of the .gnu.hash
// header of the x86_64 library at path.
func corruptHashHeader(t *testing.T, path string, field int, value uint32) {
	t.Helper()
	ef, err := elf.Open(path)
	require.NoError(t, err)
	s := ef.Section(".gnu.hash")
	require.NotNil(t, s, "no .gnu.hash")
	off := int64(s.Offset) + int64(field)
	ef.Close()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer f.Close()
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], value)
	_, err = f.WriteAt(b[:], off)
	require.NoError(t, err)
}

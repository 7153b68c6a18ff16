package elfedit_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// TestCommitIdentity: another process makes a hard link to the file, or
// renames it and puts another file (or a directory) at its path, or
// writes to it in place, at the moment between the write's last check
// and its commit ("commit"), or between the commit and the check after
// it ("committed"). The write fails with ErrChanged saying what changed,
// and every file is as it was: the link's other name (which lies outside
// any tree) is the original, the file that took the path is untouched,
// and the file decided on is the original again. With a claim held, one
// released and taken again, and no claim (by path).
func TestCommitIdentity(t *testing.T) {
	tests := []struct {
		name    string
		at      string
		act     string
		wantErr string
	}{
		{"hard link before the commit", "commit", "link", "its link count went from 1 to 2 (a hard link made or removed)"},
		{"hard link just after the commit", "committed", "link", "its link count went from 1 to 2 (a hard link made or removed)"},
		{"renamed and replaced before the commit", "commit", "replace", "its path names another file now"},
		{"renamed and replaced just after the commit", "committed", "replace", "its path names another file now"},
		{"replaced by a directory", "commit", "dir", "its path names a directory now"},
		{"renamed away", "commit", "rename", "no longer found where it was"},
		{"written in place", "commit", "write", "modified while it was being written"},
	}
	edits := map[string]func(fixtures.Fixture) elfedit.Edit{
		// A region appended, then the commit.
		"region": func(c fixtures.Fixture) elfedit.Edit {
			return elfedit.Edit{Interpreter: str(longInterp(t, c, 200)), SetPath: str(c.LibDir)}
		},
		// One write, the commit, over the old string.
		"in place": func(c fixtures.Fixture) elfedit.Edit { return elfedit.Edit{SetPath: str("/x")} },
	}
	for _, how := range []string{"claim held", "claim released", "by path"} {
		for ename, edit := range edits {
			for _, tt := range tests {
				t.Run(fmt.Sprintf("%s/%s/%s", how, ename, tt.name), func(t *testing.T) {
					c := fileOpsFixture(t)
					exe := c.Exe
					orig := readFile(t, exe)
					e := edit(c)
					other := filepath.Join(t.TempDir(), "other")
					moved := exe + ".moved"
					var opt elfedit.Options
					var pe *elfedit.Pending
					if how != "by path" {
						var b elfedit.Batch
						f, err := b.OpenForEdit(exe)
						require.NoError(t, err)
						pe, err = b.Prepare(f, e, keepNone) // planned again at the write, as by path
						require.NoError(t, err)
						require.NoError(t, pe.Claim(f))
						f.Close()
						if how == "claim released" {
							pe.Release()
						}
					}
					// What the other process left at exe's path, if anything.
					var atPath []byte
					acted := false
					opt = elfedit.WithHook(opt, func(at string) {
						if at != tt.at {
							return
						}
						acted = true
						switch tt.act {
						case "link":
							require.NoError(t, os.Link(exe, other))
						case "replace":
							require.NoError(t, os.Rename(exe, moved))
							atPath = append([]byte(nil), orig...)
							require.NoError(t, os.WriteFile(exe, atPath, 0o755))
						case "dir":
							require.NoError(t, os.Rename(exe, moved))
							require.NoError(t, os.Mkdir(exe, 0o755))
						case "rename":
							require.NoError(t, os.Rename(exe, moved))
						case "write":
							// Past the kernel's coarse clock (a tick, 10 ms
							// at most), so the stamps tell this write from
							// the edit's own.
							time.Sleep(20 * time.Millisecond)
							f, err := os.OpenFile(exe, os.O_WRONLY, 0)
							require.NoError(t, err)
							_, err = f.WriteAt([]byte{orig[len(orig)-1]}, int64(len(orig)-1))
							require.NoError(t, err)
							require.NoError(t, f.Close())
						}
					})
					var err error
					if pe != nil {
						_, err = pe.Commit(opt)
					} else {
						_, err = elfedit.EditFile(exe, e, opt)
					}
					require.True(t, acted, "the hook never ran at %q", tt.at)
					require.Error(t, err)
					t.Log(err)
					assert.Contains(t, err.Error(), tt.wantErr)
					assert.Contains(t, err.Error(), exe+": ")
					assert.True(t, errors.Is(err, elfedit.ErrChanged), "%v is not ErrChanged", err)
					assert.Contains(t, err.Error(), "(file restored)")
					// The file decided on, under whatever name it has now.
					decided := exe
					if tt.act != "link" && tt.act != "write" {
						decided = moved
					}
					assert.Equal(t, orig, readFile(t, decided), "the file decided on is not the original")
					switch tt.act {
					case "link":
						assert.Equal(t, orig, readFile(t, other), "the link outside was written")
					case "replace":
						assert.Equal(t, atPath, readFile(t, exe), "the file at the path was written")
					case "dir":
						st, err := os.Lstat(exe)
						require.NoError(t, err)
						assert.True(t, st.IsDir())
					}
				})
			}
		}
	}
}

// TestEditFileLinks: a file with three hard links is edited in place, once,
// when Links names its two other names (every name then reads the
// result and runs); with one of them only, it is refused (ErrHardLinks);
// with a name that no longer names it (another file there, the count
// right), the write fails before a byte is written.
func TestEditFileLinks(t *testing.T) {
	tests := []struct {
		name    string
		links   func(a, b, stranger string) []string
		wantErr string
	}{
		{"every other name", func(a, b, _ string) []string { return []string{a, b} }, ""},
		{"one name short", func(a, _, _ string) []string { return []string{a} }, "file has several hard links (3 links)"},
		{"a name of another file", func(a, _, s string) []string { return []string{a, s} }, "its path names another file now"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fileOpsFixture(t)
			exe := c.Exe
			orig := readFile(t, exe)
			a, b, stranger := exe+".a", filepath.Join(t.TempDir(), "b"), exe+".s"
			require.NoError(t, os.Link(exe, a))
			require.NoError(t, os.Link(exe, b))
			require.NoError(t, os.WriteFile(stranger, orig, 0o755))
			var links []elfedit.Link
			for _, p := range tt.links(a, b, stranger) {
				links = append(links, elfedit.Link{Path: p})
			}
			_, err := elfedit.EditFile(exe, elfedit.Edit{SetPath: str(c.LibDir)}, elfedit.Options{NoFollow: true, Links: links})
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				for _, p := range []string{exe, a, b, stranger} {
					assert.Equal(t, orig, readFile(t, p), "%s was written", p)
				}
				return
			}
			require.NoError(t, err)
			for _, p := range []string{exe, a, b} {
				assert.Equal(t, uint64(3), stat(t, p).Nlink)
				require.NoError(t, runs(t, c)(p))
			}
		})
	}
}

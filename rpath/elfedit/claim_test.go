package elfedit_test

import (
	"bytes"
	"cmp"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// appendRecord appends rec to path as a logger does: its own descriptor,
// O_APPEND, no lock.
func appendRecord(t *testing.T, path string, rec []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write(rec)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// TestClaimAgainstAppender: another process appends to a library, without
// a lock, at each moment of a claimed edit that appends a region (a longer
// interpreter). Its bytes are never overwritten: appended between the
// claim and the write, the file fails untouched; appended just before the
// region (the size checked already), the region lands after them (it is
// appended with O_APPEND) and the size says so; appended after the
// commit, the result is in place and the bytes follow it. Each is an
// error that says another process changed the file. A record longer than
// the distance from the old end to the journal's trailer is kept whole
// too: the journal's reservation is appended, never written past the end
// at an offset chosen before (1d3062c wrote its trailer there with pwrite,
// over the record's bytes).
func TestClaimAgainstAppender(t *testing.T) {
	tests := []struct {
		name     string
		at       string // the hook's moment; "claimed": before EditFile
		wantErr  string
		original bool // the file is the original, the record after it
		result   bool // the result is in place, the record after it
		records  int  // lines in the record: 300 unless set
	}{
		{name: "no appender"},
		{name: "between claim and write", at: "claimed", wantErr: "changed by another process since it was read: 16000 bytes, now 19300; left as it is", original: true},
		{name: "before the region", at: "append", wantErr: "another process appended to it while it was written"},
		{name: "before the region, past the trailer", at: "append", wantErr: "another process appended to it while it was written", records: 3000},
		{name: "after the commit", at: "end", wantErr: "written, but", result: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fileOpsFixture(t)
			exe := c.Exe
			orig := readFile(t, exe)
			rec := []byte(strings.Repeat("log record\n", cmp.Or(tt.records, 300)))
			e := elfedit.Edit{Interpreter: str(longInterp(t, c, 200)), SetPath: str(c.LibDir)}
			var b elfedit.Batch
			f, err := b.OpenForEdit(exe)
			require.NoError(t, err)
			pe, err := b.Prepare(f, e, keepNone)
			require.NoError(t, err)
			require.NoError(t, pe.Claim(f))
			f.Close()
			// A second claim, as a second run would take it, is refused.
			f2, err := b.Open(exe)
			require.NoError(t, err)
			pe2, err := b.Prepare(f2, e, nil)
			require.NoError(t, err)
			err = pe2.Claim(f2)
			f2.Close()
			pe2.Close()
			require.ErrorIs(t, err, elfedit.ErrLocked)

			if tt.at == "claimed" {
				appendRecord(t, exe, rec)
			}
			opt := elfedit.WithHook(elfedit.Options{}, func(at string) {
				if at == tt.at {
					appendRecord(t, exe, rec)
				}
			})
			res, err := pe.Commit(opt)
			got := readFile(t, exe)
			if tt.wantErr == "" {
				require.NoError(t, err)
				assert.Equal(t, res.Plan.NewSize, int64(len(got)))
				require.NoError(t, runs(t, c)(exe))
				return
			}
			require.Error(t, err)
			t.Log(err)
			assert.Contains(t, err.Error(), tt.wantErr)
			assert.True(t, errors.Is(err, elfedit.ErrChanged), "%v is not ErrChanged", err)
			// The record is there, whole, once.
			assert.Equal(t, 1, bytes.Count(got, rec), "the appended record")
			switch {
			case tt.original:
				assert.Equal(t, append(orig, rec...), got)
			case tt.result:
				assert.True(t, bytes.HasSuffix(got, rec))
				require.NoError(t, runs(t, c)(exe), "the result is in place")
			default:
				// The original bytes, then the record where it was
				// appended; what follows it is the region, unused.
				assert.Equal(t, orig, got[:len(orig)])
				assert.Equal(t, rec, got[len(orig):len(orig)+len(rec)])
			}
		})
	}
}

// TestClaimLocks: a claim holds the file's lock until its write ends (a
// second claim or a plain EditFile fails with ErrLocked, bytes
// untouched); released, it is taken again by the write.
func TestClaimLocks(t *testing.T) {
	c := fixtures.ByName(t, "bfd-pie").Copy(t)
	var b elfedit.Batch
	f, err := b.Open(c.Exe)
	require.NoError(t, err)
	pe, err := b.Prepare(f, elfedit.Edit{SetPath: str("/nix/store/x/lib")}, keepNone)
	require.NoError(t, err)
	require.NoError(t, pe.Claim(f))
	f.Close()
	orig := readFile(t, c.Exe)
	_, err = elfedit.EditFile(c.Exe, elfedit.Edit{SetPath: str("/nix/store/x/lib")}, elfedit.Options{})
	require.ErrorIs(t, err, elfedit.ErrLocked)
	assert.Equal(t, orig, readFile(t, c.Exe))
	// Released, the lock is gone; the write takes it again.
	pe.Release()
	_, err = pe.Commit(elfedit.Options{})
	require.NoError(t, err)
	// The lock ended with the write.
	_, err = elfedit.EditFile(c.Exe, elfedit.Edit{SetPath: str("/nix/store/y/lib")}, elfedit.Options{})
	require.NoError(t, err)
}

// TestClaimJournaled: a file that ends in the journal of an unfinished
// edit (read as that edit leaves it) is claimed like any other: taken when
// no process holds its lock (an edit a killed process left), refused with
// ErrLocked while one does (an edit at work in another process, which two
// runs at once meet).
func TestClaimJournaled(t *testing.T) {
	// The first case whose plan journals: its first write appends it.
	var path string
	for _, c := range crashCases() {
		_, pth, prepared, p, _, _, _ := crashSetup(t, c)
		require.NoError(t, os.WriteFile(pth, prepared, 0o755))
		w, err := os.OpenFile(pth, os.O_RDWR, 0)
		require.NoError(t, err)
		require.NoError(t, elfedit.ApplyPrefix(p, w, 1))
		require.NoError(t, w.Close())
		if fileSize(t, pth) > max(p.OldSize, p.NewSize) {
			path = pth
			break
		}
	}
	require.NotEmpty(t, path, "no crash case journals its edit")

	// Read to be edited, as a batch reads it: as the journal's edit
	// leaves it, still the file opened.
	var b elfedit.Batch
	f, err := b.OpenForEdit(path)
	require.NoError(t, err)
	defer f.Close()
	pe, err := b.Prepare(f, elfedit.Edit{}, nil)
	require.NoError(t, err)
	require.NoError(t, pe.Claim(f))
	g, err := b.OpenForEdit(path)
	require.NoError(t, err)
	defer g.Close()
	pg, err := b.Prepare(g, elfedit.Edit{}, nil)
	require.NoError(t, err)
	defer pg.Close()
	require.ErrorIs(t, pg.Claim(g), elfedit.ErrLocked)
	pe.Release()
}

package elfedit_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// keepNone is a keep that keeps no plan: the commit plans afresh.
func keepNone(int64) bool { return false }

// pendingString is the kept plan of p (planString), or what p says when
// none was kept.
func pendingString(p *elfedit.Pending) string {
	if k := elfedit.KeptPlan(p); k != nil {
		return planString(k)
	}
	return fmt.Sprintf("%s, no plan kept", p.Strategy())
}

// TestPendingContract: a pending edit is written at most once, through
// the claim taken when it was prepared, and only over the file as it was
// read. A commit of a file changed since its claim fails with ErrChanged,
// the file left as it is, whether the claim's descriptor was held or
// released; Close lets the claim go (the file can be claimed, and edited,
// again) and a closed edit is never written; a committed one cannot be
// committed again. A claim is taken only from the file the edit was
// prepared from, and handed over only between names of one file.
func TestPendingContract(t *testing.T) {
	type env struct {
		b    *elfedit.Batch
		path string
		e    elfedit.Edit
		orig []byte
	}
	appendTo := func(t *testing.T, v env, _ *elfedit.Pending) {
		appendRecord(t, v.path, []byte("log record\n"))
	}
	claimAgain := func(t *testing.T, v env) error {
		f, err := v.b.OpenForEdit(v.path)
		require.NoError(t, err)
		defer f.Close()
		q, err := v.b.Prepare(f, v.e, nil)
		require.NoError(t, err)
		defer q.Close()
		return q.Claim(f)
	}
	tests := []struct {
		name    string
		claim   bool
		release bool                                          // the claim's descriptor closed before the commit
		between func(t *testing.T, v env, p *elfedit.Pending) // after the claim, before the commit
		wantErr error                                         // of the commit
		wantMsg string
		written bool                                          // the file carries the edit after the commit
		after   func(t *testing.T, v env, p *elfedit.Pending) // checks after the commit
	}{
		{name: "committed", claim: true, written: true},
		{name: "committed without a claim", written: true},
		{name: "changed since the claim", claim: true, between: appendTo,
			wantErr: elfedit.ErrChanged, wantMsg: "changed by another process since it was read: 16000 bytes, now 16011; left as it is"},
		{name: "changed since the claim, released", claim: true, release: true, between: appendTo,
			wantErr: elfedit.ErrChanged, wantMsg: "changed by another process since it was read: 16000 bytes, now 16011; left as it is"},
		{name: "locked while claimed", claim: true, written: true, between: func(t *testing.T, v env, _ *elfedit.Pending) {
			require.ErrorIs(t, claimAgain(t, v), elfedit.ErrLocked)
			_, err := elfedit.EditFile(v.path, v.e, elfedit.Options{})
			require.ErrorIs(t, err, elfedit.ErrLocked)
		}},
		{name: "closed", claim: true, wantErr: elfedit.ErrPendingDone, between: func(t *testing.T, v env, p *elfedit.Pending) {
			require.NoError(t, p.Close())
			assert.False(t, p.Claimed())
			require.NoError(t, claimAgain(t, v), "the claim released by Close")
			require.NoError(t, p.Close(), "closed twice")
		}, after: func(t *testing.T, v env, p *elfedit.Pending) {
			_, err := elfedit.EditFile(v.path, v.e, elfedit.Options{})
			require.NoError(t, err, "the file is free")
		}},
		{name: "committed twice", claim: true, written: true, after: func(t *testing.T, v env, p *elfedit.Pending) {
			want := readFile(t, v.path)
			_, err := p.Commit(elfedit.Options{})
			require.ErrorIs(t, err, elfedit.ErrPendingDone)
			assert.Equal(t, want, readFile(t, v.path), "written once")
			require.ErrorIs(t, p.Claim(nil), elfedit.ErrPendingDone)
			require.NoError(t, p.Close(), "Close after Commit")
			require.NoError(t, claimAgain(t, v), "the claim released by the commit")
		}},
		{name: "claimed twice", claim: true, written: true, between: func(t *testing.T, v env, p *elfedit.Pending) {
			f, err := v.b.OpenForEdit(v.path)
			require.NoError(t, err)
			defer f.Close()
			assert.ErrorContains(t, p.Claim(f), "claimed already")
		}},
		{name: "claim of another file", written: true, between: func(t *testing.T, v env, p *elfedit.Pending) {
			other := fixtures.ByName(t, "bfd-pie").Copy(t)
			f, err := v.b.OpenForEdit(other.Exe)
			require.NoError(t, err)
			defer f.Close()
			assert.ErrorContains(t, p.Claim(f), "not the file the edit was prepared from")
			assert.False(t, p.Claimed())
			q, err := v.b.Prepare(f, v.e, nil)
			require.NoError(t, err)
			defer q.Close()
			require.NoError(t, q.Claim(f))
			assert.ErrorContains(t, p.ClaimFrom(q), "is not the file")
			assert.True(t, q.Claimed(), "q keeps its claim")
		}},
		{name: "claim of a changed file", wantErr: elfedit.ErrPendingDone, between: func(t *testing.T, v env, p *elfedit.Pending) {
			f, err := v.b.OpenForEdit(v.path)
			require.NoError(t, err)
			defer f.Close()
			appendRecord(t, v.path, []byte("log record\n"))
			require.ErrorIs(t, p.Claim(f), elfedit.ErrChanged, "read before the change")
			require.NoError(t, p.Close())
		}, after: func(t *testing.T, v env, _ *elfedit.Pending) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx := fileOpsFixture(t)
			v := env{b: &elfedit.Batch{}, path: fx.Exe, e: elfedit.Edit{SetPath: str(pad(300, fx.LibDir))}}
			v.orig = readFile(t, v.path)
			f, err := v.b.OpenForEdit(v.path)
			require.NoError(t, err)
			p, err := v.b.Prepare(f, v.e, nil)
			require.NoError(t, err)
			require.True(t, p.Changed())
			require.True(t, p.Kept(), pendingString(p))
			if tt.claim {
				require.NoError(t, p.Claim(f))
				assert.True(t, p.Claimed())
			}
			require.NoError(t, f.Close())
			if tt.release {
				p.Release()
				assert.True(t, p.Claimed(), "released, still claimed")
			}
			var changed []byte
			if tt.between != nil {
				tt.between(t, v, p)
				changed = readFile(t, v.path)
			}
			res, err := p.Commit(elfedit.Options{})
			switch {
			case tt.wantErr != nil:
				require.ErrorIs(t, err, tt.wantErr)
				assert.Contains(t, err.Error(), tt.wantMsg)
				assert.Contains(t, err.Error(), v.path+": ", "the error names the path")
				if changed != nil {
					assert.Equal(t, changed, readFile(t, v.path), "left as it is")
				}
			default:
				require.NoError(t, err)
				assert.True(t, res.Changed)
				assert.True(t, res.Reused, "the kept plan written")
				assert.False(t, p.Claimed(), "the claim given up")
			}
			if tt.written {
				assert.Equal(t, v.e.SetPath, info(t, v.path).RunPath)
				require.NoError(t, runs(t, fx)(v.path))
			} else {
				assert.NotEqual(t, v.e.SetPath, info(t, v.path).RunPath)
			}
			if tt.after != nil {
				tt.after(t, v, p)
			} else if tt.wantErr == nil || errors.Is(tt.wantErr, elfedit.ErrChanged) {
				require.NoError(t, claimAgain(t, v), "no claim left behind")
			}
		})
	}
}

// TestPendingClaimFrom: a file with two names, each prepared, is written
// once through the claim one name took and the other took over; the
// taker's commit checks the other name as one of the file's.
func TestPendingClaimFrom(t *testing.T) {
	fx := fileOpsFixture(t)
	link := filepath.Join(filepath.Dir(fx.Exe), "hardlink")
	require.NoError(t, os.Link(fx.Exe, link))
	var b elfedit.Batch
	e := elfedit.Edit{SetPath: str(pad(300, fx.LibDir))}
	prepare := func(path string) (*elfedit.File, *elfedit.Pending) {
		f, err := b.OpenForEdit(path)
		require.NoError(t, err)
		p, err := b.Prepare(f, e, nil)
		require.NoError(t, err)
		return f, p
	}
	fa, p := prepare(fx.Exe)
	require.NoError(t, fa.Close())
	fb, q := prepare(link)
	require.ErrorContains(t, p.ClaimFrom(q), "nothing to take over")
	require.NoError(t, q.Claim(fb))
	require.NoError(t, fb.Close())
	require.NoError(t, p.ClaimFrom(q))
	assert.True(t, p.Claimed())
	assert.False(t, q.Claimed(), "handed over")
	require.ErrorContains(t, p.ClaimFrom(q), "claimed already")
	require.NoError(t, q.Close())
	_, err := elfedit.EditFile(fx.Exe, e, elfedit.Options{Links: []elfedit.Link{{Path: link}}})
	require.ErrorIs(t, err, elfedit.ErrLocked, "held by p")

	res, err := p.Commit(elfedit.Options{Links: []elfedit.Link{{Path: fx.Exe}}})
	require.NoError(t, err)
	assert.True(t, res.Reused)
	for _, name := range []string{fx.Exe, link} {
		assert.Equal(t, e.SetPath, info(t, name).RunPath, name)
	}
	require.NoError(t, runs(t, fx)(fx.Exe))
}

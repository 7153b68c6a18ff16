package ldso_test

import (
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/ldso"
)

// TestElfReaderReadsOnce: jobs asking for the same file at the same time
// (closures sharing a library) open it once between them, and a missing
// file is looked for once too.
func TestElfReaderReadsOnce(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	missing := filepath.Join(t.TempDir(), "libnone.so.1")
	var opens, also sync.Map
	count := func(m *sync.Map, p string) {
		v, _ := m.LoadOrStore(p, new(atomic.Int32))
		v.(*atomic.Int32).Add(1)
	}
	read := ldso.ElfReaderOpen(func(p string) (*elfedit.File, error) {
		count(&opens, p)
		return elfedit.Open(p)
	}, func(p string, _ *elfedit.File) { count(&also, p) })

	start := make(chan struct{})
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			o, err := read(exe)
			if assert.NoError(t, err) {
				assert.NotEmpty(t, o.Class.String())
			}
			_, err = read(missing)
			assert.ErrorIs(t, err, os.ErrNotExist)
		}()
	}
	close(start)
	wg.Wait()
	for _, c := range []struct {
		m    *sync.Map
		path string
		want int32
	}{{&opens, exe, 1}, {&also, exe, 1}, {&opens, missing, 1}, {&also, missing, 0}} {
		got := int32(0)
		if v, ok := c.m.Load(c.path); ok {
			got = v.(*atomic.Int32).Load()
		}
		assert.Equal(t, c.want, got, c.path)
	}
}

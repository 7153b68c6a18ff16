package symcheck

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// BenchmarkReadRefs reads the references (relocations, symbols, versions)
// of the host's shared libraries, from memory: what the symbol check does
// once for every library of the closures it resolves.
func BenchmarkReadRefs(b *testing.B) {
	paths, _ := filepath.Glob("/lib/x86_64-linux-gnu/lib*.so.*")
	var files [][]byte
	for _, p := range paths {
		if len(files) == 200 {
			break
		}
		data, err := os.ReadFile(p)
		if err != nil || len(data) > 8<<20 || !bytes.HasPrefix(data, []byte("\x7fELF")) {
			continue
		}
		files = append(files, data)
	}
	if len(files) == 0 {
		b.Skip("no host libraries")
	}
	var sp scratchPool
	b.ResetTimer()
	for range b.N {
		var ns names
		for _, data := range files {
			f, err := elfedit.NewFile(bytes.NewReader(data), int64(len(data)))
			if err != nil {
				continue
			}
			s := sp.get()
			_, _ = newObject(f, readRefs, &ns, s)
			sp.put(s)
		}
	}
}

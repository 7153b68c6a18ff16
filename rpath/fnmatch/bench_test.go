package fnmatch_test

import (
	"strings"
	"testing"

	"github.com/cudapatch/cudapatch/rpath/fnmatch"
)

// benchNames are DT_NEEDED names of the kind a CUDA closure misses.
var benchNames = []string{
	"libcuda.so.1", "libnvidia-ml.so.1", "libcudart.so.12", "libc.so.6",
	"libnvidia-ptxjitcompiler.so.535.104.05", "libstdc++.so.6", "libxcb.so",
}

func BenchmarkMatch(b *testing.B) {
	patterns := []string{"libcuda.so.1", "libcuda.so*", "*", "libnvidia-*.so.1", "lib[!x]*.so"}
	compiled := make([]*fnmatch.Pattern, len(patterns))
	for i, p := range patterns {
		compiled[i] = fnmatch.Compile(p)
	}
	b.Run("compiled", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, p := range compiled {
				for _, name := range benchNames {
					p.Match(name)
				}
			}
		}
	})
	b.Run("uncompiled", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, p := range patterns {
				for _, name := range benchNames {
					fnmatch.Match(p, name)
				}
			}
		}
	})
}

// BenchmarkMatchStars is the case that is exponential for a naive
// backtracker.
func BenchmarkMatchStars(b *testing.B) {
	p := fnmatch.Compile("*a*a*a*a*a*a*a*a*b")
	name := strings.Repeat("a", 1000)
	b.ReportAllocs()
	for b.Loop() {
		if p.Match(name) {
			b.Fatal("matched")
		}
	}
}

package elfedit_test

import (
	"bytes"
	"testing"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// benchFiles are the files the benchmarks read: a small library and the
// 800 KiB static PIE (whose size must not matter: only headers, .dynamic
// and .dynstr are read).
var benchFiles = []struct{ name, variant, file string }{
	{"libfoo", "bfd-pie", "libfoo"},
	{"main", "bfd-pie", "main"},
	{"static-pie", "static-pie", "main"},
}

func benchBytes(b *testing.B, variant, file string) []byte {
	fx := fixtures.ByName(b, variant)
	switch file {
	case "libfoo":
		return readFile(b, fx.Libs[0])
	default:
		return readFile(b, fx.Exe)
	}
}

// BenchmarkRead measures NewFile and Info.
func BenchmarkRead(b *testing.B) {
	for _, f := range benchFiles {
		data := benchBytes(b, f.variant, f.file)
		b.Run(f.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ef, err := elfedit.NewFile(bytes.NewReader(data), int64(len(data)))
				if err != nil {
					b.Fatal(err)
				}
				_ = ef.Info()
			}
		})
	}
}

// benchEdits are the edits of BenchmarkPlan and BenchmarkApply, one per
// layout: in place, slack, region.
var benchEdits = []struct {
	name string
	edit elfedit.Edit
}{
	{"in-place", elfedit.Edit{SetPath: str("/short")}},
	{"slack", elfedit.Edit{SetPath: str(pad(200, "/lib"))}},
	{"region", elfedit.Edit{SetPath: str(pad(4096, "/lib")), Interpreter: str(pad(200, "/ld.so"))}},
}

// BenchmarkPlan measures Plan (and Result, which the verifier reads) on a
// file already read.
func BenchmarkPlan(b *testing.B) {
	data := benchBytes(b, "bfd-pie", "main")
	ef, err := elfedit.NewFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range benchEdits {
		b.Run(e.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p, err := ef.Plan(e.edit)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := p.Result(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkApply measures Apply to an in-memory copy of the file; each
// iteration first copies the original bytes into one reused buffer.
func BenchmarkApply(b *testing.B) {
	data := benchBytes(b, "bfd-pie", "main")
	ef, err := elfedit.NewFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range benchEdits {
		p, err := ef.Plan(e.edit)
		if err != nil {
			b.Fatal(err)
		}
		if p.Strategy != elfedit.Strategy(e.name) {
			b.Fatalf("%s: planned %s", e.name, p.Strategy)
		}
		b.Run(e.name, func(b *testing.B) {
			b.ReportAllocs()
			m := &memTarget{b: make([]byte, 0, len(data)+64<<10)}
			for b.Loop() {
				m.b = append(m.b[:0], data...)
				if err := p.Apply(m, false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

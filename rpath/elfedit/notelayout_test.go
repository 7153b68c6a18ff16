package elfedit

import (
	"debug/elf"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestKeptRuns(t *testing.T) {
	note := func(off int64, end uint64) parsedNote {
		n := parsedNote{end: end}
		n.Off = off
		return n
	}
	ns := []parsedNote{note(0x300, 0x320), note(0x320, 0x344), note(0x344, 0x360), note(0x360, 0x380)}
	for _, tc := range []struct {
		name string
		gone []int64
		end  uint64
		want []rng
	}{
		{"the first goes", []int64{0x300}, 0x380, []rng{{0x320, 0x380}}},
		{"a middle one goes", []int64{0x344}, 0x380, []rng{{0x300, 0x344}, {0x360, 0x380}}},
		{"all go", []int64{0x300, 0x320, 0x344, 0x360}, 0x380, nil},
		// The last note runs past the PT_NOTE's end: cut there.
		{"cut at the end", []int64{0x320}, 0x370, []rng{{0x300, 0x320}, {0x344, 0x370}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gone := map[int64]bool{}
			for _, o := range tc.gone {
				gone[o] = true
			}
			assert.Equal(t, tc.want, keptRuns(ns, gone, tc.end))
		})
	}
}

func TestSplitNote(t *testing.T) {
	p := elf.ProgHeader{Type: elf.PT_NOTE, Off: 0x300, Vaddr: 0x1300, Paddr: 0x1300, Filesz: 0x80, Memsz: 0x80, Align: 8}
	got := splitNote(p, []rng{{0x300, 0x320}, {0x344, 0x380}})
	assert.Equal(t, []elf.ProgHeader{
		{Type: elf.PT_NOTE, Off: 0x300, Vaddr: 0x1300, Paddr: 0x1300, Filesz: 0x20, Memsz: 0x20, Align: 8},
		// Its offset is no longer 8-aligned: p_align 4.
		{Type: elf.PT_NOTE, Off: 0x344, Vaddr: 0x1344, Paddr: 0x1344, Filesz: 0x3c, Memsz: 0x3c, Align: 4},
	}, got)
	assert.Empty(t, splitNote(p, nil))
}

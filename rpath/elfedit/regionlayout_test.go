package elfedit

import (
	"debug/elf"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The region layout's compute steps, each from its inputs to what it
// decides, without a file.

func TestPackBlobs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rel   uint64
		carry blob
		gap   []blob
		want  []blob
		end   uint64
	}{
		{"nothing", 32, blob{}, nil, nil, 32},
		{"carry only", 32, blob{lo: 0x5000, hi: 0x5040}, nil, []blob{{0x5000, 0x5040, 32}}, 96},
		// A gap blob keeps its offset modulo 16 (.interp at 0x318 lands at
		// 8 modulo 16), after the carried bytes.
		{"carry then gap", 32, blob{lo: 0x5000, hi: 0x5041}, []blob{{lo: 0x318, hi: 0x334}}, []blob{{0x5000, 0x5041, 32}, {0x318, 0x334, 120}}, 148},
		{"gaps", 32 + 13*56, blob{}, []blob{{lo: 0x2a8, hi: 0x2c4}, {lo: 0x2c4, hi: 0x2e8}}, []blob{{0x2a8, 0x2c4, 0x308}, {0x2c4, 0x2e8, 0x334}}, 0x358},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, end := packBlobs(tc.rel, tc.carry, tc.gap)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.end, end)
		})
	}
}

func TestAdoptableNote(t *testing.T) {
	note := func(off, size, align uint64) elf.ProgHeader {
		return elf.ProgHeader{Type: elf.PT_NOTE, Off: off, Filesz: size, Align: align}
	}
	blobs := []blob{{lo: 0x300, hi: 0x340, rel: 32}}
	for _, tc := range []struct {
		name  string
		progs []elf.ProgHeader
		end   uint64
		want  int
	}{
		{"ends at the carried end", []elf.ProgHeader{{Type: elf.PT_LOAD}, note(0x320, 0x20, 4)}, 96, 1},
		{"ends before it", []elf.ProgHeader{note(0x320, 0x10, 4)}, 96, -1},
		{"8-aligned", []elf.ProgHeader{note(0x320, 0x20, 8)}, 96, -1},
		{"not moved", []elf.ProgHeader{note(0x400, 0x20, 4)}, 96, -1},
		{"empty", []elf.ProgHeader{note(0x340, 0, 4)}, 96, -1},
		{"the last of two", []elf.ProgHeader{note(0x320, 0x20, 4), {Type: elf.PT_INTERP}, note(0x320, 0x20, 4)}, 96, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, adoptableNote(tc.progs, blobs, tc.end))
		})
	}
}

func TestStackTables(t *testing.T) {
	for _, tc := range []struct {
		name                            string
		interp, dyn, str                bool
		interpRel, dynRel, strRel, want uint64
	}{
		{"none", false, false, false, 0, 0, 0, 0x101},
		{"all", true, true, true, 0x101, 0x120, 0x1a0, 0x1e0},
		{"dynamic aligned", false, true, false, 0, 0x108, 0, 0x188},
		{"string table unaligned", false, false, true, 0, 0, 0x101, 0x141},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i, d, s, end := stackTables(0x101, 0x1c, 0x80, 8, 0x40, tc.interp, tc.dyn, tc.str)
			assert.Equal(t, []uint64{tc.interpRel, tc.dynRel, tc.strRel, tc.want}, []uint64{i, d, s, end})
		})
	}
}

func TestTailLayout(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		copied                 bool
		shTable                uint64
		shstrRel, shRel, total uint64
	}{
		{"nothing", false, 0, 0, 0x208, 0x203},
		{"name table", true, 0, 0x203, 0x2f0, 0x2ed},
		{"header table", false, 0x400, 0, 0x208, 0x608},
		{"both", true, 0x400, 0x203, 0x2f0, 0x6f0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, c := tailLayout(0x203, 0xea, tc.copied, tc.shTable)
			assert.Equal(t, []uint64{tc.shstrRel, tc.shRel, tc.total}, []uint64{a, b, c})
		})
	}
}

func TestPlacement(t *testing.T) {
	lib := placement{memStart: 0x40000, align: 0x1000}
	exe := placement{memStart: 0x440000, delta: 0x400000, align: 0x1000, exec: true}
	for _, tc := range []struct {
		name       string
		p          placement
		size       uint64
		free       *rng
		total      uint64
		off, vaddr uint64
	}{
		// A library's region follows the file, at an address congruent
		// to its offset.
		{"library", lib, 0x3a05, nil, 0x100, 0x3a10, 0x40a10},
		// An executable whose region holds the program headers keeps the
		// first segment's vaddr-offset, leaving a sparse hole.
		{"executable", exe, 0x3a05, nil, 0x100, 0x40000, 0x440000},
		{"executable past its memory", exe, 0x50005, nil, 0x100, 0x51000, 0x451000},
		// The live region's slot is reused when the new one fits before
		// it, else the region goes after the file.
		{"fits the free slot", lib, 0x6000, &rng{0x3a05, 0x4000}, 0x100, 0x3a10, 0x40a10},
		{"does not fit", lib, 0x6000, &rng{0x3a05, 0x4000}, 0x600, 0x6000, 0x40000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			off, vaddr := tc.p.choose(tc.size, tc.free, tc.total)
			assert.Equal(t, []uint64{tc.off, tc.vaddr}, []uint64{off, vaddr})
		})
	}
}

func TestComposeMap(t *testing.T) {
	pos := []int{0, 2, 1, 3}
	assert.Equal(t, []int{0, 2, 1, 3}, composeMap(nil, pos, 4), "identity, then sorted")
	// A removed section (-1) stays removed; the others follow the sort.
	assert.Equal(t, []int{0, -1, 2, 1, 3}, composeMap([]int{0, -1, 1, 2, 3}, pos, 5))
}

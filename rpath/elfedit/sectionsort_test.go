package elfedit

import (
	"bytes"
	"debug/elf"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
)

// TestWalkStopsShort: the disorders patchelf <= 0.18's walk trips on, for a
// 64-bit file with 9 program headers and no note: its grown table ends at
// 64 + (9+0+1)*56 = 0x270.
func TestWalkStopsShort(t *testing.T) {
	sec := func(off uint64) Section { return Section{Type: elf.SHT_PROGBITS, Offset: off} }
	note := func(off uint64) Section { return Section{Type: elf.SHT_NOTE, Offset: off} }
	null := Section{}
	for _, tc := range []struct {
		name  string
		secs  []Section
		stops bool
	}{
		{"sorted", []Section{null, sec(0x238), sec(0x260), sec(0x400), sec(0x9000)}, false},
		{"moved .interp before .gnu.hash", []Section{null, sec(0x9000), sec(0x260), sec(0x400)}, true},
		// The walk ends at 0x270 anyway: a moved .dynstr after .dynsym
		// (0x400) hides nothing.
		{"moved .dynstr above the walk's end", []Section{null, sec(0x238), sec(0x260), sec(0x9000), sec(0x400), sec(0x3000)}, false},
		{"moved .dynamic at the end", []Section{null, sec(0x238), sec(0x260), sec(0x400), sec(0x9000), sec(0x3000)}, false},
		{"a section at the walk's end itself", []Section{null, sec(0x9000), sec(0x270)}, true},
		{"just past it", []Section{null, sec(0x9000), sec(0x271)}, false},
		// Each SHT_NOTE section is one entry more: 0x270+56 = 0x2a8.
		{"notes grow the walk", []Section{null, note(0x238), sec(0x9000), sec(0x2a0)}, true},
		{"past the grown walk", []Section{null, note(0x238), sec(0x9000), sec(0x2a9)}, false},
		{"section 0 is not walked", []Section{sec(0x9000), sec(0x260)}, false},
		{"no sections", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.stops, walkStopsShort(tc.secs, 64, 56, 9))
		})
	}
}

// TestIdentitySectionMapReadsNothing: a section map that keeps every index
// (a note header appended to headers left in their order) renumbers no
// symbol, and fixSymbols reads neither symbol table for it; a map that
// renumbers reads both.
func TestIdentitySectionMapReadsNothing(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(fixtures.ByName(t, "bfd-pie").Libs[0])
	require.NoError(t, err)
	for _, tc := range []struct {
		name     string
		renumber bool
	}{{"identity", false}, {"renumbering", true}} {
		t.Run(tc.name, func(t *testing.T) {
			src := &CountingReader{R: bytes.NewReader(raw)}
			f, err := NewFile(src, int64(len(raw)))
			require.NoError(t, err)
			var dynsym, symtab int
			for i, s := range f.Sections {
				switch s.Type {
				case elf.SHT_DYNSYM:
					dynsym = i
				case elf.SHT_SYMTAB:
					symtab = i
				}
			}
			require.NotZero(t, dynsym)
			require.NotZero(t, symtab, "the fixture library keeps its .symtab")
			secMap := make([]int, len(f.Sections)+1)
			for i := range secMap {
				secMap[i] = i
			}
			if tc.renumber {
				secMap[len(secMap)-2], secMap[len(secMap)-1] = len(secMap)-1, len(secMap)-2
			}
			src.Ranges = nil
			f.fixSymbols(nil, secMap)
			reads := func(i int) (n int) {
				s := f.Sections[i]
				for _, r := range src.Ranges {
					if uint64(r[0]) < s.Offset+s.Size && uint64(r[1]) > s.Offset {
						n++
					}
				}
				return n
			}
			if tc.renumber {
				assert.Positive(t, reads(dynsym), ".dynsym read to be renumbered")
				assert.Positive(t, reads(symtab), ".symtab read to be renumbered")
			} else {
				assert.Zero(t, src.Calls(), "reads for a map that renumbers nothing: %v", src.Ranges)
			}
		})
	}
}

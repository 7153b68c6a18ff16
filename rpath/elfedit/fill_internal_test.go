package elfedit

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFillTail: a file whose reservation's write was cut at a page
// boundary ends in the fill pattern, and a next edit reads it as a
// pending journal that cuts the file back to the old end, whatever the
// old end's place in its unit; a tail shorter than one unit, or a pattern
// with one byte that is not its own, is no journal (nothing is cut).
func TestFillTail(t *testing.T) {
	for _, old := range []int64{4000, 4001, 4079, 4080, 4088, 8191, 12288} {
		for _, n := range []int64{1, 15, 16, 17, 31, 32, 100, 5000} {
			t.Run(fmt.Sprintf("old=%d/n=%d", old, n), func(t *testing.T) {
				b := bytes.Repeat([]byte{0x7f}, int(old)) // not zeros, not the pattern
				b = append(b, make([]byte, n)...)
				fill(b[old:], old, old)
				j, err := readJournal(bytes.NewReader(b), int64(len(b)), nil)
				if err != nil {
					t.Fatal(err)
				}
				if n < fillUnit {
					if j != nil {
						t.Fatalf("a tail of %d pattern bytes read as a journal from 0x%x", n, j.oldSize)
					}
					return
				}
				if j == nil || !j.pending || j.oldSize != old {
					t.Fatalf("got %+v, want a pending journal from %d", j, old)
				}
				rc, err := j.recover(bytes.NewReader(b))
				if err != nil || rc.size != old || len(rc.writes) != 0 {
					t.Fatalf("recovery %+v, %v: want a cut to %d", rc, err, old)
				}
				// One byte not the pattern's, anywhere past the old end:
				// not this package's, left as it is.
				for _, at := range []int64{old, old + n/2, old + n - 1} {
					c := bytes.Clone(b)
					c[at] ^= 0x55
					if j, err := readJournal(bytes.NewReader(c), int64(len(c)), nil); err != nil || j != nil {
						t.Fatalf("byte %d changed: %+v, %v; want no journal", at, j, err)
					}
				}
			})
		}
	}
}

// shortTailELF is a small ELF file (64-bit little-endian, else 32-bit
// big-endian) whose contents end at end: the ELF header, one PROGBITS
// section of filler bytes, and the section header table last.
func shortTailELF(is64 bool, end int64) []byte {
	var o binary.ByteOrder = binary.BigEndian
	ehsize, shent := int64(52), int64(40)
	if is64 {
		o, ehsize, shent = binary.LittleEndian, 64, 64
	}
	shoff := end - 2*shent
	b := bytes.Repeat([]byte{'A'}, int(end))
	copy(b, elf.ELFMAG)
	b[elf.EI_CLASS], b[elf.EI_DATA], b[elf.EI_VERSION] = byte(elf.ELFCLASS32), byte(elf.ELFDATA2MSB), 1
	clear(b[7:ehsize])
	sh := b[shoff+shent:]
	clear(b[shoff:end])
	if is64 {
		b[elf.EI_CLASS], b[elf.EI_DATA] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB)
		o.PutUint64(b[40:], uint64(shoff))
		o.PutUint16(b[52:], uint16(ehsize))
		o.PutUint16(b[58:], uint16(shent))
		o.PutUint16(b[60:], 2)
		o.PutUint32(sh[4:], uint32(elf.SHT_PROGBITS))
		o.PutUint64(sh[24:], uint64(ehsize))
		o.PutUint64(sh[32:], uint64(shoff-ehsize))
	} else {
		o.PutUint32(b[32:], uint32(shoff))
		o.PutUint16(b[40:], uint16(ehsize))
		o.PutUint16(b[46:], uint16(shent))
		o.PutUint16(b[48:], 2)
		o.PutUint32(sh[4:], uint32(elf.SHT_PROGBITS))
		o.PutUint32(sh[16:], uint32(ehsize))
		o.PutUint32(sh[20:], uint32(shoff-ehsize))
	}
	return b
}

// contentEndOf is where the contents of the ELF file b ends, as NewFile
// reads it (-1 if it reads no ELF file), for readJournal.
func contentEndOf(b []byte) int64 {
	f, err := newFile(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return -1
	}
	return f.contentEnd()
}

// endOf is contentEndOf(b) as readJournal takes it.
func endOf(b []byte) func() int64 { return func() int64 { return contentEndOf(b) } }

// TestShortTail: a reservation whose old end lay k bytes (0 < k < 16)
// before a page boundary, its write cut there, leaves the first k bytes
// of a pattern unit, too few to name the old end; the ELF file's contents
// ending exactly at the old end name it, and the next edit cuts the file
// back there, for every k, 64-bit and 32-bit, either byte order. Bytes
// past the contents (trailing data of the file's own), a size that is no
// page multiple, one byte not the pattern's, or headers that do not hold
// are no journal: nothing is cut. On 158eaf7 no such tail was recognised.
func TestShortTail(t *testing.T) {
	for _, is64 := range []bool{true, false} {
		for k := int64(1); k < fillUnit; k++ {
			t.Run(fmt.Sprintf("64=%v/k=%d", is64, k), func(t *testing.T) {
				old := 3*cutPage - k
				b := append(shortTailELF(is64, old), make([]byte, k)...)
				fill(b[old:], old, old)
				require.Equal(t, old, contentEndOf(b), "the premise")
				j, err := readJournal(bytes.NewReader(b), int64(len(b)), endOf(b))
				require.NoError(t, err)
				require.NotNil(t, j)
				require.True(t, j.pending)
				require.Equal(t, old, j.oldSize)
				rc, err := j.recover(bytes.NewReader(b))
				require.NoError(t, err)
				require.Equal(t, old, rc.size)
				require.Empty(t, rc.writes)

				none := func(c []byte, what string) {
					t.Helper()
					j, err := readJournal(bytes.NewReader(c), int64(len(c)), endOf(c))
					require.NoError(t, err, what)
					require.Nil(t, j, what)
				}
				for at := old; at < int64(len(b)); at++ {
					c := bytes.Clone(b)
					c[at] ^= 0x55
					none(c, fmt.Sprintf("byte %d changed", at))
				}
				// The contents end one byte before: that byte is the
				// file's own, and so may the pattern's start be.
				c := append(shortTailELF(is64, old-1), 0)
				c = append(c, make([]byte, k)...)
				fill(c[old:], old, old)
				none(c, "contents end before the old end")
				// A size that is no page multiple.
				c = append(shortTailELF(is64, old+1), make([]byte, k)...)
				fill(c[old+1:], old+1, old+1)
				none(c, "no page multiple")
				// Headers that do not hold: a section past the end, a
				// table count past the file, no ELF magic; or an ELF
				// header that says it runs past the old end (e_ehsize).
				for _, mangle := range []func(c []byte){
					func(c []byte) { c[0] = 0 },
					func(c []byte) { c[elf.EI_CLASS] = 9 },
					func(c []byte) {
						if is64 {
							binary.LittleEndian.PutUint16(c[52:], uint16(old+1))
						} else {
							binary.BigEndian.PutUint16(c[40:], uint16(old+1))
						}
					},
					func(c []byte) {
						if is64 {
							binary.LittleEndian.PutUint16(c[60:], 0xfff0)
						} else {
							binary.BigEndian.PutUint16(c[48:], 0xfff0)
						}
					},
				} {
					c := bytes.Clone(b)
					mangle(c)
					none(c, "mangled headers")
				}
			})
		}
	}
}

// TestShortTailReadsHeadersLast: where the ELF contents end is asked only
// of a file whose size is a page multiple and whose last bytes are the
// start of a pattern unit, so a file that ends in no journal pays nothing
// for it; unknown (nil), a short tail is no journal.
func TestShortTailReadsHeadersLast(t *testing.T) {
	const k = 5
	old := int64(2*cutPage - k)
	cut := append(shortTailELF(true, old), make([]byte, k)...)
	fill(cut[old:], old, old)
	other := bytes.Clone(cut)
	other[len(other)-1] ^= 0x55
	for _, c := range []struct {
		name  string
		b     []byte
		asked bool
	}{
		{"a page multiple, ending in the section header table", shortTailELF(true, 2*cutPage), false},
		{"no page multiple", shortTailELF(true, old), false},
		{"not the pattern's last byte", other, false},
		{"a cut reservation", cut, true},
	} {
		asked := 0
		end := func() int64 { asked++; return contentEndOf(c.b) }
		j, err := readJournal(bytes.NewReader(c.b), int64(len(c.b)), end)
		require.NoError(t, err, c.name)
		require.Equal(t, c.asked, j != nil, c.name)
		require.Equal(t, c.asked, asked > 0, c.name)
	}
	j, err := readJournal(bytes.NewReader(cut), int64(len(cut)), nil)
	require.NoError(t, err)
	require.Nil(t, j, "the contents' end unknown")
}

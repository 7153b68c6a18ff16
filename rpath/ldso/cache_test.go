package ldso_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/ldso"
)

// ent is one cache entry to write.
type ent struct {
	name, path string
	flags      ldso.CacheFlags
	hwcap      uint64
}

const (
	libc6x8664 = ldso.FlagELFLibc6 | ldso.FlagX8664Lib64
	hwcapExt   = uint64(1) << 62
)

// newPart writes a glibc-ld.so.cache1.1 part that will sit at file offset
// base: header, entries, strings, then the extension directory with the
// glibc-hwcaps and generator sections. Entry strings are relative to base,
// extension offsets and hwcaps strings to the start of the file.
func newPart(bo binary.ByteOrder, base int, ents []ent, hwcaps []string, gen string) []byte {
	var strs bytes.Buffer
	strsAt := 48 + 24*len(ents)
	add := func(s string) uint32 {
		off := strsAt + strs.Len()
		strs.WriteString(s)
		strs.WriteByte(0)
		return uint32(off)
	}
	var b bytes.Buffer
	b.WriteString("glibc-ld.so.cache1.1")
	u32 := func(v uint32) { _ = binary.Write(&b, bo, v) }
	u32(uint32(len(ents)))
	u32(0) // len_strings, patched below
	flag := byte(2)
	if bo == binary.BigEndian {
		flag = 3
	}
	b.Write([]byte{flag, 0, 0, 0})
	u32(0) // extension_offset, patched below
	b.Write(make([]byte, 12))
	for _, e := range ents {
		u32(uint32(e.flags))
		u32(add(e.name))
		u32(add(e.path))
		u32(0)
		_ = binary.Write(&b, bo, e.hwcap)
	}
	var hwOffs []uint32
	for _, h := range hwcaps {
		hwOffs = append(hwOffs, add(h)+uint32(base))
	}
	b.Write(strs.Bytes())
	bo.PutUint32(b.Bytes()[24:], uint32(strs.Len()))
	if len(hwcaps) == 0 && gen == "" {
		return b.Bytes()
	}
	for b.Len()%4 != 0 {
		b.WriteByte(0)
	}
	bo.PutUint32(b.Bytes()[32:], uint32(base+b.Len()))
	u32(0xeaa42174)
	u32(2)
	dataAt := b.Len() + 2*16
	u32(1) // glibc-hwcaps
	u32(0)
	u32(uint32(base + dataAt))
	u32(uint32(4 * len(hwOffs)))
	u32(0) // generator
	u32(0)
	u32(uint32(base + dataAt + 4*len(hwOffs)))
	u32(uint32(len(gen)))
	for _, o := range hwOffs {
		u32(o)
	}
	b.WriteString(gen)
	return b.Bytes()
}

// oldCache writes the "ld.so-1.7.0" format, followed by the new format
// when withNew is set (ldconfig's "compat" layout before glibc 2.32).
func oldCache(ents []ent, withNew bool) []byte {
	bo := binary.LittleEndian
	var b bytes.Buffer
	b.WriteString("ld.so-1.7.0\x00")
	_ = binary.Write(&b, bo, uint32(len(ents)))
	strsAt := 16 + 12*len(ents)
	newAt := (strsAt + 7) &^ 7
	var strs bytes.Buffer
	var tail []byte
	if withNew {
		tail = newPart(bo, newAt, ents, nil, "")
		strs.Write(make([]byte, newAt-strsAt))
		strs.Write(tail)
	}
	add := func(s string) uint32 {
		off := strs.Len()
		strs.WriteString(s)
		strs.WriteByte(0)
		return uint32(off)
	}
	for _, e := range ents {
		_ = binary.Write(&b, bo, int32(e.flags))
		_ = binary.Write(&b, bo, add(e.name))
		_ = binary.Write(&b, bo, add(e.path))
	}
	b.Write(strs.Bytes())
	return b.Bytes()
}

// sampleEntries is sorted as ldconfig sorts: by name, descending, with
// glibc-hwcaps entries first within a name.
var sampleEntries = []ent{
	{"libz.so.1", "/usr/lib/glibc-hwcaps/x86-64-v2/libz.so.1", libc6x8664, hwcapExt | 0},
	{"libz.so.1", "/usr/lib/glibc-hwcaps/x86-64-v3/libz.so.1", libc6x8664, hwcapExt | 1},
	{"libz.so.1", "/usr/lib/glibc-hwcaps/x86-64-v4/libz.so.1", libc6x8664, hwcapExt | 2 | 8<<32},
	{"libz.so.1", "/usr/lib/x86_64-linux-gnu/libz.so.1", libc6x8664, 0},
	{"libz.so.1", "/usr/lib/i386-linux-gnu/libz.so.1", ldso.FlagELFLibc6, 0},
	{"libtls.so", "/usr/lib/tls/libtls.so", libc6x8664, 1 << 63},
	{"libisa.so", "/usr/lib/glibc-hwcaps/x86-64-v3/libisa.so", libc6x8664, hwcapExt | 1 | 8<<32},
	{"libisa.so", "/usr/lib/libisa.so", libc6x8664, 0},
	{"liblegacy.so", "/usr/lib/sse2/liblegacy.so", libc6x8664, 1 << 3},
	{"liblegacy.so", "/usr/lib/liblegacy.so", libc6x8664, 0},
	{"libi386.so", "/usr/lib/i386-linux-gnu/libi386.so", ldso.FlagELF, 0},
	{"libi386.so", "/usr/lib/i386-linux-gnu/libc6/libi386.so", ldso.FlagELFLibc6, 0},
	{"libarm.so", "/usr/lib/arm-linux-gnueabihf/libarm.so", ldso.FlagELFLibc6 | ldso.FlagARMLibHF, 0},
	{"libaarch64.so", "/usr/lib/aarch64-linux-gnu/libaarch64.so", ldso.FlagELFLibc6 | ldso.FlagAArch64Lib64, 0},
}

var sampleHwcaps = []string{"x86-64-v2", "x86-64-v3", "x86-64-v4", "unused"}

func TestParseCacheFormats(t *testing.T) {
	newLE := newPart(binary.LittleEndian, 0, sampleEntries, sampleHwcaps, "ldconfig (test) 2.36")
	newBE := newPart(binary.BigEndian, 0, sampleEntries, sampleHwcaps, "")
	tests := []struct {
		name   string
		data   []byte
		format ldso.CacheFormat
		gen    string
		hwcaps bool
	}{
		{"new", newLE, ldso.FormatNew, "ldconfig (test) 2.36", true},
		{"new big-endian", newBE, ldso.FormatNew, "", true},
		{"old", oldCache(sampleEntries, false), ldso.FormatOld, "", false},
		{"old+new", oldCache(sampleEntries, true), ldso.FormatCompat, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ldso.ParseCache(tt.data)
			require.NoError(t, err)
			assert.Equal(t, tt.format, c.Format)
			assert.Equal(t, tt.gen, c.Generator)
			require.Len(t, c.Entries, len(sampleEntries))
			for i, e := range sampleEntries {
				got := c.Entries[i]
				assert.Equal(t, e.name, got.Name)
				assert.Equal(t, e.path, got.Path)
				assert.Equal(t, e.flags, got.Flags)
				if tt.format != ldso.FormatOld {
					assert.Equal(t, e.hwcap, got.Hwcap)
				}
			}
			if tt.hwcaps {
				assert.Equal(t, "x86-64-v3", c.Entries[1].HwcapsSubdir)
			}
		})
	}
}

func TestCacheLookup(t *testing.T) {
	newC, err := ldso.ParseCache(newPart(binary.LittleEndian, 0, sampleEntries, sampleHwcaps, ""))
	require.NoError(t, err)
	oldC, err := ldso.ParseCache(oldCache(sampleEntries, false))
	require.NoError(t, err)
	all := []string{"x86-64-v4", "x86-64-v3", "x86-64-v2"}

	tests := []struct {
		name    string
		cache   *ldso.Cache
		lib     string
		class   elf.Class
		machine elf.Machine
		hwcaps  []string
		want    string
	}{
		{"baseline without hwcaps", newC, "libz.so.1", elf.ELFCLASS64, elf.EM_X86_64, nil, "/usr/lib/x86_64-linux-gnu/libz.so.1"},
		{"best hwcaps subdirectory", newC, "libz.so.1", elf.ELFCLASS64, elf.EM_X86_64, all[1:], "/usr/lib/glibc-hwcaps/x86-64-v3/libz.so.1"},
		{"only supported hwcaps", newC, "libz.so.1", elf.ELFCLASS64, elf.EM_X86_64, all[2:], "/usr/lib/glibc-hwcaps/x86-64-v2/libz.so.1"},
		{"isa level checked", newC, "libisa.so", elf.ELFCLASS64, elf.EM_X86_64, all[1:], "/usr/lib/libisa.so"},
		{"isa level met", newC, "libisa.so", elf.ELFCLASS64, elf.EM_X86_64, all, "/usr/lib/glibc-hwcaps/x86-64-v3/libisa.so"},
		{"v4 with its isa level", newC, "libz.so.1", elf.ELFCLASS64, elf.EM_X86_64, all, "/usr/lib/glibc-hwcaps/x86-64-v4/libz.so.1"},
		{"i386 takes its own entry", newC, "libz.so.1", elf.ELFCLASS32, elf.EM_386, all, "/usr/lib/i386-linux-gnu/libz.so.1"},
		// search_cache stops at the first plain entry of the new format,
		// but goes on to a libc6 one in the old format.
		{"i386 new format takes first", newC, "libi386.so", elf.ELFCLASS32, elf.EM_386, nil, "/usr/lib/i386-linux-gnu/libi386.so"},
		{"i386 old format prefers libc6", oldC, "libi386.so", elf.ELFCLASS32, elf.EM_386, nil, "/usr/lib/i386-linux-gnu/libc6/libi386.so"},
		{"x86-64 skips i386", newC, "libi386.so", elf.ELFCLASS64, elf.EM_X86_64, nil, ""},
		{"tls bit allowed", newC, "libtls.so", elf.ELFCLASS64, elf.EM_X86_64, nil, "/usr/lib/tls/libtls.so"},
		{"legacy hwcap skipped", newC, "liblegacy.so", elf.ELFCLASS64, elf.EM_X86_64, nil, "/usr/lib/liblegacy.so"},
		{"arm hard-float", newC, "libarm.so", elf.ELFCLASS32, elf.EM_ARM, nil, "/usr/lib/arm-linux-gnueabihf/libarm.so"},
		{"aarch64", newC, "libaarch64.so", elf.ELFCLASS64, elf.EM_AARCH64, nil, "/usr/lib/aarch64-linux-gnu/libaarch64.so"},
		{"missing", newC, "libnope.so", elf.ELFCLASS64, elf.EM_X86_64, nil, ""},
		{"old format ignores hwcap", oldC, "liblegacy.so", elf.ELFCLASS64, elf.EM_X86_64, nil, "/usr/lib/sse2/liblegacy.so"},
		{"old format", oldC, "libz.so.1", elf.ELFCLASS64, elf.EM_X86_64, all, "/usr/lib/glibc-hwcaps/x86-64-v2/libz.so.1"},
		{"nil cache", nil, "libz.so.1", elf.ELFCLASS64, elf.EM_X86_64, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.cache.LookupHwcaps(tt.lib, tt.class, tt.machine, tt.hwcaps)
			assert.Equal(t, tt.want, got)
			assert.Equal(t, tt.want != "", ok)
			if tt.hwcaps == nil {
				got, _ := tt.cache.Lookup(tt.lib, tt.class, tt.machine)
				assert.Equal(t, tt.want, got)
			}
		})
	}
}

func TestParseCacheErrors(t *testing.T) {
	good := newPart(binary.LittleEndian, 0, sampleEntries[:2], sampleHwcaps, "gen")
	mod := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	le := binary.LittleEndian
	tests := []struct {
		name string
		data []byte
		msg  string
	}{
		{"empty", nil, "bad magic"},
		{"short new header", []byte("glibc-ld.so.cache1.1"), "short header"},
		{"short old header", []byte("ld.so-1.7.0"), "short old-format header"},
		{"huge count", mod(func(b []byte) []byte { le.PutUint32(b[20:], 1<<31); return b }), "entry count exceeds file size"},
		{"old huge count", append([]byte("ld.so-1.7.0\x00\xff\xff\xff\x7f"), make([]byte, 24)...), "entry count exceeds file size"},
		{"invalid flag", mod(func(b []byte) []byte { b[28] = 1; return b }), "cache marked invalid"},
		{"key out of range", mod(func(b []byte) []byte { le.PutUint32(b[48+4:], 1<<30); return b }), "string offset out of range"},
		{"unterminated", mod(func(b []byte) []byte { return bytes.TrimRight(b[:len(b)-len("gen")-4*4-2*16-8], "\x00") }), ""},
		{"extension misaligned", mod(func(b []byte) []byte { le.PutUint32(b[32:], le.Uint32(b[32:])+1); return b }), "bad extension offset"},
		{"extension magic", mod(func(b []byte) []byte { le.PutUint32(b[le.Uint32(b[32:]):], 7); return b }), "bad extension magic"},
		{"extension count", mod(func(b []byte) []byte { le.PutUint32(b[le.Uint32(b[32:])+4:], 1<<30); return b }), "extension count exceeds file size"},
		{"extension section", mod(func(b []byte) []byte { le.PutUint32(b[le.Uint32(b[32:])+8+12:], 1<<30); return b }), "extension section exceeds file size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ldso.ParseCache(tt.data)
			require.Error(t, err)
			assert.Nil(t, c)
			var fe *ldso.FormatError
			require.ErrorAs(t, err, &fe)
			assert.Contains(t, err.Error(), tt.msg)
			assert.Contains(t, err.Error(), "in record at byte 0x")
		})
	}
}

func TestCacheFlagsString(t *testing.T) {
	tests := []struct {
		f    ldso.CacheFlags
		want string
	}{
		{libc6x8664, "libc6,x86-64"},
		{ldso.FlagELFLibc6, "libc6"},
		{ldso.FlagELF, "ELF"},
		{ldso.FlagELFLibc6 | ldso.FlagAArch64Lib64, "libc6,AArch64"},
		{ldso.FlagELFLibc6 | ldso.FlagARMLibHF, "libc6,hard-float"},
		{0x77 | 0x7700, "unknown,30464"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.f.String())
	}
}

func FuzzParseCache(f *testing.F) {
	f.Add(newPart(binary.LittleEndian, 0, sampleEntries, sampleHwcaps, "gen"))
	f.Add(newPart(binary.BigEndian, 0, sampleEntries, sampleHwcaps, ""))
	f.Add(oldCache(sampleEntries, false))
	f.Add(oldCache(sampleEntries, true))
	if seed, err := os.ReadFile("testdata/ld.so.cache"); err == nil {
		f.Add(seed)
	}
	if host, err := os.ReadFile("/etc/ld.so.cache"); err == nil {
		f.Add(host)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ldso.ParseCache(data)
		if err != nil {
			return
		}
		// Each entry takes at least 12 bytes of input: no allocation
		// beyond what the input can encode.
		if len(c.Entries)*12 > len(data) {
			t.Fatalf("%d entries from %d bytes", len(c.Entries), len(data))
		}
		for _, e := range c.Entries {
			c.LookupHwcaps(e.Name, elf.ELFCLASS64, elf.EM_X86_64, []string{"x86-64-v3", e.HwcapsSubdir})
			c.Lookup(e.Name, elf.ELFCLASS32, elf.EM_386)
		}
	})
}

// TestParseCacheTestdata reads a cache written by glibc 2.36's ldconfig.
func TestParseCacheTestdata(t *testing.T) {
	data, err := os.ReadFile("testdata/ld.so.cache")
	require.NoError(t, err)
	c, err := ldso.ParseCache(data)
	require.NoError(t, err)
	assert.Equal(t, ldso.FormatNew, c.Format)
	assert.Contains(t, c.Generator, "GLIBC 2.36")
	require.Len(t, c.Entries, 3)
	assert.Equal(t, "x86-64-v3", c.Entries[1].HwcapsSubdir)
	assert.Equal(t, ldso.FlagELF, c.Entries[0].Flags)

	tests := []struct {
		name    string
		lib     string
		class   elf.Class
		machine elf.Machine
		hwcaps  []string
		want    string
	}{
		{"v3 CPU", "libseed.so.1", elf.ELFCLASS64, elf.EM_X86_64, []string{"x86-64-v4", "x86-64-v3", "x86-64-v2"}, "/usr/lib/x86_64-linux-gnu/glibc-hwcaps/x86-64-v3/libseed.so.1"},
		{"v2 CPU", "libseed.so.1", elf.ELFCLASS64, elf.EM_X86_64, []string{"x86-64-v2"}, "/usr/lib/x86_64-linux-gnu/libseed.so.1"},
		{"i386", "libseed32.so.1", elf.ELFCLASS32, elf.EM_386, nil, "/usr/lib/i386-linux-gnu/libseed32.so.1"},
		{"not for x86-64", "libseed32.so.1", elf.ELFCLASS64, elf.EM_X86_64, nil, ""},
		{"not for i386", "libseed.so.1", elf.ELFCLASS32, elf.EM_386, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := c.LookupHwcaps(tt.lib, tt.class, tt.machine, tt.hwcaps)
			assert.Equal(t, tt.want, got)
		})
	}
}

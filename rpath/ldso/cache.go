package ldso

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Magic strings of /etc/ld.so.cache (glibc sysdeps/generic/dl-cache.h).
const (
	cacheMagicOld = "ld.so-1.7.0"
	cacheMagicNew = "glibc-ld.so.cache1.1"
)

// Sizes of the on-disk structures.
const (
	oldHeaderSize = 16 // char magic[11], pad, uint32 nlibs
	oldEntrySize  = 12 // int32 flags; uint32 key, value
	newHeaderSize = 48 // struct cache_file_new; _Static_assert'ed by glibc
	newEntrySize  = 24 // struct file_entry_new
	extHeaderSize = 8  // struct cache_extension: magic, count
	extSectSize   = 16 // struct cache_extension_section
)

const (
	// cacheExtensionMagic is (uint32_t) -358342284.
	cacheExtensionMagic = 0xeaa42174
	extTagGenerator     = 0
	extTagGlibcHwcaps   = 1

	// hwcapExtension marks a glibc-hwcaps entry: the low 32 bits of the
	// hwcap field index the glibc-hwcaps section.
	hwcapExtension = uint64(1) << 62
	// isaLevelMask covers the ISA level bits at hwcap bit 32 and up.
	isaLevelMask = 1<<10 - 1
	// hwcapTLS is the legacy "tls" pseudo-hwcap, always allowed.
	hwcapTLS = uint64(1) << 63
)

// CacheFlags is the flags word of an ld.so.cache entry: the library type in
// the low byte (FLAG_ELF_LIBC6 = 3) and the ABI variant in the next byte
// (FLAG_X8664_LIB64 = 0x0300, …), as in glibc's ldconfig.h.
type CacheFlags int32

// Flag values from glibc's sysdeps/generic/ldconfig.h.
const (
	FlagTypeMask     CacheFlags = 0x00ff
	FlagLibc4        CacheFlags = 0x0000
	FlagELF          CacheFlags = 0x0001
	FlagELFLibc5     CacheFlags = 0x0002
	FlagELFLibc6     CacheFlags = 0x0003
	FlagRequiredMask CacheFlags = 0xff00

	FlagSparcLib64            CacheFlags = 0x0100
	FlagIA64Lib64             CacheFlags = 0x0200
	FlagX8664Lib64            CacheFlags = 0x0300
	FlagS390Lib64             CacheFlags = 0x0400
	FlagPowerPCLib64          CacheFlags = 0x0500
	FlagMIPS64LibN32          CacheFlags = 0x0600
	FlagMIPS64LibN64          CacheFlags = 0x0700
	FlagX8664LibX32           CacheFlags = 0x0800
	FlagARMLibHF              CacheFlags = 0x0900
	FlagAArch64Lib64          CacheFlags = 0x0a00
	FlagARMLibSF              CacheFlags = 0x0b00
	FlagMIPSLib32NaN2008      CacheFlags = 0x0c00
	FlagMIPS64LibN32NaN2008   CacheFlags = 0x0d00
	FlagMIPS64LibN64NaN2008   CacheFlags = 0x0e00
	FlagRISCVFloatABISoft     CacheFlags = 0x0f00
	FlagRISCVFloatABIDouble   CacheFlags = 0x1000
	FlagLoongArchFloatABISoft CacheFlags = 0x1100
	FlagLoongArchFloatABIDbl  CacheFlags = 0x1200
)

var flagTypeNames = map[CacheFlags]string{
	FlagLibc4: "libc4", FlagELF: "ELF", FlagELFLibc5: "libc5", FlagELFLibc6: "libc6",
}

var flagABINames = map[CacheFlags]string{
	0:                         "",
	FlagSparcLib64:            ",64bit",
	FlagIA64Lib64:             ",IA-64",
	FlagX8664Lib64:            ",x86-64",
	FlagS390Lib64:             ",64bit",
	FlagPowerPCLib64:          ",64bit",
	FlagMIPS64LibN32:          ",N32",
	FlagMIPS64LibN64:          ",64bit",
	FlagX8664LibX32:           ",x32",
	FlagARMLibHF:              ",hard-float",
	FlagAArch64Lib64:          ",AArch64",
	FlagARMLibSF:              ",soft-float",
	FlagMIPSLib32NaN2008:      ",nan2008",
	FlagMIPS64LibN32NaN2008:   ",N32,nan2008",
	FlagMIPS64LibN64NaN2008:   ",64bit,nan2008",
	FlagRISCVFloatABISoft:     ",soft-float",
	FlagRISCVFloatABIDouble:   ",double-float",
	FlagLoongArchFloatABISoft: ",soft-float",
	FlagLoongArchFloatABIDbl:  ",double-float",
}

// String describes f as `ldconfig -p` does, e.g. "libc6,x86-64".
func (f CacheFlags) String() string {
	t, ok := flagTypeNames[f&FlagTypeMask]
	if !ok {
		t = "unknown"
	}
	a, ok := flagABINames[f&FlagRequiredMask]
	if !ok {
		a = "," + strconv.Itoa(int(f&FlagRequiredMask))
	}
	return t + a
}

// CacheFormat says which layout a cache file had.
type CacheFormat string

// Layouts of /etc/ld.so.cache.
const (
	// FormatNew is glibc-ld.so.cache1.1 alone (ldconfig since glibc 2.32).
	FormatNew CacheFormat = "new"
	// FormatOld is the libc5/glibc 2.0 "ld.so-1.7.0" format alone.
	FormatOld CacheFormat = "old"
	// FormatCompat is the old format with the new one after its entries
	// (ldconfig's default before glibc 2.32).
	FormatCompat CacheFormat = "old+new"
)

// CacheEntry is one library of the cache.
type CacheEntry struct {
	Name  string     `json:"name"`
	Path  string     `json:"path"`
	Flags CacheFlags `json:"flags"`
	// OSVersion is the minimum kernel version (new format only; unused by
	// current glibc).
	OSVersion uint32 `json:"osversion,omitempty"`
	// Hwcap is the raw hwcap word (new format only).
	Hwcap uint64 `json:"hwcap,omitempty"`
	// HwcapsSubdir is the glibc-hwcaps subdirectory name (x86-64-v3…) the
	// library was found in, when Hwcap has the extension bit.
	HwcapsSubdir string `json:"hwcaps_subdir,omitempty"`
}

// Cache is a parsed /etc/ld.so.cache.
type Cache struct {
	Format CacheFormat `json:"format"`
	// Entries are the entries ld.so searches: those of the new-format part
	// when there is one, in file order (sorted by name, descending, as
	// ldconfig writes them).
	Entries []CacheEntry `json:"entries"`
	// Generator is the glibc version that wrote the cache, when recorded.
	Generator string `json:"generator,omitempty"`

	// first maps a name to the index of its first entry.
	first map[string]int
}

// FormatError reports malformed cache data, with the offset of the record.
type FormatError struct {
	Off int64
	Msg string
	Val any
}

var _ error = (*FormatError)(nil)

func (e *FormatError) Error() string {
	msg := "ld.so.cache: " + e.Msg
	if e.Val != nil {
		msg += fmt.Sprintf(" '%v'", e.Val)
	}
	return msg + fmt.Sprintf(" in record at byte %#x", e.Off)
}

// ParseCache parses the contents of an ld.so.cache file: the new format, the
// old format, or the old format followed by the new one. Every count and
// offset is checked against len(data) before use, so the result never holds
// more entries than the input could encode.
func ParseCache(data []byte) (*Cache, error) {
	switch {
	case bytes.HasPrefix(data, []byte(cacheMagicNew)):
		c, err := parseNew(data, 0)
		if err != nil {
			return nil, err
		}
		c.Format = FormatNew
		return c, nil
	case bytes.HasPrefix(data, []byte(cacheMagicOld)):
		return parseOld(data)
	}
	return nil, &FormatError{0, "bad magic", nil}
}

func parseOld(data []byte) (*Cache, error) {
	if len(data) < oldHeaderSize {
		return nil, &FormatError{0, "short old-format header", len(data)}
	}
	// The old format predates the endianness flag; ldconfig wrote it in
	// host order. Take whichever order gives a count that fits.
	bo := binary.ByteOrder(binary.LittleEndian)
	n := uint64(bo.Uint32(data[12:]))
	avail := uint64(len(data)-oldHeaderSize) / oldEntrySize
	if n > avail {
		bo = binary.BigEndian
		if n = uint64(bo.Uint32(data[12:])); n > avail {
			return nil, &FormatError{12, "entry count exceeds file size", n}
		}
	}
	strBase := oldHeaderSize + n*oldEntrySize

	// The new format follows, aligned as struct cache_file_new (8 bytes on
	// 64-bit hosts, 4 on i386).
	for _, align := range []uint64{8, 4} {
		off := (strBase + align - 1) &^ (align - 1)
		if off+newHeaderSize <= uint64(len(data)) && bytes.HasPrefix(data[off:], []byte(cacheMagicNew)) {
			c, err := parseNew(data, off)
			if err != nil {
				return nil, err
			}
			c.Format = FormatCompat
			return c, nil
		}
	}

	c := &Cache{Format: FormatOld, Entries: make([]CacheEntry, 0, n)}
	for i := uint64(0); i < n; i++ {
		off := oldHeaderSize + i*oldEntrySize
		e := CacheEntry{Flags: CacheFlags(int32(bo.Uint32(data[off:])))}
		var err error
		if e.Name, err = cstring(data, strBase, bo.Uint32(data[off+4:]), off+4); err != nil {
			return nil, err
		}
		if e.Path, err = cstring(data, strBase, bo.Uint32(data[off+8:]), off+8); err != nil {
			return nil, err
		}
		c.Entries = append(c.Entries, e)
	}
	c.index()
	return c, nil
}

// parseNew parses a cache_file_new header at base. String offsets of
// entries are relative to base; the extension offset is relative to the
// start of the file (glibc dl-cache.c).
func parseNew(data []byte, base uint64) (*Cache, error) {
	if uint64(len(data)) < base+newHeaderSize {
		return nil, &FormatError{int64(base), "short header", len(data)}
	}
	hdr := data[base : base+newHeaderSize]
	var bo binary.ByteOrder
	switch hdr[28] & 3 {
	case 0, 2: // unset (old ldconfig) or little endian
		bo = binary.LittleEndian
	case 3:
		bo = binary.BigEndian
	default:
		return nil, &FormatError{int64(base + 28), "cache marked invalid by ldconfig", hdr[28]}
	}
	n := uint64(bo.Uint32(hdr[20:]))
	if n > (uint64(len(data))-base-newHeaderSize)/newEntrySize {
		return nil, &FormatError{int64(base + 20), "entry count exceeds file size", n}
	}
	c := &Cache{Entries: make([]CacheEntry, 0, n)}

	hwcaps, gen, err := parseExtensions(data, bo, bo.Uint32(hdr[32:]))
	if err != nil {
		return nil, err
	}
	c.Generator = gen

	for i := uint64(0); i < n; i++ {
		off := base + newHeaderSize + i*newEntrySize
		r := data[off : off+newEntrySize]
		e := CacheEntry{
			Flags:     CacheFlags(int32(bo.Uint32(r))),
			OSVersion: bo.Uint32(r[12:]),
			Hwcap:     bo.Uint64(r[16:]),
		}
		if e.Name, err = cstring(data, base, bo.Uint32(r[4:]), off+4); err != nil {
			return nil, err
		}
		if e.Path, err = cstring(data, base, bo.Uint32(r[8:]), off+8); err != nil {
			return nil, err
		}
		if isHwcapExtension(e.Hwcap) {
			if idx := uint32(e.Hwcap); int64(idx) < int64(len(hwcaps)) {
				e.HwcapsSubdir = hwcaps[idx]
			}
		}
		c.Entries = append(c.Entries, e)
	}
	c.index()
	return c, nil
}

// parseExtensions reads the extension directory at off (0: none) and returns
// the glibc-hwcaps subdirectory names and the generator string.
func parseExtensions(data []byte, bo binary.ByteOrder, off uint32) ([]string, string, error) {
	if off == 0 {
		return nil, "", nil
	}
	size := uint64(len(data))
	o := uint64(off)
	if o%4 != 0 || o+extHeaderSize > size {
		return nil, "", &FormatError{int64(o), "bad extension offset", off}
	}
	if m := bo.Uint32(data[o:]); m != cacheExtensionMagic {
		return nil, "", &FormatError{int64(o), "bad extension magic", fmt.Sprintf("%#x", m)}
	}
	count := uint64(bo.Uint32(data[o+4:]))
	if count > (size-o-extHeaderSize)/extSectSize {
		return nil, "", &FormatError{int64(o + 4), "extension count exceeds file size", count}
	}
	var hwcaps []string
	var gen string
	for i := uint64(0); i < count; i++ {
		so := o + extHeaderSize + i*extSectSize
		tag := bo.Uint32(data[so:])
		start, n := uint64(bo.Uint32(data[so+8:])), uint64(bo.Uint32(data[so+12:]))
		if start+n > size {
			return nil, "", &FormatError{int64(so), "extension section exceeds file size", start + n}
		}
		switch tag {
		case extTagGenerator:
			gen = string(data[start : start+n])
		case extTagGlibcHwcaps:
			// glibc ignores a malformed hwcaps section rather than the cache.
			if n == 0 || start%4 != 0 || n%4 != 0 {
				continue
			}
			hwcaps = make([]string, 0, n/4)
			for j := uint64(0); j < n; j += 4 {
				s, err := cstring(data, 0, bo.Uint32(data[start+j:]), start+j)
				if err != nil {
					return nil, "", err
				}
				hwcaps = append(hwcaps, s)
			}
		}
	}
	return hwcaps, gen, nil
}

// cstring returns the NUL-terminated string at base+idx; at is the offset of
// the reference, for the error.
func cstring(data []byte, base uint64, idx uint32, at uint64) (string, error) {
	o := base + uint64(idx)
	if o >= uint64(len(data)) {
		return "", &FormatError{int64(at), "string offset out of range", idx}
	}
	end := bytes.IndexByte(data[o:], 0)
	if end < 0 {
		return "", &FormatError{int64(at), "unterminated string", idx}
	}
	return string(data[o : o+uint64(end)]), nil
}

func (c *Cache) index() {
	c.first = make(map[string]int, len(c.Entries))
	for i, e := range c.Entries {
		if _, ok := c.first[e.Name]; !ok {
			c.first[e.Name] = i
		}
	}
}

func isHwcapExtension(hwcap uint64) bool {
	return (hwcap>>32)&^isaLevelMask == hwcapExtension>>32
}

// cacheABI returns the entry flags the loader for class and machine
// accepts (_dl_cache_check_flags) and the flags that end the search at once
// (_DL_CACHE_DEFAULT_ID), per glibc's sysdeps/unix/sysv/linux/*/dl-cache.h.
// ARM and RISC-V float ABIs cannot be told from class and machine: the
// hard-float and double-float loaders are assumed.
func cacheABI(class elf.Class, machine elf.Machine) (accept []CacheFlags, def CacheFlags) {
	lib64 := func(f CacheFlags) ([]CacheFlags, CacheFlags) {
		return []CacheFlags{f | FlagELFLibc6}, f | FlagELFLibc6
	}
	is64 := class == elf.ELFCLASS64
	switch {
	case machine == elf.EM_X86_64 && is64:
		return lib64(FlagX8664Lib64)
	case machine == elf.EM_X86_64:
		return lib64(FlagX8664LibX32)
	case machine == elf.EM_AARCH64 && is64:
		return lib64(FlagAArch64Lib64)
	case machine == elf.EM_PPC64 && is64:
		return lib64(FlagPowerPCLib64)
	case machine == elf.EM_S390 && is64:
		return lib64(FlagS390Lib64)
	case machine == elf.EM_SPARCV9 && is64:
		return lib64(FlagSparcLib64)
	case machine == elf.EM_IA_64 && is64:
		return lib64(FlagIA64Lib64)
	case machine == elf.EM_RISCV && is64:
		return lib64(FlagRISCVFloatABIDouble)
	case machine == elf.EM_LOONGARCH && is64:
		return lib64(FlagLoongArchFloatABIDbl)
	case machine == elf.EM_ARM:
		return []CacheFlags{FlagARMLibHF | FlagELFLibc6, FlagELFLibc6}, FlagARMLibHF | FlagELFLibc6
	}
	return []CacheFlags{FlagELF, FlagELFLibc6}, FlagELFLibc6
}

// Lookup returns the path the cache gives for name to a program of the
// given class and machine, ignoring glibc-hwcaps entries. See LookupHwcaps.
func (c *Cache) Lookup(name string, class elf.Class, machine elf.Machine) (path string, ok bool) {
	return c.LookupHwcaps(name, class, machine, nil)
}

// LookupHwcaps is Lookup for a loader that supports the glibc-hwcaps
// subdirectories in hwcaps, best first. It follows glibc's search_cache:
// among the entries named name, those with the wrong ABI flags are skipped;
// glibc-hwcaps entries (listed first) compete by priority; the first
// plain entry ends the search when one was found, else it is taken.
// Entries with legacy hwcap bits are skipped, which is what a loader on a
// CPU without those features does.
func (c *Cache) LookupHwcaps(name string, class elf.Class, machine elf.Machine, hwcaps []string) (path string, ok bool) {
	if c == nil {
		return "", false
	}
	i, found := c.first[name]
	if !found {
		return "", false
	}
	accept, def := cacheABI(class, machine)
	isa := isaLevels(machine, hwcaps)
	newFormat := c.Format != FormatOld
	var best *CacheEntry
	bestPrio := 0
	for ; i < len(c.Entries) && c.Entries[i].Name == name; i++ {
		e := &c.Entries[i]
		if !slices.Contains(accept, e.Flags) {
			continue
		}
		named := false
		if newFormat {
			named = isHwcapExtension(e.Hwcap)
			if named && uint32(e.Hwcap>>32)&isaLevelMask&^isa != 0 {
				continue
			}
			if !named && best != nil {
				break
			}
			if !named && e.Hwcap&^hwcapTLS != 0 {
				continue
			}
			if named {
				p := slices.Index(hwcaps, e.HwcapsSubdir) + 1
				if p == 0 || (best != nil && p >= bestPrio) {
					continue
				}
				bestPrio = p
			}
		}
		best = e
		if !named && e.Flags == def {
			break
		}
	}
	if best == nil {
		return "", false
	}
	return best.Path, true
}

// isaLevels returns the ISA level bits (GNU_PROPERTY_X86_ISA_1_*: baseline,
// v2, v3, v4) a loader supporting hwcaps accepts in cache entries.
func isaLevels(machine elf.Machine, hwcaps []string) uint32 {
	if machine != elf.EM_X86_64 {
		return isaLevelMask
	}
	bits := uint32(1)
	for _, h := range hwcaps {
		if v, ok := strings.CutPrefix(h, "x86-64-v"); ok {
			if n, err := strconv.Atoi(v); err == nil && n >= 2 && n <= 4 {
				bits |= 1 << (n - 1)
			}
		}
	}
	return bits
}

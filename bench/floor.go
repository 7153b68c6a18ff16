//go:build ignore

// floor measures the least work the main job's two checks can do in one
// run, to tell a cost target that a better implementation can meet from
// one that none can (issue 43's targets, bench/HISTORY.md "The checks'
// floor"). It does what no check can skip, and nothing else:
//
//   - symbols: map every file, list its undefined dynamic symbols, find its
//     DT_NEEDED closure in one library directory (breadth first, as the
//     loader orders it), and look each reference up through the .gnu.hash
//     of each object of the closure until one defines it; each library of a
//     closure has its own references looked up in its own closure once;
//   - discovery: scan the .rodata sections of every file that imports
//     dlopen or dlmopen for "lib".
//
// It leaves out symbol versions, RUNPATH and every other search step,
// hwcaps, the resolution note, the report and every check of a hostile
// file (a file it cannot parse is counted and passed over): the real checks
// do more, so their cost is above this one's. Only 64-bit little-endian
// files are read. Each round starts from nothing (no mapping kept across
// rounds); the first warms the page cache and is reported apart.
//
// With -upto it stops short: "refs" maps the files and lists their
// references only, "closures" maps their closures too, "all" (the default)
// looks the references up and scans the read-only data as well.
//
// Usage: go run bench/floor.go [-rounds N] [-jobs N] [-upto STEP] LIBDIR ROOT...
package main

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

var le = binary.LittleEndian

// object is one mapped ELF file and what a lookup reads of it.
type object struct {
	b                []byte
	loads            [][3]uint64 // vaddr, offset, filesz of each PT_LOAD
	symtab, strtab   uint64      // file offsets
	needed           []string
	nsyms            uint32
	shift, nbloom    uint32
	nbucket, symoff  uint32
	bloom, buck, chn uint64 // file offsets of .gnu.hash's parts
	hashed           bool
	rodata           [][2]uint64 // offset, size of .rodata and .rodata.*
	own              sync.Once   // its own references, looked up once
}

// offset is the file offset of virtual address va, 0 if unmapped.
func (o *object) offset(va uint64) uint64 {
	for _, l := range o.loads {
		if va >= l[0] && va-l[0] < l[2] {
			return va - l[0] + l[1]
		}
	}
	return 0
}

func (o *object) cstr(off uint64) []byte {
	b := o.b[off:]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

// mapObject maps the file at path and reads its headers; nil when it is
// not a 64-bit little-endian ELF file this program can read.
func mapObject(path string) (o *object) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if syscall.Fstat(fd, &st) != nil || st.Size < 64 {
		return nil
	}
	b, err := syscall.Mmap(fd, 0, int(st.Size), syscall.PROT_READ, syscall.MAP_PRIVATE)
	if err != nil {
		return nil
	}
	defer func() {
		if recover() != nil { // out of range: a file this program cannot read
			syscall.Munmap(b)
			o = nil
		}
	}()
	if string(b[:4]) != "\x7fELF" || b[4] != 2 || b[5] != 1 {
		syscall.Munmap(b)
		return nil
	}
	o = &object{b: b}
	phoff, phnum := le.Uint64(b[32:]), uint64(le.Uint16(b[56:]))
	var dyn, dynsz uint64
	for i := range phnum {
		p := b[phoff+56*i:]
		switch le.Uint32(p) {
		case 1: // PT_LOAD
			o.loads = append(o.loads, [3]uint64{le.Uint64(p[16:]), le.Uint64(p[8:]), le.Uint64(p[32:])})
		case 2: // PT_DYNAMIC
			dyn, dynsz = le.Uint64(p[8:]), le.Uint64(p[32:])
		}
	}
	shoff, shnum, shstrndx := le.Uint64(b[40:]), uint64(le.Uint16(b[60:])), uint64(le.Uint16(b[62:]))
	if shoff != 0 && shstrndx < shnum {
		names := le.Uint64(b[shoff+64*shstrndx+24:])
		for i := range shnum {
			s := b[shoff+64*i:]
			name := string(o.cstr(names + uint64(le.Uint32(s))))
			if le.Uint32(s[4:]) == 1 && (name == ".rodata" || len(name) > 8 && name[:8] == ".rodata.") {
				o.rodata = append(o.rodata, [2]uint64{le.Uint64(s[24:]), le.Uint64(s[32:])})
			}
		}
	}
	var needed []uint64
	var gnu uint64
	for d := dyn; dynsz > 0 && d+16 <= dyn+dynsz; d += 16 {
		tag, val := le.Uint64(b[d:]), le.Uint64(b[d+8:])
		if tag == 0 {
			break
		}
		switch tag {
		case 1:
			needed = append(needed, val)
		case 5:
			o.strtab = o.offset(val)
		case 6:
			o.symtab = o.offset(val)
		case 0x6ffffef5: // DT_GNU_HASH
			gnu = o.offset(val)
		}
	}
	for _, n := range needed {
		o.needed = append(o.needed, string(o.cstr(o.strtab+n)))
	}
	if gnu == 0 || o.symtab == 0 {
		return o
	}
	o.nbucket, o.symoff, o.nbloom, o.shift = le.Uint32(b[gnu:]), le.Uint32(b[gnu+4:]), le.Uint32(b[gnu+8:]), le.Uint32(b[gnu+12:])
	o.bloom = gnu + 16
	o.buck = o.bloom + 8*uint64(o.nbloom)
	o.chn = o.buck + 4*uint64(o.nbucket)
	last := uint32(0)
	for i := range o.nbucket {
		last = max(last, le.Uint32(b[o.buck+4*uint64(i):]))
	}
	o.nsyms = o.symoff
	if last >= o.symoff {
		for le.Uint32(b[o.chn+4*uint64(last-o.symoff):])&1 == 0 {
			last++
		}
		o.nsyms = last + 1
	}
	o.hashed = o.nbloom > 0 && o.nbucket > 0
	return o
}

func gnuHash(s []byte) uint32 {
	h := uint32(5381)
	for _, c := range s {
		h = h*33 + uint32(c)
	}
	return h
}

// defines is the loader's walk of o's .gnu.hash for name (hash h), without
// versions: a defined symbol of that name.
func (o *object) defines(name []byte, h uint32) bool {
	if !o.hashed {
		return false
	}
	w := le.Uint64(o.b[o.bloom+8*uint64((h/64)&(o.nbloom-1)):])
	if m := uint64(1)<<(h%64) | uint64(1)<<((h>>o.shift)%64); w&m != m {
		return false
	}
	i := le.Uint32(o.b[o.buck+4*uint64(h%o.nbucket):])
	if i < o.symoff {
		return false
	}
	for ; i < o.nsyms; i++ {
		c := le.Uint32(o.b[o.chn+4*uint64(i-o.symoff):])
		if (c^h)>>1 == 0 {
			s := o.b[o.symtab+24*uint64(i):]
			if le.Uint16(s[6:]) != 0 && bytes.Equal(o.cstr(o.strtab+uint64(le.Uint32(s))), name) {
				return true
			}
		}
		if c&1 != 0 {
			break
		}
	}
	return false
}

// undefined calls fn with each undefined global or weak dynamic symbol.
func (o *object) undefined(fn func(name []byte)) {
	for i := uint64(1); i < uint64(o.nsyms); i++ {
		s := o.b[o.symtab+24*i:]
		if le.Uint16(s[6:]) == 0 && s[4]>>4 != 0 {
			fn(o.cstr(o.strtab + uint64(le.Uint32(s))))
		}
	}
}

// round is one run's state: the libraries mapped so far.
type round struct {
	libdir string
	upto   string
	mu     sync.Mutex
	libs   map[string]*libEntry

	refs, lookups, unresolved, scanned, hits atomic.Int64
	sink                                     atomic.Int64 // the hashes, kept computed
}

type libEntry struct {
	once sync.Once
	o    *object
}

func (r *round) lib(name string) *object {
	r.mu.Lock()
	e := r.libs[name]
	if e == nil {
		e = &libEntry{}
		r.libs[name] = e
	}
	r.mu.Unlock()
	e.once.Do(func() { e.o = mapObject(filepath.Join(r.libdir, name)) })
	return e.o
}

// closure is o and its DT_NEEDED closure in load order.
func (r *round) closure(o *object) []*object {
	order := []*object{o}
	seen := map[string]bool{}
	for k := 0; k < len(order); k++ {
		for _, n := range order[k].needed {
			if !seen[n] {
				seen[n] = true
				if d := r.lib(n); d != nil && !slices.Contains(order, d) {
					order = append(order, d)
				}
			}
		}
	}
	return order
}

// bind looks o's references up in order (o first, as the loader would).
func (r *round) bind(o *object, order []*object) {
	var refs, lookups, unresolved int64
	o.undefined(func(name []byte) {
		h := gnuHash(name)
		refs++
		for _, d := range order[1:] {
			lookups++
			if d.defines(name, h) {
				return
			}
		}
		unresolved++
	})
	r.refs.Add(refs)
	r.lookups.Add(lookups)
	r.unresolved.Add(unresolved)
}

// discover scans o's read-only data for "lib" when it imports dlopen.
func (r *round) discover(o *object) {
	imports := false
	o.undefined(func(name []byte) {
		imports = imports || string(name) == "dlopen" || string(name) == "dlmopen"
	})
	if !imports {
		return
	}
	for _, s := range o.rodata {
		b := o.b[s[0] : s[0]+s[1]]
		r.scanned.Add(int64(len(b)))
		for i := 0; ; {
			j := bytes.Index(b[i:], []byte("lib"))
			if j < 0 {
				break
			}
			r.hits.Add(1)
			i += j + 1
		}
	}
}

func (r *round) file(path string) {
	o := mapObject(path)
	if o == nil {
		return
	}
	defer syscall.Munmap(o.b)
	defer func() { recover() }() // a file this program cannot read
	if r.upto == "refs" {
		var n, h int64
		o.undefined(func(name []byte) { n, h = n+1, h^int64(gnuHash(name)) })
		r.refs.Add(n)
		r.sink.Add(h)
		return
	}
	order := r.closure(o)
	if r.upto == "closures" {
		return
	}
	r.discover(o)
	r.bind(o, order)
	for _, l := range order[1:] {
		l.own.Do(func() { r.bind(l, r.closure(l)) })
	}
}

func cpu() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func main() {
	rounds := flag.Int("rounds", 7, "rounds; the first warms the page cache")
	jobs := flag.Int("jobs", runtime.NumCPU(), "files worked on at once")
	upto := flag.String("upto", "all", "refs, closures or all: the last step done")
	flag.Parse()
	if flag.NArg() < 2 {
		fmt.Fprintln(os.Stderr, "usage: go run bench/floor.go [-rounds N] [-jobs N] [-upto STEP] LIBDIR ROOT...")
		os.Exit(2)
	}
	var files []string
	for _, root := range flag.Args()[1:] {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				files = append(files, p)
			}
			return nil
		})
	}
	var cpus, walls []time.Duration
	var last *round
	for range *rounds {
		r := &round{libdir: flag.Arg(0), upto: *upto, libs: map[string]*libEntry{}}
		c0, t0 := cpu(), time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		for range *jobs {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < int64(len(files)); i = next.Add(1) - 1 {
					r.file(files[i])
				}
			})
		}
		wg.Wait()
		walls, cpus = append(walls, time.Since(t0)), append(cpus, cpu()-c0)
		for _, e := range r.libs {
			if e.o != nil {
				syscall.Munmap(e.o.b)
			}
		}
		last = r
	}
	median := func(d []time.Duration) time.Duration {
		if len(d) > 1 {
			d = d[1:]
		}
		d = slices.Clone(d)
		slices.Sort(d)
		return d[len(d)/2]
	}
	fmt.Printf("files\tlibraries\treferences\tlookups\tunresolved\trodata scanned\tjobs\tfirst cpu\tfirst wall\tcpu\twall\n")
	fmt.Printf("%d\t%d\t%d\t%d\t%d\t%.1f MB\t%d\t%.3f\t%.3f\t%.3f\t%.3f\n", len(files), len(last.libs), last.refs.Load(), last.lookups.Load(),
		last.unresolved.Load(), float64(last.scanned.Load())/1e6, *jobs, cpus[0].Seconds(), walls[0].Seconds(), median(cpus).Seconds(), median(walls).Seconds())
}

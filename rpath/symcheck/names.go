package symcheck

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// symName is an interned symbol name with its hashes. A summary answers
// for the names interned before it was made (id below its count).
type symName struct {
	s         string
	gnu, sysv uint32
	id        uint32
}

// names interns the names references use: the few a tree's files import
// (tens of thousands over a whole /usr) against the hundreds of thousands
// they define.
// Every job looks names up for every reference it reads and every symbol
// a summary scans, so a name is found under its shard's read lock only;
// new names are made one at a time under mu, each put in its shard before
// count says it is there (a summary answers for the first count names).
type names struct {
	mu     sync.Mutex
	shards [nameShards]nameShard
	count  atomic.Uint32
	dir    atomic.Pointer[[]*nameChunkOf] // byID's table
	// gnu has bit h>>1 & gnuMask set for each name's GNU hash h: a
	// symbol whose .gnu.hash chain value misses it has none of the names.
	gnu atomic.Pointer[[(gnuMask + 1) / 64]atomic.Uint64]
	// strs interns the file names of version records, the same few in
	// most files; vers the records themselves.
	strs [nameShards]shard[string, string]
	vers [nameShards]shard[version, *version]
}

const nameShards = 64

// shard is one part of a map split by the key's hash, each with its lock.
type shard[K comparable, V any] struct {
	mu sync.RWMutex
	m  map[K]V
}

func (s *shard[K, V]) get(k K) (V, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.m[k]
	return v, ok
}

// nameShard is one part of the names, split by their GNU hash: a table
// open-addressed by that hash too. The hash is the one .gnu.hash keeps
// for every symbol (bar its low bit), so a summary looks a symbol's name
// up without hashing it again, and a reference hashes its name once.
type nameShard struct {
	mu    sync.RWMutex
	slots []*symName // a power of two of them, at most half used
	used  int
}

// find is the name b whose GNU hash is h but for its low bit (k = h>>1),
// nil if none; the caller holds mu.
func (sh *nameShard) find(b []byte, k uint32) *symName {
	if len(sh.slots) == 0 {
		return nil
	}
	mask := uint32(len(sh.slots) - 1)
	for i := (k / nameShards) & mask; ; i = (i + 1) & mask {
		n := sh.slots[i]
		if n == nil || n.gnu>>1 == k && n.s == string(b) {
			return n
		}
	}
}

// add puts n, which find does not find, in the table; the caller holds
// mu for writing.
func (sh *nameShard) add(n *symName) {
	if 2*(sh.used+1) > len(sh.slots) {
		old := sh.slots
		sh.slots = make([]*symName, max(64, 2*len(old)))
		sh.used = 0
		for _, m := range old {
			if m != nil {
				sh.add(m)
			}
		}
	}
	mask := uint32(len(sh.slots) - 1)
	i := (n.gnu >> 1 / nameShards) & mask
	for sh.slots[i] != nil {
		i = (i + 1) & mask
	}
	sh.slots[i] = n
	sh.used++
}

// getOrAdd is k's value, v put there if k has none.
func (s *shard[K, V]) getOrAdd(k K, v V) V {
	s.mu.RLock()
	old, ok := s.m[k]
	s.mu.RUnlock()
	if ok {
		return old
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.m[k]; ok {
		return old
	}
	if s.m == nil {
		s.m = map[K]V{}
	}
	s.m[k] = v
	return v
}

// shardOf spreads names over the shards by their last bytes and length
// (mangled names share long prefixes).
func shardOf[S []byte | string](b S) int {
	h := uint32(len(b)) * 0x9e3779b1
	for i := max(len(b)-8, 0); i < len(b); i++ {
		h = (h ^ uint32(b[i])) * 16777619
	}
	return int(h>>16) % nameShards
}

// gnuMask sizes names.gnu: 2^20 bits (128 KiB), a few percent of them set
// by the names a tree imports.
const gnuMask = 1<<20 - 1

// mayHave says whether a symbol whose .gnu.hash chain value is h may have
// one of the names.
func (ns *names) mayHave(h uint32) bool {
	g := ns.gnu.Load()
	b := h >> 1 & gnuMask
	return g != nil && g[b/64].Load()&(1<<(b%64)) != 0
}

// lookup is b's name, nil if not interned.
func (ns *names) lookup(b []byte) *symName {
	return ns.lookupHashed(b, elfedit.GNUHash(b))
}

// lookupHashed is lookup of a name whose GNU hash is h, or h with its low
// bit changed (a .gnu.hash chain value).
func (ns *names) lookupHashed(b []byte, h uint32) *symName {
	k := h >> 1
	sh := &ns.shards[k%nameShards]
	sh.mu.RLock()
	n := sh.find(b, k)
	sh.mu.RUnlock()
	return n
}

// covered is how many names are interned: those with a smaller id.
func (ns *names) covered() uint32 { return ns.count.Load() }

// intern returns b's name, made if new.
func (ns *names) intern(b []byte) *symName {
	h := elfedit.GNUHash(b)
	if n := ns.lookupHashed(b, h); n != nil {
		return n
	}
	// Made before taking mu, which every job's new names wait for.
	s := string(b)
	n := &symName{s: s, gnu: h, sysv: elfedit.SysVHash(s)}
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if old := ns.lookupHashed(b, h); old != nil {
		return old
	}
	n.id = ns.count.Load()
	sh := &ns.shards[(h>>1)%nameShards]
	sh.mu.Lock()
	sh.add(n)
	sh.mu.Unlock()
	ns.publish(n)
	g := ns.gnu.Load()
	if g == nil {
		g = new([(gnuMask + 1) / 64]atomic.Uint64)
		ns.gnu.Store(g)
	}
	bit := n.gnu >> 1 & gnuMask
	g[bit/64].Or(1 << (bit % 64))
	ns.count.Store(n.id + 1)
	return n
}

// all is every name interned (for tests).
func (ns *names) all() []*symName {
	out := make([]*symName, ns.covered())
	for i := range out {
		out[i] = ns.byID(uint32(i))
	}
	return out
}

// byID is the name with the given id, which a reference or a summary
// holds: interned, so published before the id was handed out.
func (ns *names) byID(id uint32) *symName {
	return (*ns.dir.Load())[id/nameChunk][id%nameChunk].Load()
}

const nameChunk = 4096

type nameChunkOf [nameChunk]atomic.Pointer[symName]

// publish makes n found by byID; the caller holds mu.
func (ns *names) publish(n *symName) {
	var dir []*nameChunkOf
	if d := ns.dir.Load(); d != nil {
		dir = *d
	}
	if int(n.id/nameChunk) >= len(dir) {
		grown := append(slices.Clip(dir), new(nameChunkOf))
		ns.dir.Store(&grown)
		dir = grown
	}
	dir[n.id/nameChunk][n.id%nameChunk].Store(n)
}

// str is s, interned.
func (ns *names) str(s string) string {
	return ns.strs[shardOf(s)].getOrAdd(s, s)
}

// version is v interned: one record for every file that needs or defines
// it.
func (ns *names) version(v version) *version {
	sh := &ns.vers[(shardOf(v.name)+shardOf(v.file))%nameShards]
	if p, ok := sh.get(v); ok {
		return p
	}
	nv := v
	return sh.getOrAdd(v, &nv)
}

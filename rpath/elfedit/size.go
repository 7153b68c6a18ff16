package elfedit

// StringTableSize is the size of the dynamic string table (DT_STRSZ). Every
// plan that moves the table holds a few copies of it in memory, so callers
// that patch many files at once use it to bound their memory.
func (f *File) StringTableSize() int { return len(f.strtab) }

// HeldBytes is the memory the file holds while it is open: what its read
// cache read (head, windows, tables) and the scratch lent to its planning.
// A caller that keeps files open for later (one read of a file for two
// of its uses, the second to come) bounds what they hold with it.
func (f *File) HeldBytes() int64 {
	c, ok := f.r.(*readCache)
	if !ok {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	if c.head != nil {
		n += int64(cap(c.head))
	}
	for _, w := range c.wins {
		n += int64(cap(w.b))
	}
	for _, b := range c.lent {
		if len(b) > 0 && len(c.head) > 0 && &b[0] == &c.head[0] {
			continue // a head of two windows is lent (fillHead)
		}
		n += int64(cap(b))
	}
	return n
}

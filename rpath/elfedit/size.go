package elfedit

// StringTableSize is the size of the dynamic string table (DT_STRSZ). Every
// plan that moves the table holds a few copies of it in memory, so callers
// that patch many files at once use it to bound their memory.
func (f *File) StringTableSize() int { return len(f.strtab) }

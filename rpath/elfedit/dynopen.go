package elfedit

// OpenDynamic opens the file at path for a reader of its dynamic-linking
// tables only that opens many files once each (the symbol check): it reads
// the ELF and program headers and the dynamic section straight from the
// file, with no read cache, no section headers and no string table (the
// caller reads what it needs of it with ReadMappedInto; DynString and the
// names of Info read as empty). What needs the section headers is not read
// either: the Sections, notes and debug objects (Kind and IsDynamic take a
// separate debug file for what it claims to be), so the caller opens this
// way a file it has judged from a full open.
func OpenDynamic(path string) (*File, error) {
	fd, st, _, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	f := &File{r: fd, closer: fd, size: st.Size, dynProg: -1, interpProg: -1, openName: -1, noStrings: true}
	for _, step := range []func() error{f.readHeader, f.readProgs, f.readDynamic} {
		if err := step(); err != nil {
			fd.Close()
			return nil, err
		}
	}
	return f, nil
}

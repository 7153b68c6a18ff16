package ldso

import (
	"sync"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/ldcache"
)

// ElfReader returns a Reader that reads objects with rpath/elfedit, the
// hardened reader the rest of cudapatch uses, and remembers each answer:
// one Resolve opens every library once, and a Reader shared by many
// Resolve calls (lint over a tree) opens it once in all. It is safe for
// concurrent use. Paths are host paths, as Resolve passes them.
func ElfReader() Reader { return elfReader(nil, nil) }

// ElfReaderOpen is ElfReader opening each file with open (nil:
// elfedit.Open; a caller reading many files lends its buffers,
// elfedit.Buffers.Open), and also handing each file it opens to also (when
// not nil) before closing it: a caller that needs more of the same files
// (the symbol check) reads them in the same open.
func ElfReaderOpen(open func(path string) (*elfedit.File, error), also func(path string, f *elfedit.File)) Reader {
	return elfReaderOpen(open, also, nil)
}

// ElfReaderDlopen is ElfReader whose objects' Dlopen names are what
// discover finds in each file (nil: none).
func ElfReaderDlopen(discover func(*elfedit.File) ([]string, error)) Reader {
	return elfReader(nil, discover)
}

func elfReader(also func(path string, f *elfedit.File), discover func(*elfedit.File) ([]string, error)) Reader {
	return elfReaderOpen(nil, also, discover)
}

func elfReaderOpen(open func(string) (*elfedit.File, error), also func(path string, f *elfedit.File), discover func(*elfedit.File) ([]string, error)) Reader {
	if open == nil {
		open = elfedit.Open
	}
	// One entry a path, read once: jobs resolving closures that share
	// a library ask for it at the same time, and each would read it.
	type result struct {
		once sync.Once
		o    *Object
		err  error
	}
	var m sync.Map // path → *result
	return func(path string) (*Object, error) {
		v, ok := m.Load(path)
		if !ok {
			v, _ = m.LoadOrStore(path, new(result))
		}
		r := v.(*result)
		r.once.Do(func() { r.o, r.err = readElfedit(open, path, also, discover) })
		return r.o, r.err
	}
}

func readElfedit(open func(string) (*elfedit.File, error), path string, also func(string, *elfedit.File), discover func(*elfedit.File) ([]string, error)) (*Object, error) {
	f, err := open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if also != nil {
		also(path, f)
	}
	o := ObjectOf(f)
	if discover != nil {
		// A file whose names cannot be read is searched for none: the
		// names are a hint, never a reason to fail the search.
		o.Dlopen, _ = discover(f)
	}
	return o, nil
}

// ObjectOf is what the loader simulation reads of an open file.
func ObjectOf(f *elfedit.File) *Object {
	in := f.Info()
	o := &Object{
		Class: in.ELFClass(), Machine: in.ELFMachine(), OSABI: in.ELFOSABI(),
		Needed: in.Needed, Soname: in.Soname, Interp: in.Interpreter, Flags1: in.Flags1,
	}
	if in.RPath != nil {
		o.RPath, o.HasRPath = *in.RPath, true
	}
	if in.RunPath != nil {
		o.RunPath, o.HasRunPath = *in.RunPath, true
	}
	o.Note = ReadNote(f)
	return o
}

// ReadNote returns f's resolution-cache note, nil when it has none. A note
// read before a malformed one is returned; an unreadable note is none, as
// the loader, which stops at a note that overruns its segment, sees it.
func ReadNote(f *elfedit.File) *Note {
	n, ok, _ := f.Note(elfedit.NoteID{Owner: ldcache.Owner, Type: ldcache.Type})
	if !ok {
		return nil
	}
	return NewNote(n.Desc, n.Loaded)
}

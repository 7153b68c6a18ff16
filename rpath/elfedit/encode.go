package elfedit

import "debug/elf"

// The encoders mirror the decoders of read.go: the model is 64-bit wide for
// both classes, and the class and byte order appear only here.

// putEhdr writes e_phoff, e_phnum and e_shoff into a copy of the raw header.
func (f *File) putEhdr(b []byte, phoff uint64, phnum int, shoff uint64) {
	o := f.order
	if f.Header.Class == elf.ELFCLASS64 {
		o.PutUint64(b[32:], phoff)
		o.PutUint64(b[40:], shoff)
		o.PutUint16(b[56:], uint16(phnum))
		return
	}
	o.PutUint32(b[28:], uint32(phoff))
	o.PutUint32(b[32:], uint32(shoff))
	o.PutUint16(b[44:], uint16(phnum))
}

// putShnum writes e_shnum and e_shstrndx into a copy of the raw header.
func (f *File) putShnum(b []byte, shnum, shstrndx int) {
	if f.Header.Class == elf.ELFCLASS64 {
		f.order.PutUint16(b[60:], uint16(shnum))
		f.order.PutUint16(b[62:], uint16(shstrndx))
		return
	}
	f.order.PutUint16(b[48:], uint16(shnum))
	f.order.PutUint16(b[50:], uint16(shstrndx))
}

func (f *File) encodeProg(b []byte, p elf.ProgHeader) {
	o := f.order
	if f.Header.Class == elf.ELFCLASS64 {
		o.PutUint32(b[0:], uint32(p.Type))
		o.PutUint32(b[4:], uint32(p.Flags))
		o.PutUint64(b[8:], p.Off)
		o.PutUint64(b[16:], p.Vaddr)
		o.PutUint64(b[24:], p.Paddr)
		o.PutUint64(b[32:], p.Filesz)
		o.PutUint64(b[40:], p.Memsz)
		o.PutUint64(b[48:], p.Align)
		return
	}
	o.PutUint32(b[0:], uint32(p.Type))
	o.PutUint32(b[4:], uint32(p.Off))
	o.PutUint32(b[8:], uint32(p.Vaddr))
	o.PutUint32(b[12:], uint32(p.Paddr))
	o.PutUint32(b[16:], uint32(p.Filesz))
	o.PutUint32(b[20:], uint32(p.Memsz))
	o.PutUint32(b[24:], uint32(p.Flags))
	o.PutUint32(b[28:], uint32(p.Align))
}

func (f *File) encodeSection(s Section) []byte {
	o := f.order
	b := make([]byte, f.shdrSize())
	if f.Header.Class == elf.ELFCLASS64 {
		o.PutUint32(b[0:], s.NameOff)
		o.PutUint32(b[4:], uint32(s.Type))
		o.PutUint64(b[8:], uint64(s.Flags))
		o.PutUint64(b[16:], s.Addr)
		o.PutUint64(b[24:], s.Offset)
		o.PutUint64(b[32:], s.Size)
		o.PutUint32(b[40:], s.Link)
		o.PutUint32(b[44:], s.Info)
		o.PutUint64(b[48:], s.Addralign)
		o.PutUint64(b[56:], s.Entsize)
		return b
	}
	o.PutUint32(b[0:], s.NameOff)
	o.PutUint32(b[4:], uint32(s.Type))
	o.PutUint32(b[8:], uint32(s.Flags))
	o.PutUint32(b[12:], uint32(s.Addr))
	o.PutUint32(b[16:], uint32(s.Offset))
	o.PutUint32(b[20:], uint32(s.Size))
	o.PutUint32(b[24:], s.Link)
	o.PutUint32(b[28:], s.Info)
	o.PutUint32(b[32:], uint32(s.Addralign))
	o.PutUint32(b[36:], uint32(s.Entsize))
	return b
}

func (f *File) encodeDyn(b []byte, d Dyn) {
	if f.Header.Class == elf.ELFCLASS64 {
		f.order.PutUint64(b, uint64(d.Tag))
		f.order.PutUint64(b[8:], d.Val)
		return
	}
	f.order.PutUint32(b, uint32(d.Tag))
	f.order.PutUint32(b[4:], uint32(d.Val))
}

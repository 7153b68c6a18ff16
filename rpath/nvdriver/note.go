package nvdriver

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// CompatNote is the forward-compatibility note that cuda_compat's libcuda
// carries in its .note.cuda.fwd_compatibility section (owner "NVIDIA
// Corporation"): a JSON object such as {"format":1,"CUDA
// version":"13.0","driver":[535,550,565,570,575,580],"device":[1,2,7]}.
// Driver lists the kernel-module branches the library runs on; Device
// lists the device codes it supports.
type CompatNote struct {
	Format      int    `json:"format"`
	CUDAVersion string `json:"CUDA version"`
	Driver      []int  `json:"driver"`
	Device      []int  `json:"device"`
}

// CompatNoteSection is the section that holds the note.
const CompatNoteSection = ".note.cuda.fwd_compatibility"

// maxNote bounds the note section: the real one is about 200 bytes.
const maxNote = 64 << 10

// ErrNoCompatNote is returned by ReadCompatNote for a library without the
// note (cuda_compat packages before CUDA 12.x have none).
var ErrNoCompatNote = errors.New("no " + CompatNoteSection + " note")

// ReadCompatNote reads the forward-compatibility note of a libcuda file.
func ReadCompatNote(r io.ReaderAt) (*CompatNote, error) {
	f, err := elf.NewFile(r)
	if err != nil {
		return nil, err
	}
	s := f.Section(CompatNoteSection)
	if s == nil || s.Type != elf.SHT_NOTE {
		return nil, ErrNoCompatNote
	}
	if s.Size > maxNote {
		return nil, fmt.Errorf("%s: %d bytes, more than %d", CompatNoteSection, s.Size, maxNote)
	}
	data, err := s.Data()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CompatNoteSection, err)
	}
	// Notes of any class use 4-byte words and 4-byte alignment here.
	for len(data) >= 12 {
		namesz := uint64(f.ByteOrder.Uint32(data[0:]))
		descsz := uint64(f.ByteOrder.Uint32(data[4:]))
		nameEnd := 12 + namesz
		descOff := 12 + (namesz+3)&^3
		descEnd := descOff + descsz
		if nameEnd > uint64(len(data)) || descEnd > uint64(len(data)) {
			return nil, fmt.Errorf("%s: a note runs past the section", CompatNoteSection)
		}
		name := string(bytes.TrimRight(data[12:nameEnd], "\x00"))
		desc := bytes.TrimRight(data[descOff:descEnd], "\x00")
		if name == "NVIDIA Corporation" {
			var n CompatNote
			if err := json.Unmarshal(desc, &n); err != nil {
				return nil, fmt.Errorf("%s: %w", CompatNoteSection, err)
			}
			return &n, nil
		}
		next := descOff + (descsz+3)&^3
		if next > uint64(len(data)) {
			break
		}
		data = data[next:]
	}
	return nil, ErrNoCompatNote
}

// ReadCompat reads what a cuda_compat libcuda file says about itself: its
// version (from the name, else the string it carries) and its note. A
// missing note is no error.
func ReadCompat(path string) (Compat, error) {
	f, err := openRegular(path)
	if err != nil {
		return Compat{}, err
	}
	defer f.Close()
	c := Compat{Version: NameVersion(path)}
	if c.Version == "" {
		st, err := f.Stat()
		if err != nil {
			return Compat{}, err
		}
		l, err := ReadLibcuda(f, st.Size())
		if err != nil {
			return Compat{}, fmt.Errorf("%s: %w", path, err)
		}
		c.Version = l.Version
	}
	n, err := ReadCompatNote(f)
	switch {
	case errors.Is(err, ErrNoCompatNote):
	case err != nil:
		return Compat{}, fmt.Errorf("%s: %w", path, err)
	default:
		c.Note = n
	}
	return c, nil
}

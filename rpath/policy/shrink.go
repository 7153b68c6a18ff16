package policy

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// ShrinkPath is patchelf --shrink-rpath on one search path. It keeps
//
//   - entries that are not absolute ($ORIGIN/../lib, relative ones): they
//     cannot be checked here and the prefix filter does not apply to them;
//   - absolute entries that start with one of the allowed prefixes (any
//     entry when there are none) and hold, under the name of a DT_NEEDED
//     entry not found in an earlier entry, an ELF file for the same machine.
//
// Empty entries are dropped. probe reports the machine of the ELF file at a
// path, or an error when there is none. removed lists patchelf's debug
// lines for the entries dropped.
func ShrinkPath(path string, needed, allowed []string, machine elf.Machine,
	probe func(path string) (elf.Machine, error)) (kept string, removed []string) {
	allowed = slices.DeleteFunc(slices.Clone(allowed), func(s string) bool { return s == "" })
	found := make([]bool, len(needed))
	var out []string
	for _, dir := range strings.Split(path, ":") {
		if dir != "" && dir[0] != '/' {
			out = append(out, dir)
			continue
		}
		if len(allowed) > 0 && !slices.ContainsFunc(allowed, func(p string) bool { return strings.HasPrefix(dir, p) }) {
			removed = append(removed, fmt.Sprintf("removing directory '%s' from RPATH because of non-allowed prefix", dir))
			continue
		}
		use := false
		for i, n := range needed {
			if found[i] || dir == "" {
				continue
			}
			lib := dir + "/" + n
			m, err := probe(lib)
			switch {
			case err != nil:
			case m != machine:
				removed = append(removed, fmt.Sprintf("ignoring library '%s' because its machine type differs", lib))
			default:
				found[i], use = true, true
			}
		}
		if !use {
			removed = append(removed, fmt.Sprintf("removing directory '%s' from RPATH", dir))
			continue
		}
		out = append(out, dir)
	}
	return strings.Join(out, ":"), removed
}

// ProbeMachine reads e_machine of the ELF file at path. A path that is
// missing, a directory, unreadable or not ELF is an error: the loader would
// not load it either.
func ProbeMachine(path string) (elf.Machine, error) {
	// Non-blocking: a FIFO named as a library is refused, not waited on.
	fd, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return 0, err
	}
	defer fd.Close()
	if st, err := fd.Stat(); err != nil || !st.Mode().IsRegular() {
		return 0, fmt.Errorf("%s: %w", path, elfedit.ErrNotRegular)
	}
	var h [20]byte
	if _, err := io.ReadFull(fd, h[:]); err != nil {
		return 0, err
	}
	if string(h[:4]) != elf.ELFMAG {
		return 0, errors.New("not ELF")
	}
	if elf.Data(h[elf.EI_DATA]) == elf.ELFDATA2MSB {
		return elf.Machine(binary.BigEndian.Uint16(h[18:])), nil
	}
	return elf.Machine(binary.LittleEndian.Uint16(h[18:])), nil
}

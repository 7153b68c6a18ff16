package elfedit

import (
	"bytes"
	"debug/elf"
	"fmt"
)

// CodeHolds reports, for each of words, whether its bytes occur in the
// file's executable sections (SHF_EXECINSTR; without section headers, its
// executable PT_LOAD segments): a string a program builds in code, from
// the immediate operands of its instructions, is there and nowhere in its
// data. The sections are read in chunks past the read cache, each once.
func (f *File) CodeHolds(words [][]byte) ([]bool, error) {
	return f.codeHolds(words, 0, 1, roChunk)
}

// CodeHoldsPart is CodeHolds over the part-th (from 0) of parts equal
// shares of the file's executable bytes, in file order: a word that starts
// in the share is found there, whichever share it ends in, so the parts'
// answers or-ed together are CodeHolds'. The parts of one File may be
// scanned at the same time, each on a goroutine of its own: a library's
// code may be hundreds of MiB, and one core reading it would keep the
// others waiting.
func (f *File) CodeHoldsPart(words [][]byte, part, parts int) ([]bool, error) {
	if parts < 1 || part < 0 || part >= parts {
		return nil, fmt.Errorf("code: part %d of %d", part, parts)
	}
	return f.codeHolds(words, part, parts, roChunk)
}

// codeHolds is CodeHoldsPart in chunks of at most the given size.
func (f *File) codeHolds(words [][]byte, part, parts int, size uint64) ([]bool, error) {
	found := make([]bool, len(words))
	longest := 0
	for _, w := range words {
		longest = max(longest, len(w))
	}
	if longest == 0 {
		return found, nil
	}
	type span struct{ off, n uint64 }
	var spans []span
	for _, s := range f.Sections {
		if s.Type == elf.SHT_PROGBITS && s.Flags&elf.SHF_ALLOC != 0 && s.Flags&elf.SHF_EXECINSTR != 0 && s.Size > 0 {
			spans = append(spans, span{s.Offset, s.Size})
		}
	}
	if len(f.Sections) == 0 {
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && p.Filesz > 0 {
				spans = append(spans, span{p.Off, p.Filesz})
			}
		}
	}
	var total uint64
	for _, s := range spans {
		if err := inFile(f.size, s.off, s.n, "code"); err != nil {
			return found, err
		}
		total += s.n
	}
	// The share's bytes: where words may start, [lo, hi) counted over the
	// spans in turn; each piece read runs longest-1 bytes past the share's
	// end (within its span), where a word starting in it ends.
	share := total / uint64(parts)
	lo, hi := share*uint64(part), share*uint64(part+1)
	if part == parts-1 {
		hi = total
	}
	var pieces []span
	var largest, at uint64
	for _, s := range spans {
		if a, b := max(at, lo), min(at+s.n, hi); a < b {
			start, stop := s.off+(a-at), s.off+(b-at)
			stop = min(stop+uint64(longest-1), s.off+s.n)
			pieces = append(pieces, span{start, stop - start})
			largest = max(largest, stop-start)
		}
		at += s.n
	}
	if largest == 0 {
		return found, nil
	}
	// Each chunk after the first starts longest-1 bytes back, so that a
	// word across two chunks is seen whole.
	chunk := max(min(largest, size), uint64(2*longest))
	buf := f.scratchToRead(chunk)
	left := len(words)
	for _, s := range pieces {
		for pos, end := s.off, s.off+s.n; pos < end && left > 0; {
			b := buf[:min(uint64(len(buf)), end-pos)]
			if err := f.readUncached(b, pos); err != nil {
				return found, fmt.Errorf("code: %w", err)
			}
			left -= markHeld(b, words, found)
			if pos+uint64(len(b)) >= end {
				break
			}
			pos += uint64(len(b) - (longest - 1))
		}
	}
	return found, nil
}

// markHeld sets found[i] for each word of words not found yet that b
// holds, and returns how many it set. Words that share a prefix (sonames
// all start with "lib") are looked for in one pass over b, at the places
// that prefix occurs; others each in a pass of their own.
func markHeld(b []byte, words [][]byte, found []bool) int {
	var prefix []byte
	n, first := 0, true
	for i, w := range words {
		if found[i] || len(w) == 0 {
			continue
		}
		if first {
			prefix, first = w, false
			continue
		}
		k := 0
		for k < len(prefix) && k < len(w) && prefix[k] == w[k] {
			k++
		}
		prefix = prefix[:k]
	}
	if len(prefix) < 3 {
		for i, w := range words {
			if !found[i] && len(w) > 0 && bytes.Contains(b, w) {
				found[i] = true
				n++
			}
		}
		return n
	}
	for at := 0; ; {
		j := bytes.Index(b[at:], prefix)
		if j < 0 {
			return n
		}
		at += j
		for i, w := range words {
			if !found[i] && len(w) > 0 && bytes.HasPrefix(b[at:], w) {
				found[i] = true
				n++
			}
		}
		at++
	}
}

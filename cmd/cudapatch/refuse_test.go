package main

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
)

// loads returns the indices of h's PT_LOADs.
func (h *hostileELF) loads() []int {
	var out []int
	for i, p := range h.progs {
		if elf.ProgType(p.Type) == elf.PT_LOAD {
			out = append(out, i)
		}
	}
	return out
}

// writeProgs writes h.progs back over the original program header table.
func (h *hostileELF) writeProgs(t testing.TB) {
	t.Helper()
	phoff := binary.LittleEndian.Uint64(h.b[32:])
	var buf bytes.Buffer
	for _, p := range h.progs {
		require.NoError(t, binary.Write(&buf, binary.LittleEndian, p))
	}
	copy(h.b[phoff:], buf.Bytes())
}

// TestMainJobRefusesWhatVerifyRejects: a file whose segments the loaders
// refuse or map other than their headers say is rejected by verify, and
// the main job (and patchelf) refuse to edit it: one line naming the
// file and the rule, exit 2, the file untouched, nothing written. A file
// with a rule the loaders accept (a W+X segment, a p_align below the
// target's page size) is patched, and the result breaks no rule the
// input did not.
func TestMainJobRefusesWhatVerifyRejects(t *testing.T) {
	fx := fixtures.ByName(t, "bfd-pie")
	orig, err := os.ReadFile(fx.Libs[0])
	require.NoError(t, err)
	for _, tc := range []struct {
		rule   string
		refuse bool
		mutate func(t testing.TB, h *hostileELF)
	}{
		{"load-overlap", true, func(t testing.TB, h *hostileELF) {
			// The second PT_LOAD claims the first one's addresses.
			l := h.loads()
			first := h.progs[l[0]]
			h.progs[l[1]].Vaddr = first.Vaddr + first.Off%first.Align
			h.progs[l[1]].Paddr = h.progs[l[1]].Vaddr
			h.progs[l[1]].Off = first.Off
			h.writeProgs(t)
		}},
		{"load-order", true, func(t testing.TB, h *hostileELF) {
			l := h.loads()
			h.progs[l[1]], h.progs[l[2]] = h.progs[l[2]], h.progs[l[1]]
			h.writeProgs(t)
		}},
		{"load-align", true, func(t testing.TB, h *hostileELF) {
			l := h.loads()
			h.progs[l[1]].Vaddr += 0x10
			h.progs[l[1]].Paddr += 0x10
			h.writeProgs(t)
		}},
		{"load-size", true, func(t testing.TB, h *hostileELF) {
			l := h.loads()
			h.progs[l[0]].Memsz = h.progs[l[0]].Filesz - 8
			h.writeProgs(t)
		}},
		{"load-bounds", true, func(t testing.TB, h *hostileELF) {
			l := h.loads()
			last := &h.progs[l[len(l)-1]]
			last.Filesz = uint64(len(h.b)) * 4
			last.Memsz = last.Filesz
			h.writeProgs(t)
		}},
		{"dynamic-map", true, func(t testing.TB, h *hostileELF) {
			i, _ := h.prog(t, elf.PT_DYNAMIC)
			h.progs[i].Vaddr += 8
			h.progs[i].Paddr += 8
			h.writeProgs(t)
		}},
		{"dynamic-load", true, func(t testing.TB, h *hostileELF) {
			// .dynamic read from a copy at the end of the file, which no
			// PT_LOAD maps.
			i, dyn := h.prog(t, elf.PT_DYNAMIC)
			off := h.appendBlock(bytes.Clone(h.b[dyn.Off : dyn.Off+dyn.Filesz]))
			h.progs[i].Off = off
			h.writeProgs(t)
		}},
		{"load-wx", false, func(t testing.TB, h *hostileELF) {
			l := h.loads()
			h.progs[l[len(l)-1]].Flags |= uint32(elf.PF_X)
			h.writeProgs(t)
		}},
		{"load-page", false, func(t testing.TB, h *hostileELF) {
			for _, i := range h.loads() {
				h.progs[i].Align = 0x800
			}
			h.writeProgs(t)
		}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			h := newHostileELF(t, orig)
			tc.mutate(t, h)
			c := newCLITree(t)
			lib := c.p("out/lib/libfoo.so")
			require.NoError(t, os.MkdirAll(filepath.Dir(lib), 0o755))
			require.NoError(t, os.WriteFile(lib, h.b, 0o755))
			c.place("out/lib/libbar.so", cLib("libbar.so"))

			// verify rejects the input with the rule, or, for a rule
			// files that load break, lists it as tolerated.
			stdout, _, code := runFixed(t, nil, "verify", lib)
			require.Contains(t, stdout, ": "+tc.rule+": ", "the crafted file does not break %s:\n%s", tc.rule, stdout)
			if tc.refuse {
				assert.Equal(t, 1, code, stdout)
			} else {
				assert.Equal(t, 0, code, stdout)
				assert.Contains(t, stdout, ": "+tc.rule+": ")
				assert.Contains(t, stdout, "(tolerated: the file loads, and an edit keeps it)")
			}

			before := c.hashes()
			// An empty --libc: not this machine's, whose line would
			// stand before the file's error.
			_, stderr, code := runFixed(t, nil, "--libc", t.TempDir(), "--ignore-missing", "*", c.p("out"))
			if tc.refuse {
				assert.Equal(t, 2, code, stderr)
				c.unchanged(before)
				lines := strings.Split(strings.TrimSpace(stderr), "\n")
				require.Len(t, lines, 2, stderr) // the file's error, the summary
				assert.Contains(t, lines[0], lib+": ")
				if tc.rule == "load-bounds" {
					// The layout meets it first, with its own words.
					assert.Contains(t, lines[0], "lies past the end of the file")
				} else {
					assert.Contains(t, lines[0], "not editing a file the verifier rejects: "+tc.rule+": ")
				}
				assert.Contains(t, lines[1], "nothing written")
				// patchelf refuses it too, and leaves it as it was.
				_, stderr, code = runFixed(t, nil, "patchelf", "--set-rpath", "/a/new/path", lib)
				assert.Equal(t, 1, code, stderr)
				if tc.rule != "load-bounds" {
					assert.Contains(t, stderr, tc.rule)
				}
				c.unchanged(before)
				return
			}
			require.Equal(t, 0, code, stderr)
			after, _, _ := runFixed(t, nil, "verify", lib)
			rules := func(out string) map[string]bool {
				m := map[string]bool{}
				for _, l := range strings.Split(out, "\n") {
					if f := strings.SplitN(l, ": ", 3); len(f) == 3 {
						m[f[1]] = true
					}
				}
				return m
			}
			had := rules(stdout)
			for r := range rules(after) {
				assert.True(t, had[r], "the result breaks %s, the input did not:\n%s", r, after)
			}
			assert.Contains(t, after, ": "+tc.rule+": ", "the edit should keep the file as it was")
		})
	}
}

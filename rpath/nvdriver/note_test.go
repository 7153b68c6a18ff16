package nvdriver_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/nvdriver"
)

// compatLib builds libcuda.so.VERSION carrying a forward-compatibility
// note with owner and JSON desc, laid out as the real one is (a note
// section of its own), or none when desc is "".
func compatLib(t *testing.T, version, owner, desc string) string {
	t.Helper()
	dir := t.TempDir()
	src := "int cuInit(unsigned f) { return 0; }\n"
	if desc != "" {
		src += `__asm__(".pushsection .note.cuda.fwd_compatibility,\"a\",@note\n" ` +
			`".balign 4\n.long 2f-1f\n.long 4f-3f\n.long 0\n1: .asciz \"` + owner + `\"\n2: .balign 4\n" ` +
			`"3: .ascii \"` + escape(desc) + `\"\n.byte 0\n4: .balign 4\n.popsection\n");` + "\n"
	}
	out := filepath.Join(dir, "libcuda.so."+version)
	fixtures.Place(t, fixtures.C{Source: src, Args: []string{"-shared", "-fPIC", "-Wl,-soname,libcuda.so.1"}}, out)
	return out
}

// escape quotes desc for a C string holding an assembler string.
func escape(s string) string {
	out := ""
	for _, r := range s {
		if r == '"' {
			out += `\\\"`
			continue
		}
		out += string(r)
	}
	return out
}

// TestReadCompat: the version comes from the file name, the note from its
// section; a library without the note, or with another owner's, has none.
func TestReadCompat(t *testing.T) {
	const desc = `{"format":1,"CUDA version":"13.0","driver":[535,550,565,570,575,580],"device":[1,2,7,8,9,10,11,12,13,14]}`
	c, err := nvdriver.ReadCompat(compatLib(t, "580.95.05", "NVIDIA Corporation", desc))
	require.NoError(t, err)
	assert.Equal(t, "580.95.05", c.Version)
	require.NotNil(t, c.Note)
	assert.Equal(t, nvdriver.CompatNote{Format: 1, CUDAVersion: "13.0", Driver: []int{535, 550, 565, 570, 575, 580},
		Device: []int{1, 2, 7, 8, 9, 10, 11, 12, 13, 14}}, *c.Note)

	c, err = nvdriver.ReadCompat(compatLib(t, "520.61.05", "", ""))
	require.NoError(t, err)
	assert.Equal(t, nvdriver.Compat{Version: "520.61.05"}, c)

	c, err = nvdriver.ReadCompat(compatLib(t, "580.95.05", "Someone Else", desc))
	require.NoError(t, err)
	assert.Nil(t, c.Note)

	_, err = nvdriver.ReadCompat(compatLib(t, "580.95.05", "NVIDIA Corporation", `{"driver":[535,`))
	assert.ErrorContains(t, err, ".note.cuda.fwd_compatibility")
}

package elfedit_test

import (
	"debug/elf"
	"os"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// TestTablePointerIntoTheRegion: a DT_VERNEED aimed into the .dynamic of
// the region an earlier edit added (a body mutation of seed 20 found it)
// points at a table no section describes, which no layout knows to carry.
// The next edit's region replaced the old one and left DT_VERNEED
// pointing at nothing; unless the edit renamed a DT_NEEDED, nothing read
// the table back, and EditFile wrote a file the loader reads unmapped
// memory from. Verify names the aim (section-table), the final check a
// table pointer into no PT_LOAD (dynamic-pointer), and the layout itself
// refuses a pointer into the region it replaces that it does not repoint
// (since mutation seed 25 aimed a DT_PLTGOT there): the edit is refused,
// saying which pointer, with the file unchanged.
func TestTablePointerIntoTheRegion(t *testing.T) {
	fx := fixtures.ByName(t, "bfd-pie").Copy(t)
	// A longer interpreter takes a region, .dynamic with it (FuzzEdit's
	// bfd-main-region seed).
	_, err := elfedit.EditFile(fx.Exe, elfedit.Edit{SetPath: str(pad(300, fx.LibDir)), Interpreter: str("/lib64/../lib64/ld-linux-x86-64.so.2")}, elfedit.Options{})
	require.NoError(t, err)

	ef, err := elf.Open(fx.Exe)
	require.NoError(t, err)
	dyn, data := ef.Section(".dynamic"), ef.Section(".data")
	require.NotNil(t, dyn)
	require.NotNil(t, data)
	in := func(p *elf.Prog, s *elf.Section) bool { return s.Offset >= p.Off && s.Offset < p.Off+p.Filesz }
	region := slices.IndexFunc(ef.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_LOAD && in(p, dyn) })
	require.GreaterOrEqual(t, region, 0)
	require.False(t, in(ef.Progs[region], data), ".dynamic moved into the region")
	ef.Close()

	x := newElfBytes(t, readFile(t, fx.Exe))
	x.setTag(t, elf.DT_VERNEED, dyn.Addr+0x30)
	b := x.b
	require.NoError(t, os.WriteFile(fx.Exe, b, 0o755))

	f, err := elfedit.Open(fx.Exe)
	require.NoError(t, err)
	rules := map[string]bool{}
	for _, p := range f.Verify() {
		rules[p.Rule] = true
	}
	require.NoError(t, f.Close())
	assert.True(t, rules["section-table"], "Verify names a DT_VERNEED that is no SHT_GNU_VERNEED section's address: %v", rules)
	assert.False(t, rules["dynamic-pointer"], "it still lies in a PT_LOAD: %v", rules)

	// A longer interpreter again: a new region, which replaces the old.
	_, err = elfedit.EditFile(fx.Exe, elfedit.Edit{SetPath: str(pad(900, fx.LibDir)), Interpreter: str("/lib64/../lib64/../lib64/ld-linux-x86-64.so.2")}, elfedit.Options{})
	require.Error(t, err, "a region that replaces the one DT_VERNEED points into")
	assert.Contains(t, err.Error(), "DT_VERNEED 0x")
	assert.Contains(t, err.Error(), "points into bytes the edit would move or replace")
	assert.Equal(t, b, readFile(t, fx.Exe), "the file is left as it was")
}

package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/ldso"
	"github.com/cudapatch/cudapatch/rpath/lint/linttest"
)

var noteOffset = regexp.MustCompile(`at 0x[0-9a-f]+,`)

// TestPrintLDCache: print shows the resolution-cache note of the lint
// tree's programs (notes written by the linker, or objcopy for the unloaded
// one): decoded entries in text, the structured cache in JSON, and notes
// that are malformed or that the loader ignores, clearly.
func TestPrintLDCache(t *testing.T) {
	tr := linttest.Build(t)
	host := func(name string) string {
		for _, c := range tr.Cases {
			if c.Name == name {
				return c.Host
			}
		}
		t.Fatalf("no case %s", name)
		return ""
	}
	drv, foo := linttest.Driver, linttest.LibFoo+"/libfoo.so"
	tests := []struct {
		name string
		// text is the ldcache part of the text output, the offset masked;
		// "" when there must be none.
		text    string
		loaded  bool
		entries map[string][]string // JSON: name → elements
		error   bool
		ignored string
	}{
		{
			name: "clean",
			text: "  ldcache:     .note.nixos.ldcache at 0xOFF, 138 bytes\n" +
				"    libcuda.so.1 ?" + drv + "\n" +
				"    libfoo.so    ?" + drv + ":=" + foo + "\n",
			loaded:  true,
			entries: map[string][]string{"libcuda.so.1": {"?" + drv}, "libfoo.so": {"?" + drv, "=" + foo}},
		},
		{
			// Written by cudapatch's engine (elfedit.Edit.SetNote).
			name: "clean-elfedit-note",
			text: "  ldcache:     .note.nixos.ldcache at 0xOFF, 138 bytes\n" +
				"    libcuda.so.1 ?" + drv + "\n" +
				"    libfoo.so    ?" + drv + ":=" + foo + "\n",
			loaded:  true,
			entries: map[string][]string{"libcuda.so.1": {"?" + drv}, "libfoo.so": {"?" + drv, "=" + foo}},
		},
		{
			name:    "ldcache-unloaded",
			text:    "  ldcache:     .note.nixos.ldcache at 0xOFF, 77 bytes, IGNORED by the loader: " + ldso.NoteUnloaded + "\n    libfoo.so =" + foo + "\n",
			entries: map[string][]string{"libfoo.so": {"=" + foo}},
			ignored: ldso.NoteUnloaded,
		},
		{
			name:   "ldcache-empty",
			text:   "  ldcache:     .note.nixos.ldcache at 0xOFF, 2 bytes, IGNORED by the loader: " + ldso.NoteRejected + "\n",
			loaded: true, ignored: ldso.NoteRejected,
		},
		{
			name: "ldcache-empty-list",
			text: "  ldcache:     .note.nixos.ldcache at 0xOFF, 86 bytes\n" +
				"    liba.so   (empty: the loader stops trusting the note here)\n" +
				"    libfoo.so =" + foo + "\n",
			loaded:  true,
			entries: map[string][]string{"liba.so": nil, "libfoo.so": {"=" + foo}},
		},
		{
			name: "ldcache-unsorted",
			text: "  ldcache:     .note.nixos.ldcache at 0xOFF, 153 bytes, MALFORMED: malformed resolution cache: name \"libbar.so\" at byte 76 is not after \"libfoo.so\" (names must be sorted and unique)\n" +
				"    raw \"libfoo.so\\x00=" + foo + "\\x00libbar.so\\x00=" + linttest.LibFoo + "/libbar.so\\x00\\x00\"\n",
			loaded: true, error: true,
		},
		{name: "ldcache-missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := runCLI(t, nil, "print", host(tt.name))
			require.Equal(t, exitOK, code, errOut)
			got := ""
			if i := strings.Index(out, "  ldcache:"); i >= 0 {
				got = noteOffset.ReplaceAllString(out[i:], "at 0xOFF,")
			}
			assert.Equal(t, tt.text, got)

			out, errOut, code = runCLI(t, nil, "print", "--json", host(tt.name))
			require.Equal(t, exitOK, code, errOut)
			var doc []struct {
				LDCache *struct {
					Section string `json:"section"`
					Loaded  bool   `json:"loaded"`
					Offset  int64  `json:"offset"`
					Entries []struct {
						Name     string   `json:"name"`
						Elements []string `json:"elements"`
					} `json:"entries"`
					Error   string `json:"error"`
					Ignored string `json:"ignored"`
					Raw     string `json:"raw"`
				} `json:"ldcache"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &doc))
			require.Len(t, doc, 1)
			lc := doc[0].LDCache
			if tt.text == "" {
				assert.Nil(t, lc)
				return
			}
			require.NotNil(t, lc)
			assert.Equal(t, ".note.nixos.ldcache", lc.Section)
			assert.Equal(t, tt.loaded, lc.Loaded)
			assert.Positive(t, lc.Offset)
			assert.Equal(t, tt.ignored, lc.Ignored)
			assert.Equal(t, tt.error, lc.Error != "")
			assert.Equal(t, tt.error, lc.Raw != "")
			var entries map[string][]string
			for _, e := range lc.Entries {
				if entries == nil {
					entries = map[string][]string{}
				}
				entries[e.Name] = e.Elements
			}
			assert.Equal(t, tt.entries, entries)
		})
	}
}

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// fixtureBintools writes a $NIX_BINTOOLS for a fixture's architecture
// below dir: the loader its programs run with, and a libc directory
// holding the host's (or the cross sysroot's) libc.so.6.
func fixtureBintools(t *testing.T, fx fixtures.Fixture, dir string) []string {
	t.Helper()
	loader, libc := sysLoader, "/lib/x86_64-linux-gnu/libc.so.6"
	if fx.Arch == "aarch64" {
		loader, libc = "/usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1", "/usr/aarch64-linux-gnu/lib/libc.so.6"
	}
	bt := filepath.Join(dir, "bintools")
	must(t, os.MkdirAll(filepath.Join(bt, "nix-support"), 0o755))
	must(t, os.MkdirAll(filepath.Join(dir, "glibc", "lib"), 0o755))
	must(t, os.Symlink(libc, filepath.Join(dir, "glibc", "lib", "libc.so.6")))
	must(t, os.WriteFile(filepath.Join(bt, "nix-support", "dynamic-linker"), []byte(loader+"\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(bt, "nix-support", "orig-libc"), []byte(filepath.Join(dir, "glibc")+"\n"), 0o644))
	return []string{"NIX_BINTOOLS=" + bt}
}

// treeHashes hashes every regular file below dir.
func treeHashes(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	must(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		out[p] = sha256.Sum256(b)
		return err
	}))
	return out
}

// dynTags lists which of DT_RUNPATH and DT_RPATH a file has.
func dynTags(t *testing.T, path string) (runpath, rpath []string) {
	t.Helper()
	f, err := elf.Open(path)
	must(t, err)
	defer f.Close()
	runpath, _ = f.DynString(elf.DT_RUNPATH)
	rpath, _ = f.DynString(elf.DT_RPATH)
	return runpath, rpath
}

// unknownNixOSNote is eu-elflint's line for the resolution note, a note
// type it does not know: no defect of the layout.
var unknownNixOSNote = regexp.MustCompile(`^(phdr\[\d+\]|section \[\d+\] '[^']*'): unknown object file note type \d+ with owner name 'NixOS' at offset \d+$`)

// elflintClean fails the test when eu-elflint --gnu-ld reports anything
// about path but the resolution note.
func elflintClean(t *testing.T, path string) {
	t.Helper()
	out, err := exec.Command("eu-elflint", "--gnu-ld", path).CombinedOutput()
	if err == nil {
		return
	}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l = strings.TrimSpace(l); l != "" && l != path+":" && !unknownNixOSNote.MatchString(l) {
			t.Errorf("eu-elflint %s: %s", path, l)
		}
	}
}

// TestPatchelfFlags: the patchelf options packages pass to auto-patchelf
// (--extra-args; the hook's patchelfFlags reach the same --patchelf-flag)
// are honoured on real fixtures, which then run, or refused with one line
// and exit 2, the tree left as it was.
func TestPatchelfFlags(t *testing.T) {
	oldRunpath := []byte(fixtures.OldRunpath)
	files := func(fx fixtures.Fixture) []string { return []string{fx.Exe, filepath.Join(fx.LibDir, "libfoo.so")} }
	for _, tc := range []struct {
		name, fixture string
		args          []string // after the command; {dir} is the fixture's copy
		err           string   // the one line of a refusal; "" for success
		check         func(t *testing.T, fx fixtures.Fixture)
	}{
		{name: "--force-rpath writes DT_RPATH", fixture: "bfd-pie",
			args: []string{"auto-patchelf", "--paths", "{dir}", "--libs", "{dir}/lib", "--extra-args", "--force-rpath"},
			check: func(t *testing.T, fx fixtures.Fixture) {
				for _, p := range files(fx) {
					runpath, rpath := dynTags(t, p)
					if len(runpath) != 0 || len(rpath) != 1 || !strings.HasSuffix(rpath[0], fx.LibDir) {
						t.Errorf("%s: DT_RUNPATH %q, DT_RPATH %q; want only DT_RPATH ending in %s", p, runpath, rpath, fx.LibDir)
					}
					if out, _ := fixtures.Readelf(t, p); strings.Contains(out, "NixOS") {
						t.Errorf("%s: a resolution note beside DT_RPATH", p)
					}
				}
			}},
		{name: "the main job's --force-rpath", fixture: "bfd-nopie",
			args: []string{"--search", "{dir}/lib", "--force-rpath", "{dir}"},
			check: func(t *testing.T, fx fixtures.Fixture) {
				if runpath, rpath := dynTags(t, fx.Exe); len(runpath) != 0 || len(rpath) != 1 {
					t.Errorf("DT_RUNPATH %q, DT_RPATH %q; want only DT_RPATH", runpath, rpath)
				}
			}},
		{name: "--no-clobber-old-sections keeps the old bytes", fixture: "lld-pie",
			args: []string{"auto-patchelf", "--paths", "{dir}", "--libs", "{dir}/lib", "--extra-args", "--no-clobber-old-sections"},
			check: func(t *testing.T, fx fixtures.Fixture) {
				for _, p := range files(fx) {
					b, err := os.ReadFile(p)
					must(t, err)
					if !bytes.Contains(b, oldRunpath) {
						t.Errorf("%s: the old RUNPATH's bytes were cleared", p)
					}
				}
			}},
		{name: "the control: without it they are cleared", fixture: "lld-pie",
			args: []string{"auto-patchelf", "--paths", "{dir}", "--libs", "{dir}/lib"},
			check: func(t *testing.T, fx fixtures.Fixture) {
				for _, p := range files(fx) {
					b, err := os.ReadFile(p)
					must(t, err)
					if bytes.Contains(b, oldRunpath) {
						t.Errorf("%s: the old RUNPATH's bytes are left", p)
					}
				}
			}},
		{name: "--page-size 65536 on aarch64", fixture: "aarch64-bfd-pie",
			args:  []string{"auto-patchelf", "--paths", "{dir}", "--libs", "{dir}/lib", "--extra-args", "--page-size", "65536"},
			check: func(t *testing.T, fx fixtures.Fixture) { checkPageSize(t, fx, 65536, true) }},
		{name: "--page-size 4096 on aarch64, with the others", fixture: "aarch64-bfd-pie",
			args: []string{"auto-patchelf", "--paths", "{dir}", "--libs", "{dir}/lib", "--extra-args", "--force-rpath", "--page-size", "4096", "--no-clobber-old-sections"},
			check: func(t *testing.T, fx fixtures.Fixture) {
				// No note beside DT_RPATH: a segment may or may not be added.
				checkPageSize(t, fx, 4096, false)
				if _, rpath := dynTags(t, fx.Exe); len(rpath) != 1 {
					t.Errorf("DT_RPATH %q", rpath)
				}
			}},
		{name: "--page-size 4096 on x86_64", fixture: "bfd-pie",
			args:  []string{"auto-patchelf", "--paths", "{dir}", "--libs", "{dir}/lib", "--extra-args", "--page-size", "4096"},
			check: func(t *testing.T, fx fixtures.Fixture) { checkPageSize(t, fx, 4096, true) }},
		{name: "--page-size 65536 on x86_64 is refused", fixture: "bfd-pie",
			args: []string{"auto-patchelf", "--paths", "{dir}", "--libs", "{dir}/lib", "--extra-args", "--page-size", "65536"},
			err:  "cudapatch: page size 65536 is larger than the 4096 that segments added to EM_X86_64 files are aligned to (the largest page size of that machine's kernels)"},
		{name: "an option cudapatch does not take", fixture: "bfd-pie",
			args: []string{"auto-patchelf", "--paths", "{dir}", "--libs", "{dir}/lib", "--extra-args", "--set-rpath", "/x"},
			err:  `cudapatch: patchelf option "--set-rpath" (patchelfFlags, --extra-args) is not supported: cudapatch makes every edit itself and honours only --force-rpath, --no-clobber-old-sections and --page-size N`},
		{name: "a word that is no option", fixture: "bfd-pie",
			args: []string{"--search", "{dir}/lib", "--patchelf-flag", "--force-rpath", "--patchelf-flag", "{dir}/bin/main", "{dir}"},
			err:  `cudapatch: patchelf option "{dir}/bin/main" (patchelfFlags, --extra-args) is not supported: cudapatch makes every edit itself and honours only --force-rpath, --no-clobber-old-sections and --page-size N`},
		{name: "patchelf's spelling only", fixture: "bfd-pie",
			args: []string{"auto-patchelf", "--paths", "{dir}", "--extra-args", "--page-size=4096"},
			err:  `cudapatch: patchelf option "--page-size=4096" (patchelfFlags, --extra-args) is not supported: cudapatch makes every edit itself and honours only --force-rpath, --no-clobber-old-sections and --page-size N`},
		{name: "a page size that is no power of two", fixture: "bfd-pie",
			args: []string{"auto-patchelf", "--paths", "{dir}", "--extra-args", "--page-size", "12288"},
			err:  `cudapatch: patchelf option --page-size "12288" (patchelfFlags, --extra-args): want a power of two`},
		{name: "--page-size without its value", fixture: "bfd-pie",
			args: []string{"auto-patchelf", "--paths", "{dir}", "--extra-args", "--force-rpath", "--page-size"},
			err:  "cudapatch: patchelf option --page-size (patchelfFlags, --extra-args) has no value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := fixtures.ByName(t, tc.fixture).Copy(t)
			env := fixtureBintools(t, fx, t.TempDir())
			before := treeHashes(t, fx.Dir)
			args := []string{"cudapatch"}
			for _, a := range tc.args {
				args = append(args, strings.ReplaceAll(a, "{dir}", fx.Dir))
			}
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), args, &stdout, &stderr, env)
			if tc.err != "" {
				if want := strings.ReplaceAll(tc.err, "{dir}", fx.Dir) + "\n"; code != exitUsage || stderr.String() != want {
					t.Errorf("exit %d, stderr\n%s\nwant exit %d and\n%s", code, stderr.String(), exitUsage, want)
				}
				for p, h := range treeHashes(t, fx.Dir) {
					if before[p] != h {
						t.Errorf("%s was written", p)
					}
				}
				return
			}
			if code != 0 {
				t.Fatalf("exit %d\n%s", code, stderr.String())
			}
			if out, err := fx.Run(t, fx.Exe); err != nil || out != fx.Want+"\n" {
				t.Errorf("%s: %q, %v; want %q", fx.Exe, out, err, fx.Want)
			}
			for _, p := range files(fx) {
				ps, err := elfedit.VerifyFile(p)
				must(t, err)
				for _, pr := range ps {
					t.Errorf("%s: %s: %s", p, pr.Rule, pr.Msg)
				}
			}
			tc.check(t, fx)
		})
	}
}

// checkPageSize checks that every segment of each file is aligned for
// pages of size bytes, that the main job added one where added says so
// (a resolution note takes the region layout), and that eu-elflint
// accepts the result.
func checkPageSize(t *testing.T, fx fixtures.Fixture, size uint64, added bool) {
	t.Helper()
	pristine := fixtures.ByName(t, fx.Name)
	for _, p := range []string{"bin/main", "lib/libfoo.so"} {
		loads := func(path string) (n int) {
			f, err := elf.Open(path)
			must(t, err)
			defer f.Close()
			for i, ph := range f.Progs {
				if ph.Type != elf.PT_LOAD {
					continue
				}
				n++
				if ph.Align < size || ph.Align%size != 0 || ph.Vaddr%size != ph.Off%size {
					t.Errorf("%s: PT_LOAD %d: p_align 0x%x, p_vaddr 0x%x, p_offset 0x%x: not aligned for pages of 0x%x", path, i, ph.Align, ph.Vaddr, ph.Off, size)
				}
			}
			return n
		}
		if after, before := loads(filepath.Join(fx.Dir, p)), loads(filepath.Join(pristine.Dir, p)); added && after <= before {
			t.Errorf("%s: %d PT_LOAD before, %d after: no segment added, so the page size was not put to the test", p, before, after)
		}
		if fx.ElflintClean {
			elflintClean(t, filepath.Join(fx.Dir, p))
		}
	}
}

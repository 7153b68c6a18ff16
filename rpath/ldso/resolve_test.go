package ldso_test

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/ldso"
)

const (
	leafSrc = "int leaf(void) { return 1; }\n"
	mainSrc = "int main(void) { return 0; }\n"
)

// fixtures builds, under dir, executables and libraries that exercise each
// search rule. Names are relative to dir.
func fixtures(t *testing.T, dir string) {
	p := func(s string) string { return filepath.Join(dir, s) }
	so := func(out, soname string, args ...string) {
		a := []string{"-shared", "-nostdlib"}
		if soname != "" {
			a = append(a, "-Wl,-soname,"+soname)
		}
		cc(t, p(out), leafSrc, append(a, args...)...)
	}
	exe := func(out string, args ...string) {
		cc(t, p(out), mainSrc, append([]string{"-Wl,--no-as-needed"}, args...)...)
	}
	rpath := func(dirs string) string { return "-Wl,--disable-new-dtags,-rpath," + dirs }
	runpath := func(dirs string) string { return "-Wl,--enable-new-dtags,-rpath," + dirs }

	so("a/libx.so", "libx.so")
	so("c/libx.so", "libx.so")
	so("b/liby.so", "liby.so", "-Wl,--no-as-needed", "-L"+p("a"), "-lx")
	so("d/libz.so", "libz.so", "-Wl,--no-as-needed", "-L"+p("a"), "-lx", runpath(p("c")))

	exe("bin/exe_rpath", "-L"+p("b"), "-ly", rpath(p("b")+":"+p("a")))
	exe("bin/exe_runpath", "-L"+p("b"), "-ly", runpath(p("b")+":"+p("a")))
	exe("bin/exe_rpath_runpath_lib", "-L"+p("d"), "-lz", rpath(p("d")+":"+p("a")))

	// $ORIGIN, ${ORIGIN}, $LIB, $PLATFORM.
	so("o/lib/libp.so", "libp.so")
	so("o/lib/libo.so", "libo.so", "-Wl,--no-as-needed", "-L"+p("o/lib"), "-lp", runpath("${ORIGIN}"))
	exe("o/bin/exe_origin", "-L"+p("o/lib"), "-lo", runpath("$ORIGIN/../lib"))
	so("o/lib/x86_64-linux-gnu/libq.so", "libq.so")
	so("o/lib64/libq.so", "libq.so")
	// $PLATFORM is not always x86_64 (glibc names some Intel CPUs).
	plat := hostConfig(t).Platform
	so("o/"+plat+"/libr.so", "libr.so")
	exe("o/bin/exe_dst", "-L"+p("o/lib64"), "-lq", "-L"+p("o/"+plat), "-lr",
		runpath("$ORIGIN/../$LIB:$ORIGIN/../${PLATFORM}:$ORIGIN/../$UNKNOWN"))

	// Wrong class and wrong machine candidates are skipped.
	cc(t, p("w32/libx.so"), leafSrc, "-m32", "-shared", "-nostdlib", "-Wl,-soname,libx.so")
	so("wm/libx.so", "libx.so")
	setMachine(t, p("wm/libx.so"), elf.EM_AARCH64)
	exe("bin/exe_wrong", "-L"+p("a"), "-lx", runpath(p("w32")+":"+p("wm")+":"+p("a")))

	// DF_1_NODEFLIB: libc is in the cache and the default directories only.
	exe("bin/exe_nodeflib", "-L"+p("a"), "-lx", runpath(p("a")), "-Wl,-z,nodefaultlib")

	// glibc-hwcaps subdirectories come first in each directory.
	so("h/libx.so", "libx.so")
	so("h/glibc-hwcaps/x86-64-v2/libx.so", "libx.so")
	exe("bin/exe_hwcaps", "-L"+p("a"), "-lx", runpath(p("h")))

	// An empty RUNPATH element is the current directory.
	exe("bin/exe_cwd", "-L"+p("a"), "-lx", runpath(":"))

	// Already loaded: by SONAME (u/libv.so is a copy whose SONAME is
	// libv.so.7) and by file (a/libx2.so is a link to libx.so).
	so("u/libv.so.7", "libv.so.7")
	so("stub/libv.so", "")
	so("u/libw.so", "libw.so", "-Wl,--no-as-needed", "-L"+p("u"), "-l:libv.so.7", runpath(p("u")))
	copyFile(t, p("u/libv.so.7"), p("u/libv.so"))
	exe("bin/exe_soname", "-L"+p("stub"), "-lv", "-L"+p("u"), "-lw", runpath(p("u")))
	so("stub/libx2.so", "")
	exe("bin/exe_samefile", "-L"+p("a"), "-lx", "-L"+p("stub"), "-lx2", runpath(p("a")))
	require.NoError(t, os.Symlink("libx.so", p("a/libx2.so")))

	// A DT_NEEDED with a '/' is opened as is.
	so("abs/libabs.so", "")
	exe("bin/exe_abs", p("abs/libabs.so"))
}

func setMachine(t *testing.T, path string, m elf.Machine) {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	binary.LittleEndian.PutUint16(b[18:], uint16(m))
	require.NoError(t, os.WriteFile(path, b, 0o755))
}

func copyFile(t *testing.T, from, to string) {
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, b, 0o755))
}

// want is one expected need: name => path (relative to the fixture dir
// unless absolute; "" for not found), step, and the RPATH owner.
type want struct {
	name, path string
	step       ldso.Step
	owner      string
	dup        bool
}

func TestResolveFixtures(t *testing.T) {
	dir := t.TempDir()
	dir, err := filepath.EvalSymlinks(dir)
	require.NoError(t, err)
	fixtures(t, dir)
	host := hostConfig(t)
	libc := "/lib/x86_64-linux-gnu/libc.so.6"
	if p, ok := host.Cache.LookupHwcaps("libc.so.6", elf.ELFCLASS64, elf.EM_X86_64, host.Hwcaps); ok {
		libc = p
	}
	hw := "h/libx.so"
	if slices.Contains(host.Hwcaps, "x86-64-v2") {
		hw = "h/glibc-hwcaps/x86-64-v2/libx.so"
	}

	tests := []struct {
		name  string
		exe   string
		llp   string
		wd    string
		wants []want
	}{
		{"rpath is inherited", "bin/exe_rpath", "", "", []want{
			{"liby.so", "b/liby.so", ldso.StepRPath, "bin/exe_rpath", false},
			{"libc.so.6", libc, ldso.StepCache, "", false},
			{"libx.so", "a/libx.so", ldso.StepRPath, "bin/exe_rpath", false},
		}},
		{"runpath is not inherited", "bin/exe_runpath", "", "", []want{
			{"liby.so", "b/liby.so", ldso.StepRunPath, "", false},
			{"libc.so.6", libc, ldso.StepCache, "", false},
			{"libx.so", "", "", "", false},
		}},
		{"rpath beats LD_LIBRARY_PATH", "bin/exe_rpath", "c", "", []want{
			{"liby.so", "b/liby.so", ldso.StepRPath, "bin/exe_rpath", false},
			{"libc.so.6", libc, ldso.StepCache, "", false},
			{"libx.so", "a/libx.so", ldso.StepRPath, "bin/exe_rpath", false},
		}},
		{"LD_LIBRARY_PATH beats runpath", "bin/exe_runpath", "c;b", "", []want{
			{"liby.so", "b/liby.so", ldso.StepLDLibraryPath, "", false},
			{"libc.so.6", libc, ldso.StepCache, "", false},
			{"libx.so", "c/libx.so", ldso.StepLDLibraryPath, "", false},
		}},
		{"a runpath stops the rpath chain", "bin/exe_rpath_runpath_lib", "", "", []want{
			{"libz.so", "d/libz.so", ldso.StepRPath, "bin/exe_rpath_runpath_lib", false},
			{"libc.so.6", libc, ldso.StepCache, "", false},
			{"libx.so", "c/libx.so", ldso.StepRunPath, "", false},
		}},
		{"origin", "o/bin/exe_origin", "", "", []want{
			{"libo.so", "o/bin/../lib/libo.so", ldso.StepRunPath, "", false},
			{"libc.so.6", libc, ldso.StepCache, "", false},
			{"libp.so", "o/bin/../lib/libp.so", ldso.StepRunPath, "", false},
		}},
		{"lib and platform", "o/bin/exe_dst", "", "", []want{
			{"libq.so", "o/bin/../" + host.Lib + "/libq.so", ldso.StepRunPath, "", false},
			{"libr.so", "o/bin/../" + host.Platform + "/libr.so", ldso.StepRunPath, "", false},
			{"libc.so.6", libc, ldso.StepCache, "", false},
		}},
		{"wrong class and machine skipped", "bin/exe_wrong", "", "", []want{
			{"libx.so", "a/libx.so", ldso.StepRunPath, "", false},
			{"libc.so.6", libc, ldso.StepCache, "", false},
		}},
		{"nodeflib", "bin/exe_nodeflib", "", "", []want{
			{"libx.so", "a/libx.so", ldso.StepRunPath, "", false},
			{"libc.so.6", "", "", "", false},
		}},
		{"hwcaps", "bin/exe_hwcaps", "", "", []want{
			{"libx.so", hw, ldso.StepRunPath, "", false},
			{"libc.so.6", libc, ldso.StepCache, "", false},
		}},
		{"empty runpath element is cwd", "bin/exe_cwd", "", "a", []want{
			{"libx.so", "libx.so", ldso.StepRunPath, "", false},
			{"libc.so.6", libc, ldso.StepCache, "", false},
		}},
		{"already loaded by soname", "bin/exe_soname", "", "", []want{
			{"libv.so", "u/libv.so", ldso.StepRunPath, "", false},
			{"libw.so", "u/libw.so", ldso.StepRunPath, "", false},
			{"libc.so.6", libc, ldso.StepCache, "", false},
			{"libv.so.7", "u/libv.so", ldso.StepLoaded, "", true},
		}},
		{"already loaded by file", "bin/exe_samefile", "", "", []want{
			{"libx.so", "a/libx.so", ldso.StepRunPath, "", false},
			{"libx2.so", "a/libx.so", ldso.StepRunPath, "", true},
			{"libc.so.6", libc, ldso.StepCache, "", false},
		}},
		{"absolute", "bin/exe_abs", "", "", []want{
			{filepath.Join(dir, "abs/libabs.so"), "abs/libabs.so", ldso.StepAbsolute, "", false},
			{"libc.so.6", libc, ldso.StepCache, "", false},
		}},
	}
	abs := func(s string) string {
		if s == "" || filepath.IsAbs(s) {
			return s
		}
		return filepath.Join(dir, s)
	}
	// filepath.Join cleans; ld.so does not, so build "$ORIGIN/.." paths by hand.
	raw := func(s string) string {
		if s == "" || filepath.IsAbs(s) || s == "libx.so" {
			return s
		}
		return dir + "/" + s
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := host
			var env []string
			if tt.llp != "" {
				var parts []string
				for _, d := range bytes.FieldsFunc([]byte(tt.llp), func(r rune) bool { return r == ';' }) {
					parts = append(parts, abs(string(d)))
				}
				cfg.LDLibraryPath = joinSemi(parts)
				env = append(env, "LD_LIBRARY_PATH="+cfg.LDLibraryPath)
			}
			wd := dir
			if tt.wd != "" {
				wd = abs(tt.wd)
				cfg.WorkDir = wd
			}
			exe := abs(tt.exe)
			tr, err := ldso.Resolve(cfg, readELF, exe)
			require.NoError(t, err)

			var got []want
			for _, n := range tr.Needs {
				w := want{n.Name, n.Path, n.Step, n.RPathOwner, n.AlreadyLoaded}
				if n.Step == ldso.StepInterp {
					continue
				}
				got = append(got, w)
			}
			var exp []want
			for _, w := range tt.wants {
				w.path, w.owner = raw(w.path), abs(w.owner)
				exp = append(exp, w)
			}
			assert.Equal(t, exp, got)

			// The real loader agrees.
			pairs, _, ok := ldList(t, wd, exe, env...)
			require.True(t, ok)
			assert.Equal(t, pairs, resolvedPairs(tr))

			var buf bytes.Buffer
			require.NoError(t, tr.Format(&buf))
			assert.Contains(t, buf.String(), tt.wants[0].name)
		})
	}
}

func joinSemi(parts []string) string {
	var b bytes.Buffer
	for i, p := range parts {
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteString(p)
	}
	return b.String()
}

package main

import (
	"bytes"
	"debug/elf"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

// autoPatchelfPy, when set, makes TestAutoPatchelfGolden run nixpkgs'
// auto-patchelf.py found there on each case and rewrite the golden files
// from what it printed and wrote (scripts/autopatchelf-goldens.sh).
var autoPatchelfPy = flag.String("autopatchelf-py", "", "regenerate testdata/autopatchelf from this auto-patchelf.py")

// goldenProvenance heads every golden file.
const goldenProvenance = `# Produced by scripts/autopatchelf-goldens.sh: nixpkgs' auto-patchelf.py
# (NixOS/nixpkgs@dd274979294e76a0a7950cd461267e763df120e9, PR #551485) run
# with /usr/bin/python3 3.11, python3-pyelftools 0.29 and patchelf 0.14.3
# (Debian 12) on the fixtures of TestAutoPatchelfGolden; "relative-rpaths"
# then applies nixpkgs PR #534339's relative rewrite (see the script).
# {root} is the test's directory. Do not edit: regenerate.
`

// goldenCase is one run of auto-patchelf, by both tools, on the same tree.
type goldenCase struct {
	name  string
	build func(c *cliTree)
	args  []string // auto-patchelf's command line ({root} expanded)
	ours  []string // cudapatch's own flags, appended for cudapatch only
	env   []string
	// relativeStore: compare RUNPATHs after nixpkgs PR #534339's rewrite
	// (store entries relative to each file), cudapatch given
	// --relative-rpaths; its events are not compared.
	relativeStore bool
	// failing: auto-patchelf has written files when it fails, cudapatch
	// writes nothing then; only the events and the exit status compare.
	failing bool
}

var goldenCases = []goldenCase{
	{
		name: "structured",
		build: func(c *cliTree) {
			c.place("out/bin/app", cExe("/old", "libdep.so", "libl.so", "libc.so.6", "libmissing.so.3", "libcuda.so.1"))
			c.place("out/bin/x/static", cfix.Spec{Static: true})
			c.write("out/bin/x/README", "not ELF\n")
			c.place("out/lib/libl.so", cLib("libl.so", "libdep.so"))
			c.place("out/lib/z/libarm.so", cfix.Spec{Arch: "aarch64", Soname: "libarm.so"})
			c.place("deps/lib/libdep.so", cLib("libdep.so"))
		},
		args: []string{"--ignore-missing", "libmissing.so.*", "libcuda.so.1", "--paths", "{root}/out/bin", "{root}/out/lib",
			"--libs", "{root}/deps/lib", "--runtime-dependencies", "/nix/store/rt-libGL/lib", "--append-rpaths", "$ORIGIN/", "--structured-logs"},
	},
	{
		name: "relative-paths",
		build: func(c *cliTree) {
			c.place("usr/bin/tool", cExe("", "libdep.so", "libc.so.6"))
			c.place("deps/lib/libdep.so", cLib("libdep.so"))
		},
		args: []string{"--paths", "./usr//bin/tool", "--libs", "deps/lib", "--structured-logs"},
	},
	{
		name: "relativize-rpath",
		build: func(c *cliTree) {
			c.place("out/lib/libbaz.so", cLib("libbaz.so", "libfoo.so", "libdep.so"))
			c.place("out/lib/libs/libfoo.so", cLib("libfoo.so"))
			c.place("deps/libdep.so", cLib("libdep.so"))
		},
		args: []string{"--paths", "{root}/out", "--libs", "{root}/deps", "--relativize-rpath",
			"--append-rpaths", "{root}/out/lib/plugins", "{root}/out", "/opt/lib", "--structured-logs"},
	},
	{
		name: "preserve-origin",
		build: func(c *cliTree) {
			c.place("out/bin/app", cExe("/old:$ORIGIN/../lib:$ORIGIN/../plugins", "libl.so", "libdep.so"))
			c.place("out/lib/libl.so", cLib("libl.so"))
			c.place("deps/libdep.so", cLib("libdep.so"))
			c.write("out/plugins/.keep", "")
		},
		args: []string{"--paths", "{root}/out/bin", "{root}/out/lib", "--libs", "{root}/deps", "--preserve-origin",
			"--append-rpaths", "/z", "--structured-logs"},
	},
	{
		name: "missing",
		build: func(c *cliTree) {
			c.place("out/bin/app", cExe("", "libx.so.1", "liby.so"))
			c.place("out/lib/libz.so", cLib("libz.so", "libx.so.1"))
		},
		args:    []string{"--ignore-missing", "liby.so", "--paths", "{root}/out/bin", "{root}/out/lib", "--structured-logs"},
		failing: true,
	},
	{
		name: "relative-rpaths",
		build: func(c *cliTree) {
			c.place("nix/store/hhh-foo/lib/libfoo.so", cLib("libfoo.so"))
			c.place("nix/store/iii-bar/lib/libbar.so", cLib("libbar.so"))
			c.place("nix/store/jjj-app/libexec/lib-check", cExe("", "libfoo.so", "libbar.so", "libown.so"))
			c.place("nix/store/jjj-app/libexec/lib/libown.so", cLib("libown.so", "libfoo.so"))
			c.place("opt/lib/libother.so", cLib("libother.so"))
			c.place("nix/store/jjj-app/libexec/lib/x/libuser.so", cLib("libuser.so", "libother.so"))
		},
		args: []string{"--paths", "{root}/nix/store/jjj-app", "--libs", "{root}/nix/store/hhh-foo/lib", "{root}/nix/store/iii-bar/lib", "{root}/opt/lib",
			"--append-rpaths", "{root}/nix/store/jjj-app/share"},
		env:           []string{"NIX_STORE={root}/nix/store"},
		relativeStore: true,
	},
}

// TestAutoPatchelfGolden: `cudapatch auto-patchelf` against the real
// auto-patchelf.py, on the same trees: the --structured-logs lines
// byte for byte, the exit status, and the interpreter, RUNPATH and RPATH
// of every ELF file afterwards. cudapatch runs with --driver-link-for
// none, so that it writes what auto-patchelf alone writes.
//
// The fixtures are laid out so that the order of files is the same for
// both: auto-patchelf walks in directory-listing order (a directory's own
// files, then its subdirectories), cudapatch in sorted order.
func TestAutoPatchelfGolden(t *testing.T) {
	for _, gc := range goldenCases {
		t.Run(gc.name, func(t *testing.T) {
			path := filepath.Join("testdata", "autopatchelf", gc.name+".golden")
			if *autoPatchelfPy != "" {
				want := runReference(t, gc)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(goldenProvenance+want), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (regenerate: bash scripts/autopatchelf-goldens.sh PATH/TO/auto-patchelf.py)", err)
			}
			want := strings.TrimPrefix(string(b), goldenProvenance)
			if got := runOurs(t, gc); got != want {
				t.Errorf("%s differs from auto-patchelf's:\n--- got\n%s--- want\n%s", path, got, want)
			}
		})
	}
}

// goldenTree builds a case's tree and the $NIX_BINTOOLS both tools read.
func goldenTree(t *testing.T, gc goldenCase) (*cliTree, []string) {
	c := newCLITree(t)
	var env []string
	for _, e := range append(c.bintools(), gc.env...) {
		env = append(env, c.x(e))
	}
	gc.build(c)
	return c, env
}

// runOurs runs `cudapatch auto-patchelf` in-process, from the tree's root.
func runOurs(t *testing.T, gc goldenCase) string {
	c, env := goldenTree(t, gc)
	t.Chdir(c.root)
	args := append([]string{"auto-patchelf"}, gc.args...)
	if gc.relativeStore {
		args = append(args, "--relative-rpaths")
	}
	args = append(args, "--driver-link-for", "none")
	code, stdout, stderr := c.runCLI(env, args...)
	if code != 0 && !gc.failing {
		t.Logf("stderr:\n%s", stderr)
	}
	return goldenRecord(t, c, gc, code, stdout)
}

// runReference runs auto-patchelf.py (with Debian's patchelf) from the
// tree's root, then for relativeStore the relative rewrite.
func runReference(t *testing.T, gc goldenCase) string {
	c, env := goldenTree(t, gc)
	var args []string
	for _, a := range gc.args {
		args = append(args, c.x(a))
	}
	cmd := exec.Command("/usr/bin/python3", append([]string{*autoPatchelfPy}, args...)...)
	cmd.Dir = c.root
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	t.Logf("auto-patchelf.py: exit %d\nstderr:\n%s", code, stderr.String())
	if gc.relativeStore {
		relativeRewrite(t, c, c.p("nix/store"))
	}
	return goldenRecord(t, c, gc, code, stdout.String())
}

// relativeRewrite is nixpkgs PR #534339's relative RUNPATH rewrite, as its
// patchelf setup hook does it for patchelfRelativeRpaths (the hook of
// autoPatchelfRelativeRpaths, whose Python text was not available, is
// described in that PR as the same rule): in every ELF file below the
// store, each RUNPATH entry below the store becomes
// "$ORIGIN/" + `realpath -m --relative-to=<file's directory> <entry>`.
func relativeRewrite(t *testing.T, c *cliTree, store string) {
	const script = `store=$1; shift
for f in "$@"; do
  rp=$(patchelf --print-rpath "$f") || continue
  [ -n "$rp" ] || continue
  new=
  IFS=: read -r -a entries <<< "$rp"
  for e in "${entries[@]}"; do
    if [[ $f == "$store"/* && $e == "$store"/* ]]; then
      e='$ORIGIN/'$(realpath -m --relative-to="$(dirname "$f")" "$e")
    fi
    new=${new:+$new:}$e
  done
  [ "$new" = "$rp" ] || patchelf --set-rpath "$new" "$f"
done`
	args := []string{"-c", script, "rewrite", store}
	for _, rel := range elfFiles(t, c) {
		args = append(args, c.p(rel))
	}
	if out, err := exec.Command("bash", args...).CombinedOutput(); err != nil {
		t.Fatalf("relative rewrite: %v\n%s", err, out)
	}
}

// elfFiles lists the regular ELF files of the tree, sorted, relative.
func elfFiles(t *testing.T, c *cliTree) []string {
	var out []string
	err := filepath.WalkDir(c.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || strings.HasPrefix(p, c.p("bintools")) || strings.HasPrefix(p, c.p("glibc")) {
			return err
		}
		if f, err := elf.Open(p); err == nil {
			f.Close()
			rel, _ := filepath.Rel(c.root, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// goldenRecord is what a golden file holds after its header: the exit
// status, the events (not for relativeStore), and each ELF file's state.
func goldenRecord(t *testing.T, c *cliTree, gc goldenCase, code int, stdout string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "$ auto-patchelf %s\nexit %d\n", strings.Join(gc.args, " "), code)
	if !gc.relativeStore {
		b.WriteString("stdout:\n")
		b.WriteString(strings.ReplaceAll(stdout, c.root, "{root}"))
	}
	if gc.failing {
		return b.String()
	}
	b.WriteString("files:\n")
	for _, rel := range elfFiles(t, c) {
		f, err := elf.Open(c.p(rel))
		if err != nil {
			t.Fatal(err)
		}
		interp := ""
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				buf := make([]byte, p.Filesz)
				p.ReadAt(buf, 0)
				interp = strings.TrimRight(string(buf), "\x00")
			}
		}
		runpath, _ := f.DynString(elf.DT_RUNPATH)
		rpath, _ := f.DynString(elf.DT_RPATH)
		f.Close()
		fmt.Fprintf(&b, "%s interp=%q runpath=%q rpath=%q\n", rel, interp, strings.ReplaceAll(strings.Join(runpath, "|"), c.root, "{root}"),
			strings.ReplaceAll(strings.Join(rpath, "|"), c.root, "{root}"))
	}
	return b.String()
}

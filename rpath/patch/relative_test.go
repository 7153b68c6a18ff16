package patch_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/policy"
	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

// Sources of the relocatable package: a program that needs two libraries
// of other store paths (nixpkgs' test auto-patchelf-hook-relative-rpaths),
// and a bundle whose library needs another one in a subdirectory of the
// same output (auto-patchelf-hook-relativize-rpath).
const (
	srcFooLib = "int foo(void) { return 40; }\n"
	srcBarLib = "int bar(void) { return 2; }\n"
	srcCheck  = `#include <stdio.h>
int foo(void);
int bar(void);
int main(void) { printf("foo+bar=%d\n", foo() + bar()); return 0; }
`
	srcBaz      = "int foo(void);\nint baz(void) { return foo() + 2; }\n"
	srcDlopener = `#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) { printf("%s\n", dlerror()); return 1; }
	int (*baz)(void) = (int (*)(void))dlsym(h, "baz");
	printf("baz=%d\n", baz());
	return 0;
}
`
)

// cachelessLoader copies the host's dynamic loader with the path of its
// cache changed to one that does not exist, so that a program whose
// PT_INTERP names the copy can be run directly (not through the loader:
// run as "ld.so prog", $ORIGIN is the directory of the path given, not of
// the real file) with only RUNPATHs deciding.
func cachelessLoader(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(hostLoader)
	if err != nil {
		t.Fatalf("this test runs x86_64 glibc programs: %v", err)
	}
	const cache, none = "/etc/ld.so.cache", "/nonexistent/lsc"
	if n := bytes.Count(b, []byte(cache)); n == 0 {
		t.Fatalf("%s does not name %s", hostLoader, cache)
	}
	b = bytes.ReplaceAll(b, []byte(cache), []byte(none))
	p := filepath.Join(t.TempDir(), "ld-nocache.so")
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// runDirect runs a program by its path, as a user would (execve of a
// symbolic link runs its target), with LD_LIBRARY_PATH and LD_PRELOAD
// removed.
func runDirect(t *testing.T, path string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = t.TempDir()
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LD_LIBRARY_PATH=") && !strings.HasPrefix(kv, "LD_PRELOAD=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

// relocatableStore lays out store/{foo,bar,app} as nixpkgs' test does:
// the program in app/libexec, a link to it in app/bin.
func relocatableStore(t *testing.T) *tree {
	tr := newTree(t)
	foo := cfix.Build(t, cfix.Spec{Soname: "libfoo.so", Source: srcFooLib})
	bar := cfix.Build(t, cfix.Spec{Soname: "libbar.so", Source: srcBarLib})
	cfix.Copy(t, foo, tr.p("store/hhh-foo/lib/libfoo.so"))
	cfix.Copy(t, bar, tr.p("store/iii-bar/lib/libbar.so"))
	tr.place("store/jjj-app/libexec/lib-check", cfix.Spec{Exe: true, Libc: true, Source: srcCheck, Link: []string{foo, bar}})
	tr.symlink("store/jjj-app/bin/lib-check", "../libexec/lib-check")
	return tr
}

// TestRuntimeRelativeRpaths: with Policy.RelativeStore the program's RUNPATH
// names its dependencies relative to its real directory, and it runs
// through a link in another directory, and after the whole store moved to
// a deeper place; without it, the moved program does not find them.
func TestRuntimeRelativeRpaths(t *testing.T) {
	loader := cachelessLoader(t)
	for _, relative := range []bool{true, false} {
		tr := relocatableStore(t)
		opts := patch.Config{
			Search: tr.ps("store/hhh-foo/lib", "store/iii-bar/lib"),
			Policy: policy.Config{Interpreter: loader},
			Libc:   hostLibcDir,
		}
		want := drv + ":{root}/store/hhh-foo/lib:{root}/store/iii-bar/lib"
		if relative {
			opts.Policy.RelativeStore = tr.p("store")
			want = drv + ":$ORIGIN/../../hhh-foo/lib:$ORIGIN/../../iii-bar/lib"
		}
		tr.mustPatch([]string{"store/jjj-app"}, opts)
		if got := tr.runpathOf("store/jjj-app/libexec/lib-check"); got != tr.x(want) {
			t.Fatalf("relative %v: RUNPATH %q, want %q", relative, got, tr.x(want))
		}
		// A link in a directory of another depth, outside the store.
		tr.symlink("elsewhere/a/b/run-me", "{root}/store/jjj-app/libexec/lib-check")
		for _, p := range []string{"store/jjj-app/libexec/lib-check", "store/jjj-app/bin/lib-check", "elsewhere/a/b/run-me"} {
			if out, err := runDirect(t, tr.p(p)); err != nil || out != "foo+bar=42" {
				t.Errorf("relative %v: %s: %v %q", relative, p, err, out)
			}
		}
		// The store moves two levels deeper; the old place is gone.
		tr.mkdir("moved/x/y")
		if err := os.Rename(tr.p("store"), tr.p("moved/x/y/store")); err != nil {
			t.Fatal(err)
		}
		tr.symlink("elsewhere/c/run-moved", "{root}/moved/x/y/store/jjj-app/libexec/lib-check")
		for _, p := range []string{"moved/x/y/store/jjj-app/bin/lib-check", "elsewhere/c/run-moved"} {
			out, err := runDirect(t, tr.p(p))
			switch {
			case relative && (err != nil || out != "foo+bar=42"):
				t.Errorf("relocated %s: %v %q", p, err, out)
			case !relative && (err == nil || !strings.Contains(out, "libfoo.so: cannot open shared object file")):
				t.Errorf("control: relocated %s with absolute RUNPATHs: %v %q; want libfoo.so not found", p, err, out)
			}
		}
	}
}

// TestRuntimeRelativizeRpath: nixpkgs' test auto-patchelf-hook-relativize-
// rpath. A bundle's libbaz.so needs libfoo.so from a subdirectory of the
// same output; with Policy.RelativizeRoot the bundle, copied anywhere, still
// loads (dlopen by path from a program elsewhere), while the dependency
// outside the output stays absolute.
func TestRuntimeRelativizeRpath(t *testing.T) {
	loader := cachelessLoader(t)
	tr := newTree(t)
	foo := cfix.Build(t, cfix.Spec{Soname: "libfoo.so", Source: srcFooLib})
	cfix.Copy(t, foo, tr.p("bundle/lib/libs/libfoo.so"))
	tr.place("bundle/lib/libbaz.so", cfix.Spec{Soname: "libbaz.so", Source: srcBaz, Link: []string{foo}})
	tr.place("tools/dlopener", cfix.Spec{Exe: true, Libc: true, Source: srcDlopener})
	tr.mustPatch([]string{"bundle"}, patch.Config{
		Policy: policy.Config{
			RelativizeRoot: true,
			DriverLinkFor:  policy.DriverLinkNone,
			Interpreter:    loader,
		},
		Libc: hostLibcDir,
	})
	if got := tr.runpathOf("bundle/lib/libbaz.so"); got != "$ORIGIN/libs" {
		t.Fatalf("libbaz.so RUNPATH %q, want $ORIGIN/libs", got)
	}
	tr.mustPatch([]string{"tools"}, patch.Config{Policy: policy.Config{DriverLinkFor: policy.DriverLinkNone, Interpreter: loader}, Libc: hostLibcDir})
	tr.mkdir("consumer/libs")
	if err := os.Rename(tr.p("bundle/lib"), tr.p("consumer/libs/baz-bundle")); err != nil {
		t.Fatal(err)
	}
	if out, err := runDirect(t, tr.p("tools/dlopener"), tr.p("consumer/libs/baz-bundle/libbaz.so")); err != nil || out != "baz=42" {
		t.Errorf("moved bundle: %v %q", err, out)
	}
}

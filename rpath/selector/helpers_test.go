package selector_test

import (
	"context"
	"github.com/cudapatch/cudapatch/rpath/nvdriver/nvdrivertest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/stretchr/testify/require"
)

// arch is a machine the selector is built for and run on: this one, or
// aarch64 under qemu-user with the cross sysroot.
type arch struct {
	name string
	cc   string
	run  []string // prefix that starts a program; nil runs it directly
}

func arches() []arch {
	return []arch{
		{name: "x86_64", cc: "gcc"},
		{name: "aarch64", cc: "aarch64-linux-gnu-gcc", run: []string{"qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"}},
	}
}

// need fails when a tool of the arch is missing (scripts/deps.sh installs
// them); the tests build and run real code, a skip would hide that.
func (a arch) need(t testing.TB) {
	t.Helper()
	if _, err := os.Stat("/lib64/ld-linux-x86-64.so.2"); err != nil {
		t.Skip("not an x86_64 glibc host")
	}
	tools := []string{a.cc}
	if a.run != nil {
		tools = append(tools, a.run[0])
	}
	for _, tool := range tools {
		_, err := exec.LookPath(tool)
		require.NoError(t, err, "the selector tests need %s (scripts/deps.sh installs it)", tool)
	}
}

// compile runs the arch's C compiler.
func (a arch) compile(t testing.TB, args ...string) {
	t.Helper()
	fixtures.Cmd(t, a.cc, args...)
}

// exec runs a program of the arch with env added to a clean environment
// (no LD_LIBRARY_PATH or LD_PRELOAD) and returns its stdout and stderr.
func (a arch) exec(t testing.TB, env []string, prog string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	argv := slices.Clone(a.run)
	for _, e := range env {
		if a.run != nil {
			argv = append(argv, "-E", e)
		}
	}
	argv = append(append(argv, prog), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(e string) bool {
		return strings.HasPrefix(e, "LD_LIBRARY_PATH=") || strings.HasPrefix(e, "LD_PRELOAD=") || strings.HasPrefix(e, "QEMU_")
	})
	if a.run == nil {
		cmd.Env = append(cmd.Env, env...)
	}
	out, err := cmd.CombinedOutput()
	require.NoError(t, ctx.Err(), "%s timed out (a deadlock?): %s", prog, out)
	return string(out), err
}

// write writes a file, making its directory.
func write(t testing.TB, path, text string) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	return path
}

// noteAsm is the forward-compatibility note as cuda_compat's libcuda
// carries it, in a section of its own (as rpath/nvdriver's tests emit it).
func noteAsm(desc string) string { return nvdrivertest.NoteAsm(desc) }

// fakeSource is a fake libcuda: it names itself through fakeWhich, carries
// a version, calls one of its own entry points from its constructor
// (which binds to the selector when the selector is in the global scope)
// and has functions with many arguments and a large struct result.
func fakeSource(which string, version int, compatOnly bool, note string) string {
	src := `#include <string.h>
#include <unistd.h>
struct fakeBig { long v[8]; };
int cuInit(unsigned flags) { return 0; }
int cuDriverGetVersion(int *v) { *v = ` + strconv.Itoa(version) + `; return 0; }
int fakeWhich(char *buf, int n) { strncpy(buf, "` + which + `", n - 1); buf[n - 1] = 0; return 0; }
double fakeSum(int a1, int a2, int a3, int a4, int a5, int a6, int a7, int a8, int a9, int a10,
	double d1, double d2, double d3, double d4, double d5, double d6, double d7, double d8, double d9, double d10) {
	return a1 * 1 + a2 * 3 + a3 * 5 + a4 * 7 + a5 * 11 + a6 * 13 + a7 * 17 + a8 * 19 + a9 * 23 + a10 * 29 +
		d1 * 31 + d2 * 37 + d3 * 41 + d4 * 43 + d5 * 47 + d6 * 53 + d7 * 59 + d8 * 61 + d9 * 67 + d10 * 71;
}
struct fakeBig fakeBig(long seed) { struct fakeBig b; for (int i = 0; i < 8; i++) b.v[i] = seed * (i + 1) + i * i; return b; }
static int ctor_saw = -1;
__attribute__((constructor)) static void ctor(void) {
	int v = 0, rc = cuDriverGetVersion(&v);
	ctor_saw = rc == 0 ? v : -rc;
	write(1, "real-ctor\n", 10);
}
int fakeCtorSaw(int *v) { *v = ctor_saw; return 0; }
`
	if compatOnly {
		src += "int fakeCompatOnly(void) { return 0; }\n"
	}
	if note != "" {
		src += noteAsm(note)
	}
	return src
}

// progSource is a program that calls the fake entry points, through its
// DT_NEEDED libcuda.so.1 or through dlopen("libcuda.so.1") and dlsym, and
// prints what answered and the libcuda files mapped.
const progSource = `#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
struct fakeBig { long v[8]; };
int cuInit(unsigned);
int cuDriverGetVersion(int *);
int fakeWhich(char *, int);
double fakeSum(int, int, int, int, int, int, int, int, int, int,
	double, double, double, double, double, double, double, double, double, double);
struct fakeBig fakeBig(long);
int fakeCtorSaw(int *);
int fakeCompatOnly(void);
#ifdef USE_DLOPEN
static void *h;
#define GET(f) ((__typeof__(&f))dlsym(h, #f))
#else
#define GET(f) (&f)
#endif
int main(void) {
#ifdef USE_DLOPEN
	h = dlopen("libcuda.so.1", RTLD_NOW);
	if (!h) {
		printf("dlopen: %s\n", dlerror());
		return 1;
	}
#endif
	int rc = GET(cuInit)(0);
	printf("cuInit=%d\n", rc);
	char buf[64] = "-";
	int w = GET(fakeWhich)(buf, sizeof buf);
	printf("which=%d %s\n", w, buf);
	int v = -1;
	w = GET(cuDriverGetVersion)(&v);
	printf("version=%d %d\n", w, v);
	printf("compatOnly=%d\n", GET(fakeCompatOnly)());
	v = -1;
	w = GET(fakeCtorSaw)(&v);
	printf("ctorSaw=%d %d\n", w, v);
	if (rc == 0) {
		double s = GET(fakeSum)(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5);
		printf("sum=%s\n", s == 3863.0 ? "ok" : "bad");
		struct fakeBig b = GET(fakeBig)(7);
		int ok = 1;
		for (int i = 0; i < 8; i++)
			ok &= b.v[i] == 7L * (i + 1) + i * i;
		printf("big=%s\n", ok ? "ok" : "bad");
	}
	/* A later dlopen by name, after the real library is loaded with the
	 * same SONAME, still gets the selector. */
	void *again = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	Dl_info info;
	if (again && dladdr(dlsym(again, "cuInit"), &info))
		printf("again=%s\n", info.dli_fname);
	FILE *m = fopen("/proc/self/maps", "r");
	char line[4096], seen[8][1024];
	int n = 0;
	while (m && fgets(line, sizeof line, m)) {
		char *p = strchr(line, '/');
		if (!p || !strstr(p, "/libcuda.so"))
			continue;
		p[strcspn(p, "\n")] = 0;
		int dup = 0;
		for (int i = 0; i < n; i++)
			dup |= strcmp(seen[i], p) == 0;
		if (!dup && n < 8) {
			snprintf(seen[n++], sizeof seen[0], "%s", p);
			printf("map=%s\n", p);
		}
	}
	return 0;
}
`

// earlySource is a library with no dependency on libcuda whose
// constructor, run before the selector's, calls through the selector: the
// first call takes the lazy path with every argument register live.
const earlySource = `#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
struct fakeBig { long v[8]; };
static void say(const char *s) { write(1, s, strlen(s)); }
__attribute__((constructor)) static void early(void) {
	const char *first = getenv("FAKE_FIRST");
	int ok = 0;
	say("early-calling\n");
	if (first && strcmp(first, "sum") == 0) {
		double (*f)(int, int, int, int, int, int, int, int, int, int,
			double, double, double, double, double, double, double, double, double, double) = dlsym(RTLD_DEFAULT, "fakeSum");
		ok = f && f(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5) == 3863.0;
	} else if (first && strcmp(first, "big") == 0) {
		struct fakeBig (*g)(long) = dlsym(RTLD_DEFAULT, "fakeBig");
		if (g) {
			struct fakeBig b = g(7);
			ok = 1;
			for (int i = 0; i < 8; i++)
				ok &= b.v[i] == 7L * (i + 1) + i * i;
		}
	}
	say(ok ? "early-result=ok\n" : "early-result=bad\n");
}
`

// lines maps each "key=value" line of out to its value (the last one).
func lines(out string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}

// maps lists the "map=" lines of out.
func maps(out string) []string {
	var ms []string
	for _, l := range strings.Split(out, "\n") {
		if p, ok := strings.CutPrefix(l, "map="); ok {
			ms = append(ms, p)
		}
	}
	return ms
}

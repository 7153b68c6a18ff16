package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

// TestParseAutoPatchelf: nixpkgs' auto-patchelf.py command line, parsed as
// argparse does: list options are nargs="*" (every word up to the next
// option, possibly none; a repeated option replaces the earlier list),
// --extra-args is nargs="..." (the rest of the line, options included).
func TestParseAutoPatchelf(t *testing.T) {
	for _, tc := range []struct {
		name string
		args string // split on spaces; "" entries written as ''
		want autoPatchelfArgs
		err  string
	}{
		{name: "the hook's call with empty lists",
			args: "--ignore-missing --paths /o1 /o2 --libs /l1 /l2 --runtime-dependencies --append-rpaths --extra-args",
			want: autoPatchelfArgs{paths: []string{"/o1", "/o2"}, libs: []string{"/l1", "/l2"}}},
		{name: "the hook's call with everything",
			args: "--no-recurse --ignore-missing libcuda.so.1 lib?.so * --paths /o --libs /l --runtime-dependencies /nix/store/a/lib /nix/store/b/lib " +
				"--append-rpaths $ORIGIN /x --keep-libc --preserve-origin --ignore-existing --structured-logs --extra-args --page-size 65536",
			want: autoPatchelfArgs{
				paths: []string{"/o"}, libs: []string{"/l"}, runtimeDeps: []string{"/nix/store/a/lib", "/nix/store/b/lib"},
				appendRpaths: []string{"$ORIGIN", "/x"}, ignoreMissing: []string{"libcuda.so.1", "lib?.so", "*"},
				extra: []string{"--page-size", "65536"}, noRecurse: true, keepLibc: true, preserveOrigin: true, ignoreExisting: true, structured: true}},
		{name: "--extra-args takes the rest, options included",
			args: "--paths /o --extra-args --paths /p --keep-libc --bogus",
			want: autoPatchelfArgs{paths: []string{"/o"}, extra: []string{"--paths", "/p", "--keep-libc", "--bogus"}}},
		{name: "a repeated list option replaces the earlier list",
			args: "--ignore-missing a b --paths /o --ignore-missing c --libs /l1 --libs /l2 /l3",
			want: autoPatchelfArgs{paths: []string{"/o"}, ignoreMissing: []string{"c"}, libs: []string{"/l2", "/l3"}}},
		{name: "an option=value word",
			args: "--paths=/o --ignore-missing=libx.so",
			want: autoPatchelfArgs{paths: []string{"/o"}, ignoreMissing: []string{"libx.so"}}},
		{name: "options in any order",
			args: "--keep-libc --libs /l --paths /o /p --no-recurse",
			want: autoPatchelfArgs{paths: []string{"/o", "/p"}, libs: []string{"/l"}, keepLibc: true, noRecurse: true}},
		{name: "help", args: "-h", want: autoPatchelfArgs{help: true}},
		{name: "--paths is required", args: "--libs /l", err: "auto-patchelf: the following arguments are required: --paths"},
		{name: "a word after a flag is no list's", args: "--paths /o --keep-libc /p", err: "auto-patchelf: unrecognized arguments: /p"},
		{name: "a word before any option", args: "/o --paths /p", err: "auto-patchelf: unrecognized arguments: /o"},
		{name: "an unknown option", args: "--paths /o --frobnicate", err: "auto-patchelf: unrecognized arguments: --frobnicate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseAutoPatchelf(strings.Fields(tc.args))
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(normalize(*got), normalize(tc.want)) {
				t.Errorf("\n got %+v\nwant %+v", *got, tc.want)
			}
		})
	}
}

// normalize makes nil and empty lists equal.
func normalize(a autoPatchelfArgs) autoPatchelfArgs {
	for _, l := range []*[]string{&a.paths, &a.libs, &a.runtimeDeps, &a.appendRpaths, &a.ignoreMissing, &a.extra} {
		if len(*l) == 0 {
			*l = nil
		}
	}
	return a
}

// bintools writes a $NIX_BINTOOLS with the system's loader and a libc
// directory holding libc.so.6, and returns the environment for it.
func (c *cliTree) bintools() []string {
	c.write("bintools/nix-support/dynamic-linker", sysLoader+"\n")
	c.write("bintools/nix-support/orig-libc", "{root}/glibc\n")
	c.place("glibc/lib/libc.so.6", cLib("libc.so.6"))
	return []string{"NIX_BINTOOLS={root}/bintools"}
}

// TestAutoPatchelfHookCall: the command line nixpkgs' hook builds
// (auto-patchelf.sh), run end to end. The driver link is added, as the
// driver hook would afterwards; runtime dependencies go to executables
// only; appended entries come next, then the old $ORIGIN entries kept by
// --preserve-origin (auto-patchelf's order); patchelf's --extra-args are
// honoured (TestPatchelfFlags).
func TestAutoPatchelfHookCall(t *testing.T) {
	c := newCLITree(t)
	env := c.bintools()
	c.place("out/bin/app", cExe("$ORIGIN/../lib:/build/old", "libdep.so", "libc.so.6", "libmissing.so.3"))
	c.place("out/lib/libl.so", cLib("libl.so", "libdep.so", "libc.so.6"))
	c.place("deps/lib/libdep.so", cLib("libdep.so"))
	code, stdout, stderr := c.runCLI(env, "auto-patchelf",
		"--ignore-missing", "libmissing.so.*",
		"--paths", "{root}/out",
		"--libs", "{root}/deps/lib", "{root}/nonexistent/lib",
		"--runtime-dependencies", "/nix/store/rt-libGL/lib",
		"--append-rpaths", "$ORIGIN",
		"--preserve-origin",
		"--extra-args", "--page-size", "4096")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if got, want := c.runpath("out/bin/app"), c.x("/run/opengl-driver/lib:/nix/store/rt-libGL/lib:{root}/deps/lib:$ORIGIN:$ORIGIN/../lib"); got != want {
		t.Errorf("app RUNPATH %q, want %q", got, want)
	}
	if got, want := c.runpath("out/lib/libl.so"), c.x("/run/opengl-driver/lib:{root}/deps/lib:$ORIGIN"); got != want {
		t.Errorf("libl.so RUNPATH %q, want %q", got, want)
	}
	if got := c.interp("out/bin/app"); got != sysLoader {
		t.Errorf("interpreter %q", got)
	}
	if len(lines(stdout)) != 2 {
		t.Errorf("stdout %q", stdout)
	}
	if !strings.HasSuffix(stderr, "cudapatch: patched 2 files, 0 unchanged, 0 skipped, 0 failed, 0 missing dependencies\n") {
		t.Errorf("stderr %q", stderr)
	}
}

// TestAutoPatchelfFlags: --keep-libc, --no-recurse and --ignore-existing
// reach the policy.
func TestAutoPatchelfFlags(t *testing.T) {
	c := newCLITree(t)
	env := c.bintools()
	c.place("out/app", cExe("", "libc.so.6", "libhop.so", "libh.so"))
	c.place("out/sub/app2", cExe("/keep"))
	c.place("hop/libhop.so", cfix.Spec{Soname: "libhop.so", RunPath: "{root}/hidden"})
	c.place("hidden/libh.so", cLib("libh.so"))
	code, _, stderr := c.runCLI(env, "auto-patchelf", "--paths", "{root}/out", "--libs", "{root}/hop", "{root}/glibc/lib",
		"--no-recurse", "--keep-libc")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if got, want := c.runpath("out/app"), c.x("/run/opengl-driver/lib:{root}/glibc/lib:{root}/hop:{root}/hidden"); got != want {
		t.Errorf("app RUNPATH %q, want %q", got, want)
	}
	if got := c.runpath("out/sub/app2"); got != "/keep" {
		t.Errorf("--no-recurse: app2 RUNPATH %q", got)
	}
	// --structured-logs: auto-patchelf's events on stdout, one JSON object
	// a line (exact forms: TestAutoPatchelfGolden).
	code, stdout, stderr := c.runCLI(env, "auto-patchelf", "--paths", "{root}/out", "--libs", "{root}/hop", "--no-recurse", "--structured-logs")
	var kinds []string
	for _, l := range lines(stdout) {
		var ev map[string]json.RawMessage
		if err := json.Unmarshal([]byte(l), &ev); err != nil || len(ev) != 1 {
			t.Errorf("--structured-logs: line %q: %v", l, err)
		}
		for k := range ev {
			kinds = append(kinds, k)
		}
	}
	if code != 0 || strings.Join(kinds, " ") != "SetInterpreter Dependency Dependency SetRpath" {
		t.Errorf("--structured-logs: exit %d, events %q\n%s", code, kinds, stderr)
	}
	// --ignore-existing (add_existing=False): the outputs' own libraries
	// are not indexed.
	c.place("out/app3", cExe("", "libown.so"))
	c.place("out/libown.so", cLib("libown.so"))
	code, _, stderr = c.runCLI(env, "auto-patchelf", "--paths", "{root}/out", "--libs", "{root}/hop", "--no-recurse", "--ignore-existing")
	if code != 1 || !strings.Contains(stderr, c.x("error: auto-patchelf could not satisfy dependency libown.so wanted by {root}/out/app3\n")) {
		t.Errorf("--ignore-existing: exit %d\n%s", code, stderr)
	}
}

// TestAutoPatchelfMissing: auto-patchelf's own error line for each missing
// dependency, exit 1, nothing written; "*" ignores them all.
func TestAutoPatchelfMissing(t *testing.T) {
	c := newCLITree(t)
	env := c.bintools()
	c.place("out/bin/a", cExe("", "libx.so.1", "liby.so"))
	c.place("out/lib/libz.so", cLib("libz.so", "libx.so.1"))
	before := c.hashes()
	code, _, stderr := c.runCLI(env, "auto-patchelf", "--ignore-missing", "--paths", "{root}/out", "--libs", "--extra-args")
	if code != 1 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	c.wantLines("stderr", stderr,
		"error: auto-patchelf could not satisfy dependency libx.so.1 wanted by {root}/out/bin/a",
		"error: auto-patchelf could not satisfy dependency liby.so wanted by {root}/out/bin/a",
		"error: auto-patchelf could not satisfy dependency libx.so.1 wanted by {root}/out/lib/libz.so",
		"cudapatch: nothing written: would patch 2 files, 0 unchanged, 0 skipped, 0 failed, 3 missing dependencies")
	c.unchanged(before)

	code, _, stderr = c.runCLI(env, "auto-patchelf", "--ignore-missing", "*", "--paths", "{root}/out")
	if code != 0 {
		t.Errorf("ignore-missing '*': exit %d\n%s", code, stderr)
	}
}

// TestAutoPatchelfUsage: argparse's exit status 2 for a bad command line,
// 0 and the usage for -h.
func TestAutoPatchelfUsage(t *testing.T) {
	c := newCLITree(t)
	for _, tc := range []struct {
		args []string
		code int
		out  string // in stdout (code 0) or stderr
	}{
		{[]string{"auto-patchelf", "--libs", "/l"}, 2, "cudapatch: auto-patchelf: the following arguments are required: --paths\n"},
		{[]string{"auto-patchelf", "--paths", "/o", "--bogus"}, 2, "cudapatch: auto-patchelf: unrecognized arguments: --bogus\n"},
		{[]string{"auto-patchelf", "--paths", "{root}", "--ignore-missing", ""}, 2, "cudapatch: empty ignore-missing pattern\n"},
		{[]string{"auto-patchelf", "--help"}, 0, "usage: cudapatch auto-patchelf"},
		{[]string{"auto-patchelf", "-h"}, 0, "usage: cudapatch auto-patchelf"},
	} {
		code, stdout, stderr := c.runCLI(nil, tc.args...)
		out := stderr
		if tc.code == 0 {
			out = stdout
		}
		if code != tc.code || !strings.Contains(out, tc.out) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d and %q", tc.args, code, stdout, stderr, tc.code, tc.out)
		}
	}
}

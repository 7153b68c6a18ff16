package main

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v3"

	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

// testVersion stands in for the build's version, so outputs that show it
// are stable.
var testVersion = versionInfo{Version: "0.1.0-test", Commit: "0123456789abcdef0123456789abcdef01234567", Go: "go1.26.0 linux/amd64"}

// runFixed runs the CLI with testVersion.
func runFixed(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	g := newGlobals(&o, &e, env)
	g.version = testVersion
	code = g.main(context.Background(), append([]string{"cudapatch"}, args...))
	return o.String(), e.String(), code
}

// commandNames is every command of the tree, "" for the root.
func treeCommands(t *testing.T) []*cli.Command {
	t.Helper()
	var o, e bytes.Buffer
	root := newApp(newGlobals(&o, &e, nil))
	return append([]*cli.Command{root}, root.Commands...)
}

// TestHelpGolden: the help of every command, as --help, -h and `help
// COMMAND` print it, is its golden file (testdata/help; rewrite with
// go test ./cmd/cudapatch -run TestHelpGolden -update).
func TestHelpGolden(t *testing.T) {
	for _, c := range treeCommands(t) {
		name := c.Name
		t.Run(name, func(t *testing.T) {
			var cmd []string
			if name != "cudapatch" {
				cmd = []string{name}
			}
			out, errOut, code := runFixed(t, nil, append([]string{"help"}, cmd...)...)
			require.Equal(t, exitOK, code, errOut)
			require.Empty(t, errOut)
			goldenFile(t, filepath.Join("help", name+".txt"), out)
			if c.SkipFlagParsing {
				// patchelf and auto-patchelf print the same text from their
				// own parsers (patchelf on stderr, as patchelf does).
				o2, e2, code := runFixed(t, nil, name, "--help")
				require.Equal(t, exitOK, code)
				assert.Equal(t, out, o2+e2)
				return
			}
			for _, flag := range []string{"--help", "-h"} {
				o2, e2, code := runFixed(t, nil, append(slices.Clone(cmd), flag)...)
				assert.Equal(t, exitOK, code, flag)
				assert.Empty(t, e2, flag)
				assert.Equal(t, out, o2, flag)
			}
			// Help wins over the rest of the line.
			o2, _, code := runFixed(t, nil, append(slices.Clone(cmd), "--help", "/nonexistent")...)
			assert.Equal(t, exitOK, code)
			assert.Equal(t, out, o2, "--help /nonexistent")
			for _, l := range strings.Split(out, "\n") {
				assert.LessOrEqual(t, len(l), helpWidth+5, "line too long: %q", l)
			}
		})
	}
}

// TestFlagDefinitions holds every command's flags to the conventions the
// help, the man page and the completions rely on: long names, short names
// never shared within a command, a placeholder naming each value (an
// UPPER-case noun or the allowed words a|b|c, which are then enforced),
// "repeatable" in the usage of every repeatable flag.
func TestFlagDefinitions(t *testing.T) {
	placeholderRE := regexp.MustCompile(`^([A-Z][A-Z0-9_]*|[a-z0-9-]+(\|[a-z0-9-]+)+)$`)
	for _, c := range treeCommands(t) {
		d := docCommand(c, "")
		shorts := map[string]string{}
		for _, f := range d.Flags {
			assert.Greater(t, len(f.Long), 1, "%s: flag %+v has no long name", c.Name, f)
			if f.Short != "" {
				if other, ok := shorts[f.Short]; ok {
					t.Errorf("%s: -%s is both --%s and --%s", c.Name, f.Short, other, f.Long)
				}
				shorts[f.Short] = f.Long
			}
			assert.NotEmpty(t, f.Usage, "%s --%s", c.Name, f.Long)
			var fl cli.Flag
			for _, x := range c.Flags {
				if x.Names()[0] == f.Long {
					fl = x
				}
			}
			df := fl.(cli.DocGenerationFlag)
			if !df.TakesValue() {
				continue
			}
			assert.Regexp(t, placeholderRE, f.Arg, "%s --%s: usage %q names no `VALUE`", c.Name, f.Long, df.GetUsage())
			if f.Repeatable {
				assert.Contains(t, f.Usage, "repeatable", "%s --%s", c.Name, f.Long)
			}
			if len(f.Choices) > 0 {
				args := []string{"--" + f.Long, "bogus", "/nonexistent"}
				if c.Name != "cudapatch" {
					args = append([]string{c.Name}, args...)
				}
				_, errOut, code := runFixed(t, nil, args...)
				assert.Equal(t, exitUsage, code, args)
				assert.Contains(t, errOut, `invalid value "bogus" for --`+f.Long+": want "+orList(f.Choices), args)
			}
		}
	}
}

// TestREADMEFlagTable: the README's table of the main job's flags names
// exactly the flags --help lists, with the same placeholders and short
// names.
func TestREADMEFlagTable(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	var rows []string
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "| flag | meaning |"):
			in = true
		case in && !strings.HasPrefix(l, "|"):
			in = false
		case in && !strings.HasPrefix(l, "| ---"):
			rows = append(rows, strings.SplitN(strings.TrimPrefix(l, "| "), " |", 2)[0])
		}
	}
	require.NotEmpty(t, rows, "no | flag | meaning | table in README.md")
	code := regexp.MustCompile("`([^`]+)`")
	var readme []string
	for _, r := range rows {
		for _, m := range code.FindAllStringSubmatch(strings.ReplaceAll(r, `\|`, "|"), -1) {
			readme = append(readme, m[1])
		}
	}
	var help []string
	for _, f := range docCommand(treeCommands(t)[0], "").Flags {
		if f.Long == "help" || f.Long == "version" {
			continue
		}
		s := "--" + f.Long
		if f.Arg != "" {
			s += " " + f.Arg
		}
		help = append(help, s)
		if f.Short != "" {
			help = append(help, "-"+f.Short)
		}
	}
	sort.Strings(readme)
	sort.Strings(help)
	assert.Equal(t, help, readme, "README.md's flag table (left) and cudapatch --help (right) disagree")
}

// truncatedELF is an ELF header whose program header table lies past the
// end of the file.
func truncatedELF(t testing.TB, path string) {
	t.Helper()
	h := elf.Header64{
		Type: uint16(elf.ET_DYN), Machine: uint16(elf.EM_X86_64), Version: uint32(elf.EV_CURRENT),
		Phoff: 64, Ehsize: 64, Phentsize: 56, Phnum: 1, Shentsize: 64,
	}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS], h.Ident[elf.EI_DATA], h.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	var b bytes.Buffer
	require.NoError(t, binary.Write(&b, binary.LittleEndian, h))
	require.NoError(t, os.WriteFile(path, b.Bytes(), 0o644))
}

// TestBadInput: each bad input gets exactly its message on stderr (one
// line naming the file and the problem), nothing on stdout unless said, the
// exit code, and leaves every file as it was. A file that cannot be read
// is counted as failed, never as unchanged. The commonest cases are
// scripts: testdata/script/bad-input.txtar, usage.txtar, help.txtar.
func TestBadInput(t *testing.T) {
	c := newCLITree(t)
	truncatedELF(t, c.p("truncated.so"))
	c.write("notelf.so", "not an ELF file\n")
	c.write("docs/README", "no ELF files here\n")
	c.write("tiny.so", "\x7fELF\x02\x01\x01")
	const trunc = "program header table: range 0x40+0x38 lies past the end of the file (size 0x40) (at 0x40)"
	t.Chdir(c.root)
	for _, tc := range []struct {
		args           []string
		stdout, stderr string
		code           int
	}{
		// The ELF magic and less than an identification is a truncated
		// ELF file too, not a file to pass over.
		{[]string{"--dry-run", "tiny.so"}, "",
			"error: {root}/tiny.so: ELF identification: range 0x0+0x10 lies past the end of the file (size 0x7) (at 0x0)\n" +
				"cudapatch: would patch 0 files, 0 unchanged, 0 skipped, 1 failed, 0 missing dependencies\n", exitUsage},
		{[]string{"doctor", "--proc", "/nonexistent", "--sys", "/nonexistent", "truncated.so"}, "",
			"cudapatch: doctor: truncated.so: " + trunc + "\n", exitUsage},
		{[]string{"lint", "--format", "xml", "."}, "",
			"cudapatch: lint: invalid value \"xml\" for --format: want text, json, sarif or junit (see 'cudapatch lint --help')\n", exitUsage},
		{[]string{"completion"}, "", "cudapatch: completion: want one SHELL: bash, zsh or fish\n", exitUsage},
		{[]string{"completion", "tcsh"}, "", "cudapatch: completion: unknown shell \"tcsh\" (want bash, zsh or fish)\n", exitUsage},
		{[]string{"man", "x"}, "", "cudapatch: man: takes no arguments\n", exitUsage},
		{[]string{"--version", "--bogus"}, "", "cudapatch: unknown flag --bogus (see 'cudapatch --help')\n", exitUsage},
		{[]string{"doctor", "-v"}, "", "cudapatch: doctor: --verbose is an option of the main job, not of doctor (see 'cudapatch doctor --help')\n", exitUsage},
		// A new user's mistakes: a file that does not exist, a directory
		// where a FILE is wanted, a file that is not ELF. One line each,
		// naming the path once.
		{[]string{"nonexistent.so"}, "", "cudapatch: nonexistent.so: no such file or directory\n", exitUsage},
		{[]string{"nosuchcommand"}, "", "cudapatch: nosuchcommand: no such file or directory (nor a command; see 'cudapatch --help')\n", exitUsage},
		{[]string{"--dry-run", "nonexistent.so"}, "", "cudapatch: nonexistent.so: no such file or directory\n", exitUsage},
		{[]string{"print", "docs"}, "", "cudapatch: docs: is a directory, not an ELF file\n", exitFindings},
		{[]string{"verify", "nonexistent.so", "docs", "notelf.so"}, "",
			"cudapatch: nonexistent.so: no such file or directory\ncudapatch: docs: is a directory, not an ELF file\ncudapatch: notelf.so: not an ELF file\n", exitFindings},
		{[]string{"explain", "nonexistent.so"}, "", "cudapatch: explain: nonexistent.so: no such file or directory\n", exitUsage},
		{[]string{"explain", "docs"}, "", "cudapatch: explain: docs: is a directory, not an ELF file\n", exitUsage},
		{[]string{"doctor", "--proc", "/nonexistent", "--sys", "/nonexistent", "nonexistent.so"}, "",
			"cudapatch: doctor: nonexistent.so: no such file or directory\n", exitUsage},
		{[]string{"doctor", "--proc", "/nonexistent", "--sys", "/nonexistent", "docs"}, "",
			"cudapatch: doctor: docs: is a directory, not an ELF file\n", exitUsage},
		{[]string{"lint", "nonexistent.so"}, "", "cudapatch: lint: nonexistent.so: no such file or directory\n", exitUsage},
		// A directory without ELF files is no error: the hook runs over
		// every output, and many have none. lint says what it checked.
		{[]string{"docs"}, "", "cudapatch: patched 0 files, 0 unchanged, 1 skipped, 0 failed, 0 missing dependencies\n", exitOK},
		{[]string{"lint", "docs"}, "0 ELF files checked, 0 with findings: 0 errors, 0 warnings, 0 info\n", "", exitOK},
	} {
		before := c.hashes()
		var args []string
		for _, a := range tc.args {
			args = append(args, c.x(a))
		}
		out, errOut, code := runFixed(t, nil, args...)
		assert.Equal(t, c.x(tc.stdout), out, "%q: stdout", tc.args)
		assert.Equal(t, c.x(tc.stderr), errOut, "%q: stderr", tc.args)
		assert.Equal(t, tc.code, code, "%q: exit code", tc.args)
		c.unchanged(before)
	}
}

// TestSummaryCountsEveryFileOnce: a tree with one file of each kind (one
// changed, one unchanged, one skipped, one failed) is summed up as such,
// with --json counting the same.
func TestSummaryCountsEveryFileOnce(t *testing.T) {
	c := pkgTree(t)
	c.write("out/share/readme.txt", "text\n")
	truncatedELF(t, c.p("out/lib/libbroken.so"))
	_, _, stderr := c.runCLI(nil, "--dry-run", "--search", "{root}/deps", "{root}/out")
	c.wantLines("stderr", stderr,
		"error: {root}/out/lib/libbroken.so: program header table: range 0x40+0x38 lies past the end of the file (size 0x40) (at 0x40)",
		"cudapatch: would patch 3 files, 0 unchanged, 2 skipped, 1 failed, 0 missing dependencies")
	require.NoError(t, os.Remove(c.p("out/lib/libbroken.so")))
	code, _, stderr := c.runCLI(nil, "--search", "{root}/deps", "{root}/out")
	require.Equal(t, exitOK, code, stderr)
	truncatedELF(t, c.p("out/lib/libbroken.so"))
	code, stdout, stderr := c.runCLI(nil, "--json", "--search", "{root}/deps", "{root}/out")
	assert.Equal(t, exitUsage, code)
	c.wantLines("stderr", stderr,
		"error: {root}/out/lib/libbroken.so: program header table: range 0x40+0x38 lies past the end of the file (size 0x40) (at 0x40)",
		"cudapatch: nothing written: would patch 0 files, 3 unchanged, 2 skipped, 1 failed, 0 missing dependencies")
	for _, key := range []string{`"changed": 0`, `"unchanged": 3`, `"skipped": 2`, `"failed": 1`, `"write_phase": false`} {
		assert.Contains(t, stdout, key)
	}
}

// TestVersion: --version prints the version, the commit and the Go
// version; without -X main.version the version comes from the build
// information.
func TestVersion(t *testing.T) {
	out, errOut, code := runFixed(t, nil, "--version")
	assert.Equal(t, exitOK, code)
	assert.Empty(t, errOut)
	assert.Equal(t, "cudapatch 0.1.0-test\ncommit 0123456789abcdef0123456789abcdef01234567\ngo1.26.0 linux/amd64\n", out)

	bi := func(version string, settings ...string) *debug.BuildInfo {
		b := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: version}}
		for i := 0; i+1 < len(settings); i += 2 {
			b.Settings = append(b.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return b
	}
	for _, tc := range []struct {
		ldflags  string
		bi       *debug.BuildInfo
		version  string
		commit   string
		modified bool
		date     string
	}{
		{"0.1.0", bi("(devel)"), "0.1.0", "", false, ""},
		{"", bi("v0.2.0"), "v0.2.0", "", false, ""},
		{"", bi("v0.0.0-20261122160000-9b977c2d1a2b+dirty", "vcs.revision", "9b977c2d1a2b9b977c2d1a2b9b977c2d1a2b9b97", "vcs.modified", "true", "vcs.time", "2026-11-22T16:00:00Z"),
			"v0.0.0-20261122160000-9b977c2d1a2b+dirty", "9b977c2d1a2b9b977c2d1a2b9b977c2d1a2b9b97", true, "2026-11-22"},
		{"", bi("(devel)", "vcs.revision", "9b977c2d1a2b", "vcs.modified", "false"), "devel", "9b977c2d1a2b", false, ""},
		{"", nil, "devel", "", false, ""},
		// go install …@<pseudo-version>: a module zip, no VCS settings;
		// the version names the commit and its time.
		{"", bi("v0.0.0-20261122191557-5d1c941239c8"), "v0.0.0-20261122191557-5d1c941239c8", "5d1c941239c8", false, "2026-11-22"},
		{"", bi("v0.1.1-0.20261201080910-0123456789ab"), "v0.1.1-0.20261201080910-0123456789ab", "0123456789ab", false, "2026-12-01"},
		{"", bi("v0.2.0-rc.1.0.20261201080910-0123456789ab+dirty"), "v0.2.0-rc.1.0.20261201080910-0123456789ab+dirty", "0123456789ab", true, "2026-12-01"},
		// -X main.version wins over the module version.
		{"0.1.0", bi("v0.0.0-20261122191557-5d1c941239c8"), "0.1.0", "", false, ""},
	} {
		v := buildVersion(tc.ldflags, tc.bi)
		assert.Equal(t, tc.version, v.Version)
		assert.Equal(t, tc.commit, v.Commit, tc.version)
		assert.Equal(t, tc.modified, v.Modified, tc.version)
		assert.Equal(t, tc.date, v.Date, tc.version)
	}
	var b bytes.Buffer
	require.NoError(t, versionInfo{Version: "devel", Commit: "abc", Modified: true, Go: "go1.26.0 linux/amd64"}.write(&b))
	assert.Equal(t, "cudapatch devel\ncommit abc (with uncommitted changes)\ngo1.26.0 linux/amd64\n", b.String())
	b.Reset()
	require.NoError(t, versionInfo{Version: "v0.0.0-20261122191557-5d1c941239c8", Commit: "5d1c941239c8", Date: "2026-11-22", Go: "go1.26.0 linux/amd64"}.write(&b))
	assert.Equal(t, "cudapatch v0.0.0-20261122191557-5d1c941239c8\ncommit 5d1c941239c8 (2026-11-22)\ngo1.26.0 linux/amd64\n", b.String())
	b.Reset()
	require.NoError(t, versionInfo{Version: "0.1.0", Go: "go1.26.0 linux/amd64"}.write(&b))
	assert.Equal(t, "cudapatch 0.1.0\ncommit unknown (built without version control information)\ngo1.26.0 linux/amd64\n", b.String())
}

// TestVersionOfABuild builds the binary as a user does and runs --version:
// from a git checkout (go build and go install record the VCS revision),
// the version is the pseudo-version Go stamps and the commit is HEAD; built
// without VCS information it says so; -X main.version wins.
func TestVersionOfABuild(t *testing.T) {
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout (or no git): %v", err)
	}
	bin := t.TempDir()
	build := func(name string, args ...string) string {
		t.Helper()
		out := filepath.Join(bin, name)
		cmd := exec.Command("go", append(append([]string{"build", "-o", out}, args...), ".")...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %q: %v\n%s", args, err, b)
		}
		v, err := exec.Command(out, "--version").Output()
		require.NoError(t, err)
		return string(v)
	}
	goLine := regexp.QuoteMeta(runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH) + `\n$`
	rev := strings.TrimSpace(string(head))
	// The tree may have uncommitted changes (+dirty) or not.
	assert.Regexp(t, `^cudapatch v0\.0\.0-[0-9]{14}-`+rev[:12]+`(\+dirty)?\n`+
		`commit `+rev+` \([0-9]{4}-[0-9]{2}-[0-9]{2}(, with uncommitted changes)?\)\n`+goLine,
		build("vcs", "-buildvcs=true"))
	assert.Regexp(t, `^cudapatch devel\ncommit unknown \(built without version control information\)\n`+goLine,
		build("novcs", "-buildvcs=false"))
	assert.Regexp(t, `^cudapatch 9\.8\.7\ncommit `+rev+` `,
		build("ldflags", "-buildvcs=true", "-ldflags=-X main.version=9.8.7"))
}

// TestSummaryWriteFailure: a file that cannot be written is found out
// while deciding (it is opened for writing then), so nothing is written:
// the other files stay as they were, the summary says "nothing written"
// with the failed file counted once, and the exit code is 2. The file is
// made unwritable with chattr +i as root (root ignores permissions), else
// with chmod. (Until issue 31 the write phase ran and left the tree half
// patched, the summary saying "patched 2 files".)
func TestSummaryWriteFailure(t *testing.T) {
	c := pkgTree(t)
	locked := c.p("out/lib/librp.so")
	if os.Geteuid() == 0 {
		if b, err := exec.Command("chattr", "+i", locked).CombinedOutput(); err != nil {
			t.Skipf("chattr +i: %v: %s", err, b)
		}
		t.Cleanup(func() { _ = exec.Command("chattr", "-i", locked).Run() })
	} else {
		require.NoError(t, os.Chmod(locked, 0o444))
	}
	code, stdout, stderr := c.runCLI(nil, "--search", "{root}/deps", "{root}/out")
	assert.Equal(t, exitUsage, code, stderr)
	c.wantLines("stdout", stdout,
		"{root}/out/bin/app: RUNPATH /old/lib -> /run/opengl-driver/lib:{root}/deps; resolution note for 1 name (not written)",
		"{root}/out/lib/libl.so: RUNPATH (none) -> /run/opengl-driver/lib:{root}/deps; resolution note for 1 name (not written)")
	l := lines(stderr)
	require.Len(t, l, 2, stderr)
	assert.Regexp(t, `^error: `+regexp.QuoteMeta(locked)+`: .*(operation not permitted|permission denied)`, l[0])
	assert.Equal(t, "cudapatch: nothing written: would patch 2 files, 0 unchanged, 1 skipped, 1 failed, 0 missing dependencies", l[1])
	assert.Equal(t, "", c.runpath("out/lib/libl.so"), "the other files are not written")
	assert.Equal(t, "/old/lib", c.runpath("out/bin/app"), "the other files are not written")
	f, err := elf.Open(locked)
	require.NoError(t, err)
	defer f.Close()
	rp, err := f.DynString(elf.DT_RPATH)
	require.NoError(t, err)
	assert.Equal(t, []string{"/opt/x"}, rp, "the locked file is as it was")
}

// TestMemoryLimitFollowsJobs: the main job's heap limit grows with --jobs
// (memoryPerJob), never below memoryLimit, and with the ELF files decided
// (memoryPerFile, not counting other files); only the patch command sets it.
func TestMemoryLimitFollowsJobs(t *testing.T) {
	for _, tc := range []struct {
		jobs, files int
		want        int64
	}{
		{1, 0, 56 << 20}, {2, 0, 56 << 20}, {3, 0, 56 << 20}, {4, 0, 64 << 20}, {8, 0, 128 << 20}, {16, 0, 256 << 20},
		{2, 2048, 56<<20 + 32<<20}, {8, 64, 128<<20 + 1<<20},
	} {
		assert.Equal(t, tc.want, memoryLimitFor(tc.jobs, tc.files), "jobs %d, files %d", tc.jobs, tc.files)
	}
	tr := newCLITree(t)
	for i := range 3 {
		tr.place(fmt.Sprintf("lib/libm%d.so", i), cfix.Spec{Soname: fmt.Sprintf("libm%d.so", i)})
	}
	tr.write("share/readme.txt", "not ELF")
	empty := t.TempDir()
	for _, tc := range []struct {
		args []string
		want []int64 // each call, in order
	}{
		{[]string{"cudapatch", "--dry-run", "-j", "16", empty}, []int64{256 << 20, 256 << 20}},
		{[]string{"cudapatch", "patch", "--dry-run", "--jobs", "1", tr.root}, []int64{56 << 20, 56<<20 + 3*16<<10}},
		{[]string{"cudapatch", "print", tr.root}, nil},
	} {
		var stdout, stderr bytes.Buffer
		g := newGlobals(&stdout, &stderr, nil)
		var got []int64
		g.setMemoryLimit = func(n int64) { got = append(got, n) }
		g.main(context.Background(), tc.args)
		assert.Equal(t, tc.want, got, "%q: %s", tc.args, stderr.String())
	}
}

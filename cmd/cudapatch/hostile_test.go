package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/internal/printable"
)

// TestHostileNamesStayOneLine: a DT_NEEDED name, a RUNPATH and a file name
// may hold any byte but NUL ('/' aside): a newline or an escape sequence in
// one reached the terminal raw and broke the main job's list, lint's and
// explain's lines. Every text output escapes them (internal/printable);
// the files themselves keep their bytes.
func TestHostileNamesStayOneLine(t *testing.T) {
	c := newCLITree(t)
	const (
		name = "lib\x1b[31mred\nx.so"
		path = "/old\x1b]0;title\x07\n/lib"
		file = "out/bin/ap\np"
	)
	c.place(file, cExe(path, name))
	c.place("deps/libdep.so", cLib("libdep.so"))
	t.Chdir(c.root)
	escaped := []string{`lib\x1b[31mred\nx.so`, `ap\np`}
	for _, tc := range []struct {
		args []string
		want []string // escaped forms the output must show
		// lines is how many lines stdout+stderr have, hostile names or not.
		lines int
	}{
		{[]string{"print", "out/bin/ap\np"}, append(escaped, `/old\x1b]0;title\a\n/lib`), 6},
		{[]string{"verify", "out/bin/ap\np"}, []string{`ap\np: ok`}, 1},
		{[]string{"lint", "out"}, escaped, 0},
		{[]string{"explain", "out/bin/ap\np"}, escaped, 0},
		{[]string{"--dry-run", "--search", "deps", "out"}, append(escaped, `/old\x1b]0;title\a\n/lib ->`), 3},
		{[]string{"nonexistent\x1b[2J.so"}, []string{`nonexistent\x1b[2J.so: no such file`}, 1},
	} {
		stdout, stderr, _ := runFixed(t, nil, tc.args...)
		out := stdout + stderr
		assert.NotContains(t, out, "\x1b", "%q: an escape reached the output:\n%s", tc.args, out)
		assert.NotContains(t, out, "\x07", "%q", tc.args)
		for _, w := range tc.want {
			assert.Contains(t, out, w, "%q", tc.args)
		}
		if tc.lines > 0 {
			assert.Equal(t, tc.lines, strings.Count(out, "\n"), "%q:\n%s", tc.args, out)
		}
		for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			// A hostile name's tail never starts a line of its own.
			assert.False(t, strings.HasPrefix(l, "x.so") || strings.HasPrefix(l, "p:") || strings.HasPrefix(l, "/lib"), "%q: line %q", tc.args, l)
		}
	}
}

// cudapatchBinary builds the command once per test binary run, for tests
// that run it as a subprocess (a hang or a crash must not take the test
// process with it).
func cudapatchBinary(t *testing.T) string {
	t.Helper()
	builtOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cudapatch-bin-")
		if err != nil {
			builtErr = err
			return
		}
		built = filepath.Join(dir, "cudapatch")
		out, err := exec.Command("go", "build", "-o", built, ".").CombinedOutput()
		if err != nil {
			builtErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, builtErr)
	return built
}

var (
	builtOnce sync.Once
	built     string
	builtErr  error
)

// TestMain is testscript.Main: run as "cudapatch" or "patchelf" (a
// script's exec, script_test.go) this binary is the command; otherwise it
// runs the tests, then removes the binary cudapatchBinary built, if any.
func TestMain(m *testing.M) {
	testscript.Main(removeBuilt{hidePATH{m, os.Getenv("PATH")}}, scriptCommands)
}

// removeBuilt runs the tests, then removes cudapatchBinary's binary.
type removeBuilt struct{ m testscript.TestingM }

func (r removeBuilt) Run() int {
	code := r.m.Run()
	if built != "" {
		os.RemoveAll(filepath.Dir(built))
	}
	return code
}

// bounded is how one run of the binary ended.
type bounded struct {
	code           int
	stdout, stderr string
	elapsed        time.Duration
	maxRSS         int64 // bytes
	timedOut       bool
}

// runBounded runs the binary with args under a time limit and a Go heap
// limit, in dir, and reports its exit, output, time and peak RSS.
//
// The peak RSS comes from GNU time, which forks the binary: Linux carries
// a process's high-water RSS across exec, so a binary forked by this test
// process would report at least the test's own RSS at the fork.
func runBounded(t *testing.T, dir string, limit time.Duration, args ...string) bounded {
	t.Helper()
	timeBin, err := exec.LookPath("time")
	if err != nil {
		timeBin = "/usr/bin/time"
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	rss := filepath.Join(t.TempDir(), "maxrss")
	cmd := exec.CommandContext(ctx, timeBin, append([]string{"-q", "-f", "%M", "-o", rss, cudapatchBinary(t)}, args...)...)
	// The time limit ends the binary too, not only time: its group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOMEMLIMIT=128MiB", "GOTRACEBACK=all")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	start := time.Now()
	err = cmd.Run()
	r := bounded{stdout: o.String(), stderr: e.String(), elapsed: time.Since(start), timedOut: ctx.Err() != nil}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%q: %v", args, err)
	}
	if b, err := os.ReadFile(rss); err == nil {
		lines := strings.Fields(strings.TrimSpace(string(b)))
		if n := len(lines); n > 0 {
			if kb, err := strconv.ParseInt(lines[n-1], 10, 64); err == nil {
				r.maxRSS = kb << 10
			}
		}
	} else if !r.timedOut {
		t.Fatalf("%q: no peak RSS from %s: %v", args, timeBin, err)
	}
	return r
}

// TestSpecialFilesRefused: a FIFO, a unix socket and a character device
// named to any command are refused in one line, "FILE: not a regular
// file", and never opened for reading (a FIFO's open would wait for a
// writer forever: a hang fails the run's time limit); below a tree the
// main job counts them as skipped.
func TestSpecialFilesRefused(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.so")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	sock := filepath.Join(dir, "sock.so")
	l, err := net.Listen("unix", sock)
	require.NoError(t, err)
	defer l.Close()
	for _, f := range []string{fifo, sock, "/dev/null"} {
		for _, tc := range []struct {
			args []string
			code int
		}{
			{[]string{"print", f}, 1},
			{[]string{"print", "--json", f}, 1},
			{[]string{"verify", f}, 1},
			{[]string{"lint", f}, 2},
			{[]string{"explain", f}, 2},
			{[]string{"doctor", f}, 2},
			{[]string{"patchelf", "--print-rpath", f}, 1},
			{[]string{"patchelf", "--print-needed", f}, 1},
			{[]string{"patchelf", "--set-rpath", "/x", f}, 1},
			{[]string{"patchelf", "--set-interpreter", "/x", f}, 1},
			{[]string{"patchelf", "--add-needed", "libx.so", f}, 1},
			{[]string{"patchelf", "--shrink-rpath", f}, 1},
		} {
			r := runBounded(t, dir, 20*time.Second, tc.args...)
			require.False(t, r.timedOut, "%q hung", tc.args)
			out := r.stdout + r.stderr
			if tc.args[0] == "print" && tc.args[1] == "--json" {
				out = r.stderr
				assert.Contains(t, r.stdout, `"error": "not a regular file"`, "%q", tc.args)
			} else {
				assert.Equal(t, 1, strings.Count(out, "\n"), "%q: one line:\n%s", tc.args, out)
				assert.Contains(t, out, f+": not a regular file", "%q", tc.args)
			}
			assert.Equal(t, tc.code, r.code, "%q:\n%s", tc.args, out)
		}
		// The main job, on one as its operand: skipped.
		r := runBounded(t, dir, 20*time.Second, "--dry-run", f)
		require.False(t, r.timedOut, "main job on %s hung", f)
		assert.Equal(t, 0, r.code, r.stderr)
		assert.Contains(t, r.stderr, "would patch 0 files, 0 unchanged, 1 skipped, 0 failed")
	}
	// Inside a tree, beside an ELF library: the library is decided, the
	// FIFO, the socket and the device (a copy of /dev/null's node where
	// this user may make one) are skipped with the reason, and a symbolic
	// link to /dev/null is not followed.
	c := newCLITree(t)
	c.place("out/lib/libdep.so", cLib("libdep.so"))
	require.NoError(t, syscall.Mkfifo(c.p("out/lib/libfifo.so"), 0o644))
	ls, err := net.Listen("unix", c.p("out/lib/sock"))
	require.NoError(t, err)
	defer ls.Close()
	require.NoError(t, os.Symlink("/dev/null", c.p("out/lib/null.so")))
	specials := 2
	if syscall.Mknod(c.p("out/lib/null"), syscall.S_IFCHR|0o666, 1<<8|3) == nil {
		specials++
	}
	for _, args := range [][]string{{"--dry-run", "--json", "out"}, {"--json", "out"}} {
		r := runBounded(t, c.root, 20*time.Second, args...)
		require.False(t, r.timedOut, "main job on the tree hung")
		assert.Equal(t, 0, r.code, r.stderr)
		var rep struct {
			Files []struct {
				Path    string `json:"path"`
				Skipped string `json:"skipped"`
			} `json:"files"`
			Skipped int `json:"skipped"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
		assert.Equal(t, specials, rep.Skipped)
		n := 0
		for _, f := range rep.Files {
			if f.Skipped == "not a regular file" {
				n++
			}
			assert.NotEqual(t, "null.so", filepath.Base(f.Path), "a symbolic link was followed")
		}
		assert.Equal(t, specials, n, "%s", r.stdout)
	}
	// lint and explain on the tree: the special files are passed over.
	for _, args := range [][]string{{"lint", "out"}, {"print", "out/lib/libdep.so"}} {
		r := runBounded(t, c.root, 20*time.Second, args...)
		require.False(t, r.timedOut, "%q hung", args)
	}
}

// hostileCommands are the commands the hostile-input suite runs on each
// input: FILE is the input, DIR its directory (a copy per command, since
// some write).
var hostileCommands = [][]string{
	{"print", "FILE"},
	{"print", "--json", "FILE"},
	{"verify", "FILE"},
	{"lint", "FILE"},
	{"explain", "FILE"},
	{"explain", "--symbols", "FILE"},
	{"patchelf", "--print-rpath", "FILE"},
	{"patchelf", "--set-rpath", "/a/new/and/longer/search/path/than/before", "FILE"},
	{"--dry-run", "--ignore-missing", "*", "DIR"},
	{"--ignore-missing", "*", "--append-rpath", "/opt/appended/lib", "DIR"},
}

// Per run of one command on one hostile input: the time limit, and the
// peak RSS allowed over the input's size.
const (
	hostileTimeLimit = 30 * time.Second
	hostileRSSBase   = 160 << 20
	hostileRSSFactor = 8
)

// TestHostileInputsBounded runs every command on files whose headers
// claim far more work than their size pays for (hostileInputs), each as a
// subprocess under a time limit and GOMEMLIMIT, and checks a clean
// outcome: an exit of 0, 1 or 2, no panic, at most a few lines on stderr,
// and a peak RSS within hostileRSSBase + hostileRSSFactor × the file's
// size. Every walk over a table the headers describe (program headers,
// section headers, notes, dynamic entries, version records, symbols) is
// bounded by the file's size, whatever its counts claim.
func TestHostileInputsBounded(t *testing.T) {
	fx := fixtures.ByName(t, "bfd-pie")
	for _, in := range hostileInputs() {
		for _, base := range []string{"lib", "exe"} {
			t.Run(in.name+"/"+base, func(t *testing.T) {
				src := fx.Libs[0]
				if base == "exe" {
					src = fx.Exe
				}
				orig, err := os.ReadFile(src)
				require.NoError(t, err)
				h := newHostileELF(t, orig)
				in.build(t, h)
				if keep := os.Getenv("CUDAPATCH_HOSTILE_DIR"); keep != "" {
					// Only write the inputs there, to probe them by hand.
					require.NoError(t, os.WriteFile(filepath.Join(keep, in.name+"-"+base), h.b, 0o755))
					t.Skip("inputs written to CUDAPATCH_HOSTILE_DIR")
				}
				for _, args := range hostileCommands {
					dir := t.TempDir()
					file := filepath.Join(dir, filepath.Base(src))
					require.NoError(t, os.WriteFile(file, h.b, 0o755))
					argv := make([]string, len(args))
					for i, a := range args {
						argv[i] = strings.NewReplacer("FILE", file, "DIR", dir).Replace(a)
					}
					r := runBounded(t, dir, hostileTimeLimit, argv...)
					t.Logf("%-12s %-40q exit %d in %v, peak RSS %d MiB", in.name, args, r.code, r.elapsed.Round(time.Millisecond), r.maxRSS>>20)
					require.False(t, r.timedOut, "%q ran past %v", args, hostileTimeLimit)
					assert.Contains(t, []int{0, 1, 2}, r.code, "%q:\n%s", args, r.stderr)
					assert.NotContains(t, r.stderr, "panic", "%q", args)
					assert.NotContains(t, r.stderr, "goroutine ", "%q", args)
					assert.LessOrEqual(t, strings.Count(r.stderr, "\n"), 4, "%q:\n%s", args, r.stderr)
					assert.LessOrEqual(t, r.maxRSS, int64(hostileRSSBase+hostileRSSFactor*len(h.b)), "%q: peak RSS", args)
				}
			})
		}
	}
}

// TestRawNamesInJSON: a file name, a RUNPATH and a DT_NEEDED name that
// are not UTF-8 (\xff, and a newline) come back byte for byte from every
// --json output: each bad byte is written as \udcXY
// (printable.EncodeJSON), not as U+FFFD, which would no longer name the
// file.
func TestRawNamesInJSON(t *testing.T) {
	c := newCLITree(t)
	const (
		file   = "out/bin/ap\xff\np"
		needed = "lib\xfddep.so"
		rp     = "/old/\xfe/lib"
	)
	c.place(file, cExe(rp, needed))
	c.place("deps/"+needed, cLib(needed))
	exe := c.p(file)
	unquote := func(raw json.RawMessage) string {
		s, err := printable.UnquoteJSON(raw)
		require.NoError(t, err)
		return s
	}
	t.Run("print", func(t *testing.T) {
		stdout, _, code := runFixed(t, nil, "print", "--json", exe)
		require.Equal(t, 0, code)
		var out []struct {
			Path json.RawMessage `json:"path"`
			Info struct {
				Needed  []json.RawMessage `json:"needed"`
				RunPath json.RawMessage   `json:"runpath"`
			} `json:"info"`
		}
		require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
		require.Len(t, out, 1)
		assert.Equal(t, exe, unquote(out[0].Path))
		assert.Equal(t, needed, unquote(out[0].Info.Needed[0]))
		assert.Equal(t, rp, unquote(out[0].Info.RunPath), stdout)
	})
	t.Run("verify", func(t *testing.T) {
		stdout, _, code := runFixed(t, nil, "verify", "--json", exe)
		require.Equal(t, 0, code)
		var out []struct {
			Path json.RawMessage `json:"path"`
		}
		require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
		assert.Equal(t, exe, unquote(out[0].Path))
	})
	t.Run("main job", func(t *testing.T) {
		stdout, stderr, code := runFixed(t, nil, "--dry-run", "--json", "--search", c.p("deps"), c.p("out"))
		require.Equal(t, 0, code, stderr)
		var rep struct {
			Files []struct {
				Path       json.RawMessage `json:"path"`
				OldRunPath json.RawMessage `json:"old_runpath"`
				RunPath    json.RawMessage `json:"runpath"`
				Deps       []struct {
					Name json.RawMessage `json:"name"`
					Path json.RawMessage `json:"path"`
				} `json:"deps"`
			} `json:"files"`
		}
		require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
		require.Len(t, rep.Files, 1)
		f := rep.Files[0]
		assert.Equal(t, exe, unquote(f.Path))
		assert.Equal(t, rp, unquote(f.OldRunPath))
		assert.Contains(t, unquote(f.RunPath), c.p("deps"))
		assert.Equal(t, needed, unquote(f.Deps[0].Name))
		assert.Equal(t, c.p("deps/"+needed), unquote(f.Deps[0].Path))
		assert.NotContains(t, stdout, "\ufffd")
	})
	t.Run("lint", func(t *testing.T) {
		stdout, _, _ := runFixed(t, nil, "lint", "--format", "json", c.p("out"))
		var rep struct {
			Findings []struct {
				Path json.RawMessage `json:"path"`
			} `json:"findings"`
		}
		require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
		require.NotEmpty(t, rep.Findings, stdout)
		assert.Equal(t, exe, unquote(rep.Findings[0].Path))
	})
}

// TestHostileDependencyBounded: a build input whose version records are
// hostile is read by the symbol check only (the engine never edits it):
// the main job, lint and explain --symbols, each on a program that needs
// it, finish within the time limit and name the problem, where they
// walked n²/2 records (111 s for the file).
func TestHostileDependencyBounded(t *testing.T) {
	fx := fixtures.ByName(t, "bfd-pie")
	for _, in := range hostileInputs() {
		if in.name != "verneed-overlapping-chains" {
			continue
		}
		dir := t.TempDir()
		exe := filepath.Join(dir, "out/bin/main")
		require.NoError(t, os.MkdirAll(filepath.Dir(exe), 0o755))
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "deps/lib"), 0o755))
		b, err := os.ReadFile(fx.Exe)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(exe, b, 0o755))
		for i, l := range fx.Libs {
			b, err := os.ReadFile(l)
			require.NoError(t, err)
			if i == 0 {
				h := newHostileELF(t, b)
				in.build(t, h)
				b = h.b
			}
			require.NoError(t, os.WriteFile(filepath.Join(dir, "deps/lib", filepath.Base(l)), b, 0o755))
		}
		for _, args := range [][]string{
			{"--search", "deps/lib", "out"},
			{"lint", "out"},
			{"explain", "--symbols", "out/bin/main"},
		} {
			r := runBounded(t, dir, hostileTimeLimit, args...)
			t.Logf("%q: exit %d in %v, peak RSS %d MiB\n%s%s", args, r.code, r.elapsed.Round(time.Millisecond), r.maxRSS>>20, r.stdout, r.stderr)
			require.False(t, r.timedOut, "%q ran past %v", args, hostileTimeLimit)
			assert.Less(t, r.elapsed, 10*time.Second, "%q", args)
			assert.Contains(t, r.stdout+r.stderr, "more version records than the file can hold (overlapping chains)", "%q", args)
			assert.Contains(t, []int{0, 1, 2}, r.code, "%q", args)
		}
	}
}

// TestHostileGrowthAllocates: an edit whose new segment lies far past a
// hostile file's end (60,000 PT_LOADs: the file grows from 6 MiB to
// 241 MiB, most of it a hole) holds no buffer the size of the growth.
// What the whole job allocates stays within the hostile bound. On 1cea6bd
// the zeros written back over the journal's reservation were one
// allocation of the growth (234 MiB).
func TestHostileGrowthAllocates(t *testing.T) {
	fx := fixtures.ByName(t, "bfd-pie")
	orig, err := os.ReadFile(fx.Exe)
	require.NoError(t, err)
	h := newHostileELF(t, orig)
	i := slices.IndexFunc(hostileInputs(), func(in hostileInput) bool { return in.name == "verneed-chain-times-60000-pt-load" })
	require.GreaterOrEqual(t, i, 0)
	hostileInputs()[i].build(t, h)
	dir := t.TempDir()
	file := filepath.Join(dir, "main")
	require.NoError(t, os.WriteFile(file, h.b, 0o755))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"cudapatch", "--ignore-missing", "*", "--append-rpath", "/opt/appended/lib", dir}, &stdout, &stderr, os.Environ())
	runtime.ReadMemStats(&after)
	require.Equal(t, 0, code, stderr.String())
	st, err := os.Stat(file)
	require.NoError(t, err)
	require.Greater(t, st.Size(), int64(100<<20), "the premise: the file grows far past its bytes")
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d MiB file grew to %d MiB; the job allocated %d MiB", len(h.b)>>20, st.Size()>>20, alloc>>20)
	require.LessOrEqual(t, alloc, uint64(hostileRSSBase+hostileRSSFactor*len(h.b)))
}

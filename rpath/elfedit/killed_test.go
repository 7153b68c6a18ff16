package elfedit_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// The child of TestKilledProcessConverges: EditFile on the file and the
// edit its environment names, on one thread, so that strace counts its
// writes in order.
const (
	killChildPath = "ELFEDIT_KILL_CHILD_PATH"
	killChildEdit = "ELFEDIT_KILL_CHILD_EDIT"
)

func TestKillChild(t *testing.T) {
	path := os.Getenv(killChildPath)
	if path == "" {
		return // run as TestKilledProcessConverges's child only
	}
	runtime.LockOSThread()
	var e elfedit.Edit
	require.NoError(t, json.Unmarshal([]byte(os.Getenv(killChildEdit)), &e))
	_, err := elfedit.EditFile(path, e, elfedit.Options{})
	require.NoError(t, err)
}

// TestKilledProcessConverges kills a real process, this test binary
// running EditFile, with strace's fault injection: SIGKILL on entry to its
// N-th pwrite64 (for every N until it runs to the end), and on entry to
// its ftruncate. The file it leaves must be, byte for byte, what
// TestCrashConverges's in-process kill after write N-1 leaves (the model
// is the process), load, and come out of the next run as one clean run
// leaves it.
func TestKilledProcessConverges(t *testing.T) {
	t.Parallel()
	strace0, err := exec.LookPath("strace")
	require.NoError(t, err, "strace is needed (.ci/run installs it)")
	self, err := os.Executable()
	require.NoError(t, err)
	var cases []convergeCase
	for _, c := range convergeCases() {
		switch c.name {
		case "bfd-pie/slack", "bfd-pie/region", "bfd-pie/note-again", "s390x-bfd-pie/re-edit-truncate", "i686-bfd-pie/phdr-in-region":
			cases = append(cases, c)
		}
	}
	require.Len(t, cases, 5)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fx, path, prepared, e := convergeSetup(t, c)
			clean, writes, p := convergeApply(t, path, prepared, e, false, -1)
			// What the in-process kill after each write leaves.
			models := make([][]byte, writes)
			for k := range models {
				models[k], _, _ = convergeApply(t, path, prepared, e, false, k)
			}
			ej, err := json.Marshal(e)
			require.NoError(t, err)
			// strace -P counts only the calls on the file, each syscall
			// apart: a recording run says which call the k-th write of the
			// file is (a region or journal is appended with write(2) on
			// an O_APPEND descriptor, the rest with pwrite64, the last cut
			// with ftruncate), and the kill then names that call.
			traced := "trace=pwrite64,write,ftruncate"
			child := func(strace ...string) (bool, []byte) {
				require.NoError(t, os.WriteFile(path, prepared, 0o755))
				args := append([]string{"-f", "-qq", "-P", path, "-e", traced}, strace...)
				cmd := exec.Command(strace0, append(args, self, "-test.run=^TestKillChild$", "-test.count=1")...)
				cmd.Env = append(os.Environ(), killChildPath+"="+path, killChildEdit+"="+string(ej))
				out, err := cmd.CombinedOutput()
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
						return true, out
					}
				}
				require.NoError(t, err, "child: %s", out)
				return false, out
			}
			log := filepath.Join(t.TempDir(), "strace.log")
			killed, _ := child("-o", log)
			require.False(t, killed)
			calls := fileCalls(t, log)
			require.Len(t, calls, writes, "the child's calls on the file %v, the writes of the plan in process: %s", calls, planString(p))
			check := func(what string, model []byte) {
				got := readFile(t, path)
				if !bytes.Equal(got, model) {
					t.Errorf("%s: the file is not what the in-process kill leaves: %s", what, differs(got, model, "the in-process kill"))
				}
				if err := works(t, fx, c.lib, path); err != nil {
					t.Errorf("%s: %v", what, err)
				}
				rerun(t, path, e)
				if got := readFile(t, path); !bytes.Equal(got, clean) {
					t.Errorf("%s: the next run leaves %s", what, differs(got, clean, "a clean run"))
				}
			}
			nth := map[string]int{}
			for k, call := range calls {
				nth[call]++
				killed, out := child("-o", "/dev/null", "-e", fmt.Sprintf("inject=%s:signal=KILL:when=%d", call, nth[call]))
				require.True(t, killed, "the child was not killed at its %s %d (write %d of the file): %s", call, nth[call], k+1, out)
				check(fmt.Sprintf("killed at write %d (%s %d)", k+1, call, nth[call]), models[k])
			}
			require.Equal(t, "ftruncate", calls[len(calls)-1], "the last write of the plan is the cut that drops the journal")
			if t.Failed() {
				keepOnFailure(t, fx)
			}
		})
	}
}

// fileCalls reads an strace log of the calls on one file (-P) and returns
// their names in order.
func fileCalls(t *testing.T, log string) []string {
	t.Helper()
	var calls []string
	for _, line := range strings.Split(string(readFile(t, log)), "\n") {
		if m := straceCall.FindStringSubmatch(line); m != nil {
			calls = append(calls, m[1])
		}
	}
	return calls
}

// straceCall is the start of a call in an strace log, after the thread's
// id when strace prints one (not a "<... resumed>" line).
var straceCall = regexp.MustCompile(`^(?:\d+\s+)?(pwrite64|write|ftruncate)\(`)

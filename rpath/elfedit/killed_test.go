package elfedit_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
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
	strace, err := exec.LookPath("strace")
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
			kill := func(inject string) bool {
				require.NoError(t, os.WriteFile(path, prepared, 0o755))
				cmd := exec.Command(strace, "-f", "-qq", "-o", "/dev/null", "-e", "trace=pwrite64,ftruncate", "-e", "inject="+inject,
					self, "-test.run=^TestKillChild$", "-test.count=1")
				cmd.Env = append(os.Environ(), killChildPath+"="+path, killChildEdit+"="+string(ej))
				out, err := cmd.CombinedOutput()
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
						return true
					}
				}
				require.NoError(t, err, "child: %s", out)
				return false
			}
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
			n := 1
			for ; kill(fmt.Sprintf("pwrite64:signal=KILL:when=%d", n)); n++ {
				require.Less(t, n-1, writes, "the child wrote more than the plan in process")
				check(fmt.Sprintf("killed at pwrite64 %d", n), models[n-1])
			}
			// Every write of the plan is a pwrite64 but the last, the
			// cut that drops the journal (with an old region, if any).
			require.Equal(t, writes-1, n-1, "pwrite64 calls of the child, writes of the plan in process: %s", planString(p))
			require.True(t, kill("ftruncate:signal=KILL:when=1"), "the child was not killed at its ftruncate")
			check("killed at ftruncate", models[writes-1])
			if t.Failed() {
				keepOnFailure(t, fx)
			}
		})
	}
}

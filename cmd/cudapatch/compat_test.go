package main

import (
	"encoding/json"
	"fmt"
	"github.com/cudapatch/cudapatch/rpath/nvdriver/nvdrivertest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/fixtures"
)

// compatNote is cuda_compat's forward-compatibility note, in assembler:
// the branches 535 and 580.
var compatNote = nvdrivertest.NoteAsm(`{"format":1,"driver":[535,580]}`)

// TestCompatChoiceAgrees: one build with --cuda-compat and its selector;
// then, for kernel modules older and newer than compat, the program run
// on that machine (a private mount namespace whose /proc/driver holds the
// module's version), doctor --proc, explain --proc and lint
// --driver-version all name the same libcuda.
func TestCompatChoiceAgrees(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root, for a private mount namespace over /proc/driver (CI runs as root)")
	}
	root := t.TempDir()
	compat := filepath.Join(root, "store/c-cuda_compat/compat")
	drv := filepath.Join(root, "run/opengl-driver/lib")
	sel := filepath.Join(root, "store/s-cuda-compat-selector/lib")
	out := filepath.Join(root, "store/p-app")
	fixtures.Place(t, fixtures.C{Source: "int cuInit(unsigned f) { return 0; }\nint which(void) { return 1; }\n" + compatNote,
		Args: []string{"-shared", "-fPIC", "-Wl,-soname,libcuda.so.1"}}, filepath.Join(compat, "libcuda.so.580.95.05"))
	require.NoError(t, os.Symlink("libcuda.so.580.95.05", filepath.Join(compat, "libcuda.so.1")))
	driver := fixtures.Compile(t, fixtures.C{Source: "int cuInit(unsigned f) { return 0; }\nint which(void) { return 2; }\n",
		Args: []string{"-shared", "-fPIC", "-Wl,-soname,libcuda.so.1"}})
	fixtures.CopyFile(t, driver, filepath.Join(drv, "libcuda.so.1"))
	app := filepath.Join(out, "bin/app")
	// Linked against the driver's libcuda: DT_NEEDED is its soname.
	fixtures.Place(t, fixtures.C{Source: "#include <stdio.h>\nint which(void);\nint main(void) { printf(\"which=%d\\n\", which()); return 0; }\n",
		Args: []string{driver}}, app)

	_, stderr, code := runCLI(t, []string{"CC=gcc"}, "--cuda-compat", compat, "--cuda-compat-selector", sel, "--driver-link", drv, out)
	require.Equal(t, 0, code, stderr)
	stdout, stderr, code := runCLI(t, nil, "print", app)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, sel+":"+drv)

	for _, tc := range []struct {
		module string
		use    string
		which  string
	}{
		{"535.261.03", "compat", "which=1"},
		{"580.65.06", "compat", "which=1"},
		{"580.159.04", "driver", "which=2"},
		{"590.10.01", "driver", "which=2"},
	} {
		t.Run(tc.module, func(t *testing.T) {
			line := "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  " + tc.module + "  Release Build\n"
			// The program, on that machine.
			script := `mount -t tmpfs cudapatch-test /proc/driver && mkdir /proc/driver/nvidia && printf '%s' "$1" > /proc/driver/nvidia/version && exec env -u LD_LIBRARY_PATH "$2"`
			b, err := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", line, app).CombinedOutput()
			require.NoError(t, err, "%s", b)
			assert.Equal(t, tc.which, strings.TrimSpace(string(b)), "the program's libcuda")

			proc, sys := filepath.Join(t.TempDir(), "proc"), filepath.Join(t.TempDir(), "sys")
			require.NoError(t, os.MkdirAll(filepath.Join(proc, "driver/nvidia"), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(proc, "driver/nvidia/version"), []byte(line), 0o644))

			stdout, stderr, _ := runCLI(t, nil, "doctor", "--proc", proc, "--sys", sys, "--json", app)
			var doc struct {
				Libcuda []struct {
					Kind  string `json:"kind"`
					Takes *struct {
						Use string `json:"use"`
					} `json:"takes"`
				} `json:"libcuda"`
			}
			require.NoError(t, json.Unmarshal([]byte(stdout), &doc), "%s%s", stdout, stderr)
			require.NotEmpty(t, doc.Libcuda, stdout)
			require.Equal(t, "selector", doc.Libcuda[0].Kind)
			assert.Equal(t, tc.use, doc.Libcuda[0].Takes.Use, "doctor")

			stdout, stderr, code = runCLI(t, nil, "explain", "--proc", proc, "--sys", sys, app)
			require.Equal(t, 0, code, stderr)
			assert.Contains(t, stdout, fmt.Sprintf("is the libcuda selector of cuda_compat 580.95.05: on this machine it takes the %s:", tc.use), "explain")

			stdout, stderr, _ = runCLI(t, nil, "lint", "--driver-version", tc.module, "--driver-link", drv, app)
			assert.Contains(t, stdout, fmt.Sprintf("takes the %s with driver %s", tc.use, tc.module), "lint: %s", stderr)
		})
	}
}

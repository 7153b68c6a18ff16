// Package hooks_test runs cuda-patchelf-hook.sh under a re-creation of the
// stdenv pieces it relies on (test/stdenv.sh), against the real cudapatch
// binary, and checks the Nix expressions that package it.
package hooks_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// repoRoot is the module root: go test runs each package in its directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// needTool fails the test when a tool that CI installs is missing, rather
// than skipping: a skipped hook test would pass a broken hook.
func needTool(t *testing.T, name, debianPackage string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Fatalf("%s is not on PATH (Debian: apt-get install %s)", name, debianPackage)
	}
}

// cudapatchBinary builds ./cmd/cudapatch into a temporary directory. The
// CUDAPATCH environment variable names another binary to test instead.
func cudapatchBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("CUDAPATCH"); bin != "" {
		t.Logf("testing CUDAPATCH=%s instead of building ./cmd/cudapatch", bin)
		return bin
	}
	bin := filepath.Join(t.TempDir(), "cudapatch")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/cudapatch")
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/cudapatch: %v\n%s", err, out)
	}
	return bin
}

// TestHookHarness builds the sample prebuilt tree with gcc and runs
// test/run.sh, which asserts exact RUNPATHs, the interpreter, the take-over
// of autoPatchelfHook, autoAddDriverRunpath, autoAddCudaCompatRunpath and
// removeStubsFromRunpathHook, and a failed build on a missing dependency;
// with and without __structuredAttrs, with and without cuda_compat.
func TestHookHarness(t *testing.T) {
	needTool(t, "bash", "bash")
	needTool(t, "gcc", "gcc")
	needTool(t, "readelf", "binutils")
	bin := cudapatchBinary(t)
	tmp := t.TempDir()
	sample := filepath.Join(tmp, "sample")

	build := exec.Command("bash", filepath.Join("test", "build-sample.sh"), sample)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build-sample.sh: %v\n%s", err, out)
	}

	run := exec.Command("bash", filepath.Join("test", "run.sh"))
	run.Env = append(os.Environ(),
		"CUDAPATCH="+bin,
		"SAMPLE="+sample,
		"WORK="+filepath.Join(tmp, "work"),
	)
	out, err := run.CombinedOutput()
	t.Logf("test/run.sh:\n%s", out)
	if err != nil {
		t.Fatalf("test/run.sh: %v", err)
	}
}

// TestShellcheck keeps the hook, its harness and the Nix tier's scripts
// shellcheck-clean.
func TestShellcheck(t *testing.T) {
	needTool(t, "shellcheck", "shellcheck")
	files := []string{"cuda-patchelf-hook.sh"}
	for _, pattern := range []string{
		filepath.Join("test", "*.sh"),
		// The Nix tier's package set: its stdenv, stand-in hooks, fixtures.
		filepath.Join("..", "nix", "tests", "build", "*.sh"),
		filepath.Join("..", "nix", "tests", "build", "*", "*.sh"),
	} {
		more, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, more...)
	}
	out, err := exec.Command("shellcheck", append([]string{"--shell=bash"}, files...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("shellcheck: %v\n%s", err, out)
	}
}

package hooks_test

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// nixFiles lists every .nix file of the repository outside .git and caches.
func nixFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || path == filepath.Join(root, "testdata", "build")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".nix") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// nixRun runs a Nix command and returns its stdout and stderr apart: Nix
// prints warnings on stderr (on a machine without the nixbld group, "the
// group 'nixbld' specified in 'build-users-group' does not exist") that
// must not be read as part of its output.
func nixRun(name string, args ...string) (stdout, stderr []byte, err error) {
	var out, errBuf bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &errBuf
	err = cmd.Run()
	return out.Bytes(), errBuf.Bytes(), err
}

// TestNixParse parses every .nix file; CI has Nix's parser but no nixpkgs.
func TestNixParse(t *testing.T) {
	needTool(t, "nix-instantiate", "nix-bin")
	root := repoRoot(t)
	files := nixFiles(t, root)
	for _, want := range []string{"flake.nix", "nix/package.nix", "nix/hook.nix", "nix/overlay.nix"} {
		found := false
		for _, f := range files {
			found = found || f == filepath.Join(root, want)
		}
		if !found {
			t.Errorf("%s is missing", want)
		}
	}
	for _, f := range files {
		if _, stderr, err := nixRun("nix-instantiate", "--readonly-mode", "--parse", f); err != nil {
			t.Errorf("nix-instantiate --parse %s: %v\n%s", f, err, stderr)
		}
	}
}

// TestNixEval evaluates what needs no nixpkgs (nix/tests/eval): the flake's
// outputs, the overlay, the hook's substitutions, lintCheck's command, and
// how package.nix installs the completions and the man page.
func TestNixEval(t *testing.T) {
	needTool(t, "nix-instantiate", "nix-bin")
	root := repoRoot(t)
	out, stderr, err := nixRun("nix-instantiate", "--readonly-mode", "--eval", "--strict", "--json",
		filepath.Join(root, "nix", "tests", "eval"))
	if err != nil {
		t.Fatalf("nix-instantiate --eval: %v\n%s", err, stderr)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v in %s\nstderr: %s", err, out, stderr)
	}
	const wantJSON = `{
		"description": "cudapatch: one-pass RUNPATH fixing for prebuilt CUDA binaries, and cudaPatchelfHook",
		"outputs": ["checks", "devShells", "lib", "overlays", "packages"],
		"systems": ["aarch64-linux", "x86_64-linux"],
		"packages": ["cudaPatchelfHook", "cudapatch", "default"],
		"defaultIsCudapatch": true,
		"packageFile": "package.nix",
		"hookFile": "hook.nix",
		"devShells": ["default"],
		"overlay": ["cudaPatchelfHook", "cudapatch"],
		"hookScript": "cuda-patchelf-hook.sh",
		"hookPropagated": ["cudapatch", "bintools"],
		"hookWithoutCompat": {"cudaCompat": "", "driverLink": "/run/opengl-driver/lib"},
		"hookWithCompat": {"cudaCompat": "/nix/store/s-cuda-compat-selector-12.0/lib", "driverLink": "/run/opengl-driver/lib"},
		"hookSelectorNull": null,
		"selectorName": "cuda-compat-selector-12.0",
		"selectorInputs": ["cudapatch"],
		"selectorCommand": "cudapatch selector --cuda-compat /nix/store/c-cuda_compat-12.0/compat \\\n  --driver-link /run/opengl-driver/lib --out \"$out/lib\"\n",
		"packageNativeBuildInputs": ["installShellFiles"],
		"packagePostInstall": "installShellCompletion --cmd cudapatch \\\n  --bash <(\"$out/bin/cudapatch\" completion bash) \\\n  --zsh <(\"$out/bin/cudapatch\" completion zsh) \\\n  --fish <(\"$out/bin/cudapatch\" completion fish)\n\"$out/bin/cudapatch\" man > cudapatch.1\ninstallManPage cudapatch.1\n",
		"lintName": "example-cudapatch-lint",
		"lintOutputs": "for p in '/nix/store/o' '/nix/store/l'; do",
		"lintCommand": "if ((${#lintPaths[@]})); then cudapatch lint \"${lintPaths[@]}\"; fi"
	}`
	var want map[string]any
	if err := json.Unmarshal([]byte(wantJSON), &want); err != nil {
		t.Fatal(err)
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || !reflect.DeepEqual(g, w) {
			t.Errorf("%s: got %v, want %v", k, g, w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected key %s = %v", k, got[k])
		}
	}
}

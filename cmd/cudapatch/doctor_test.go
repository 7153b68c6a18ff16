package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/doctor"
	"github.com/cudapatch/cudapatch/rpath/doctor/doctortest"
	"github.com/cudapatch/cudapatch/rpath/lint/linttest"
)

// TestDoctorThisMachine runs doctor on the real machine. Without an NVIDIA
// kernel module (this CI machine) it must exit 0 and say so plainly; with
// one it must at least report the module.
func TestDoctorThisMachine(t *testing.T) {
	out, errOut, code := runCLI(t, nil, "doctor")
	assert.Empty(t, errOut)
	_, errProc := os.Stat("/proc/driver/nvidia/version")
	_, errSys := os.Stat("/sys/module/nvidia/version")
	if errProc != nil && errSys != nil {
		assert.Equal(t, exitOK, code, out)
		assert.Contains(t, out, "no NVIDIA kernel module is loaded")
		assert.Contains(t, out, "No NVIDIA GPU driver is loaded on this machine, so there is nothing to fix here.")
	} else {
		assert.Contains(t, []int{exitOK, exitFindings}, code)
		assert.Contains(t, out, "NVIDIA kernel module")
	}
	out, _, _ = runCLI(t, nil, "doctor", "--json")
	var rep doctor.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	assert.NotEmpty(t, rep.Checks)
	// Without a kernel module, --fix has nothing to link.
	if errProc != nil && errSys != nil {
		out, errOut, code = runCLI(t, nil, "doctor", "--fix", "--dry-run")
		assert.Equal(t, exitFindings, code, errOut)
		assert.Contains(t, out, "doctor --fix: no NVIDIA kernel module is loaded, so there is no driver to link\n")
	}
}

// TestDoctorFakeTree: the lint fixture root with a loaded module; a stub
// directory in LD_LIBRARY_PATH is a problem (exit 1), the clean program
// loads the driver link's libcuda.
func TestDoctorFakeTree(t *testing.T) {
	tr := linttest.Build(t)
	proc := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(proc, "driver/nvidia"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(proc, "driver/nvidia/version"), []byte("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build\n"), 0o644))
	clean := "/nix/store/99999999999999999999999999999999-clean/bin/clean"
	args := []string{"doctor", "--root", tr.Root, "--proc", proc, "--sys", t.TempDir(), clean}
	out, errOut, code := runCLI(t, nil, args...)
	assert.Equal(t, exitOK, code, out+errOut)
	assert.Contains(t, out, "ok      NVIDIA kernel module 580.159.04 is loaded")
	assert.Contains(t, out, "would load libcuda.so.1 from the driver link")
	assert.Contains(t, out, "/run/opengl-driver/lib/libcuda.so.1: driver link, 580.159.04 (ldcache of "+clean+")  <- loads")
	assert.Contains(t, out, "No problems found.")

	out, _, code = runCLI(t, []string{"LD_LIBRARY_PATH=" + linttest.Stubs}, args...)
	assert.Equal(t, exitFindings, code, out)
	assert.Contains(t, out, "problem LD_LIBRARY_PATH comes before every RUNPATH, so it shadows the driver link and cuda_compat; it holds 1 entry that does\n"+
		"          "+linttest.Stubs+", a stub directory: CUDA fails with \"CUDA driver is a stub library\"\n"+
		"  fix:    unset LD_LIBRARY_PATH\n")

	_, errOut, code = runCLI(t, nil, "doctor", "a", "b")
	assert.Equal(t, exitUsage, code)
	assert.Equal(t, "cudapatch: doctor: at most one FILE\n", errOut)
	_, errOut, code = runCLI(t, nil, "doctor", "--root", tr.Root, "/nonexistent")
	assert.Equal(t, exitUsage, code)
	assert.Equal(t, "cudapatch: doctor: /nonexistent: no such file or directory ("+tr.Root+"/nonexistent)\n", errOut)
	_, errOut, code = runCLI(t, nil, "doctor", "--dry-run")
	assert.Equal(t, exitUsage, code)
	assert.Equal(t, "cudapatch: doctor: --dry-run goes with --fix\n", errOut)
}

// runAs runs the CLI as the given effective user.
func runAs(t *testing.T, euid int, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	g := newGlobals(&o, &e, env)
	g.version, g.euid = testVersion, euid
	code = g.main(context.Background(), append([]string{"cudapatch"}, args...))
	return o.String(), e.String(), code
}

// gpuHost is a fake of the GPU machine (COMMON.md): kernel module
// 580.159.04, the driver in /usr/local/nvidia/lib64 (64-bit) and
// /usr/local/nvidia/lib (32-bit), both in LD_LIBRARY_PATH, also in
// /usr/lib/x86_64-linux-gnu through ld.so.cache, CUDA's cuda_compat
// 580.95.05 and stubs, no driver link; and a PyTorch-like library
// (libtorch_cuda.so → libcudart.so.12, which dlopens libcuda.so.1) patched
// without and with --cuda-compat.
func gpuHost(t *testing.T) (*doctortest.Machine, []string) {
	m := doctortest.New(t)
	m.Module("580.159.04")
	m.Driver(doctortest.HostDir, "580.159.04")
	m.Driver("/usr/local/nvidia/lib64", "580.159.04")
	m.DriverWith("i686-linux-gnu-gcc", "/usr/local/nvidia/lib", "580.159.04")
	m.Cache(doctortest.HostDir)
	m.Compat("/usr/local/cuda/compat", "580.95.05")
	m.Stub("/usr/local/cuda/lib64/stubs")
	for _, v := range []struct{ dir, runpath string }{
		{"/opt/torch", "/run/opengl-driver/lib:$ORIGIN"},
		{"/opt/torch-compat", "/usr/local/cuda/compat:/run/opengl-driver/lib:$ORIGIN"},
	} {
		cudart := v.dir + "/nvidia/cuda_runtime/lib/libcudart.so.12"
		m.Lib(cudart, "libcudart.so.12")
		m.SetRunPath(cudart, v.runpath)
		m.Program(v.dir+"/torch/lib/libtorch_cuda.so", "$ORIGIN/../../nvidia/cuda_runtime/lib", "libcudart.so.12")
	}
	base := []string{"--root", m.Sys.Root, "--proc", m.Sys.Proc, "--sys", m.Sys.Sys}
	return m, base
}

const gpuLLP = "LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib"

// TestDoctorGPUHost: what doctor says on (a fake of) the GPU machine, as
// golden files (testdata/doctor; rewrite with -update): the two-directory
// LD_LIBRARY_PATH gets one fix, the missing driver link gets doctor --fix
// and its exact commands, and a library patched with --cuda-compat is
// said to fail with error 803 before it runs, since cuda_compat 580.95.05
// is older than the kernel module 580.159.04.
func TestDoctorGPUHost(t *testing.T) {
	m, base := gpuHost(t)
	for _, tc := range []struct {
		golden string
		env    []string
		args   []string
		code   int
	}{
		{"gpu-host.txt", []string{gpuLLP}, nil, exitFindings},
		{"gpu-host-fix-dry-run.txt", []string{gpuLLP}, []string{"--fix", "--dry-run"}, exitFindings},
		{"gpu-host-torch.txt", nil, []string{"/opt/torch/torch/lib/libtorch_cuda.so"}, exitFindings},
		{"gpu-host-torch-compat.txt", nil, []string{"/opt/torch-compat/torch/lib/libtorch_cuda.so"}, exitFindings},
		{"gpu-host-torch-compat-llp.txt", []string{gpuLLP}, []string{"/opt/torch-compat/torch/lib/libtorch_cuda.so"}, exitFindings},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			out, errOut, code := runAs(t, 1000, tc.env, append(append([]string{"doctor"}, base...), tc.args...)...)
			assert.Equal(t, tc.code, code, errOut)
			assert.Empty(t, errOut)
			goldenFile(t, filepath.Join("doctor", tc.golden), out)
		})
	}
	_, err := os.Lstat(m.Host("/run/opengl-driver"))
	assert.ErrorIs(t, err, os.ErrNotExist, "--dry-run wrote")
}

// TestDoctorFix: --fix refuses without root and writes nothing; as root it
// makes the link and the tmpfiles.d file, and says the machine is fine
// after; a second run has nothing to do. The machine's CUDA program then
// loads the driver link's libcuda.
func TestDoctorFix(t *testing.T) {
	m, base := gpuHost(t)
	args := append([]string{"doctor"}, base...)
	out, errOut, code := runAs(t, 1000, nil, append(args, "--fix")...)
	assert.Equal(t, exitUsage, code)
	assert.Empty(t, out)
	assert.Equal(t, "cudapatch: doctor: --fix writes /run/opengl-driver/lib and /etc/tmpfiles.d/cudapatch-driver-link.conf: run it as root (sudo cudapatch doctor --fix), or see what it would do with --fix --dry-run\n", errOut)
	_, err := os.Lstat(m.Host("/run/opengl-driver"))
	assert.ErrorIs(t, err, os.ErrNotExist)

	out, errOut, code = runAs(t, 0, nil, append(args, "--fix")...)
	assert.Equal(t, exitOK, code, out+errOut)
	i := strings.Index(out, "\ndoctor --fix: ran:\n")
	require.GreaterOrEqual(t, i, 0, out)
	assert.Contains(t, out[i:], "\n  ln -s /usr/lib/x86_64-linux-gnu/libcuda.so.1 /run/opengl-driver/lib/libcuda.so.1\n")
	assert.Contains(t, out[i:], "\nAfter the fix:\n")
	assert.True(t, strings.HasSuffix(out, "\nNo problems found.\n"), out)
	target, err := os.Readlink(m.Host("/run/opengl-driver/lib/libcuda.so.1"))
	require.NoError(t, err)
	assert.Equal(t, "/usr/lib/x86_64-linux-gnu/libcuda.so.1", target)
	conf, err := os.ReadFile(m.Host(doctor.TmpfilesConf))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(conf), doctor.Marker+"\n"))

	// Idempotent, and nothing left to do is no reason to need root.
	out, errOut, code = runAs(t, 1000, nil, append(args, "--fix")...)
	assert.Equal(t, exitOK, code, errOut)
	assert.True(t, strings.HasSuffix(out, "\ndoctor --fix: nothing to do: /run/opengl-driver/lib links /usr/lib/x86_64-linux-gnu, and /etc/tmpfiles.d/cudapatch-driver-link.conf makes them at boot.\n"), out)

	out, _, code = runAs(t, 1000, nil, append(args, "/opt/torch/torch/lib/libtorch_cuda.so")...)
	assert.Equal(t, exitOK, code, out)
	assert.Contains(t, out, "ok      /opt/torch/torch/lib/libtorch_cuda.so would load libcuda.so.1 from the driver link (dlopen from /opt/torch/nvidia/cuda_runtime/lib/libcudart.so.12, runpath of /opt/torch/nvidia/cuda_runtime/lib/libcudart.so.12)\n")

	// --json: the report, the plan, what was done.
	require.NoError(t, os.Remove(m.Host("/run/opengl-driver/lib/libnvidia-ml.so.1")))
	out, errOut, code = runAs(t, 1000, nil, append(args, "--fix", "--dry-run", "--json")...)
	assert.Equal(t, exitOK, code, errOut)
	var res struct {
		Report  doctor.Report `json:"report"`
		DryRun  bool          `json:"dry_run"`
		Applied bool          `json:"applied"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	assert.True(t, res.DryRun)
	assert.False(t, res.Applied)
	require.NotNil(t, res.Report.Fix)
	assert.Equal(t, []doctor.Step{{Op: doctor.OpSymlink, Path: "/run/opengl-driver/lib/libnvidia-ml.so.1", Target: "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"}}, res.Report.Fix.Steps)

	// A tmpfiles.d file it did not write stops it, and is left as it was.
	require.NoError(t, os.WriteFile(m.Host(doctor.TmpfilesConf), []byte("# mine\n"), 0o644))
	out, errOut, code = runAs(t, 0, nil, append(args, "--fix")...)
	assert.Equal(t, exitFindings, code, errOut)
	assert.Contains(t, out, "\ndoctor --fix: refusing to overwrite what cudapatch did not write: /etc/tmpfiles.d/cudapatch-driver-link.conf exists and cudapatch did not write it")
	conf, err = os.ReadFile(m.Host(doctor.TmpfilesConf))
	require.NoError(t, err)
	assert.Equal(t, "# mine\n", string(conf))
	_, err = os.Lstat(m.Host("/run/opengl-driver/lib/libnvidia-ml.so.1"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// TestDoctorFixDryRunIsWhatFixDoes: the commands `doctor --fix --dry-run`
// prints, run by bash with the paths they write moved under the fake root,
// make exactly what `doctor --fix` makes (every link and its target, every
// file and directory with its content and mode): on the GPU machine without
// a driver link, and after a driver upgrade, where the fix repoints a link
// (ln -sfn), adds one and removes one it made.
func TestDoctorFixDryRunIsWhatFixDoes(t *testing.T) {
	m, _ := gpuHost(t)
	compare := func(t *testing.T, wantSteps ...string) {
		t.Helper()
		dry, fixed := copyRoot(t, m.Sys.Root), copyRoot(t, m.Sys.Root)
		args := func(root string, more ...string) []string {
			return append([]string{"doctor", "--root", root, "--proc", m.Sys.Proc, "--sys", m.Sys.Sys}, more...)
		}
		out, errOut, _ := runAs(t, 1000, nil, args(dry, "--fix", "--dry-run")...)
		require.Empty(t, errOut)
		const head = "\ndoctor --fix --dry-run: would run, as root:\n"
		i := strings.Index(out, head)
		require.GreaterOrEqual(t, i, 0, out)
		var script []string
		for _, l := range strings.Split(strings.TrimSuffix(out[i+len(head):], "\n"), "\n") {
			script = append(script, strings.TrimPrefix(l, "  "))
		}
		for _, w := range wantSteps {
			assert.Contains(t, script, w)
		}
		sh := exec.Command("bash", "-euc", strings.Join(underRoot(t, dry, script), "\n")+"\n")
		if b, err := sh.CombinedOutput(); err != nil {
			t.Fatalf("the printed commands failed: %v\n%s\nscript:\n%s", err, b, strings.Join(script, "\n"))
		}
		out, errOut, code := runAs(t, 0, nil, args(fixed, "--fix")...)
		require.Contains(t, []int{exitOK, exitFindings}, code, errOut)
		require.Contains(t, out, "\ndoctor --fix: ran:\n")
		assert.Equal(t, fixSnapshot(t, fixed), fixSnapshot(t, dry))
		// Both are done: the next --fix has nothing to do on either.
		for _, root := range []string{dry, fixed} {
			out, _, _ := runAs(t, 1000, nil, args(root, "--fix", "--dry-run")...)
			assert.Contains(t, out, "\ndoctor --fix: nothing to do: ")
		}
	}
	t.Run("no driver link", func(t *testing.T) {
		compare(t, "mkdir -p /run/opengl-driver/lib",
			"ln -s /usr/lib/x86_64-linux-gnu/libcuda.so.1 /run/opengl-driver/lib/libcuda.so.1",
			"cat > /etc/tmpfiles.d/cudapatch-driver-link.conf <<'EOF'")
	})
	t.Run("driver upgrade", func(t *testing.T) {
		_, errOut, code := runAs(t, 0, nil, "doctor", "--root", m.Sys.Root, "--proc", m.Sys.Proc, "--sys", m.Sys.Sys, "--fix")
		require.Equal(t, exitOK, code, errOut)
		m.Module("590.48.01")
		m.Driver("/opt/nvidia-590", "590.48.01")
		require.NoError(t, os.Remove(m.Host("/opt/nvidia-590/libnvidia-ml.so.1")))
		m.Lib("/opt/nvidia-590/libnvidia-ptxjitcompiler.so.590.48.01", "libnvidia-ptxjitcompiler.so.1", doctortest.DriverStrings("590.48.01")...)
		m.Symlink("libnvidia-ptxjitcompiler.so.590.48.01", "/opt/nvidia-590/libnvidia-ptxjitcompiler.so.1")
		m.Cache("/opt/nvidia-590")
		compare(t, "ln -sfn /opt/nvidia-590/libcuda.so.1 /run/opengl-driver/lib/libcuda.so.1",
			"ln -s /opt/nvidia-590/libnvidia-ptxjitcompiler.so.1 /run/opengl-driver/lib/libnvidia-ptxjitcompiler.so.1",
			"rm /run/opengl-driver/lib/libnvidia-ml.so.1")
	})
}

// copyRoot copies a fake machine's root (links as links) and returns the
// copy.
func copyRoot(t *testing.T, root string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "root")
	if b, err := exec.Command("cp", "-a", root, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v\n%s", err, b)
	}
	return dst
}

// underRoot moves the paths doctor's commands write (never a link's
// target) under root; here-document lines are left alone.
func underRoot(t *testing.T, root string, script []string) []string {
	t.Helper()
	var out []string
	heredoc := false
	for _, l := range script {
		f := strings.Fields(l)
		switch {
		case heredoc:
			heredoc = l != "EOF"
		case len(f) == 3 && f[0] == "mkdir" && f[1] == "-p", len(f) == 2 && f[0] == "rm":
			f[len(f)-1] = root + f[len(f)-1]
			l = strings.Join(f, " ")
		case len(f) == 4 && f[0] == "ln" && (f[1] == "-s" || f[1] == "-sfn"):
			f[3] = root + f[3]
			l = strings.Join(f, " ")
		case len(f) == 4 && f[0] == "cat" && f[1] == ">" && f[3] == "<<'EOF'":
			f[2] = root + f[2]
			l = strings.Join(f, " ")
			heredoc = true
		default:
			t.Fatalf("a command doctor should not print: %q", l)
		}
		out = append(out, l)
	}
	return out
}

// fixSnapshot is what the fix manages under root: the driver link's tree
// and the tmpfiles.d directory, each entry with its mode and its content
// or link target.
func fixSnapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, dir := range []string{"/run", "/etc/tmpfiles.d"} {
		err := filepath.WalkDir(root+dir, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			v := info.Mode().String()
			switch {
			case info.Mode()&os.ModeSymlink != 0:
				s, err := os.Readlink(p)
				if err != nil {
					return err
				}
				v += " -> " + s
			case info.Mode().IsRegular():
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				v += "\n" + string(b)
			}
			out[strings.TrimPrefix(p, root)] = v
			return nil
		})
		require.NoError(t, err)
	}
	return out
}

// TestDoctorNoModule: on a machine with no NVIDIA kernel module, doctor
// FILE says what a machine with the driver would meet, as information, and
// exits 0: a program whose RUNPATH lacks the driver link gets the fix, and
// the fix is a command that works (given a link, it names the file the
// link leads to); once it ran, the program searches the driver link.
func TestDoctorNoModule(t *testing.T) {
	m := doctortest.New(t)
	m.Program("/opt/a/libexec/app", "/opt/a/lib", "libcuda.so.1")
	m.Symlink("../libexec/app", "/opt/a/bin/app")
	base := []string{"doctor", "--root", m.Sys.Root, "--proc", m.Sys.Proc, "--sys", m.Sys.Sys}
	out, errOut, code := runCLI(t, nil, append(base, "/opt/a/bin/app")...)
	assert.Equal(t, exitOK, code, out+errOut)
	assert.Empty(t, errOut)
	assert.NotRegexp(t, `(?m)^problem`, out)
	assert.Contains(t, out, "info    on a machine with the NVIDIA driver: /opt/a/bin/app needs libcuda.so.1 and the loader would not find it\n"+
		"  fix:    cudapatch /opt/a/libexec/app   # adds the driver link to its RUNPATH\n")
	assert.True(t, strings.HasSuffix(out, "\nNo NVIDIA GPU driver is loaded on this machine, so nothing above is a problem here; a fix above is for a machine with the driver.\n"), out)

	// The fix, on the file under the fake root.
	_, errOut, code = runCLI(t, nil, m.Host("/opt/a/libexec/app"))
	require.Equal(t, exitOK, code, errOut)
	out, errOut, code = runCLI(t, nil, append(base, "/opt/a/bin/app")...)
	assert.Equal(t, exitOK, code, out+errOut)
	assert.Contains(t, out, "info    /opt/a/bin/app needs libcuda.so.1 and finds none on this machine; it searches the driver link /run/opengl-driver/lib (runpath of /opt/a/bin/app), where a machine with the NVIDIA driver has it\n")
	assert.NotContains(t, out, "fix:")
}

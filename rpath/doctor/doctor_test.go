package doctor_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/rpath/doctor"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

const hostDir = "/usr/lib/x86_64-linux-gnu"

// machine is a fake system: a root, procfs and sysfs.
type machine struct {
	t   *testing.T
	sys doctor.System
	tmp string
}

func newMachine(t *testing.T) *machine {
	tmp := t.TempDir()
	m := &machine{t: t, tmp: tmp, sys: doctor.System{
		Root: filepath.Join(tmp, "root"), Proc: filepath.Join(tmp, "proc"), Sys: filepath.Join(tmp, "sys"),
		DriverLink: "/run/opengl-driver/lib",
	}}
	for _, d := range []string{m.sys.Root, m.sys.Proc, m.sys.Sys} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	return m
}

func (m *machine) host(p string) string { return filepath.Join(m.sys.Root, p) }

func (m *machine) write(p, content string) {
	require.NoError(m.t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(m.t, os.WriteFile(p, []byte(content), 0o644))
}

func (m *machine) symlink(target, p string) {
	require.NoError(m.t, os.MkdirAll(filepath.Dir(m.host(p)), 0o755))
	require.NoError(m.t, os.Symlink(target, m.host(p)))
}

func (m *machine) gcc(out string, args ...string) {
	src := filepath.Join(m.tmp, "x.c")
	m.write(src, "int x(void) { return 0; }\nint main(void) { return 0; }\n")
	require.NoError(m.t, os.MkdirAll(filepath.Dir(out), 0o755))
	b, err := exec.Command("gcc", append([]string{"-fPIC", "-nostdlib", "-o", out, src}, args...)...).CombinedOutput()
	require.NoError(m.t, err, "%s", b)
}

// lib builds a library with the given soname at logical path p.
func (m *machine) lib(p, soname string) {
	m.gcc(m.host(p), "-shared", "-Wl,-soname,"+soname)
}

// driver installs a driver of the given version in dir: libcuda and
// libnvidia-ml, versioned files with soname links.
func (m *machine) driver(dir, version string) {
	for _, n := range []string{"libcuda", "libnvidia-ml"} {
		m.lib(dir+"/"+n+".so."+version, n+".so.1")
		m.symlink(n+".so."+version, dir+"/"+n+".so.1")
	}
}

// cache writes etc/ld.so.cache for the root with ldconfig.
func (m *machine) cache(dirs ...string) {
	m.write(m.host("/etc/ld.so.conf"), strings.Join(dirs, "\n")+"\n")
	b, err := exec.Command("ldconfig", "-X", "-r", m.sys.Root).CombinedOutput()
	require.NoError(m.t, err, "ldconfig: %s", b)
}

func (m *machine) module(version string) {
	m.write(filepath.Join(m.sys.Proc, "driver/nvidia/version"),
		"NVRM version: NVIDIA UNIX x86_64 Kernel Module  "+version+"  Thu Jan  1 00:00:00 UTC 2026\nGCC version:  gcc version 12.2.0\n")
}

// program builds an executable needing the given libraries with the given
// RUNPATH, at /opt/app/bin/app, and returns that path.
func (m *machine) program(runpath string, needed ...string) string {
	var libs []string
	for i, n := range needed {
		p := filepath.Join(m.tmp, "proto", string(rune('a'+i)), n)
		m.gcc(p, "-shared", "-Wl,-soname,"+n)
		libs = append(libs, p)
	}
	const exe = "/opt/app/bin/app"
	m.gcc(m.host(exe), append([]string{"-nostartfiles", "-Wl,-e,main", "-Wl,--no-as-needed"}, libs...)...)
	_, err := elfedit.EditFile(m.host(exe), elfedit.Edit{SetPath: &runpath}, elfedit.Options{})
	require.NoError(m.t, err)
	return exe
}

func (m *machine) diagnose(file string) *doctor.Report {
	rep, err := doctor.Diagnose(context.Background(), m.sys, file)
	require.NoError(m.t, err)
	return rep
}

func check(t *testing.T, rep *doctor.Report, id string) doctor.Check {
	t.Helper()
	var found []doctor.Check
	for _, c := range rep.Checks {
		if c.ID == id {
			found = append(found, c)
		}
	}
	require.Len(t, found, 1, "check %s in %+v", id, rep.Checks)
	return found[0]
}

func TestHealthy(t *testing.T) {
	m := newMachine(t)
	m.module("580.159.04")
	m.driver(hostDir, "580.159.04")
	m.cache(hostDir)
	m.symlink(hostDir+"/libcuda.so.1", "/run/opengl-driver/lib/libcuda.so.1")
	rep := m.diagnose("")
	assert.Equal(t, 0, rep.Problems(), "%+v", rep.Checks)
	assert.Equal(t, "580.159.04", rep.KernelModule)
	assert.Equal(t, "580.159.04", rep.LinkDriver)
	assert.Equal(t, []string{hostDir}, rep.HostDriverDirs)
	assert.Equal(t, doctor.StatusOK, check(t, rep, "driver-version").Status)
}

func TestNoNVIDIA(t *testing.T) {
	m := newMachine(t)
	rep := m.diagnose("")
	assert.Equal(t, 0, rep.Problems())
	assert.Equal(t, "", rep.KernelModule)
	assert.Equal(t, doctor.StatusInfo, check(t, rep, "kernel-module").Status)
	c := check(t, rep, "driver-link")
	assert.Equal(t, doctor.StatusInfo, c.Status)
	assert.Empty(t, c.Fix)
}

func TestDriverLinkMissing(t *testing.T) {
	m := newMachine(t)
	m.write(filepath.Join(m.sys.Sys, "module/nvidia/version"), "580.159.04\n")
	m.driver(hostDir, "580.159.04")
	m.cache(hostDir)
	rep := m.diagnose("")
	assert.Equal(t, "580.159.04", rep.KernelModule)
	c := check(t, rep, "driver-link")
	assert.Equal(t, doctor.StatusProblem, c.Status)
	assert.Equal(t, []string{
		"sudo mkdir -p /run/opengl-driver/lib",
		"sudo ln -sfn " + hostDir + "/libcuda.so.1 /run/opengl-driver/lib/libcuda.so.1",
		"sudo ln -sfn " + hostDir + "/libnvidia-ml.so.1 /run/opengl-driver/lib/libnvidia-ml.so.1",
		"# and at every boot, in /etc/tmpfiles.d/nvidia-driver-link.conf:",
		"d /run/opengl-driver/lib 0755 root root -",
		"L+ /run/opengl-driver/lib/libcuda.so.1 - - - - " + hostDir + "/libcuda.so.1",
		"L+ /run/opengl-driver/lib/libnvidia-ml.so.1 - - - - " + hostDir + "/libnvidia-ml.so.1",
	}, c.Fix)

	// The link directory without libcuda.
	require.NoError(t, os.MkdirAll(m.host("/run/opengl-driver/lib"), 0o755))
	rep = m.diagnose("")
	assert.Equal(t, doctor.StatusProblem, check(t, rep, "driver-libcuda").Status)
	// A dangling link is no better.
	m.symlink("/nonexistent/libcuda.so.1", "/run/opengl-driver/lib/libcuda.so.1")
	assert.Equal(t, doctor.StatusProblem, check(t, m.diagnose(""), "driver-libcuda").Status)
}

func TestVersionMismatch(t *testing.T) {
	m := newMachine(t)
	m.module("580.159.04")
	m.driver(hostDir, "580.159.04")
	m.driver("/opt/old-driver", "570.86.10")
	m.cache(hostDir)
	m.symlink("/opt/old-driver/libcuda.so.1", "/run/opengl-driver/lib/libcuda.so.1")
	rep := m.diagnose("")
	assert.Equal(t, "570.86.10", rep.LinkDriver)
	c := check(t, rep, "driver-version")
	assert.Equal(t, doctor.StatusProblem, c.Status)
	assert.Contains(t, c.Message, "570.86.10")
	assert.Contains(t, c.Fix, "L+ /run/opengl-driver/lib/libcuda.so.1 - - - - "+hostDir+"/libcuda.so.1")
}

func TestProgramLibcuda(t *testing.T) {
	m := newMachine(t)
	m.module("580.159.04")
	m.driver("/run/opengl-driver/lib", "580.159.04")
	m.lib("/opt/cuda/lib64/stubs/libcuda.so", "libcuda.so.1")
	m.symlink("libcuda.so", "/opt/cuda/lib64/stubs/libcuda.so.1")
	m.lib("/opt/compat-old/compat/libcuda.so.575.57.08", "libcuda.so.1")
	m.symlink("libcuda.so.575.57.08", "/opt/compat-old/compat/libcuda.so.1")
	m.lib("/opt/compat-new/compat/libcuda.so.590.48.01", "libcuda.so.1")
	m.symlink("libcuda.so.590.48.01", "/opt/compat-new/compat/libcuda.so.1")

	for _, tc := range []struct {
		name, runpath string
		status        doctor.Status
		msg           string
	}{
		{"driver", "/run/opengl-driver/lib", doctor.StatusOK, "from the driver link"},
		{"stub first", "/opt/cuda/lib64/stubs:/run/opengl-driver/lib", doctor.StatusProblem, "stub"},
		{"old compat", "/opt/compat-old/compat:/run/opengl-driver/lib", doctor.StatusProblem, "error 803"},
		{"new compat", "/opt/compat-new/compat:/run/opengl-driver/lib", doctor.StatusOK, "590.48.01"},
		{"missing", "/opt/nothing", doctor.StatusProblem, "would not find it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exe := m.program(tc.runpath, "libcuda.so.1")
			c := check(t, m.diagnose(exe), "program-libcuda")
			assert.Equal(t, tc.status, c.Status, c.Message)
			assert.Contains(t, c.Message, tc.msg)
		})
	}

	// Through libcudart's dlopen, with the runtime's own RUNPATH.
	m.lib("/opt/cudart/lib/libcudart.so.12", "libcudart.so.12")
	stubs := "/opt/cuda/lib64/stubs"
	_, err := elfedit.EditFile(m.host("/opt/cudart/lib/libcudart.so.12"), elfedit.Edit{SetPath: &stubs}, elfedit.Options{})
	require.NoError(t, err)
	exe := m.program("/opt/cudart/lib", "libcudart.so.12")
	c := check(t, m.diagnose(exe), "program-libcuda")
	assert.Equal(t, doctor.StatusProblem, c.Status)
	assert.Contains(t, c.Message, "dlopen from /opt/cudart/lib/libcudart.so.12")
}

func TestLDLibraryPath(t *testing.T) {
	m := newMachine(t)
	m.module("580.159.04")
	m.driver("/run/opengl-driver/lib", "580.159.04")
	m.driver("/usr/local/nvidia/lib64", "580.159.04")
	for _, tc := range []struct {
		llp    string
		status doctor.Status
		fix    string
	}{
		{"/usr/local/cuda/lib64/stubs", doctor.StatusProblem, "unset LD_LIBRARY_PATH"},
		{"/usr/local/nvidia/lib64:/opt/x", doctor.StatusWarning, "export LD_LIBRARY_PATH=/opt/x"},
		{"/opt/x", doctor.StatusInfo, "unset LD_LIBRARY_PATH"},
	} {
		m.sys.LDLibraryPath = tc.llp
		c := check(t, m.diagnose(""), "ld-library-path")
		assert.Equal(t, tc.status, c.Status, tc.llp)
		assert.Equal(t, []string{tc.fix}, c.Fix, tc.llp)
	}
}

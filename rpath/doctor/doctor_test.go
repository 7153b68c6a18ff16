package doctor_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cudapatch/cudapatch/internal/confine"
	"github.com/cudapatch/cudapatch/rpath/doctor"
	"github.com/cudapatch/cudapatch/rpath/doctor/doctortest"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/nvdriver"
	"github.com/cudapatch/cudapatch/rpath/selector"
)

const hostDir = doctortest.HostDir

// machine is a doctortest.Machine with the tests' shorthands.
type machine struct {
	*doctortest.Machine
	t   *testing.T
	sys *doctor.System
}

func newMachine(t *testing.T) *machine {
	dm := doctortest.New(t)
	return &machine{Machine: dm, t: t, sys: &dm.Sys}
}

func (m *machine) host(p string) string                 { return m.Host(p) }
func (m *machine) write(p, content string)              { m.Write(p, content) }
func (m *machine) symlink(target, p string)             { m.Symlink(target, p) }
func (m *machine) lib(p, soname string, strs ...string) { m.Lib(p, soname, strs...) }
func (m *machine) driver(dir, version string)           { m.Driver(dir, version) }
func (m *machine) driverWith(cc, dir, version string)   { m.DriverWith(cc, dir, version) }
func (m *machine) compat(dir, version string)           { m.Compat(dir, version) }
func (m *machine) stub(dir string)                      { m.Stub(dir) }
func (m *machine) cache(dirs ...string)                 { m.Cache(dirs...) }
func (m *machine) module(version string)                { m.Module(version) }
func (m *machine) program(runpath string, needed ...string) string {
	return m.Program("/opt/app/bin/app", runpath, needed...)
}

var driverStrings = doctortest.DriverStrings

func (m *machine) diagnose(file string) *doctor.Report {
	rep, err := doctor.Diagnose(context.Background(), *m.sys, file)
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

func hasCheck(rep *doctor.Report, id string) bool {
	for _, c := range rep.Checks {
		if c.ID == id {
			return true
		}
	}
	return false
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
	assert.Equal(t, hostDir, rep.DriverSource)
	assert.Equal(t, doctor.StatusOK, check(t, rep, "driver-version").Status)
	// Made by hand, the link is not made again at boot: said, not a problem.
	assert.Equal(t, doctor.StatusInfo, check(t, rep, "driver-link-boot").Status)
	m.write(m.host("/usr/lib/tmpfiles.d/nvidia.conf"), "L+ /run/opengl-driver/lib/libcuda.so.1 - - - - "+hostDir+"/libcuda.so.1\n")
	assert.False(t, hasCheck(m.diagnose(""), "driver-link-boot"))
}

func TestNoNVIDIA(t *testing.T) {
	m := newMachine(t)
	rep := m.diagnose("")
	assert.Equal(t, 0, rep.Problems())
	assert.Equal(t, "", rep.KernelModule)
	assert.Nil(t, rep.Fix)
	assert.Equal(t, doctor.StatusInfo, check(t, rep, "kernel-module").Status)
	c := check(t, rep, "driver-link")
	assert.Equal(t, doctor.StatusInfo, c.Status)
	assert.Empty(t, c.Fix)
}

// wantConf is TmpfilesConf for links from the driver link into dir.
func wantConf(dir string, libs ...string) string {
	s := doctor.Marker + "\n" +
		"# /run is a tmpfs: systemd-tmpfiles makes the links again at every boot.\n" +
		"# cudapatch doctor --fix rewrites this file; delete it (and /run/opengl-driver/lib) to undo.\n" +
		"d /run/opengl-driver/lib 0755 root root -\n"
	for _, l := range libs {
		s += "L+ /run/opengl-driver/lib/" + l + " - - - - " + dir + "/" + l + "\n"
	}
	return s
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
	assert.Equal(t, append([]string{
		"sudo cudapatch doctor --fix   # which runs, as root:",
		"mkdir -p /run/opengl-driver/lib",
		"ln -s " + hostDir + "/libcuda.so.1 /run/opengl-driver/lib/libcuda.so.1",
		"ln -s " + hostDir + "/libnvidia-ml.so.1 /run/opengl-driver/lib/libnvidia-ml.so.1",
		"mkdir -p /etc/tmpfiles.d",
		"cat > /etc/tmpfiles.d/cudapatch-driver-link.conf <<'EOF'",
	}, append(strings.Split(strings.TrimSuffix(wantConf(hostDir, "libcuda.so.1", "libnvidia-ml.so.1"), "\n"), "\n"), "EOF")...), c.Fix)

	// The link directory without libcuda.
	require.NoError(t, os.MkdirAll(m.host("/run/opengl-driver/lib"), 0o755))
	rep = m.diagnose("")
	assert.Equal(t, doctor.StatusProblem, check(t, rep, "driver-libcuda").Status)
	// A dangling link is no better.
	m.symlink("/nonexistent/libcuda.so.1", "/run/opengl-driver/lib/libcuda.so.1")
	assert.Equal(t, doctor.StatusProblem, check(t, m.diagnose(""), "driver-libcuda").Status)
	// Nor is a stub.
	require.NoError(t, os.Remove(m.host("/run/opengl-driver/lib/libcuda.so.1")))
	m.stub("/run/opengl-driver/lib")
	c = check(t, m.diagnose(""), "driver-libcuda")
	assert.Equal(t, doctor.StatusProblem, c.Status)
	assert.Contains(t, c.Message, "stub")
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
	// The link was made by hand: the fix will not overwrite it, and says so.
	assert.Equal(t, []string{
		"# cudapatch doctor --fix will not overwrite what it did not write:",
		"#   /run/opengl-driver/lib/libcuda.so.1 is a symbolic link to /opt/old-driver/libcuda.so.1 that cudapatch did not make",
		"# remove those by hand, then: sudo cudapatch doctor --fix",
	}, c.Fix)
}

// TestProgramLibcuda: every libcuda.so.1 the program could load, in the
// loader's order, with its version; the one it takes is judged against the
// kernel module.
func TestProgramLibcuda(t *testing.T) {
	m := newMachine(t)
	m.module("580.159.04")
	m.driver("/run/opengl-driver/lib", "580.159.04")
	m.stub("/opt/cuda/lib64/stubs")
	m.compat("/usr/local/cuda/compat", "580.95.05")
	m.compat("/opt/compat-new/compat", "590.48.01")
	m.driver("/opt/old-driver", "570.86.10")

	for _, tc := range []struct {
		name, runpath string
		status        doctor.Status
		msg           string
		details       []string
	}{
		{"driver", "/run/opengl-driver/lib", doctor.StatusOK, "from the driver link", []string{
			"/run/opengl-driver/lib/libcuda.so.1 -> /run/opengl-driver/lib/libcuda.so.580.159.04: driver link, 580.159.04 (runpath of /opt/app/bin/app)  <- loads",
		}},
		{"stub first", "/opt/cuda/lib64/stubs:/run/opengl-driver/lib", doctor.StatusProblem, "would load the stub", []string{
			"/opt/cuda/lib64/stubs/libcuda.so.1 -> /opt/cuda/lib64/stubs/libcuda.so: stub, no driver version (runpath of /opt/app/bin/app)  <- loads",
			"/run/opengl-driver/lib/libcuda.so.1 -> /run/opengl-driver/lib/libcuda.so.580.159.04: driver link, 580.159.04 (runpath of /opt/app/bin/app)",
		}},
		{"older compat", "/usr/local/cuda/compat:/run/opengl-driver/lib", doctor.StatusProblem,
			"would load the cuda_compat libcuda /usr/local/cuda/compat/libcuda.so.1 (580.95.05, DT_NEEDED of /opt/app/bin/app, runpath): cuda_compat 580.95.05 is older than the kernel module 580.159.04: CUDA fails with error 803", []string{
				"/usr/local/cuda/compat/libcuda.so.1 -> /usr/local/cuda/compat/libcuda.so.580.95.05: cuda_compat, 580.95.05 (runpath of /opt/app/bin/app)  <- loads",
				"/run/opengl-driver/lib/libcuda.so.1 -> /run/opengl-driver/lib/libcuda.so.580.159.04: driver link, 580.159.04 (runpath of /opt/app/bin/app)",
			}},
		{"newer compat", "/opt/compat-new/compat:/run/opengl-driver/lib", doctor.StatusOK, "590.48.01", nil},
		{"another driver", "/opt/old-driver:/run/opengl-driver/lib", doctor.StatusProblem, "libcuda 570.86.10 but the kernel module is 580.159.04", nil},
		{"missing", "/opt/nothing", doctor.StatusProblem, "would not find it", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exe := m.program(tc.runpath, "libcuda.so.1")
			c := check(t, m.diagnose(exe), "program-libcuda")
			assert.Equal(t, tc.status, c.Status, c.Message)
			assert.Contains(t, c.Message, tc.msg)
			if tc.details != nil {
				assert.Equal(t, append([]string{"every libcuda.so.1 it could load, in the loader's order (kernel module 580.159.04):"}, tc.details...), c.Details)
			}
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

	// A dlopener that finds no libcuda at all.
	m.lib("/opt/cudart3/lib/libcudart.so.12", "libcudart.so.12")
	m.SetRunPath("/opt/cudart3/lib/libcudart.so.12", "/run/opengl-driver-missing/lib")
	c = check(t, m.diagnose(m.program("/opt/cudart3/lib", "libcudart.so.12")), "program-libcuda")
	assert.Equal(t, doctor.StatusProblem, c.Status)
	assert.Equal(t, "/opt/app/bin/app loads /opt/cudart3/lib/libcudart.so.12, which dlopens libcuda.so.1, and the loader would find none (LD_LIBRARY_PATH, its RUNPATH, ld.so.cache, the default directories): CUDA fails with \"no CUDA-capable device is detected\"", c.Message)
	// Neither needed nor dlopened.
	c = check(t, m.diagnose(m.program("/opt/nothing")), "program-libcuda")
	assert.Equal(t, doctor.StatusInfo, c.Status)

	// The stub is known by its contents too, wherever it lies.
	m.lib("/opt/cudart2/lib/libcudart.so.12", "libcudart.so.12")
	m.stub("/opt/copied")
	rp := "/opt/copied:/run/opengl-driver/lib"
	_, err = elfedit.EditFile(m.host("/opt/cudart2/lib/libcudart.so.12"), elfedit.Edit{SetPath: &rp}, elfedit.Options{})
	require.NoError(t, err)
	rep := m.diagnose(m.program("/opt/cudart2/lib", "libcudart.so.12"))
	c = check(t, rep, "program-libcuda")
	assert.Equal(t, doctor.StatusProblem, c.Status)
	assert.Contains(t, c.Message, "would load the stub /opt/copied/libcuda.so.1")
	require.Len(t, rep.Libcuda, 2)
	assert.Equal(t, doctor.KindStub, rep.Libcuda[0].Kind)
	assert.True(t, rep.Libcuda[0].Loads)
	assert.Equal(t, "580.159.04", rep.Libcuda[1].Version)
}

// TestCompatVersionFromContents: a cuda_compat libcuda whose file name
// carries no version is judged by the version it carries inside.
func TestCompatVersionFromContents(t *testing.T) {
	m := newMachine(t)
	m.module("580.159.04")
	m.driver("/run/opengl-driver/lib", "580.159.04")
	m.lib("/opt/c/compat/libcuda.so.1", "libcuda.so.1", driverStrings("580.95.05")...)
	rep := m.diagnose(m.program("/opt/c/compat:/run/opengl-driver/lib", "libcuda.so.1"))
	c := check(t, rep, "program-libcuda")
	assert.Equal(t, doctor.StatusProblem, c.Status)
	assert.Contains(t, c.Message, "error 803")
	assert.Equal(t, "", rep.Libcuda[0].NameVersion)
	assert.Equal(t, "580.95.05", rep.Libcuda[0].Version)
}

// TestLDLibraryPath: whatever LD_LIBRARY_PATH shadows is one check with one
// fix, the value without every such entry, or unset when nothing is left.
// The GPU machine's case: the driver in /usr/local/nvidia/lib64 (64-bit)
// and /usr/local/nvidia/lib (32-bit), both in LD_LIBRARY_PATH.
func TestLDLibraryPath(t *testing.T) {
	m := newMachine(t)
	m.module("580.159.04")
	m.driver("/run/opengl-driver/lib", "580.159.04")
	m.driver("/usr/local/nvidia/lib64", "580.159.04")
	m.driverWith("i686-linux-gnu-gcc", "/usr/local/nvidia/lib", "580.159.04")
	m.driver("/opt/old-driver", "570.86.10")
	m.compat("/usr/local/cuda/compat", "580.95.05")
	m.compat("/opt/new/compat", "590.48.01")
	require.NoError(t, os.MkdirAll(m.host("/opt/x"), 0o755))
	const lib64 = "/usr/local/nvidia/lib64, which provides libcuda.so.1, libnvidia-ml.so.1 (driver 580.159.04, harmless while it matches the kernel module)"
	const lib32 = "/usr/local/nvidia/lib, which provides libcuda.so.1, libnvidia-ml.so.1 (driver 580.159.04, harmless while it matches the kernel module)"
	for _, tc := range []struct {
		llp     string
		status  doctor.Status
		fix     string
		details []string
	}{
		{"/usr/local/nvidia/lib64:/usr/local/nvidia/lib", doctor.StatusWarning, "unset LD_LIBRARY_PATH", []string{lib64, lib32}},
		{"/usr/local/nvidia/lib64:/opt/x:/usr/local/nvidia/lib", doctor.StatusWarning, "export LD_LIBRARY_PATH=/opt/x", []string{lib64, lib32}},
		{"/usr/local/cuda/lib64/stubs", doctor.StatusProblem, "unset LD_LIBRARY_PATH", []string{
			`/usr/local/cuda/lib64/stubs, a stub directory: CUDA fails with "CUDA driver is a stub library"`}},
		{"/usr/local/nvidia/lib64:/usr/local/cuda/lib64/stubs:/opt/x", doctor.StatusProblem, "export LD_LIBRARY_PATH=/opt/x", []string{lib64,
			`/usr/local/cuda/lib64/stubs, a stub directory: CUDA fails with "CUDA driver is a stub library"`}},
		{"/opt/x:", doctor.StatusWarning, "export LD_LIBRARY_PATH=/opt/x", []string{"an empty entry, which the loader takes for the current directory"}},
		{"/usr/local/cuda/compat;/opt/x", doctor.StatusProblem, "export LD_LIBRARY_PATH=/opt/x", []string{
			"/usr/local/cuda/compat: cuda_compat 580.95.05 is older than the kernel module 580.159.04: CUDA fails with error 803 (system has unsupported display driver / cuda driver combination)"}},
		{"/opt/new/compat:/usr/local/nvidia/lib64", doctor.StatusWarning, "export LD_LIBRARY_PATH=/opt/new/compat", []string{lib64}},
		{"/opt/old-driver", doctor.StatusProblem, "unset LD_LIBRARY_PATH", []string{
			`/opt/old-driver, which provides libcuda.so.1, libnvidia-ml.so.1 (libcuda 570.86.10 but the kernel module is 580.159.04: CUDA fails with "driver/library version mismatch")`}},
		{"/run/opengl-driver/lib:/opt/x", doctor.StatusInfo, "unset LD_LIBRARY_PATH", nil},
	} {
		m.sys.LDLibraryPath = tc.llp
		c := check(t, m.diagnose(""), "ld-library-path")
		assert.Equal(t, tc.status, c.Status, tc.llp)
		assert.Equal(t, []string{tc.fix}, c.Fix, tc.llp)
		assert.Equal(t, tc.details, c.Details, tc.llp)
	}
}

func readConf(t *testing.T, m *machine) string {
	b, err := os.ReadFile(m.host(doctor.TmpfilesConf))
	require.NoError(t, err)
	return string(b)
}

func linkTarget(t *testing.T, m *machine, name string) string {
	s, err := os.Readlink(m.host("/run/opengl-driver/lib/" + name))
	require.NoError(t, err)
	return s
}

// TestFix: the plan makes the link and the tmpfiles.d file; applied, the
// machine has no problem left and the next plan is empty (idempotent). On
// a driver upgrade it repoints the links it made, removes the ones it made
// that are no longer wanted, and rewrites its file.
func TestFix(t *testing.T) {
	m := newMachine(t)
	m.module("580.159.04")
	m.driver("/usr/local/nvidia/lib64", "580.159.04")
	m.driverWith("i686-linux-gnu-gcc", "/usr/local/nvidia/lib", "580.159.04")
	m.sys.LDLibraryPath = "/usr/local/nvidia/lib:/usr/local/nvidia/lib64"
	rep := m.diagnose("")
	// Not in ld.so.cache: the 64-bit LD_LIBRARY_PATH directory is the
	// source; the 32-bit one is not linked.
	assert.Equal(t, "/usr/local/nvidia/lib64", rep.DriverSource)
	require.NotNil(t, rep.Fix)
	assert.Equal(t, []string{"libcuda.so.1", "libnvidia-ml.so.1"}, rep.Fix.Libraries)
	assert.Equal(t, []doctor.Step{
		{Op: doctor.OpMkdir, Path: "/run/opengl-driver/lib"},
		{Op: doctor.OpSymlink, Path: "/run/opengl-driver/lib/libcuda.so.1", Target: "/usr/local/nvidia/lib64/libcuda.so.1"},
		{Op: doctor.OpSymlink, Path: "/run/opengl-driver/lib/libnvidia-ml.so.1", Target: "/usr/local/nvidia/lib64/libnvidia-ml.so.1"},
		{Op: doctor.OpWrite, Path: doctor.TmpfilesConf, Content: wantConf("/usr/local/nvidia/lib64", "libcuda.so.1", "libnvidia-ml.so.1")},
	}, rep.Fix.Steps)
	require.NoError(t, doctor.Apply(*m.sys, rep.Fix))
	rep = m.diagnose("")
	assert.False(t, rep.LinkBroken)
	assert.Equal(t, "580.159.04", rep.LinkDriver)
	assert.False(t, hasCheck(rep, "driver-link-boot"), "the written file names the link")
	assert.Empty(t, rep.Fix.Steps, "a second plan has nothing to do")
	assert.Empty(t, rep.Fix.Conflicts)
	require.NoError(t, doctor.Apply(*m.sys, rep.Fix))
	assert.Equal(t, wantConf("/usr/local/nvidia/lib64", "libcuda.so.1", "libnvidia-ml.so.1"), readConf(t, m))
	st, err := os.Stat(m.host(doctor.TmpfilesConf))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), st.Mode().Perm())

	// The driver is upgraded in place: libnvidia-ml is gone, a new
	// library comes, the kernel module is 590.
	for _, n := range []string{"libcuda.so.1", "libcuda.so.580.159.04", "libnvidia-ml.so.1", "libnvidia-ml.so.580.159.04"} {
		require.NoError(t, os.Remove(m.host("/usr/local/nvidia/lib64/"+n)))
	}
	m.module("590.48.01")
	m.sys.LDLibraryPath = ""
	m.driver("/opt/nvidia-590", "590.48.01")
	m.lib("/opt/nvidia-590/libnvidia-ptxjitcompiler.so.590.48.01", "libnvidia-ptxjitcompiler.so.1", driverStrings("590.48.01")...)
	m.symlink("libnvidia-ptxjitcompiler.so.590.48.01", "/opt/nvidia-590/libnvidia-ptxjitcompiler.so.1")
	require.NoError(t, os.Remove(m.host("/opt/nvidia-590/libnvidia-ml.so.1")))
	m.cache("/opt/nvidia-590")
	rep = m.diagnose("")
	assert.True(t, rep.LinkBroken)
	assert.Equal(t, []doctor.Step{
		{Op: doctor.OpReplace, Path: "/run/opengl-driver/lib/libcuda.so.1", Target: "/opt/nvidia-590/libcuda.so.1"},
		{Op: doctor.OpSymlink, Path: "/run/opengl-driver/lib/libnvidia-ptxjitcompiler.so.1", Target: "/opt/nvidia-590/libnvidia-ptxjitcompiler.so.1"},
		{Op: doctor.OpRemove, Path: "/run/opengl-driver/lib/libnvidia-ml.so.1"},
		{Op: doctor.OpWrite, Path: doctor.TmpfilesConf, Content: wantConf("/opt/nvidia-590", "libcuda.so.1", "libnvidia-ptxjitcompiler.so.1")},
	}, rep.Fix.Steps)
	require.NoError(t, doctor.Apply(*m.sys, rep.Fix))
	rep = m.diagnose("")
	assert.Equal(t, 0, rep.Problems(), "%+v", rep.Checks)
	assert.Equal(t, "590.48.01", rep.LinkDriver)
	assert.Equal(t, "/opt/nvidia-590/libcuda.so.1", linkTarget(t, m, "libcuda.so.1"))
	_, err = os.Lstat(m.host("/run/opengl-driver/lib/libnvidia-ml.so.1"))
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.Empty(t, rep.Fix.Steps)
}

// TestFixConflicts: the fix never overwrites what it did not write: a
// tmpfiles.d file without its marker, a link or file it did not make, a
// driver link that is not a directory, NixOS's symbolic link. Apply
// refuses such a plan and changes nothing.
func TestFixConflicts(t *testing.T) {
	setup := func(t *testing.T) *machine {
		m := newMachine(t)
		m.module("580.159.04")
		m.driver(hostDir, "580.159.04")
		m.cache(hostDir)
		return m
	}
	for _, tc := range []struct {
		name     string
		arrange  func(m *machine)
		conflict string
	}{
		{"foreign tmpfiles.d file", func(m *machine) {
			m.write(m.host(doctor.TmpfilesConf), "d /run/opengl-driver/lib 0755 root root -\n")
		}, doctor.TmpfilesConf + " exists and cudapatch did not write it"},
		{"foreign link", func(m *machine) {
			m.symlink("/opt/elsewhere/libcuda.so.1", "/run/opengl-driver/lib/libcuda.so.1")
		}, "/run/opengl-driver/lib/libcuda.so.1 is a symbolic link to /opt/elsewhere/libcuda.so.1 that cudapatch did not make"},
		{"foreign file", func(m *machine) {
			m.write(m.host("/run/opengl-driver/lib/libnvidia-ml.so.1"), "x")
		}, "/run/opengl-driver/lib/libnvidia-ml.so.1 is a file cudapatch did not make"},
		{"link is a file", func(m *machine) {
			m.write(m.host("/run/opengl-driver/lib"), "x")
		}, "/run/opengl-driver/lib exists and is not a directory"},
		{"NixOS", func(m *machine) {
			require.NoError(m.t, os.MkdirAll(m.host("/nix/store/aaa-graphics-drivers/lib"), 0o755))
			m.symlink("/nix/store/aaa-graphics-drivers", "/run/opengl-driver")
		}, "/run/opengl-driver is a symbolic link (on NixOS the system makes it)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := setup(t)
			tc.arrange(m)
			before := snapshot(t, m.sys.Root)
			rep := m.diagnose("")
			require.NotNil(t, rep.Fix)
			assert.Contains(t, strings.Join(rep.Fix.Conflicts, "\n"), tc.conflict)
			err := doctor.Apply(*m.sys, rep.Fix)
			assert.ErrorContains(t, err, "refusing to overwrite what cudapatch did not write")
			assert.Equal(t, before, snapshot(t, m.sys.Root))
		})
	}
}

// snapshot records every path under root: file contents and link targets.
func snapshot(t *testing.T, root string) map[string]string {
	out := map[string]string{}
	require.NoError(t, filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		switch {
		case info.Mode()&os.ModeSymlink != 0:
			s, _ := os.Readlink(p)
			out[p] = "-> " + s
		case info.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			out[p] = string(b)
		default:
			out[p] = info.Mode().String()
		}
		return nil
	}))
	return out
}

// TestFixStaysInRoot: with --root R, a directory the fix writes in that is
// a symbolic link out of R (R/etc/tmpfiles.d, R/etc) is not followed:
// Apply fails naming the path, and nothing is written outside R.
func TestFixStaysInRoot(t *testing.T) {
	for _, link := range []string{"/etc/tmpfiles.d", "/etc"} {
		t.Run(link, func(t *testing.T) {
			m := newMachine(t)
			m.module("580.159.04")
			m.driver(hostDir, "580.159.04")
			m.cache(hostDir)
			// The directory moved out of the root, a link left in its
			// place.
			outside := t.TempDir()
			require.NoError(t, os.MkdirAll(m.host(link), 0o755))
			target := filepath.Join(outside, filepath.Base(link))
			require.NoError(t, os.Rename(m.host(link), target))
			require.NoError(t, os.Symlink(target, m.host(link)))
			before := snapshot(t, outside)
			rep := m.diagnose("")
			require.NotNil(t, rep.Fix)
			require.Empty(t, rep.Fix.Conflicts)
			err := doctor.Apply(*m.sys, rep.Fix)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "write "+doctor.TmpfilesConf)
			assert.ErrorIs(t, err, confine.ErrEscape)
			assert.Equal(t, before, snapshot(t, outside), "outside the root")
		})
	}
}

// TestSelectorTakes: a program whose libcuda.so.1 is the libcuda selector
// is told which library the selector takes on this machine and why, by
// nvdriver.Choose as the selector decides at run time, and that library is
// judged as the loader would take it: the driver on a module not older
// than compat (the GPU machine's 580.159.04 with compat 580.95.05), compat
// on an older one, nothing without a module.
func TestSelectorTakes(t *testing.T) {
	for _, tc := range []struct {
		module string
		status doctor.Status
		use    nvdriver.Use
		msg    string
	}{
		{"580.159.04", doctor.StatusOK, nvdriver.UseDriver, "would load the libcuda selector /opt/sel/lib/libcuda.so.1 (DT_NEEDED of /opt/app/bin/app, runpath): the selector takes the driver's /run/opengl-driver/lib/libcuda.so.1: the driver 580.159.04 is not older than cuda_compat 580.95.05"},
		{"535.261.03", doctor.StatusOK, nvdriver.UseCompat, "the selector takes cuda_compat /usr/local/cuda/compat/libcuda.so.580.95.05: the driver 535.261.03 is older than cuda_compat 580.95.05"},
		{"", doctor.StatusInfo, nvdriver.UseNone, "the selector takes nothing here: no NVIDIA kernel module is loaded"},
	} {
		t.Run(tc.module, func(t *testing.T) {
			m := newMachine(t)
			if tc.module != "" {
				m.module(tc.module)
				m.driver("/run/opengl-driver/lib", tc.module)
			}
			m.compat("/usr/local/cuda/compat", "580.95.05")
			spec, err := selector.ForCompat(m.host("/usr/local/cuda/compat"), nil)
			require.NoError(t, err)
			// The paths the selector loads, as the machine's root sees them.
			spec.Compat, spec.Driver = "/usr/local/cuda/compat/libcuda.so.580.95.05", []string{"/run/opengl-driver/lib/libcuda.so.1"}
			require.NoError(t, os.MkdirAll(m.host("/opt/sel/lib"), 0o755))
			require.NoError(t, selector.Build(context.Background(), spec, []string{"gcc"}, m.host("/opt/sel/lib")))
			rep := m.diagnose(m.program("/opt/sel/lib:/run/opengl-driver/lib", "libcuda.so.1"))
			c := check(t, rep, "program-libcuda")
			assert.Equal(t, tc.status, c.Status, c.Message)
			assert.Contains(t, c.Message, tc.msg)
			require.NotEmpty(t, rep.Libcuda)
			assert.Equal(t, doctor.KindSelector, rep.Libcuda[0].Kind)
			require.NotNil(t, rep.Libcuda[0].Takes)
			assert.Equal(t, tc.use, rep.Libcuda[0].Takes.Use)
		})
	}
}

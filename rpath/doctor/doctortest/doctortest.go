// Package doctortest builds fake machines for the tests of doctor: a root
// directory, procfs and sysfs, with NVIDIA drivers, cuda_compat and stubs
// whose libraries are real ELF files (built and cached by
// internal/fixtures.Compile) carrying the strings real ones carry, an
// ld.so.cache written by ldconfig, and programs with a chosen RUNPATH.
package doctortest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cudapatch/cudapatch/internal/fixtures"
	"github.com/cudapatch/cudapatch/rpath/doctor"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
)

// HostDir is where a Debian or Ubuntu host's driver libraries are.
const HostDir = "/usr/lib/x86_64-linux-gnu"

// Machine is a fake system.
type Machine struct {
	tb  testing.TB
	Sys doctor.System
}

// New makes an empty machine in a temporary directory.
func New(tb testing.TB) *Machine {
	tb.Helper()
	tmp := tb.TempDir()
	m := &Machine{tb: tb, Sys: doctor.System{
		Root: filepath.Join(tmp, "root"), Proc: filepath.Join(tmp, "proc"), Sys: filepath.Join(tmp, "sys"),
		DriverLink: "/run/opengl-driver/lib",
	}}
	for _, d := range []string{m.Sys.Root, m.Sys.Proc, m.Sys.Sys} {
		m.must(os.MkdirAll(d, 0o755))
	}
	return m
}

func (m *Machine) must(err error, msg ...any) {
	m.tb.Helper()
	if err != nil {
		m.tb.Fatal(append([]any{err}, msg...)...)
	}
}

// Host is the logical path p on this machine.
func (m *Machine) Host(p string) string { return filepath.Join(m.Sys.Root, p) }

// Write writes a file at host path p.
func (m *Machine) Write(p, content string) {
	m.tb.Helper()
	m.must(os.MkdirAll(filepath.Dir(p), 0o755))
	m.must(os.WriteFile(p, []byte(content), 0o644))
}

// Symlink makes logical path p a link to target.
func (m *Machine) Symlink(target, p string) {
	m.tb.Helper()
	m.must(os.MkdirAll(filepath.Dir(m.Host(p)), 0o755))
	m.must(os.Symlink(target, m.Host(p)))
}

// cc compiles C source with the given compiler and flags, without a libc,
// and returns the built file.
func (m *Machine) cc(compiler, src string, args ...string) string {
	m.tb.Helper()
	return fixtures.Compile(m.tb, fixtures.C{Compiler: compiler, Source: src, Args: append([]string{"-fPIC", "-nostdlib"}, args...)})
}

// Lib builds, at logical path p, a library with the given soname whose
// read-only data holds strs.
func (m *Machine) Lib(p, soname string, strs ...string) { m.LibWith("gcc", p, soname, strs...) }

// LibWith is Lib with another compiler (i686-linux-gnu-gcc).
func (m *Machine) LibWith(compiler, p, soname string, strs ...string) {
	m.tb.Helper()
	src := "const char *const strs[] = {"
	for _, s := range strs {
		src += "\"" + s + "\", "
	}
	src += "0};\nint x(int i) { return strs[i] != 0; }\n"
	fixtures.CopyFile(m.tb, m.cc(compiler, src, "-shared", "-Wl,-soname,"+soname), m.Host(p))
}

// DriverStrings are what a real libcuda of the version carries (Debian's
// libcuda1 535.309.01: "535.309.01", "/dev/nvidia%d",
// "libnvidia-pkcs11.so.535.309.01").
func DriverStrings(version string) []string {
	return []string{version, "/dev/nvidia%d", "/proc/driver/nvidia/params", "libnvidia-pkcs11.so." + version}
}

// Driver installs a driver of the given version in dir: libcuda and
// libnvidia-ml, versioned files with soname links.
func (m *Machine) Driver(dir, version string) { m.DriverWith("gcc", dir, version) }

// DriverWith is Driver with another compiler (a 32-bit driver).
func (m *Machine) DriverWith(compiler, dir, version string) {
	m.tb.Helper()
	for _, n := range []string{"libcuda", "libnvidia-ml"} {
		m.LibWith(compiler, dir+"/"+n+".so."+version, n+".so.1", DriverStrings(version)...)
		m.Symlink(n+".so."+version, dir+"/"+n+".so.1")
	}
}

// Compat installs cuda_compat's libcuda of the given version in dir.
func (m *Machine) Compat(dir, version string) {
	m.tb.Helper()
	m.Lib(dir+"/libcuda.so."+version, "libcuda.so.1", DriverStrings(version)...)
	m.Symlink("libcuda.so."+version, dir+"/libcuda.so.1")
}

// Stub installs the toolkit's link-time stub in dir.
func (m *Machine) Stub(dir string) {
	m.tb.Helper()
	m.Lib(dir+"/libcuda.so", "libcuda.so.1", "CUDA driver is a stub library")
	m.Symlink("libcuda.so", dir+"/libcuda.so.1")
}

// Cache writes etc/ld.so.cache for the root with ldconfig.
func (m *Machine) Cache(dirs ...string) {
	m.tb.Helper()
	m.Write(m.Host("/etc/ld.so.conf"), strings.Join(dirs, "\n")+"\n")
	b, err := exec.Command("ldconfig", "-X", "-r", m.Sys.Root).CombinedOutput()
	m.must(err, "ldconfig: "+string(b))
}

// Module loads the kernel module of the version (procfs).
func (m *Machine) Module(version string) {
	m.Write(filepath.Join(m.Sys.Proc, "driver/nvidia/version"),
		"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  "+version+"  Release Build  (dvs-builder@U16-I3-B03-4-3)  Thu Oct  9 2025\nGCC version:  gcc version 12.2.0\n")
}

// Program builds an executable at logical path exe needing the given
// libraries, with the given RUNPATH.
func (m *Machine) Program(exe, runpath string, needed ...string) string {
	m.tb.Helper()
	var libs []string
	for _, n := range needed {
		libs = append(libs, m.cc("gcc", "int x(void) { return 0; }\n", "-shared", "-Wl,-soname,"+n))
	}
	fixtures.CopyFile(m.tb, m.cc("gcc", "int main(void) { return 0; }\n", append([]string{"-nostartfiles", "-Wl,-e,main", "-Wl,--no-as-needed"}, libs...)...), m.Host(exe))
	m.SetRunPath(exe, runpath)
	return exe
}

// SetRunPath sets the RUNPATH of the file at logical path p.
func (m *Machine) SetRunPath(p, runpath string) {
	m.tb.Helper()
	_, err := elfedit.EditFile(m.Host(p), elfedit.Edit{SetPath: &runpath}, elfedit.Options{})
	m.must(err)
}

// Package doctor diagnoses a machine that runs Nix-built CUDA programs,
// typically on another distribution than NixOS: is the driver link
// (/run/opengl-driver/lib) there, does it hold libcuda.so.1, does that
// match the loaded kernel module, where the host's own driver lives, what
// LD_LIBRARY_PATH shadows, and which libcuda a given program would load:
// every libcuda.so.1 it could reach, in the loader's order, with the
// version each carries, so that a cuda_compat older than the kernel module
// (CUDA error 803), a stub, or a mismatched driver is said before a
// program fails. Every problem carries one fix that repairs all of it;
// PlanFix and Apply make the driver link (fix.go). It builds on rpath (the
// driver library names, stub directories), rpath/ldso (the loader
// simulation), rpath/lint (known dlopeners, compat directories) and
// rpath/nvdriver (versions).
//
// All system paths come from a [System], so tests run it on fake trees.
// The package never prints; Diagnose returns a [Report].
package doctor

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"

	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/fnmatch"
	"github.com/cudapatch/cudapatch/rpath/ldso"
	"github.com/cudapatch/cudapatch/rpath/nvdriver"
	"github.com/cudapatch/cudapatch/rpath/policy"
	"github.com/cudapatch/cudapatch/rpath/selector"
)

// System says where the machine's state is read from.
type System struct {
	// Root is prepended to every absolute system path (the driver link,
	// /etc/ld.so.cache, /etc/tmpfiles.d, the library directories); "" is
	// the host.
	Root string `json:"root,omitempty"`
	// Proc and Sys are where procfs and sysfs are mounted; defaults
	// /proc and /sys (not under Root).
	Proc string `json:"proc"`
	Sys  string `json:"sys"`
	// DriverLink defaults to /run/opengl-driver/lib.
	DriverLink string `json:"driver_link"`
	// LDLibraryPath is the environment's LD_LIBRARY_PATH.
	LDLibraryPath string `json:"ld_library_path,omitempty"`
	// Machine is the ELF machine of this system's programs, whose driver
	// libraries the driver link must hold; 0 means the one Go was built
	// for.
	Machine elf.Machine `json:"-"`
}

// Status grades a check.
type Status string

// Check statuses. Only StatusProblem makes a run fail.
const (
	StatusOK      Status = "ok"
	StatusInfo    Status = "info"
	StatusWarning Status = "warning"
	StatusProblem Status = "problem"
)

func (s Status) rank() int {
	return slices.Index([]Status{StatusOK, StatusInfo, StatusWarning, StatusProblem}, s)
}

// Check is one finding.
type Check struct {
	ID      string `json:"id"`
	Status  Status `json:"status"`
	Message string `json:"message"`
	// Details are more lines about it (the libcuda candidates of a
	// program).
	Details []string `json:"details,omitempty"`
	// Fix is the one repair of the whole problem: commands or file lines,
	// in order.
	Fix []string `json:"fix,omitempty"`
}

// Libcuda kinds.
const (
	KindDriverLink = "driver link"
	KindCompat     = "cuda_compat"
	KindStub       = "stub"
	KindDriver     = "driver" // a driver installed outside the driver link
	// KindSelector is cudapatch's libcuda selector (rpath/selector), which
	// loads cuda_compat's libcuda or the driver's when the process starts.
	KindSelector = "selector"
)

// Libcuda is one libcuda.so.1 a program could load.
type Libcuda struct {
	// Path is the search directory joined with libcuda.so.1, as the
	// loader opens it.
	Path string `json:"path"`
	// File is where its symbolic links end.
	File string `json:"file"`
	Kind string `json:"kind"`
	// NameVersion is the version in File's name (libcuda.so.580.95.05),
	// Version the one the library carries (nvdriver.ReadLibcuda).
	NameVersion string `json:"name_version,omitempty"`
	Version     string `json:"version,omitempty"`
	// Step is how the loader reaches it: "LD_LIBRARY_PATH", "runpath of
	// FILE", "ld.so.cache", "default".
	Step string `json:"step"`
	// Loads marks the one the loader takes.
	Loads bool `json:"loads,omitempty"`
	// Selector is what a selector was built from, and Takes what it takes
	// on this machine and why (nvdriver.Choose, as at run time).
	Selector *selector.Info   `json:"selector,omitempty"`
	Takes    *nvdriver.Choice `json:"takes,omitempty"`
}

// version is the version the library reports, else its name's.
func (l Libcuda) version() string {
	if l.Version != "" {
		return l.Version
	}
	return l.NameVersion
}

func (l Libcuda) describe() string {
	s := l.Path
	if l.File != l.Path {
		s += " -> " + l.File
	}
	v := l.version()
	if v == "" {
		v = "version unknown"
	}
	if l.Kind == KindStub {
		v = "no driver version"
	}
	if l.Kind == KindSelector {
		v = "of cuda_compat " + l.Selector.CompatVersion + ", takes the " + string(l.Takes.Use)
	}
	s += fmt.Sprintf(": %s, %s (%s)", l.Kind, v, l.Step)
	if l.Loads {
		s += "  <- loads"
	}
	return s
}

// Report is the result of Diagnose.
type Report struct {
	System System `json:"system"`
	// KernelModule is the loaded NVIDIA kernel module's version, "" if
	// none is loaded.
	KernelModule string `json:"kernel_module,omitempty"`
	// LinkDriver is the version of libcuda.so.1 in the driver link.
	LinkDriver string `json:"link_driver,omitempty"`
	// HostDriverDirs are the directories ld.so.cache lists libcuda.so.1 in.
	HostDriverDirs []string `json:"host_driver_dirs,omitempty"`
	// DriverSource is the directory of this machine's driver libraries
	// that the driver link should point into (ld.so.cache's, else
	// LD_LIBRARY_PATH's), the one whose libcuda matches the kernel module
	// if any does; "" when none was found.
	DriverSource string `json:"driver_source,omitempty"`
	// Libcuda lists, for the FILE given, every libcuda.so.1 it could load,
	// in the loader's order.
	Libcuda []Libcuda `json:"libcuda,omitempty"`
	// Fix is the plan that makes the driver link (PlanFix's result).
	Fix *Plan `json:"fix,omitempty"`
	// LinkBroken says a driver-link check failed: the link is missing,
	// empty, or holds another driver than the kernel module's.
	LinkBroken bool    `json:"link_broken,omitempty"`
	Checks     []Check `json:"checks"`
}

// Problems counts checks with StatusProblem.
func (r *Report) Problems() int {
	n := 0
	for _, c := range r.Checks {
		if c.Status == StatusProblem {
			n++
		}
	}
	return n
}

type doctor struct {
	sys    System
	rep    *Report
	driver []*fnmatch.Pattern
	cache  *ldso.Cache
	libs   map[string]Libcuda // by host path of the file, read once
	// noModule says no NVIDIA kernel module is loaded (kernel): no
	// check is then a problem for this machine.
	noModule bool
}

// add records a check. On a machine with no NVIDIA kernel module (kernel
// says so first) nothing is a problem for that machine: what would be one
// on a machine with the driver is information, and says so.
func (d *doctor) add(id string, s Status, fix []string, format string, args ...any) *Check {
	msg := fmt.Sprintf(format, args...)
	if s == StatusProblem && d.noModule {
		s, msg = StatusInfo, onDriverMachine+msg
	}
	d.rep.Checks = append(d.rep.Checks, Check{ID: id, Status: s, Message: msg, Fix: fix})
	return &d.rep.Checks[len(d.rep.Checks)-1]
}

// onDriverMachine starts what would be a problem on a machine with the
// NVIDIA driver, said on one without.
const onDriverMachine = "on a machine with the NVIDIA driver: "

// patchCommand is the cudapatch command line that patches file: the file
// a chain of symbolic links at file leads to, so that the command patches
// it wherever it lies (the main job follows a link named on its command
// line only into the link's own directory).
func (d *doctor) patchCommand(file string) string {
	chain := d.chain(file)
	return "cudapatch " + chain[len(chain)-1]
}

func (d *doctor) host(p string) string {
	if d.sys.Root == "" {
		return p
	}
	return filepath.Join(d.sys.Root, filepath.FromSlash(p))
}

func (d *doctor) isDriverLib(name string) bool {
	for _, p := range d.driver {
		if p.Match(path.Base(name)) {
			return true
		}
	}
	return false
}

// machines maps GOARCH to the ELF machine of the programs it runs.
var machines = map[string]elf.Machine{
	"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "ppc64le": elf.EM_PPC64,
	"riscv64": elf.EM_RISCV, "s390x": elf.EM_S390, "386": elf.EM_386,
}

func withDefaults(sys System) System {
	if sys.Proc == "" {
		sys.Proc = "/proc"
	}
	if sys.Sys == "" {
		sys.Sys = "/sys"
	}
	if sys.DriverLink == "" {
		sys.DriverLink = policy.DefaultDriverLink
	}
	if sys.Machine == 0 {
		sys.Machine = machines[runtime.GOARCH]
	}
	return sys
}

// Diagnose inspects the system and, when file is not "", which libcuda the
// program at file (a path inside sys.Root) would load. The report carries
// the driver-link fix plan when the link needs one.
func Diagnose(ctx context.Context, sys System, file string) (*Report, error) {
	sys = withDefaults(sys)
	d := &doctor{sys: sys, rep: &Report{System: sys, Checks: []Check{}}, libs: map[string]Libcuda{}}
	for _, p := range policy.DriverLibraries {
		d.driver = append(d.driver, fnmatch.Compile(p))
	}
	if data, err := os.ReadFile(d.host("/etc/ld.so.cache")); err == nil {
		if c, err := ldso.ParseCache(data); err == nil {
			d.cache = c
		} else {
			d.add("ld.so.cache", StatusWarning, nil, "%s does not parse: %v", d.host("/etc/ld.so.cache"), err)
		}
	}
	d.kernel()
	d.hostDriver()
	d.rep.DriverSource = d.driverSource()
	if d.rep.KernelModule != "" {
		d.rep.Fix = d.planFix()
	}
	d.link()
	d.ldLibraryPath()
	if file != "" {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := d.program(file); err != nil {
			return nil, err
		}
	}
	return d.rep, nil
}

// kernel reads the loaded module's version.
func (d *doctor) kernel() {
	d.rep.KernelModule = nvdriver.KernelModule(d.sys.Proc, d.sys.Sys)
	if d.rep.KernelModule == "" {
		d.add("kernel-module", StatusInfo, nil,
			"no NVIDIA kernel module is loaded (no %s, no %s): this machine cannot run CUDA programs, so nothing below is a problem for it; the checks still show what a CUDA program would find",
			filepath.Join(d.sys.Proc, "driver/nvidia/version"), filepath.Join(d.sys.Sys, "module/nvidia/version"))
		d.noModule = true
		return
	}
	d.add("kernel-module", StatusOK, nil, "NVIDIA kernel module %s is loaded", d.rep.KernelModule)
}

// hostDriver finds the host's libcuda.so.1 in ld.so.cache.
func (d *doctor) hostDriver() {
	if d.cache == nil {
		return
	}
	for _, e := range d.cache.Entries {
		if e.Name == "libcuda.so.1" && !slices.Contains(d.rep.HostDriverDirs, path.Dir(e.Path)) {
			d.rep.HostDriverDirs = append(d.rep.HostDriverDirs, path.Dir(e.Path))
		}
	}
	if len(d.rep.HostDriverDirs) == 0 {
		d.add("host-driver", StatusInfo, nil, "ld.so.cache lists no libcuda.so.1: the host has no NVIDIA driver libraries installed through its package manager")
		return
	}
	for _, dir := range d.rep.HostDriverDirs {
		l := d.libcuda(dir+"/libcuda.so.1", "ld.so.cache")
		st, msg, fix := d.judge(l)
		if st == StatusOK {
			d.add("host-driver", StatusOK, nil, "the host's driver libraries are in %s (libcuda %s)", dir, orUnknown(l.version()))
			continue
		}
		d.add("host-driver", st, fix, "ld.so.cache lists %s: %s", l.describe(), msg)
	}
}

func orUnknown(v string) string {
	if v == "" {
		return "version unknown"
	}
	return v
}

// chain follows the symbolic links from logical path p inside the root
// (absolute targets start again at the root) and returns every path on the
// way, p first.
func (d *doctor) chain(p string) []string {
	out := []string{p}
	for range 40 {
		t, err := os.Readlink(d.host(p))
		if err != nil {
			break
		}
		if !path.IsAbs(t) {
			t = path.Join(path.Dir(p), t)
		}
		p = t
		out = append(out, p)
	}
	return out
}

// isFile reports whether logical path p is, after its links, a regular file.
func (d *doctor) isFile(p string) bool {
	c := d.chain(p)
	st, err := os.Lstat(d.host(c[len(c)-1]))
	return err == nil && st.Mode().IsRegular()
}

// libcuda describes the libcuda at logical path p, reached by step.
func (d *doctor) libcuda(p, step string) Libcuda {
	c := d.chain(p)
	file := c[len(c)-1]
	l := Libcuda{Path: p, File: file, Step: step}
	for _, q := range c {
		if v := nvdriver.NameVersion(q); v != "" {
			l.NameVersion = v
		}
	}
	read, ok := d.libs[file]
	if !ok {
		if sel, err := selector.Read(d.host(file)); err == nil {
			read = Libcuda{Kind: KindSelector, Selector: sel}
		} else if r, err := nvdriver.ReadLibcudaFile(d.host(file)); err == nil {
			read = Libcuda{Version: r.Version}
			if r.Stub {
				read.Kind = KindStub
			}
		}
		d.libs[file] = read
	}
	l.Version = read.Version
	dir := path.Dir(p)
	switch {
	case read.Kind == KindSelector:
		l.Kind, l.Selector = KindSelector, read.Selector
		c := read.Selector.Choose(nvdriver.ReadMachine(d.sys.Proc, d.sys.Sys))
		l.Takes = &c
	case read.Kind == KindStub || policy.IsStubDir(dir):
		l.Kind = KindStub
	case policy.IsCompatDir(dir):
		l.Kind = KindCompat
	case path.Clean(dir) == d.sys.DriverLink:
		l.Kind = KindDriverLink
	default:
		l.Kind = KindDriver
	}
	return l
}

// judge says whether a libcuda works with the loaded kernel module, and
// how to fix it if not.
func (d *doctor) judge(l Libcuda) (Status, string, []string) {
	km, v := d.rep.KernelModule, l.version()
	if l.Kind == KindSelector {
		return d.judgeSelector(l)
	}
	switch {
	case l.Kind == KindStub:
		return StatusProblem, "a link-time stub: CUDA fails with \"CUDA driver is a stub library\"", nil
	case km == "":
		return StatusOK, "", nil
	case v == "":
		return StatusWarning, "its version is unknown (neither its file name nor its contents say), so it cannot be checked against the kernel module " + km, nil
	case l.Kind == KindCompat && nvdriver.Compare(v, km) < 0:
		return StatusProblem, fmt.Sprintf("cuda_compat %s is older than the kernel module %s: CUDA fails with error 803 (system has unsupported display driver / cuda driver combination)", v, km),
			[]string{"rebuild with the libcuda selector (cudapatch --cuda-compat DIR --cuda-compat-selector OUT), which takes the driver " + km + " here and compat where it is newer"}
	case l.Kind == KindCompat && nvdriver.Compare(v, km) > 0:
		return StatusOK, fmt.Sprintf("cuda_compat %s is newer than the kernel module %s (forward compatibility, which only data-center GPUs support)", v, km), nil
	case l.Kind != KindCompat && v != km:
		return StatusProblem, fmt.Sprintf("libcuda %s but the kernel module is %s: CUDA fails with \"driver/library version mismatch\"", v, km), nil
	}
	return StatusOK, "", nil
}

// driverLibsIn lists the driver libraries of dir (inside the root) with a
// versioned soname (libcuda.so.1, not libcuda.so or libcuda.so.580.159.04).
func (d *doctor) driverLibsIn(dir string) []string {
	ents, err := os.ReadDir(d.host(dir))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		n := e.Name()
		if d.isDriverLib(n) && isSonameLink(n) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// isSonameLink reports names like libcuda.so.1: ".so." and one number.
func isSonameLink(n string) bool {
	i := strings.LastIndex(n, ".so.")
	if i < 0 {
		return false
	}
	v := n[i+4:]
	return v != "" && strings.Trim(v, "0123456789") == ""
}

// native reports whether the library at logical path p is an ELF file of
// this system's machine, the only ones the driver link may hold (32-bit
// x86 libraries go to the -32 link).
func (d *doctor) native(p string) bool {
	c := d.chain(p)
	f, err := elfedit.Open(d.host(c[len(c)-1]))
	if err != nil {
		return false
	}
	defer f.Close()
	in := f.Info()
	return in.ELFMachine() == d.sys.Machine
}

// driverSource picks the directory the driver link should point into:
// among ld.so.cache's driver directories and LD_LIBRARY_PATH's, the first
// whose libcuda.so.1 is of this machine and matches the kernel module,
// else the first of this machine.
func (d *doctor) driverSource() string {
	var dirs []string
	dirs = append(dirs, d.rep.HostDriverDirs...)
	for _, e := range splitPath(d.sys.LDLibraryPath) {
		if e != "" && path.IsAbs(e) && !slices.Contains(dirs, path.Clean(e)) {
			dirs = append(dirs, path.Clean(e))
		}
	}
	first := ""
	for _, dir := range dirs {
		p := dir + "/libcuda.so.1"
		if dir == d.sys.DriverLink || policy.IsStubDir(dir) || policy.IsCompatDir(dir) || !d.isFile(p) || !d.native(p) {
			continue
		}
		l := d.libcuda(p, "")
		if l.Kind != KindDriver {
			continue
		}
		if d.rep.KernelModule != "" && l.version() == d.rep.KernelModule {
			return dir
		}
		if first == "" {
			first = dir
		}
	}
	return first
}

// linkFix is the fix of a broken driver link: `cudapatch doctor --fix`,
// and the commands it runs, to run by hand instead.
func (d *doctor) linkFix() []string {
	switch {
	case d.rep.KernelModule == "":
		return nil // nothing to link to, and nothing that needs it
	case d.rep.Fix == nil || d.rep.Fix.Source == "":
		return []string{"install the NVIDIA user-space driver of the kernel module " + d.rep.KernelModule + ", then run cudapatch doctor again"}
	case len(d.rep.Fix.Conflicts) > 0:
		fix := []string{"# cudapatch doctor --fix will not overwrite what it did not write:"}
		for _, c := range d.rep.Fix.Conflicts {
			fix = append(fix, "#   "+c)
		}
		return append(fix, "# remove those by hand, then: sudo cudapatch doctor --fix")
	}
	fix := []string{"sudo cudapatch doctor --fix   # which runs, as root:"}
	for _, s := range d.rep.Fix.Steps {
		fix = append(fix, s.Shell()...)
	}
	return fix
}

// link checks the driver link and its libcuda.so.1.
func (d *doctor) link() {
	link := d.sys.DriverLink
	// A missing driver is only a problem where a driver is loaded.
	bad := StatusProblem
	if d.rep.KernelModule == "" {
		bad = StatusInfo
	}
	st, err := os.Stat(d.host(link))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		d.rep.LinkBroken = bad == StatusProblem
		d.add("driver-link", bad, d.linkFix(), "%s does not exist: Nix-built CUDA programs find the driver only there", link)
		return
	case err != nil:
		d.add("driver-link", StatusProblem, nil, "%s: %v", link, err)
		return
	case !st.IsDir():
		d.rep.LinkBroken = true
		d.add("driver-link", StatusProblem, d.linkFix(), "%s is not a directory", link)
		return
	}
	lib := link + "/libcuda.so.1"
	if !d.isFile(lib) {
		d.rep.LinkBroken = bad == StatusProblem
		d.add("driver-libcuda", bad, d.linkFix(), "%s exists but holds no (working link to) libcuda.so.1", link)
		return
	}
	l := d.libcuda(lib, "driver link")
	d.rep.LinkDriver = l.version()
	if l.Kind == KindStub {
		d.rep.LinkBroken = true
		d.add("driver-libcuda", StatusProblem, d.linkFix(), "%s holds a stub libcuda.so.1 (%s): CUDA fails with \"CUDA driver is a stub library\"", link, l.File)
		return
	}
	d.add("driver-libcuda", StatusOK, nil, "%s holds libcuda.so.1 (%s)", link, orUnknown(l.version()))
	switch v := l.version(); {
	case d.rep.KernelModule == "" || v == "":
	case v != d.rep.KernelModule:
		d.rep.LinkBroken = true
		fix := d.linkFix()
		if d.rep.Fix != nil && d.rep.Fix.Source != "" && d.versionIn(d.rep.Fix.Source) != d.rep.KernelModule {
			fix = []string{fmt.Sprintf("point the libraries in %s at the driver %s, or reboot if the driver was upgraded and the old module is still loaded", link, d.rep.KernelModule)}
		}
		d.add("driver-version", StatusProblem, fix, "libcuda.so.1 in %s is %s but the loaded kernel module is %s: CUDA fails with \"driver/library version mismatch\"", link, v, d.rep.KernelModule)
	default:
		d.add("driver-version", StatusOK, nil, "libcuda %s matches the kernel module", v)
	}
	if !d.rep.LinkBroken && d.rep.KernelModule != "" && !d.madeAtBoot(link) {
		var fix []string
		if d.rep.Fix != nil && d.rep.Fix.Source != "" {
			fix = d.linkFix()
		}
		d.add("driver-link-boot", StatusInfo, fix,
			"no tmpfiles.d configuration names %s: /run is a tmpfs, so the link is gone after a reboot unless something else makes it", link)
	}
}

// madeAtBoot reports whether a systemd-tmpfiles configuration names the
// driver link (or the system makes it otherwise: a symbolic link, as on
// NixOS).
func (d *doctor) madeAtBoot(link string) bool {
	for q := link; q != "/" && q != "."; q = path.Dir(q) {
		if st, err := os.Lstat(d.host(q)); err == nil && st.Mode()&fs.ModeSymlink != 0 {
			return true
		}
	}
	for _, dir := range []string{"/etc/tmpfiles.d", "/run/tmpfiles.d", "/usr/lib/tmpfiles.d"} {
		ents, _ := os.ReadDir(d.host(dir))
		for _, e := range ents {
			b, err := os.ReadFile(d.host(path.Join(dir, e.Name())))
			if err == nil && strings.Contains(string(b), link) {
				return true
			}
		}
	}
	return false
}

func (d *doctor) versionIn(dir string) string {
	return d.libcuda(dir+"/libcuda.so.1", "").version()
}

// splitPath splits a search path as glibc does: at ':' and ';'.
func splitPath(s string) []string {
	if s == "" {
		return nil
	}
	return strings.FieldsFunc(s, func(r rune) bool { return r == ':' || r == ';' })
}

// ldLibraryPath checks what LD_LIBRARY_PATH puts ahead of every RUNPATH:
// stub directories, driver libraries other than the driver link's, a
// cuda_compat older than the kernel module, empty entries (the current
// directory). All of them are one problem with one fix: the value without
// those entries, or unset when nothing is left.
func (d *doctor) ldLibraryPath() {
	llp := d.sys.LDLibraryPath
	if llp == "" {
		return
	}
	status := StatusOK
	var keep, why []string
	raise := func(s Status) {
		if s.rank() > status.rank() {
			status = s
		}
	}
	// glibc splits at ':' and ';', and an empty element is the current
	// directory.
	for _, e := range strings.Split(strings.ReplaceAll(llp, ";", ":"), ":") {
		switch {
		case e == "":
			raise(StatusWarning)
			why = append(why, "an empty entry, which the loader takes for the current directory")
			continue
		case policy.IsStubDir(e):
			raise(StatusProblem)
			why = append(why, fmt.Sprintf("%s, a stub directory: CUDA fails with \"CUDA driver is a stub library\"", e))
			continue
		case policy.IsCompatDir(e) && d.isFile(path.Join(e, "libcuda.so.1")):
			l := d.libcuda(path.Join(e, "libcuda.so.1"), "LD_LIBRARY_PATH")
			if st, msg, _ := d.judge(l); st == StatusProblem {
				raise(st)
				why = append(why, fmt.Sprintf("%s: %s", e, msg))
				continue
			}
		case path.Clean(e) != d.sys.DriverLink && len(d.driverLibsIn(e)) > 0:
			libs := d.driverLibsIn(e)
			s, what := StatusWarning, "harmless while it matches the kernel module"
			if d.isFile(path.Join(e, "libcuda.so.1")) {
				l := d.libcuda(path.Join(e, "libcuda.so.1"), "LD_LIBRARY_PATH")
				if st, msg, _ := d.judge(l); st == StatusProblem {
					s, what = st, msg
				} else if v := l.version(); v != "" {
					what = "driver " + v + ", " + what
				}
			}
			raise(s)
			why = append(why, fmt.Sprintf("%s, which provides %s (%s)", e, strings.Join(libs, ", "), what))
			continue
		}
		keep = append(keep, e)
	}
	if len(why) == 0 {
		d.add("ld-library-path", StatusInfo, []string{"unset LD_LIBRARY_PATH"}, "LD_LIBRARY_PATH=%s is set: it outranks every RUNPATH, so it can shadow the libraries Nix chose", llp)
		return
	}
	fix := "unset LD_LIBRARY_PATH"
	if len(keep) > 0 {
		fix = "export LD_LIBRARY_PATH=" + strings.Join(keep, ":")
	}
	c := d.add("ld-library-path", status, []string{fix},
		"LD_LIBRARY_PATH comes before every RUNPATH, so it shadows the driver link and cuda_compat; it holds %s", plural(len(why), "entry that does", "entries that do"))
	c.Details = why
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// loaderOf is the loader that runs file: nixpkgs' glibc for a program
// whose interpreter is in a Nix store, the host's glibc for anything else
// (a library is loaded by whatever program the host runs).
func loaderOf(in elfedit.Info) ldso.Loader {
	if strings.HasPrefix(in.Interpreter, "/nix/store/") {
		return ldso.LoaderNixOS
	}
	return ldso.LoaderStock
}

// program says which libcuda.so.1 file would load, and lists every one it
// could: through DT_NEEDED (the loader simulation), or else through the
// dlopen of a known dlopener it loads, or of the file itself when it loads
// none (searched as dlopen does: LD_LIBRARY_PATH, the caller's RUNPATH,
// ld.so.cache, the default directories).
func (d *doctor) program(file string) error {
	f, err := elfedit.Open(d.host(file))
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	in := f.Info()
	f.Close()
	cfg, err := ldso.DefaultConfig(d.sys.Root, in.ELFClass(), in.ELFMachine())
	if err != nil {
		return err
	}
	cfg.LDLibraryPath = d.sys.LDLibraryPath
	cfg.Loader = loaderOf(in)
	read := ldso.ElfReader()
	tr, err := ldso.Resolve(cfg, read, file)
	if err != nil {
		return err
	}
	where, how, requester, step := "", "", "", ""
	for _, n := range tr.Needs {
		if n.Name == "libcuda.so.1" {
			switch {
			case !n.Found() && d.noModule && driverLinkStep(n, d.sys.DriverLink) != "":
				// Not found here for want of a driver; where there is
				// one, the driver link holds it.
				d.add("program-libcuda", StatusInfo, nil,
					"%s needs libcuda.so.1 and finds none on this machine; it searches the driver link %s (%s of %s), where a machine with the NVIDIA driver has it",
					file, d.sys.DriverLink, driverLinkStep(n, d.sys.DriverLink), n.Requester)
				return nil
			case !n.Found():
				d.add("program-libcuda", StatusProblem, []string{d.patchCommand(file) + "   # adds the driver link to its RUNPATH"},
					"%s needs libcuda.so.1 and the loader would not find it", file)
				return nil
			}
			where, how, requester = n.Path, fmt.Sprintf("DT_NEEDED of %s, %s", n.Requester, n.Step), n.Requester
			step = string(n.Step)
			switch n.Step {
			case ldso.StepRunPath, ldso.StepRPath, ldso.StepNote:
				step += " of " + n.Requester
			}
			break
		}
	}
	var callers []string
	dlopeners := 0
	if where == "" {
		// The known dlopeners are the ones that open libcuda; the file
		// itself only when it loads none (a program that links the CUDA
		// runtime statically).
		for _, n := range tr.Needs {
			if n.Found() && !n.AlreadyLoaded && matchAny(policy.KnownDlopeners, n.Path) {
				callers = append(callers, path.Clean(n.Path))
			}
		}
		dlopeners = len(callers)
		if dlopeners == 0 {
			callers = []string{file}
		}
		for _, c := range callers {
			if cands := d.candidates(cfg, read, c); len(cands) > 0 {
				where, how, requester = cands[0].Path, fmt.Sprintf("dlopen from %s, %s", c, cands[0].Step), c
				break
			}
		}
	}
	if where == "" {
		if tag := d.searchesLink(read, callers[0]); dlopeners > 0 && d.noModule && tag != "" {
			d.add("program-libcuda", StatusInfo, nil,
				"%s loads %s, which dlopens libcuda.so.1 and finds none on this machine; it searches the driver link %s (%s), where a machine with the NVIDIA driver has it",
				file, callers[0], d.sys.DriverLink, tag)
			return nil
		}
		if dlopeners > 0 {
			fix := []string{d.patchCommand(callers[0]) + "   # puts the driver link in its RUNPATH"}
			if d.rep.LinkBroken {
				fix = d.linkFix()
			}
			d.add("program-libcuda", StatusProblem, fix,
				"%s loads %s, which dlopens libcuda.so.1, and the loader would find none (LD_LIBRARY_PATH, its RUNPATH, ld.so.cache, the default directories): CUDA fails with \"no CUDA-capable device is detected\"", file, callers[0])
			return nil
		}
		d.add("program-libcuda", StatusInfo, nil, "%s neither needs libcuda.so.1 nor loads a known dlopener", file)
		return nil
	}
	requester = path.Clean(requester)
	cands := d.candidates(cfg, read, requester)
	i := slices.IndexFunc(cands, func(l Libcuda) bool { return l.Path == where })
	if i < 0 {
		// Found by a step the candidates do not model (a resolution-cache
		// note): it comes first.
		cands = append([]Libcuda{d.libcuda(where, how)}, cands...)
		i = 0
	}
	cands[i].Loads = true
	if step != "" {
		cands[i].Step = step // as the loader simulation found it
	}
	d.rep.Libcuda = cands
	var details []string
	for _, l := range cands {
		details = append(details, l.describe())
	}
	win := cands[i]
	st, msg, fix := d.judge(win)
	var c *Check
	switch {
	case win.Kind == KindStub:
		c = d.add("program-libcuda", StatusProblem, []string{d.patchCommand(file) + "   # rewrites the RUNPATH: driver link first, stubs removed"},
			"%s would load the stub %s (%s): CUDA fails with \"CUDA driver is a stub library\"", file, where, how)
	case win.Kind == KindSelector:
		c = d.add("program-libcuda", st, fix, "%s would load the libcuda selector %s (%s): %s", file, where, how, msg)
	case win.Kind == KindCompat:
		if msg != "" {
			msg = ": " + msg
		}
		c = d.add("program-libcuda", st, fix, "%s would load the cuda_compat libcuda %s (%s, %s)%s", file, where, orUnknown(win.version()), how, msg)
	case st != StatusOK:
		if win.Kind == KindDriverLink {
			fix = d.linkFix()
		}
		c = d.add("program-libcuda", st, fix, "%s would load %s (%s): %s", file, where, how, msg)
	case win.Kind == KindDriverLink:
		c = d.add("program-libcuda", StatusOK, nil, "%s would load libcuda.so.1 from the driver link (%s)", file, how)
	default:
		c = d.add("program-libcuda", StatusWarning, nil, "%s would load %s (%s), not the driver link's libcuda", file, where, how)
	}
	c.Details = append([]string{fmt.Sprintf("every libcuda.so.1 it could load, in the loader's order (kernel module %s):", orUnknown(d.rep.KernelModule))}, details...)
	return nil
}

// driverLinkStep is the step in which the loader tried dir for n ("" if
// none did).
func driverLinkStep(n *ldso.Need, dir string) string {
	for _, a := range n.Tried {
		if path.Clean(a.Dir) == path.Clean(dir) {
			return string(a.Step)
		}
	}
	return ""
}

func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if fnmatch.Match(p, path.Base(name)) {
			return true
		}
	}
	return false
}

// searchesLink says where caller's own search path (DT_RUNPATH, else
// DT_RPATH) names the driver link, as "runpath of CALLER"; "" where it
// does not.
func (d *doctor) searchesLink(read ldso.Reader, caller string) string {
	o, err := read(d.host(caller))
	if err != nil {
		return ""
	}
	search, tag := o.RunPath, "runpath"
	if !o.HasRunPath {
		search, tag = o.RPath, "rpath"
	}
	for _, e := range strings.Split(search, ":") {
		if e != "" && path.Clean(e) == path.Clean(d.sys.DriverLink) {
			return tag + " of " + caller
		}
	}
	return ""
}

// candidates lists every libcuda.so.1 the loader could take for a request
// from caller, in its search order: LD_LIBRARY_PATH, the caller's
// DT_RUNPATH (or DT_RPATH when it has none), ld.so.cache, the default
// directories. A file reached twice is listed once.
func (d *doctor) candidates(cfg ldso.Config, read ldso.Reader, caller string) []Libcuda {
	const name = "libcuda.so.1"
	o, err := read(d.host(caller))
	if err != nil {
		return nil
	}
	var out []Libcuda
	seen := map[string]bool{}
	try := func(p, step string) {
		p = path.Clean(p)
		if !d.isFile(p) {
			return
		}
		c := d.chain(p)
		if seen[c[len(c)-1]] {
			return
		}
		// The loader passes over a library of another class or machine
		// (the 32-bit driver in an LD_LIBRARY_PATH directory).
		if l, err := read(d.host(c[len(c)-1])); err != nil || l.Class != o.Class || l.Machine != o.Machine {
			return
		}
		seen[c[len(c)-1]] = true
		out = append(out, d.libcuda(p, step))
	}
	if !cfg.Secure {
		for _, dir := range splitPath(cfg.LDLibraryPath) {
			try(path.Join(dir, name), "LD_LIBRARY_PATH")
		}
	}
	search, tag := o.RunPath, "runpath"
	if !o.HasRunPath {
		search, tag = o.RPath, "rpath"
	}
	for _, e := range strings.Split(search, ":") {
		e = strings.ReplaceAll(strings.ReplaceAll(e, "${ORIGIN}", path.Dir(caller)), "$ORIGIN", path.Dir(caller))
		if e != "" && path.IsAbs(e) {
			try(path.Join(e, name), tag+" of "+caller)
		}
	}
	if cfg.Cache != nil {
		if p, ok := cfg.Cache.Lookup(name, o.Class, o.Machine); ok {
			try(p, "ld.so.cache")
		}
	}
	for _, dir := range cfg.DefaultDirs {
		try(path.Join(dir, name), "default")
	}
	return out
}

// judgeSelector says what a libcuda selector takes on this machine, and
// judges that library as the loader would take it.
func (d *doctor) judgeSelector(l Libcuda) (Status, string, []string) {
	c := *l.Takes
	switch c.Use {
	case nvdriver.UseNone:
		return StatusInfo, "the selector takes nothing here: " + c.Reason + "; every CUDA call answers CUDA_ERROR_NO_DEVICE (100)", nil
	case nvdriver.UseCompat:
		t := d.libcuda(l.Selector.Compat, "selector")
		t.Kind = KindCompat
		if st, msg, fix := d.judge(t); st != StatusOK {
			return st, fmt.Sprintf("the selector takes cuda_compat %s (%s), and %s", l.Selector.Compat, c.Reason, msg), fix
		}
		return StatusOK, fmt.Sprintf("the selector takes cuda_compat %s: %s", l.Selector.Compat, c.Reason), nil
	}
	for _, p := range l.Selector.Driver {
		if !d.isFile(p) {
			continue
		}
		st, msg, fix := d.judge(d.libcuda(p, "selector"))
		if st == StatusOK && c.Fallback {
			st, msg = StatusWarning, "a program built for compat's CUDA may need a newer driver"
		}
		if st != StatusOK {
			return st, fmt.Sprintf("the selector takes the driver's %s (%s): %s", p, c.Reason, msg), fix
		}
		return StatusOK, fmt.Sprintf("the selector takes the driver's %s: %s", p, c.Reason), nil
	}
	return StatusProblem, fmt.Sprintf("the selector takes the driver (%s), but none of %s exists: every CUDA call answers CUDA_ERROR_NO_DEVICE (100)", c.Reason, strings.Join(l.Selector.Driver, ", ")), d.linkFix()
}

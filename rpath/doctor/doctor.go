// Package doctor diagnoses a machine that runs Nix-built CUDA programs,
// typically on another distribution than NixOS: is the driver link
// (/run/opengl-driver/lib) there, does it hold libcuda.so.1, does that
// match the loaded kernel module, where the host's own driver lives, what
// LD_LIBRARY_PATH shadows, and which libcuda a given program would load.
// Every finding carries the exact fix. It builds on rpath (the driver
// library names, stub directories), rpath/ldso (the loader simulation) and
// rpath/lint (known dlopeners, compat directories).
//
// All system paths come from a [System], so tests run it on fake trees.
// The package never prints; Diagnose returns a [Report].
package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/cudapatch/cudapatch/rpath"
	"github.com/cudapatch/cudapatch/rpath/elfedit"
	"github.com/cudapatch/cudapatch/rpath/fnmatch"
	"github.com/cudapatch/cudapatch/rpath/ldso"
	"github.com/cudapatch/cudapatch/rpath/lint"
)

// System says where the machine's state is read from.
type System struct {
	// Root is prepended to every absolute system path (the driver link,
	// /etc/ld.so.cache, the library directories); "" is the host.
	Root string `json:"root,omitempty"`
	// Proc and Sys are where procfs and sysfs are mounted; defaults
	// /proc and /sys (not under Root).
	Proc string `json:"proc"`
	Sys  string `json:"sys"`
	// DriverLink defaults to /run/opengl-driver/lib.
	DriverLink string `json:"driver_link"`
	// LDLibraryPath is the environment's LD_LIBRARY_PATH.
	LDLibraryPath string `json:"ld_library_path,omitempty"`
}

// Host returns the System of this machine, with the given LD_LIBRARY_PATH.
func Host(ldLibraryPath string) System {
	return System{Proc: "/proc", Sys: "/sys", DriverLink: rpath.DefaultDriverLink, LDLibraryPath: ldLibraryPath}
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

// Check is one finding.
type Check struct {
	ID      string `json:"id"`
	Status  Status `json:"status"`
	Message string `json:"message"`
	// Fix lists exact commands or file lines that repair it, in order.
	Fix []string `json:"fix,omitempty"`
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
	Checks         []Check  `json:"checks"`
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
}

func (d *doctor) add(id string, s Status, fix []string, format string, args ...any) {
	d.rep.Checks = append(d.rep.Checks, Check{ID: id, Status: s, Message: fmt.Sprintf(format, args...), Fix: fix})
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

// Diagnose inspects the system and, when file is not "", which libcuda the
// program at file (a path inside sys.Root) would load.
func Diagnose(ctx context.Context, sys System, file string) (*Report, error) {
	if sys.Proc == "" {
		sys.Proc = "/proc"
	}
	if sys.Sys == "" {
		sys.Sys = "/sys"
	}
	if sys.DriverLink == "" {
		sys.DriverLink = rpath.DefaultDriverLink
	}
	d := &doctor{sys: sys, rep: &Report{System: sys, Checks: []Check{}}}
	for _, p := range rpath.DriverLibraries {
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

var (
	procVersion = regexp.MustCompile(`Kernel Module(?: for \S+)?\s+([0-9][0-9.]*)`)
	soVersion   = regexp.MustCompile(`^libcuda\.so\.([0-9]+\.[0-9][0-9.]*)$`)
	sonameLink  = regexp.MustCompile(`\.so\.[0-9]+$`)
)

// kernel reads the loaded module's version: /proc/driver/nvidia/version
// ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  …", or
// "… Open Kernel Module for x86_64  580.159.04 …"), else
// /sys/module/nvidia/version.
func (d *doctor) kernel() {
	if b, err := os.ReadFile(filepath.Join(d.sys.Proc, "driver/nvidia/version")); err == nil {
		if m := procVersion.FindSubmatch(b); m != nil {
			d.rep.KernelModule = string(m[1])
		}
	}
	if d.rep.KernelModule == "" {
		if b, err := os.ReadFile(filepath.Join(d.sys.Sys, "module/nvidia/version")); err == nil {
			d.rep.KernelModule = strings.TrimSpace(string(b))
		}
	}
	if d.rep.KernelModule == "" {
		d.add("kernel-module", StatusInfo, nil,
			"no NVIDIA kernel module is loaded (no %s, no %s): this machine cannot run CUDA programs, so nothing below is a problem for it; the checks still show what a CUDA program would find",
			filepath.Join(d.sys.Proc, "driver/nvidia/version"), filepath.Join(d.sys.Sys, "module/nvidia/version"))
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
		v := d.versionOf(dir + "/libcuda.so.1")
		d.add("host-driver", StatusOK, nil, "the host's driver libraries are in %s (libcuda %s)", dir, orUnknown(v))
	}
}

func orUnknown(v string) string {
	if v == "" {
		return "version unknown"
	}
	return v
}

// versionOf returns the version of a libcuda from the name of the file its
// links end at (libcuda.so.580.159.04).
func (d *doctor) versionOf(p string) string {
	for _, q := range d.chain(p) {
		if m := soVersion.FindStringSubmatch(path.Base(q)); m != nil {
			return m[1]
		}
	}
	return ""
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

// driverLibsIn lists the driver libraries of dir (inside the root) with a
// versioned soname, as the links to make.
func (d *doctor) driverLibsIn(dir string) []string {
	ents, err := os.ReadDir(d.host(dir))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		n := e.Name()
		if d.isDriverLib(n) && sonameLink.MatchString(n) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// linkFix is how to (re)create the driver link from the host's driver in
// dir: a directory of symbolic links to the driver's libraries only (never
// a link to the whole system library directory, whose libc would then
// shadow the program's own), now and at every boot.
func (d *doctor) linkFix(dir string) []string {
	link := d.sys.DriverLink
	libs := d.driverLibsIn(dir)
	if len(libs) == 0 {
		libs = []string{"libcuda.so.1"}
	}
	fix := []string{"sudo mkdir -p " + link}
	for _, l := range libs {
		fix = append(fix, fmt.Sprintf("sudo ln -sfn %s/%s %s/%s", dir, l, link, l))
	}
	fix = append(fix, "# and at every boot, in /etc/tmpfiles.d/nvidia-driver-link.conf:")
	fix = append(fix, fmt.Sprintf("d %s 0755 root root -", link))
	for _, l := range libs {
		fix = append(fix, fmt.Sprintf("L+ %s/%s - - - - %s/%s", link, l, dir, l))
	}
	return fix
}

func (d *doctor) genericFix() []string {
	if d.rep.KernelModule == "" {
		return nil // nothing to link to, and nothing that needs it
	}
	if len(d.rep.HostDriverDirs) > 0 {
		return d.linkFix(d.rep.HostDriverDirs[0])
	}
	return []string{"install the NVIDIA driver for the loaded kernel module, then run cudapatch doctor again for the link commands"}
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
		d.add("driver-link", bad, d.genericFix(), "%s does not exist: Nix-built CUDA programs find the driver only there", link)
		return
	case err != nil:
		d.add("driver-link", StatusProblem, nil, "%s: %v", link, err)
		return
	case !st.IsDir():
		d.add("driver-link", StatusProblem, append([]string{"sudo rm " + link}, d.genericFix()...), "%s is not a directory", link)
		return
	}
	lib := link + "/libcuda.so.1"
	if !d.isFile(lib) {
		d.add("driver-libcuda", bad, d.genericFix(), "%s exists but holds no (working link to) libcuda.so.1", link)
		return
	}
	v := d.versionOf(lib)
	d.rep.LinkDriver = v
	d.add("driver-libcuda", StatusOK, nil, "%s holds libcuda.so.1 (%s)", link, orUnknown(v))
	switch {
	case d.rep.KernelModule == "" || v == "":
	case v != d.rep.KernelModule:
		var fix []string
		for _, dir := range d.rep.HostDriverDirs {
			if d.versionOf(dir+"/libcuda.so.1") == d.rep.KernelModule {
				fix = d.linkFix(dir)
			}
		}
		if fix == nil {
			fix = []string{fmt.Sprintf("point the libraries in %s at the driver %s, or reboot if the driver was upgraded and the old module is still loaded", link, d.rep.KernelModule)}
		}
		d.add("driver-version", StatusProblem, fix, "libcuda.so.1 in %s is %s but the loaded kernel module is %s: CUDA fails with \"driver/library version mismatch\"", link, v, d.rep.KernelModule)
	default:
		d.add("driver-version", StatusOK, nil, "libcuda %s matches the kernel module", v)
	}
}

func (d *doctor) ldLibraryPath() {
	llp := d.sys.LDLibraryPath
	if llp == "" {
		return
	}
	shadow := false
	for _, dir := range strings.FieldsFunc(llp, func(r rune) bool { return r == ':' || r == ';' }) {
		switch {
		case rpath.IsStubDir(dir):
			d.add("ld-library-path", StatusProblem, []string{without(llp, dir)},
				"LD_LIBRARY_PATH holds the stub directory %s, which comes before every RUNPATH: CUDA fails with \"CUDA driver is a stub library\"", dir)
			shadow = true
		case len(d.driverLibsIn(dir)) > 0 && path.Clean(dir) != d.sys.DriverLink:
			d.add("ld-library-path", StatusWarning, []string{without(llp, dir)},
				"LD_LIBRARY_PATH holds %s, which provides %s ahead of the driver link in every program's RUNPATH (and of cuda_compat)", dir, strings.Join(d.driverLibsIn(dir), ", "))
			shadow = true
		}
	}
	if !shadow {
		d.add("ld-library-path", StatusInfo, []string{"unset LD_LIBRARY_PATH"}, "LD_LIBRARY_PATH=%s is set: it outranks every RUNPATH, so it can shadow the libraries Nix chose", llp)
	}
}

func without(list, dir string) string {
	var keep []string
	for _, e := range strings.Split(list, ":") {
		if e != dir {
			keep = append(keep, e)
		}
	}
	if len(keep) == 0 {
		return "unset LD_LIBRARY_PATH"
	}
	return "export LD_LIBRARY_PATH=" + strings.Join(keep, ":")
}

// program says which libcuda.so.1 file would load: through DT_NEEDED
// (the loader simulation), or else through the dlopen of the program or
// of a known dlopener it loads (searched as dlopen does: LD_LIBRARY_PATH,
// the caller's RUNPATH, ld.so.cache, the default directories).
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
	read := ldso.ElfReader()
	tr, err := ldso.Resolve(cfg, read, file)
	if err != nil {
		return err
	}
	where, how := "", ""
	for _, n := range tr.Needs {
		if n.Name == "libcuda.so.1" {
			if !n.Found() {
				d.add("program-libcuda", StatusProblem, []string{"cudapatch " + file + "   # adds the driver link to its RUNPATH"},
					"%s needs libcuda.so.1 and the loader would not find it", file)
				return nil
			}
			where, how = n.Path, fmt.Sprintf("DT_NEEDED of %s, %s", n.Requester, n.Step)
			break
		}
	}
	if where == "" {
		callers := []string{file}
		for _, n := range tr.Needs {
			if n.Found() && !n.AlreadyLoaded && matchAny(lint.KnownDlopeners, n.Path) {
				callers = append(callers, n.Path)
			}
		}
		for _, c := range callers {
			if p, step := d.dlopen(cfg, read, c); p != "" {
				where, how = p, fmt.Sprintf("dlopen from %s, %s", c, step)
				break
			}
		}
	}
	if where == "" {
		d.add("program-libcuda", StatusInfo, nil, "%s neither needs libcuda.so.1 nor loads a known dlopener that would find it", file)
		return nil
	}
	dir := path.Dir(where)
	switch {
	case rpath.IsStubDir(dir):
		d.add("program-libcuda", StatusProblem, []string{"cudapatch " + file + "   # rewrites the RUNPATH: driver link first, stubs removed"},
			"%s would load the stub %s (%s): CUDA fails with \"CUDA driver is a stub library\"", file, where, how)
	case lint.IsCompatDir(dir):
		cv := d.versionOf(where)
		st, msg := StatusOK, ""
		if d.rep.KernelModule != "" && cv != "" && versionLess(cv, d.rep.KernelModule) {
			st, msg = StatusProblem, fmt.Sprintf(": compat %s is older than the kernel module %s, so CUDA fails with error 803 (unsupported display driver / cuda driver combination)", cv, d.rep.KernelModule)
		}
		var fix []string
		if st == StatusProblem {
			fix = []string{"rebuild without cuda_compat, or with a cuda_compat newer than the driver (cudapatch --cuda-compat only where it is newer)"}
		}
		d.add("program-libcuda", st, fix, "%s would load the cuda_compat libcuda %s (%s, %s)%s", file, where, orUnknown(cv), how, msg)
	case dir == d.sys.DriverLink:
		d.add("program-libcuda", StatusOK, nil, "%s would load libcuda.so.1 from the driver link (%s)", file, how)
	default:
		d.add("program-libcuda", StatusWarning, nil, "%s would load %s (%s), not the driver link's libcuda", file, where, how)
	}
	return nil
}

func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if fnmatch.Match(p, path.Base(name)) {
			return true
		}
	}
	return false
}

// dlopen searches libcuda.so.1 as a dlopen call from caller would.
func (d *doctor) dlopen(cfg ldso.Config, read ldso.Reader, caller string) (string, string) {
	const name = "libcuda.so.1"
	o, err := read(d.host(caller))
	if err != nil {
		return "", ""
	}
	try := func(dir string) bool { return d.isFile(path.Join(dir, name)) }
	if !cfg.Secure {
		for _, dir := range strings.FieldsFunc(cfg.LDLibraryPath, func(r rune) bool { return r == ':' || r == ';' }) {
			if try(dir) {
				return path.Join(dir, name), "LD_LIBRARY_PATH"
			}
		}
	}
	if o.HasRunPath {
		for _, e := range strings.Split(o.RunPath, ":") {
			e = strings.ReplaceAll(strings.ReplaceAll(e, "${ORIGIN}", path.Dir(caller)), "$ORIGIN", path.Dir(caller))
			if e != "" && try(e) {
				return path.Join(e, name), "runpath of " + caller
			}
		}
	}
	if p, ok := cfg.Cache.Lookup(name, o.Class, o.Machine); ok {
		return p, "ld.so.cache"
	}
	for _, dir := range cfg.DefaultDirs {
		if try(dir) {
			return path.Join(dir, name), "default"
		}
	}
	return "", ""
}

// versionLess compares dotted numeric versions.
func versionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(as), len(bs)); i++ {
		var x, y int
		if i < len(as) {
			fmt.Sscan(as[i], &x)
		}
		if i < len(bs) {
			fmt.Sscan(bs[i], &y)
		}
		if x != y {
			return x < y
		}
	}
	return false
}

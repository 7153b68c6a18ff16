package policy_test

import (
	"debug/elf"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cudapatch/cudapatch/rpath/policy"
)

// Rows of TestDecide are short through these helpers: a dependency of
// each source and outcome, a file's facts, a configuration.

func need(name, dir string) policy.Dep {
	return policy.Dep{Name: name, Source: policy.SourceNeeded, How: policy.HowStore, Path: dir + "/" + name, Dir: dir}
}

func noted(name, dir string) policy.Dep {
	d := need(name, dir)
	d.Source = policy.SourceDlopen
	return d
}

func spelled(name, dir string) policy.Dep {
	d := need(name, dir)
	d.Source = policy.SourceStrings
	return d
}

func how(d policy.Dep, how string) policy.Dep {
	if how != policy.HowStore && how != policy.HowVersioned && how != policy.HowFound {
		d.Path, d.Dir = "", ""
	}
	d.How = how
	return d
}

func driverDep(name string) policy.Dep { return how(need(name, ""), policy.HowDriver) }

func inheritedFrom(d policy.Dep, from string) policy.Dep { d.From = from; return d }

const store = "/nix/store"

func exeAt(path string, old ...string) policy.Facts {
	return policy.Facts{Path: path, Root: store + "/aaa-pkg", Machine: elf.EM_X86_64, Interpreter: "/lib64/ld-linux-x86-64.so.2", OldPath: old, Links: links{}}
}

func libAt(path string, old ...string) policy.Facts {
	f := exeAt(path, old...)
	f.Interpreter = ""
	return f
}

func cfg(mods ...func(*policy.Config)) *policy.Config {
	c := &policy.Config{DriverLink: "/run/opengl-driver/lib", DriverLink32: "/run/opengl-driver-32/lib", DriverLinkFor: policy.DriverLinkNeeded, BuildDirs: []string{"/build"}, Dlopen: policy.DlopenResolve}
	for _, m := range mods {
		m(c)
	}
	return c
}

// links answers for a file system of symbolic links only: each key leads
// to its value, every other path is itself.
type links map[string]string

func (l links) EvalSymlinks(p string) (string, error) {
	for from, to := range l {
		if p == from || strings.HasPrefix(p, from+"/") {
			return to + strings.TrimPrefix(p, from), nil
		}
	}
	return filepath.Clean(p), nil
}

func (l links) SameDir(a, b string) bool {
	ra, _ := l.EvalSymlinks(a)
	rb, _ := l.EvalSymlinks(b)
	return ra == rb
}

// TestDecide: the RUNPATH policy, as a table of files that do not exist.
func TestDecide(t *testing.T) {
	const (
		app    = store + "/aaa-pkg/bin/app"
		pkgLib = store + "/aaa-pkg/lib"
		dep    = store + "/bbb-dep/lib"
		dep2   = store + "/ccc-dep2/lib"
		compat = store + "/ddd-cuda_compat/lib"
		driver = "/run/opengl-driver/lib"
	)
	for _, tc := range []struct {
		name      string
		facts     policy.Facts
		deps      []policy.Dep
		inherited []policy.Dep
		cfg       *policy.Config
		runpath   string
		interp    string
		notes     []string // the names the resolution note answers
		hows      []string // of the deps as reported, when it matters
		entries   []string // Dep.Entry of the deps as reported, when it matters
		problems  []string // what the audit names, in order
		asRPath   bool
	}{
		{name: "resolved directories in DT_NEEDED order, duplicates once",
			facts: libAt(pkgLib + "/liba.so"), deps: []policy.Dep{need("libb.so", dep2), need("libc2.so", dep), need("libd.so", dep2)},
			cfg: cfg(), runpath: dep2 + ":" + dep, notes: []string{"libb.so", "libc2.so", "libd.so"}},
		{name: "cuda_compat before the driver link before resolved dirs before appended",
			facts: exeAt(app), deps: []policy.Dep{need("libb.so", dep), driverDep("libcuda.so.1")},
			cfg:     cfg(func(c *policy.Config) { c.CudaCompat = compat; c.AppendRunpaths = []string{"$ORIGIN/../plugins"} }),
			runpath: compat + ":" + driver + ":" + dep + ":$ORIGIN/../plugins", notes: []string{"libb.so", "libcuda.so.1"}},
		{name: "a driver library gets the driver link, never a directory of its own",
			facts: libAt(pkgLib + "/liba.so"), deps: []policy.Dep{driverDep("libcuda.so.1"), driverDep("libnvidia-ml.so.1")},
			cfg: cfg(), runpath: driver, notes: []string{"libcuda.so.1", "libnvidia-ml.so.1"}, hows: []string{policy.HowDriver, policy.HowDriver}},
		{name: "driver link for all files",
			facts: libAt(pkgLib + "/liba.so"), deps: []policy.Dep{need("libb.so", dep)},
			cfg: cfg(func(c *policy.Config) { c.DriverLinkFor = policy.DriverLinkAll }), runpath: driver + ":" + dep, notes: []string{"libb.so"}},
		{name: "driver link only where needed",
			facts: libAt(pkgLib + "/liba.so"), deps: []policy.Dep{need("libb.so", dep)},
			cfg: cfg(func(c *policy.Config) { c.CudaCompat = compat }), runpath: dep, notes: []string{"libb.so"}},
		{name: "no driver link at all",
			facts: libAt(pkgLib + "/liba.so"), deps: []policy.Dep{driverDep("libcuda.so.1")},
			cfg: cfg(func(c *policy.Config) { c.DriverLinkFor = policy.DriverLinkNone }), runpath: "", notes: []string{"libcuda.so.1"}},
		{name: "32-bit x86: the 32-bit driver link, no cuda_compat",
			facts: func() policy.Facts { f := libAt(pkgLib + "/liba.so"); f.Machine = elf.EM_386; return f }(), deps: []policy.Dep{driverDep("libcuda.so.1")},
			cfg: cfg(func(c *policy.Config) { c.CudaCompat = compat }), runpath: "/run/opengl-driver-32/lib", notes: []string{"libcuda.so.1"}},
		{name: "ignored, libc, absolute and missing names get no entry",
			facts: exeAt(app),
			deps: []policy.Dep{how(need("libgone.so", ""), policy.HowIgnored), how(need("libc.so.6", ""), policy.HowLibc),
				how(need("/opt/libx.so", ""), policy.HowAbsolute), how(need("libnowhere.so", ""), policy.HowMissing), need("libb.so", dep)},
			cfg: cfg(), runpath: dep, notes: []string{"libgone.so", "libc.so.6", "/opt/libx.so", "libnowhere.so", "libb.so"},
			hows: []string{policy.HowIgnored, policy.HowLibc, policy.HowAbsolute, policy.HowMissing, policy.HowStore}},
		{name: "keep-libc: libc resolved to its directory like any library",
			facts: exeAt(app), deps: []policy.Dep{need("libc.so.6", store+"/eee-glibc/lib"), need("libb.so", dep)},
			cfg: cfg(), runpath: store + "/eee-glibc/lib:" + dep, notes: []string{"libc.so.6", "libb.so"}},
		{name: "runtime dependencies first in an executable",
			facts: exeAt(app), deps: []policy.Dep{need("libb.so", dep)},
			cfg: cfg(func(c *policy.Config) {
				c.RuntimeDeps = []string{store + "/fff-rt/lib"}
				c.DriverLinkFor = policy.DriverLinkAll
			}),
			runpath: driver + ":" + store + "/fff-rt/lib:" + dep, notes: []string{"libb.so"}},
		{name: "runtime dependencies never in a library",
			facts: libAt(pkgLib + "/liba.so"), deps: []policy.Dep{need("libb.so", dep)},
			cfg: cfg(func(c *policy.Config) { c.RuntimeDeps = []string{store + "/fff-rt/lib"} }), runpath: dep, notes: []string{"libb.so"}},
		{name: "the interpreter of an executable, not of a library",
			facts: exeAt(app), deps: []policy.Dep{need("libb.so", dep)},
			cfg:     cfg(func(c *policy.Config) { c.Interpreter = store + "/eee-glibc/lib/ld-linux-x86-64.so.2" }),
			runpath: dep, interp: store + "/eee-glibc/lib/ld-linux-x86-64.so.2", notes: []string{"libb.so"}},
		{name: "no interpreter configured keeps the file's",
			facts: exeAt(app), deps: []policy.Dep{need("libb.so", dep)}, cfg: cfg(), runpath: dep, notes: []string{"libb.so"}},
		{name: "dlopen-Discovered and .note.dlopen directories after DT_NEEDED ones",
			facts: libAt(pkgLib + "/liba.so"), deps: []policy.Dep{need("libb.so", dep), noted("libplug.so", store+"/ggg-plug/lib"), spelled("libnvrtc.so.12", dep2)},
			cfg: cfg(), runpath: dep + ":" + store + "/ggg-plug/lib:" + dep2, notes: []string{"libb.so", "libplug.so", "libnvrtc.so.12"}},
		{name: "dlopen report: found, reported, not added",
			facts: libAt(pkgLib + "/liba.so"), deps: []policy.Dep{need("libb.so", dep), spelled("libnvrtc.so.12", dep2)},
			cfg:     cfg(func(c *policy.Config) { c.Dlopen = policy.DlopenReport }),
			runpath: dep, notes: []string{"libb.so"}, hows: []string{policy.HowStore, policy.HowFound}},
		{name: "dlopen report: a spelled driver library does not need the driver link",
			facts: libAt(pkgLib + "/liba.so"), deps: []policy.Dep{func() policy.Dep { d := driverDep("libcuda.so.1"); d.Source = policy.SourceStrings; return d }()},
			cfg: cfg(func(c *policy.Config) { c.Dlopen = policy.DlopenReport }), runpath: "", notes: []string{}},
		{name: "dlopen resolve: a spelled driver library needs it, with a note entry",
			facts: libAt(pkgLib + "/liba.so"), deps: []policy.Dep{func() policy.Dep { d := driverDep("libcuda.so.1"); d.Source = policy.SourceStrings; return d }()},
			cfg: cfg(), runpath: driver, notes: []string{"libcuda.so.1"}},
		{name: "a spelled name found nowhere is unresolved, never missing",
			facts: libAt(pkgLib + "/liba.so"), deps: []policy.Dep{how(spelled("libnope.so.1", ""), policy.HowMissing)},
			cfg: cfg(), runpath: "", notes: []string{}, hows: []string{policy.HowUnresolved}},
		{name: "a versioned name: its directory, no note entry",
			facts: libAt(pkgLib + "/liba.so"), deps: []policy.Dep{how(spelled("libcudnn_graph.so", dep2), policy.HowVersioned)},
			cfg: cfg(), runpath: dep2, notes: []string{}},
		{name: ".note.dlopen names answered once by the note",
			facts: libAt(pkgLib + "/liba.so"), deps: []policy.Dep{need("libb.so", dep), noted("libb.so", dep)},
			cfg: cfg(), runpath: dep, notes: []string{"libb.so"}},
		{name: "inherited names after the file's own, no note entry, own names win",
			facts: libAt(pkgLib + "/libcpu.so"), deps: []policy.Dep{need("libb.so", dep)},
			inherited: []policy.Dep{inheritedFrom(spelled("libnvrtc.so.12", dep2), pkgLib+"/libcuda_part.so"), inheritedFrom(spelled("libb.so", store+"/zzz/lib"), pkgLib+"/libcuda_part.so")},
			cfg:       cfg(), runpath: dep + ":" + dep2, notes: []string{"libb.so"}, hows: []string{policy.HowStore, policy.HowStore}},
		{name: "an inherited driver library brings the driver link",
			facts: libAt(pkgLib + "/libcpu.so"), inherited: []policy.Dep{inheritedFrom(func() policy.Dep { d := driverDep("libcuda.so.1"); d.Source = policy.SourceStrings; return d }(), pkgLib+"/libx.so")},
			cfg: cfg(), runpath: driver, notes: []string{}},
		{name: "preserve-origin: a dependency reached by an old $ORIGIN entry keeps it, every old $ORIGIN entry after the appended ones",
			facts: exeAt(app, "$ORIGIN/../lib", "/opt/old", "${ORIGIN}/plugins"), deps: []policy.Dep{need("liba.so", pkgLib), need("libb.so", dep)},
			cfg:     cfg(func(c *policy.Config) { c.PreserveOrigin = true; c.AppendRunpaths = []string{"/opt/extra"} }),
			runpath: "$ORIGIN/../lib:" + dep + ":/opt/extra:${ORIGIN}/plugins", notes: []string{"liba.so", "libb.so"}, entries: []string{"$ORIGIN/../lib", ""}},
		{name: "preserve-origin through a symbolic link",
			facts: func() policy.Facts {
				f := exeAt(app, "$ORIGIN/../lib")
				f.Links = links{pkgLib: dep}
				return f
			}(),
			deps: []policy.Dep{need("libb.so", dep)}, cfg: cfg(func(c *policy.Config) { c.PreserveOrigin = true }),
			runpath: "$ORIGIN/../lib", notes: []string{"libb.so"}, entries: []string{"$ORIGIN/../lib"}},
		{name: "no preserve-origin: old entries go",
			facts: exeAt(app, "$ORIGIN/../lib"), deps: []policy.Dep{need("liba.so", pkgLib)},
			cfg: cfg(), runpath: pkgLib, notes: []string{"liba.so"}, entries: []string{""}},
		{name: "relative rpaths: entries in the store relative to the file, the driver link and cuda_compat absolute",
			facts: exeAt(app), deps: []policy.Dep{need("liba.so", pkgLib), need("libb.so", dep), need("libo.so", "/opt/lib")},
			cfg: cfg(func(c *policy.Config) {
				c.RelativeStore, c.CudaCompat, c.DriverLinkFor = store, compat, policy.DriverLinkAll
			}),
			runpath: compat + ":" + driver + ":$ORIGIN/../lib:$ORIGIN/../../bbb-dep/lib:/opt/lib", notes: []string{"liba.so", "libb.so", "libo.so"},
			entries: []string{"$ORIGIN/../lib", "$ORIGIN/../../bbb-dep/lib", ""}},
		{name: "relative rpaths: a file outside the store keeps absolute entries",
			facts: func() policy.Facts { f := exeAt("/opt/pkg/bin/app"); f.Root = "/opt/pkg"; return f }(), deps: []policy.Dep{need("libb.so", dep)},
			cfg: cfg(func(c *policy.Config) { c.RelativeStore = store }), runpath: dep, notes: []string{"libb.so"}},
		{name: "relativize-rpath: entries under the file's root",
			facts: exeAt(app), deps: []policy.Dep{need("liba.so", pkgLib), need("libb.so", dep)},
			cfg: cfg(func(c *policy.Config) { c.RelativizeRoot = true }), runpath: "$ORIGIN/../lib:" + dep, notes: []string{"liba.so", "libb.so"}},
		{name: "relativize-rpath: the file's own directory is $ORIGIN",
			facts: libAt(pkgLib + "/liba.so"), deps: []policy.Dep{need("libself.so", pkgLib)},
			cfg: cfg(func(c *policy.Config) { c.RelativizeRoot = true }), runpath: "$ORIGIN", notes: []string{"libself.so"}},
		{name: "force-rpath writes DT_RPATH",
			facts: exeAt(app), deps: []policy.Dep{need("libb.so", dep)},
			cfg: cfg(func(c *policy.Config) { c.ForceRPath = true }), runpath: dep, asRPath: true, notes: []string{"libb.so"}},
		{name: "force-rpath with nothing to write keeps the file's path",
			facts: exeAt(app), cfg: cfg(func(c *policy.Config) { c.ForceRPath = true }), runpath: "", notes: []string{}},
		{name: "the audit: build directory, relative entry, stub directory",
			facts: exeAt(app), deps: []policy.Dep{need("libb.so", "/build/src/lib"), need("libcudart.so", store+"/hhh-cudart-stubs/lib")},
			cfg:     cfg(func(c *policy.Config) { c.AppendRunpaths = []string{"lib", "$ORIGIN"} }),
			runpath: "/build/src/lib:" + store + "/hhh-cudart-stubs/lib:lib:$ORIGIN", notes: []string{"libb.so", "libcudart.so"},
			problems: []string{`"/build/src/lib" points into the build directory /build`, `"` + store + `/hhh-cudart-stubs/lib" is a stub directory`, `"lib" is relative`}},
		{name: "the audit: a build directory given with a slash",
			facts: exeAt(app), deps: []policy.Dep{need("libb.so", "/tmp/nix-build-x/lib")},
			cfg:     cfg(func(c *policy.Config) { c.BuildDirs = []string{"/tmp/nix-build-x/"} }),
			runpath: "/tmp/nix-build-x/lib", notes: []string{"libb.so"}, problems: []string{"points into the build directory /tmp/nix-build-x/"}},
		{name: "a directory no entry can name: a ':' in it, a token in it; the runtime dependency too",
			facts: exeAt(app), deps: []policy.Dep{need("libb.so", pkgLib+"/x:."), need("libc2.so", pkgLib+"/${LIB}")},
			cfg:     cfg(func(c *policy.Config) { c.RuntimeDeps = []string{store + "/eee-rt/$PLATFORM/lib"} }),
			runpath: store + "/eee-rt/$PLATFORM/lib:" + pkgLib + "/x:.:" + pkgLib + "/${LIB}", notes: []string{"libb.so", "libc2.so"},
			problems: []string{`the runtime dependency ` + store + `/eee-rt/$PLATFORM/lib cannot be a RUNPATH entry: the loader expands "$PLATFORM" in it`,
				"libb.so is in " + pkgLib + "/x:., which no RUNPATH entry can name: the loader splits entries at ':'",
				`libc2.so is in ` + pkgLib + `/${LIB}, which no RUNPATH entry can name: the loader expands "${LIB}" in it`}},
		{name: "a '$' that is no token is a name like any other",
			facts: libAt(pkgLib + "/liba.so"), deps: []policy.Dep{need("libb.so", pkgLib+"/$LIBx"), need("libc2.so", pkgLib+"/${LIB")},
			cfg: cfg(), runpath: pkgLib + "/$LIBx:" + pkgLib + "/${LIB", notes: []string{"libb.so", "libc2.so"}},
		{name: "an appended entry with a ':' is audited as the loader splits it",
			facts: libAt(pkgLib + "/liba.so"), deps: []policy.Dep{need("libb.so", dep)},
			cfg:     cfg(func(c *policy.Config) { c.AppendRunpaths = []string{"$ORIGIN:."} }),
			runpath: dep + ":$ORIGIN:.", notes: []string{"libb.so"}, problems: []string{`RUNPATH entry "." is relative`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := policy.Decide(tc.facts, tc.deps, tc.inherited, tc.cfg)
			if d.RunPath != tc.runpath {
				t.Errorf("RUNPATH\n got %q\nwant %q", d.RunPath, tc.runpath)
			}
			if d.AsRPath != tc.asRPath {
				t.Errorf("as DT_RPATH %v, want %v", d.AsRPath, tc.asRPath)
			}
			if d.Interpreter != tc.interp {
				t.Errorf("interpreter %q, want %q", d.Interpreter, tc.interp)
			}
			if got := append([]string{}, d.NoteNames...); !slices.Equal(got, tc.notes) {
				t.Errorf("note names %q, want %q", got, tc.notes)
			}
			if tc.hows != nil {
				var got []string
				for _, dep := range d.Deps {
					got = append(got, dep.How)
				}
				if !slices.Equal(got, tc.hows) {
					t.Errorf("hows %q, want %q", got, tc.hows)
				}
			}
			if tc.entries != nil {
				var got []string
				for _, dep := range d.Deps {
					got = append(got, dep.Entry)
				}
				if !slices.Equal(got, tc.entries) {
					t.Errorf("entries %q, want %q", got, tc.entries)
				}
			}
			if len(d.Problems) != len(tc.problems) {
				t.Fatalf("problems %q, want %q", d.Problems, tc.problems)
			}
			for i, p := range d.Problems {
				if !errors.Is(p, policy.ErrAudit) || !strings.Contains(p.Error(), tc.problems[i]) {
					t.Errorf("problem %d: %v, want ErrAudit naming %s", i, p, tc.problems[i])
				}
			}
		})
	}
}

// TestDecideLeavesDepsAlone: Decide reports the deps it was given as
// copies; the caller's slice keeps its entries.
func TestDecideLeavesDepsAlone(t *testing.T) {
	deps := []policy.Dep{need("libb.so", "/nix/store/bbb-dep/lib")}
	c := cfg(func(c *policy.Config) { c.RelativeStore = "/nix/store" })
	d := policy.Decide(exeAt("/nix/store/aaa-pkg/bin/app"), deps, nil, c)
	if d.Deps[0].Entry != "$ORIGIN/../../bbb-dep/lib" || deps[0].Entry != "" {
		t.Errorf("reported entry %q, given entry %q", d.Deps[0].Entry, deps[0].Entry)
	}
}

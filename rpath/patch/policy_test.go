package patch_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/cudapatch/cudapatch/rpath/patch"
	"github.com/cudapatch/cudapatch/rpath/policy"
	"github.com/cudapatch/cudapatch/rpath/testdata/cfix"
)

// rule is one row of TestRunpathRules: a tree of fixtures, options, and the
// exact RUNPATH each named file must have afterwards.
type rule struct {
	name  string
	files map[string]cfix.Spec
	setup func(tr *tree) // symlinks, plain files, empty directories
	roots []string       // what to patch; default "out"
	opts  func(tr *tree) patch.Config
	want  map[string]string // file → RUNPATH on disk after the run ("" = none)
	deps  map[string]string // "file needed-name" → how it was satisfied
}

const drv = "/run/opengl-driver/lib"

var runpathRules = []rule{
	{
		name: "order compat, driver, runtime deps, resolved dirs in DT_NEEDED order, appends, old $ORIGIN entries",
		files: map[string]cfix.Spec{
			"out/bin/app":     withRunpath(exe("libzz.so", "libaa.so"), "$ORIGIN/../lib:/old/lib:${ORIGIN}/x"),
			"out/lib/libl.so": withRunpath(lib("libl.so", "libaa.so"), "/old:$ORIGIN"),
			"deps/a/libaa.so": lib("libaa.so"),
			"deps/z/libzz.so": lib("libzz.so"),
		},
		opts: func(tr *tree) patch.Config {
			return patch.Config{
				Policy: policy.Config{
					CudaCompat:     tr.p("compat"),
					RuntimeDeps:    []string{"/rt1/lib", "/rt2/lib"},
					PreserveOrigin: true,
					AppendRunpaths: []string{"$ORIGIN/../share", "/append/lib"},
				},
				Search: tr.ps("deps/a", "deps/z"),
			}
		},
		want: map[string]string{
			"out/bin/app":     "{root}/compat:" + drv + ":/rt1/lib:/rt2/lib:{root}/deps/z:{root}/deps/a:$ORIGIN/../share:/append/lib:$ORIGIN/../lib:${ORIGIN}/x",
			"out/lib/libl.so": "{root}/compat:" + drv + ":{root}/deps/a:$ORIGIN/../share:/append/lib:$ORIGIN",
		},
	},
	{
		name: "duplicates removed, first wins",
		files: map[string]cfix.Spec{
			"out/bin/app":     exe("libaa.so", "libab.so", "libaa.so"),
			"deps/a/libaa.so": lib("libaa.so"),
			"deps/a/libab.so": lib("libab.so"),
		},
		opts: func(tr *tree) patch.Config {
			return patch.Config{
				Search: []string{tr.p("deps/a")},
				Policy: policy.Config{RuntimeDeps: []string{"/rt/lib", drv, "/rt/lib"}, AppendRunpaths: []string{tr.p("deps/a"), "$ORIGIN", "/rt/lib", "$ORIGIN"}},
			}
		},
		want: map[string]string{"out/bin/app": drv + ":/rt/lib:{root}/deps/a:$ORIGIN"},
	},
	{
		name: "never an empty entry",
		files: map[string]cfix.Spec{
			"out/bin/app": withRunpath(exe(), ":$ORIGIN::/x:"),
		},
		opts: func(tr *tree) patch.Config {
			return patch.Config{Policy: policy.Config{
				DriverLinkFor:  policy.DriverLinkNone,
				RuntimeDeps:    []string{"", "/rt/lib", ""},
				PreserveOrigin: true,
			}}
		},
		want: map[string]string{"out/bin/app": "/rt/lib:$ORIGIN"},
	},
	{
		name: "driver link for all (the default)",
		files: map[string]cfix.Spec{
			"out/lib/libplain.so": lib("libplain.so"),
			"out/lib/libuser.so":  lib("libuser.so", "libcuda.so.1"),
			"out/lib/libnote.so":  {Soname: "libnote.so", Dlopen: `[{"soname":["libcuda.so.1"]}]`},
		},
		opts: func(tr *tree) patch.Config { return patch.Config{Policy: policy.Config{CudaCompat: tr.p("compat")}} },
		want: map[string]string{
			"out/lib/libplain.so": "{root}/compat:" + drv,
			"out/lib/libuser.so":  "{root}/compat:" + drv,
			"out/lib/libnote.so":  "{root}/compat:" + drv,
		},
		deps: map[string]string{"out/lib/libuser.so libcuda.so.1": policy.HowDriver, "out/lib/libnote.so libcuda.so.1": policy.HowDriver},
	},
	{
		name: "driver link for needed: DT_NEEDED or .note.dlopen of a driver library",
		files: map[string]cfix.Spec{
			"out/lib/libplain.so": lib("libplain.so"),
			"out/lib/libuser.so":  lib("libuser.so", "libcuda.so.1"),
			"out/lib/libnote.so":  {Soname: "libnote.so", Dlopen: `[{"soname":["libcuda.so.1"]}]`},
			"out/lib/libml.so":    lib("libml.so", "libnvidia-ml.so.1"),
		},
		opts: func(tr *tree) patch.Config {
			return patch.Config{Policy: policy.Config{CudaCompat: tr.p("compat"), DriverLinkFor: policy.DriverLinkNeeded}}
		},
		want: map[string]string{
			"out/lib/libplain.so": "",
			"out/lib/libuser.so":  "{root}/compat:" + drv,
			"out/lib/libnote.so":  "{root}/compat:" + drv,
			"out/lib/libml.so":    "{root}/compat:" + drv,
		},
		deps: map[string]string{"out/lib/libuser.so libcuda.so.1": policy.HowDriver, "out/lib/libml.so libnvidia-ml.so.1": policy.HowDriver},
	},
	{
		name: "driver link for none: driver libraries still satisfied, no entry",
		files: map[string]cfix.Spec{
			"out/lib/libplain.so": lib("libplain.so"),
			"out/lib/libuser.so":  lib("libuser.so", "libcuda.so.1", "libdep.so"),
			"deps/libdep.so":      lib("libdep.so"),
		},
		opts: func(tr *tree) patch.Config {
			return patch.Config{Policy: policy.Config{CudaCompat: tr.p("compat"), DriverLinkFor: policy.DriverLinkNone}, Search: []string{tr.p("deps")}}
		},
		want: map[string]string{"out/lib/libplain.so": "", "out/lib/libuser.so": "{root}/deps"},
		deps: map[string]string{"out/lib/libuser.so libcuda.so.1": policy.HowDriver},
	},
	{
		name:  "custom driver link",
		files: map[string]cfix.Spec{"out/lib/libuser.so": lib("libuser.so", "libcuda.so.1")},
		opts: func(tr *tree) patch.Config {
			return patch.Config{Policy: policy.Config{DriverLink: "/usr/lib/nvidia"}}
		},
		want: map[string]string{"out/lib/libuser.so": "/usr/lib/nvidia"},
	},
	{
		name: "i686 gets /run/opengl-driver-32/lib and no cuda_compat; matched by machine",
		files: map[string]cfix.Spec{
			"out/lib32/libi.so": {Arch: "i686", Soname: "libi.so", Needed: []string{"libdep.so", "libcuda.so.1"}},
			"out/lib/libx.so":   lib("libx.so", "libdep.so"),
			"deps64/libdep.so":  lib("libdep.so"),
			"deps32/libdep.so":  {Arch: "i686", Soname: "libdep.so"},
		},
		opts: func(tr *tree) patch.Config {
			return patch.Config{Policy: policy.Config{CudaCompat: tr.p("compat")}, Search: tr.ps("deps64", "deps32")}
		},
		want: map[string]string{
			"out/lib32/libi.so": "/run/opengl-driver-32/lib:{root}/deps32",
			"out/lib/libx.so":   "{root}/compat:" + drv + ":{root}/deps64",
		},
	},
	{
		name: "driver libraries never resolved to a store path or a stub",
		files: map[string]cfix.Spec{
			"out/lib/libapp.so": lib("libapp.so", "libcuda.so.1", "libnvidia-ml.so.1", "libdep.so", "libnvidia-ptxjitcompiler.so.1", "libcudadebugger.so.1"),
			// a stubs directory among the search dirs, as the toolkit's
			"cuda/lib/stubs/libcuda.so.1":      lib("libcuda.so.1"),
			"cuda/lib/stubs/libnvidia-ml.so.1": lib("libnvidia-ml.so.1"),
			"cuda/lib/stubs/libdep.so":         lib("libdep.so"),
			// a "-stubs" output, as nixpkgs' cuda_cudart has
			"abc-cuda_cudart-12.4-stubs/lib/libcuda.so.1": lib("libcuda.so.1"),
			// a store copy of the driver
			"nvidia-x11/lib/libcuda.so.1":                  lib("libcuda.so.1"),
			"nvidia-x11/lib/libnvidia-ml.so.1":             lib("libnvidia-ml.so.1"),
			"nvidia-x11/lib/libnvidia-ptxjitcompiler.so.1": lib("libnvidia-ptxjitcompiler.so.1"),
			"deps/libdep.so":                               lib("libdep.so"),
		},
		opts: func(tr *tree) patch.Config {
			return patch.Config{Search: tr.ps("cuda/lib/stubs", "abc-cuda_cudart-12.4-stubs/lib", "nvidia-x11/lib", "deps")}
		},
		want: map[string]string{"out/lib/libapp.so": drv + ":{root}/deps"},
		deps: map[string]string{
			"out/lib/libapp.so libcuda.so.1":                  policy.HowDriver,
			"out/lib/libapp.so libnvidia-ml.so.1":             policy.HowDriver,
			"out/lib/libapp.so libnvidia-ptxjitcompiler.so.1": policy.HowDriver,
			"out/lib/libapp.so libcudadebugger.so.1":          policy.HowDriver,
			"out/lib/libapp.so libdep.so":                     policy.HowStore,
		},
	},
	{
		name: "pre-existing stub directories dropped, and never searched through a RUNPATH",
		files: map[string]cfix.Spec{
			"out/lib/libold.so": withRunpath(lib("libold.so", "libdep.so"),
				"{root}/cuda/lib64/stubs:$ORIGIN/../lib:{root}/abc-cuda_cudart-12.4-stubs/lib:{root}/deps"),
			"cuda/lib64/stubs/libdep.so":               lib("libdep.so"),
			"abc-cuda_cudart-12.4-stubs/lib/libdep.so": lib("libdep.so"),
			"deps/libdep.so":                           lib("libdep.so"),
		},
		opts: func(tr *tree) patch.Config { return patch.Config{Policy: policy.Config{PreserveOrigin: true}} },
		want: map[string]string{"out/lib/libold.so": drv + ":{root}/deps:$ORIGIN/../lib"},
	},
	{
		name: "libc names satisfied without an entry",
		files: map[string]cfix.Spec{
			"out/bin/app":         exe("libc.so.6", "libm.so.6", "libdep.so"),
			"glibc/lib/libc.so.6": lib("libc.so.6"),
			"glibc/lib/libm.so.6": lib("libm.so.6"),
			"deps/libdep.so":      lib("libdep.so"),
		},
		opts: func(tr *tree) patch.Config {
			return patch.Config{Libc: tr.p("glibc/lib"), Search: tr.ps("glibc/lib", "deps")}
		},
		want: map[string]string{"out/bin/app": drv + ":{root}/deps"},
		deps: map[string]string{"out/bin/app libc.so.6": policy.HowLibc, "out/bin/app libm.so.6": policy.HowLibc},
	},
	{
		name: "keep-libc gives libc an entry when it is found",
		files: map[string]cfix.Spec{
			"out/bin/app":         exe("libc.so.6", "libm.so.6", "libdep.so"),
			"glibc/lib/libc.so.6": lib("libc.so.6"),
			"glibc/lib/libm.so.6": lib("libm.so.6"),
			"deps/libdep.so":      lib("libdep.so"),
		},
		opts: func(tr *tree) patch.Config {
			return patch.Config{Libc: tr.p("glibc/lib"), KeepLibc: true, Search: tr.ps("glibc/lib", "deps")}
		},
		want: map[string]string{"out/bin/app": drv + ":{root}/glibc/lib:{root}/deps"},
		deps: map[string]string{"out/bin/app libc.so.6": policy.HowStore},
	},
	{
		// auto-patchelf.py's step 4: "If all of the above fail, libc
		// dependencies should still be considered found."
		name: "keep-libc with libc not among the search dirs: still satisfied, no entry",
		files: map[string]cfix.Spec{
			"out/bin/app":         exe("libc.so.6", "libdep.so"),
			"glibc/lib/libc.so.6": lib("libc.so.6"),
			"deps/libdep.so":      lib("libdep.so"),
		},
		opts: func(tr *tree) patch.Config {
			return patch.Config{Libc: tr.p("glibc/lib"), KeepLibc: true, Search: []string{tr.p("deps")}}
		},
		want: map[string]string{"out/bin/app": drv + ":{root}/deps"},
		deps: map[string]string{"out/bin/app libc.so.6": policy.HowLibc},
	},
	{
		name: "absolute DT_NEEDED that exists needs no entry",
		files: map[string]cfix.Spec{
			"out/bin/app":    exe("{root}/abs/libabs.so", "libdep.so"),
			"abs/libabs.so":  lib(""),
			"deps/libdep.so": lib("libdep.so"),
		},
		opts: func(tr *tree) patch.Config { return patch.Config{Search: []string{tr.p("deps")}} },
		want: map[string]string{"out/bin/app": drv + ":{root}/deps"},
		deps: map[string]string{"out/bin/app {root}/abs/libabs.so": policy.HowAbsolute},
	},
	{
		name: "precedence: the outputs before the search dirs",
		files: map[string]cfix.Spec{
			"out/bin/app":       exe("libdep.so"),
			"out/lib/libdep.so": lib("libdep.so"),
			"deps/libdep.so":    lib("libdep.so"),
		},
		opts: func(tr *tree) patch.Config { return patch.Config{Search: []string{tr.p("deps")}} },
		want: map[string]string{"out/bin/app": drv + ":{root}/out/lib"},
	},
	{
		name: "precedence: search dirs in the order given (s2 first)",
		files: map[string]cfix.Spec{
			"out/bin/app": exe("libx.so"),
			"s1/libx.so":  lib("libx.so"),
			"s2/libx.so":  lib("libx.so"),
		},
		opts: func(tr *tree) patch.Config { return patch.Config{Search: tr.ps("s2", "s1")} },
		want: map[string]string{"out/bin/app": drv + ":{root}/s2"},
	},
	{
		name: "precedence: search dirs in the order given (s1 first)",
		files: map[string]cfix.Spec{
			"out/bin/app": exe("libx.so"),
			"s1/libx.so":  lib("libx.so"),
			"s2/libx.so":  lib("libx.so"),
		},
		opts: func(tr *tree) patch.Config { return patch.Config{Search: tr.ps("s1", "s2")} },
		want: map[string]string{"out/bin/app": drv + ":{root}/s1"},
	},
	{
		name: "precedence: RUNPATH dirs of found libraries are searched, after every search dir",
		files: map[string]cfix.Spec{
			"out/bin/app":    exe("libhop.so", "libh.so", "liby.so"),
			"s1/libhop.so":   withRunpath(lib("libhop.so"), "$ORIGIN/nowhere:{root}/hidden"),
			"hidden/libh.so": lib("libh.so"),
			"hidden/liby.so": lib("liby.so"),
			"s2/liby.so":     lib("liby.so"),
		},
		opts: func(tr *tree) patch.Config { return patch.Config{Search: tr.ps("s1", "s2")} },
		want: map[string]string{"out/bin/app": drv + ":{root}/s1:{root}/hidden:{root}/s2"},
	},
	{
		// auto-patchelf's populate_cache(paths) follows the outputs'
		// RUNPATHs before populate_cache(lib_dirs) starts.
		name: "precedence: RUNPATH dirs of the outputs' libraries come before the search dirs",
		files: map[string]cfix.Spec{
			"out/bin/app":     exe("libo.so", "liby.so", "libz.so"),
			"out/lib/libo.so": withRunpath(lib("libo.so"), "{root}/orp"),
			"orp/liby.so":     lib("liby.so"),
			"orp/libz.so":     lib("libz.so"),
			"s1/liby.so":      lib("liby.so"),
		},
		opts: func(tr *tree) patch.Config { return patch.Config{Search: []string{tr.p("s1")}} },
		want: map[string]string{"out/bin/app": drv + ":{root}/out/lib:{root}/orp"},
	},
	{
		name: "precedence: duplicates within the outputs resolved in lexical order",
		files: map[string]cfix.Spec{
			"out/bin/app":     exe("libdup.so"),
			"out/b/libdup.so": lib("libdup.so"),
			"out/a/libdup.so": lib("libdup.so"),
			"out/c/libdup.so": lib("libdup.so"),
		},
		want: map[string]string{"out/bin/app": drv + ":{root}/out/a"},
	},
	{
		name: "search-recursive adds every directory below",
		files: map[string]cfix.Spec{
			"out/bin/app":              exe("libr1.so", "libr2.so"),
			"tree/y/deep/lib/libr2.so": lib("libr2.so"),
			"tree/x/lib/libr1.so":      lib("libr1.so"),
			"tree/x/lib/libr2.so.1":    lib("libr2.so.1"),
		},
		opts: func(tr *tree) patch.Config { return patch.Config{SearchRecursive: []string{tr.p("tree")}} },
		want: map[string]string{"out/bin/app": drv + ":{root}/tree/x/lib:{root}/tree/y/deep/lib"},
	},
	{
		name: "search-recursive: plain search dirs come first",
		files: map[string]cfix.Spec{
			"out/bin/app":         exe("libr1.so"),
			"tree/x/lib/libr1.so": lib("libr1.so"),
			"flat/libr1.so":       lib("libr1.so"),
		},
		opts: func(tr *tree) patch.Config {
			return patch.Config{SearchRecursive: []string{tr.p("tree")}, Search: []string{tr.p("flat")}}
		},
		want: map[string]string{"out/bin/app": drv + ":{root}/flat"},
	},
	{
		name: "a wrong-machine library earlier in the search order is skipped",
		files: map[string]cfix.Spec{
			"out/bin/app":    exe("libm1.so"),
			"arm/libm1.so":   {Arch: "aarch64", Soname: "libm1.so"},
			"x86/libm1.so":   {Arch: "i686", Soname: "libm1.so"},
			"amd64/libm1.so": lib("libm1.so"),
		},
		opts: func(tr *tree) patch.Config {
			return patch.Config{Search: tr.ps("arm", "x86", "amd64")}
		},
		want: map[string]string{"out/bin/app": drv + ":{root}/amd64"},
	},
	{
		name: "OS ABI: equal or either side SYSV",
		files: map[string]cfix.Spec{
			// a GNU/Linux (3) library wants libo.so and libs.so
			"out/lib/libgnu.so": {Soname: "libgnu.so", Needed: []string{"libo.so", "libs.so"}, OSABI: 3},
			"fbsd/libo.so":      {Soname: "libo.so", OSABI: 9}, // FreeBSD: incompatible
			"fbsd/libs.so":      {Soname: "libs.so", OSABI: 9},
			"gnu/libo.so":       {Soname: "libo.so", OSABI: 3},
			"sysv/libs.so":      lib("libs.so"),
			// a SYSV library accepts a FreeBSD one
			"out/lib/libsysv.so": lib("libsysv.so", "libf.so"),
			"fbsd/libf.so":       {Soname: "libf.so", OSABI: 9},
		},
		opts: func(tr *tree) patch.Config {
			return patch.Config{Search: tr.ps("fbsd", "gnu", "sysv")}
		},
		want: map[string]string{
			"out/lib/libgnu.so":  drv + ":{root}/gnu:{root}/sysv",
			"out/lib/libsysv.so": drv + ":{root}/fbsd",
		},
	},
	{
		name: "matched by file name, not DT_SONAME",
		files: map[string]cfix.Spec{
			"out/bin/app":   exe("libfile.so"),
			"s1/libfile.so": lib("libother.so"),
		},
		opts: func(tr *tree) patch.Config { return patch.Config{Search: []string{tr.p("s1")}} },
		want: map[string]string{"out/bin/app": drv + ":{root}/s1"},
	},
	{
		name: "a link in a search dir is reached through its target's directory when the names agree",
		files: map[string]cfix.Spec{
			"out/bin/app":    exe("libq.so", "libr.so.1"),
			"real/libq.so":   lib("libq.so"),
			"s1/libr.so.1.2": lib("libr.so.1"),
		},
		setup: func(tr *tree) {
			tr.symlink("s1/libq.so", "{root}/real/libq.so")
			tr.symlink("s1/libr.so.1", "libr.so.1.2")
		},
		opts: func(tr *tree) patch.Config { return patch.Config{Search: []string{tr.p("s1")}} },
		want: map[string]string{"out/bin/app": drv + ":{root}/real:{root}/s1"},
	},
	{
		name: ".note.dlopen entries resolved after DT_NEEDED, first alternative found wins",
		files: map[string]cfix.Spec{
			"out/lib/libplug.so": {Soname: "libplug.so", Needed: []string{"libdep.so"},
				Dlopen: `[{"soname":["libnope.so.1","libdl1.so"],"priority":"recommended"},{"soname":["libdl2.so"]}]`},
			"deps/libdep.so": lib("libdep.so"),
			"s1/libdl2.so":   lib("libdl2.so"),
			"s2/libdl1.so":   lib("libdl1.so"),
		},
		opts: func(tr *tree) patch.Config { return patch.Config{Search: tr.ps("deps", "s1", "s2")} },
		want: map[string]string{"out/lib/libplug.so": drv + ":{root}/deps:{root}/s2:{root}/s1"},
		deps: map[string]string{"out/lib/libplug.so libdl1.so": policy.HowStore, "out/lib/libplug.so libdl2.so": policy.HowStore},
	},
	{
		name: "DT_RPATH becomes DT_RUNPATH; its $ORIGIN entries kept with preserve-origin",
		files: map[string]cfix.Spec{
			"out/lib/librp.so": {Soname: "librp.so", Needed: []string{"libdep.so"}, RPath: "/old:$ORIGIN/../lib"},
			"deps/libdep.so":   lib("libdep.so"),
		},
		opts: func(tr *tree) patch.Config {
			return patch.Config{Search: []string{tr.p("deps")}, Policy: policy.Config{PreserveOrigin: true}}
		},
		want: map[string]string{"out/lib/librp.so": drv + ":{root}/deps:$ORIGIN/../lib"},
	},
	{
		name: "preserve-origin: a dependency found where an old $ORIGIN entry leads keeps that entry",
		files: map[string]cfix.Spec{
			"out/bin/app":     withRunpath(exe("libl.so", "libdep.so"), "/old:$ORIGIN/../lib:$ORIGIN/../plugins"),
			"out/lib/libl.so": lib("libl.so"),
			"deps/libdep.so":  lib("libdep.so"),
		},
		setup: func(tr *tree) { tr.mkdir("out/plugins") },
		opts: func(tr *tree) patch.Config {
			return patch.Config{Search: []string{tr.p("deps")}, Policy: policy.Config{PreserveOrigin: true, AppendRunpaths: []string{"/z"}}}
		},
		want: map[string]string{"out/bin/app": drv + ":$ORIGIN/../lib:{root}/deps:/z:$ORIGIN/../plugins"},
	},
	{
		name: "relative rpaths: store entries relative to the file, driver link and cuda_compat absolute",
		files: map[string]cfix.Spec{
			"store/aaa-app/libexec/app":       exe("libfoo.so", "libbar.so", "libown.so"),
			"store/aaa-app/lib/libown.so":     lib("libown.so"),
			"store/bbb-foo/lib/libfoo.so":     lib("libfoo.so"),
			"store/ccc-bar/lib/libbar.so":     lib("libbar.so"),
			"elsewhere/lib/libother.so":       lib("libother.so"),
			"store/aaa-app/lib/libuser.so":    lib("libuser.so", "libother.so", "libfoo.so"),
			"store/ddd-compat/compat/libx.so": lib("libx.so"),
		},
		roots: []string{"store/aaa-app"},
		opts: func(tr *tree) patch.Config {
			return patch.Config{
				Search: tr.ps("store/bbb-foo/lib", "store/ccc-bar/lib", "elsewhere/lib"),
				Policy: policy.Config{
					CudaCompat:     tr.p("store/ddd-compat/compat"),
					RelativeStore:  tr.p("store"),
					RuntimeDeps:    []string{tr.p("store/eee-rt/lib")},
					AppendRunpaths: []string{tr.p("store/aaa-app/lib/extra"), "/opt/lib"},
				},
			}
		},
		want: map[string]string{
			"store/aaa-app/libexec/app":    "{root}/store/ddd-compat/compat:" + drv + ":$ORIGIN/../../eee-rt/lib:$ORIGIN/../../bbb-foo/lib:$ORIGIN/../../ccc-bar/lib:$ORIGIN/../lib:$ORIGIN/../lib/extra:/opt/lib",
			"store/aaa-app/lib/libuser.so": "{root}/store/ddd-compat/compat:" + drv + ":{root}/elsewhere/lib:$ORIGIN/../../bbb-foo/lib:$ORIGIN/extra:/opt/lib",
		},
	},
	{
		name: "relativize-rpath: entries under the path being patched relative to the file, others absolute",
		files: map[string]cfix.Spec{
			"out/lib/libbaz.so":      lib("libbaz.so", "libfoo.so", "libdep.so"),
			"out/lib/libs/libfoo.so": lib("libfoo.so"),
			"deps/libdep.so":         lib("libdep.so"),
		},
		opts: func(tr *tree) patch.Config {
			return patch.Config{
				Search: []string{tr.p("deps")},
				Policy: policy.Config{
					RelativizeRoot: true,
					DriverLinkFor:  policy.DriverLinkNone,
					AppendRunpaths: []string{tr.p("out/lib"), tr.p("out")},
				},
			}
		},
		want: map[string]string{"out/lib/libbaz.so": "$ORIGIN/libs:{root}/deps:$ORIGIN:$ORIGIN/..", "out/lib/libs/libfoo.so": "$ORIGIN/..:$ORIGIN/../.."},
	},
	{
		name: "no-recurse patches and indexes only the top directory",
		files: map[string]cfix.Spec{
			"out/bin/app":           exe("libtop.so"),
			"out/bin/libtop.so":     lib("libtop.so"),
			"out/bin/sub/app2":      withRunpath(exe(), "/untouched"),
			"out/bin/sub/libtop.so": lib("libtop.so"),
		},
		roots: []string{"out/bin"},
		opts:  func(tr *tree) patch.Config { return patch.Config{NoRecurse: true} },
		want:  map[string]string{"out/bin/app": drv + ":{root}/out/bin", "out/bin/sub/app2": "/untouched"},
	},
}

// TestRunpathRules checks the exact RUNPATH, order included, that each rule
// of the policy (rpath/doc.go, issue 3) gives.
func TestRunpathRules(t *testing.T) {
	for _, r := range runpathRules {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			tr := newTree(t)
			for _, rel := range slices.Sorted(maps.Keys(r.files)) {
				tr.place(rel, r.files[rel])
			}
			if r.setup != nil {
				r.setup(tr)
			}
			roots := r.roots
			if roots == nil {
				roots = []string{"out"}
			}
			var opts patch.Config
			if r.opts != nil {
				opts = r.opts(tr)
			}
			rep := tr.mustPatch(roots, opts)
			for rel, want := range r.want {
				if got := tr.runpathOf(rel); got != tr.x(want) {
					t.Errorf("%s: RUNPATH\n got %q\nwant %q", rel, got, tr.x(want))
				}
			}
			for key, how := range r.deps {
				rel, name, _ := cut(key)
				if d := tr.dep(rep, rel, tr.x(name)); d.How != how {
					t.Errorf("%s: %s satisfied as %q (%+v), want %q", rel, name, d.How, d, how)
				}
			}
		})
	}
}

func cut(s string) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

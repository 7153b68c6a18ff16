package rpath

import (
	"path/filepath"
	"strings"

	"github.com/cudapatch/cudapatch/rpath/fnmatch"
	"github.com/cudapatch/cudapatch/rpath/ldcache"
)

// DriverLibraries are fnmatch patterns of the libraries that come with the
// NVIDIA driver. They must match the running kernel module, so they are
// never taken from the store: the loader finds them through the driver link
// (/run/opengl-driver/lib on NixOS, which the system fills from the
// configured driver). A toolkit's stub copies of them must never be reached
// at run time ("CUDA driver is a stub library").
var DriverLibraries = []string{
	"libcuda.so*",
	"libcudadebugger.so*",
	"libnvcuvid.so*",
	"libnvidia-allocator.so*",
	"libnvidia-cfg.so*",
	"libnvidia-eglcore.so*",
	"libnvidia-encode.so*",
	"libnvidia-fbc.so*",
	"libnvidia-glcore.so*",
	"libnvidia-glsi.so*",
	"libnvidia-glvkspirv.so*",
	"libnvidia-gpucomp.so*",
	"libnvidia-ml.so*",
	"libnvidia-ngx.so*",
	"libnvidia-nvvm.so*",
	"libnvidia-opencl.so*",
	"libnvidia-opticalflow.so*",
	"libnvidia-pkcs11*.so*",
	"libnvidia-ptxjitcompiler.so*",
	"libnvidia-rtcore.so*",
	"libnvidia-tls.so*",
	"libnvoptix.so*",
	"libGLX_nvidia.so*",
	"libEGL_nvidia.so*",
	"libGLESv1_CM_nvidia.so*",
	"libGLESv2_nvidia.so*",
}

// driverMatcher matches driver library names.
type driverMatcher []*fnmatch.Pattern

func newDriverMatcher(patterns []string) driverMatcher {
	m := make(driverMatcher, len(patterns))
	for i, p := range patterns {
		m[i] = fnmatch.Compile(p)
	}
	return m
}

func (m driverMatcher) match(name string) bool {
	base := filepath.Base(name)
	for _, p := range m {
		if p.Match(base) {
			return true
		}
	}
	return false
}

// IsStubDir reports directories that hold link-time stub libraries: the
// CUDA toolkit's "lib/stubs" (or "lib64/stubs") and nixpkgs' "-stubs"
// outputs ("<hash>-cuda_cudart-12.4-stubs/lib").
func IsStubDir(dir string) bool {
	dir = filepath.Clean(dir)
	if filepath.Base(dir) == "stubs" {
		return true
	}
	base := filepath.Base(dir)
	return (base == "lib" || base == "lib64") && strings.HasSuffix(filepath.Base(filepath.Dir(dir)), "-stubs")
}

// ResolutionRules are the rules every resolution note cudapatch writes
// follows (see ldcache.Rules), given the driver link directories: they are
// run-time-only directories, never probed at build time; the driver's
// libraries (DriverLibraries) get no "=" element after them; stub
// directories give no element at all. Lint checks notes with the same
// rules.
func ResolutionRules(driverLinks ...string) ldcache.Rules {
	return newDriverMatcher(DriverLibraries).rules(driverLinks)
}

func (m driverMatcher) rules(driverLinks []string) ldcache.Rules {
	return ldcache.Rules{RunTimeOnly: driverLinks, Restricted: m.match, Excluded: IsStubDir}
}

// IsDriverLibrary reports whether name (a DT_NEEDED name or a path) is one
// of DriverLibraries.
func IsDriverLibrary(name string) bool {
	return newDriverMatcher(DriverLibraries).match(name)
}

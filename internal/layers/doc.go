// Package layers holds only a test: it keeps the dependency arrows of the
// project pointing down (cmd → lint → rpath → ldso/elfedit/fnmatch), so the
// byte-level ELF code never learns about Nix or CUDA and the library never
// grows a command-line dependency.
package layers

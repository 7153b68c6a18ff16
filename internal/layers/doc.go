// Package layers holds only a test: it keeps the dependency arrows of the
// project pointing down (cmd → the main job, lint, doctor, the drop-in
// patchelf → policy → ldso/symcheck/ldcache → elfedit/fnmatch), so the
// byte-level ELF code never learns about Nix or CUDA, the siblings share
// the policy instead of importing each other, and the library never grows
// a command-line dependency.
package layers

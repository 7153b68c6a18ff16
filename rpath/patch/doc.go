// Package patch is cudapatch's main job: it walks the paths to patch,
// resolves every file's dependencies against an index built like
// auto-patchelf's, asks the policy (rpath/policy.Decide) for each file's
// RUNPATH, interpreter and resolution note, and writes the edits through
// rpath/elfedit, once a file, only when every file of the tree was
// decided without error. It replaces nixpkgs' autoPatchelfHook together
// with the CUDA driver, cuda_compat and stub hooks.
//
// Run does the work, configured by a Config: a plain struct whose zero
// fields mean the defaults, its RUNPATH policy part (rpath/policy.Config)
// the struct lint takes too. Run validates it, keeps a resolved copy in
// the run's unexported job, and never changes it. A worker pool decides
// the files (the big-table gate bounds the memory of the largest, kept
// plans spare the write phase a second read), then writes them. The package never prints; it returns a
// Report and logs through the *slog.Logger it is given.
package patch

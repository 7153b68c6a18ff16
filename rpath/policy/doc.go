// Package policy is what cudapatch's commands share: what the RUNPATH,
// interpreter and resolution-note names of an ELF file of a Nix output
// must be (Decide, a function of facts already read), which libraries are
// the NVIDIA driver's, which files are skipped, what dlopen discovery
// reads, patchelf's --shrink-rpath. The main job (rpath/patch), lint,
// doctor and the drop-in patchelf build on it; it writes nothing.
//
// Config is the policy's configuration, one struct for every command that
// takes it: the main job (patch.Config.Policy) and lint
// (lint.Options.Policy), so that a flag both commands share fills one
// field with one meaning.
//
// The policy, in one place (the index that resolves names is the main
// job's, rpath/patch; the patch.Config fields named below configure it):
//
//   - Dependencies (DT_NEEDED, then .note.dlopen entries) are resolved
//     against an index built like auto-patchelf's, in two rounds: every
//     *.so* file of the paths being patched (recursively; skipped with
//     patch.Config.IgnoreExisting), then each search directory in the
//     order given (not recursively); each round followed by the
//     absolute RUNPATH directories of the libraries it found,
//     breadth-first. Within a directory names are taken in sorted
//     order. A candidate must have a compatible ELF class, machine and
//     OS ABI (equal, or either side SYSV). The first candidate wins. A
//     .note.dlopen entry is satisfied by any of its alternatives; if
//     none is found it is missing, named "any(a, b)" as auto-patchelf
//     names it. The index is searched lazily with exactly that
//     precedence: directories are listed as lookups need them, a
//     library's headers are read only when a wanted name is its file
//     name, and RUNPATH directories are followed only when a name is
//     still unresolved after every directory queued before them.
//   - Libraries of the NVIDIA driver (DriverLibraries) are never resolved to
//     a store path nor to a stub: they are satisfied by the driver link.
//     Stub directories (".../stubs", "...-stubs/lib") are never indexed and
//     never appear in a result.
//   - Names present in the libc directory are satisfied without an entry,
//     unless patch.Config.KeepLibc.
//   - The RUNPATH's order is Decide's (its doc comment states it).
//     Config.PreserveOrigin also writes a dependency's directory as the old
//     $ORIGIN entry that leads there.
//   - With Config.RelativeStore (entries under the store) or
//     Config.RelativizeRoot (entries under the path the file was found
//     under), absolute entries become "$ORIGIN/…" relative to the file's
//     directory, as auto-patchelf's --relative-rpaths and
//     --relativize-rpath do; the cuda_compat directory and the driver link
//     stay absolute.
//   - Every result is audited before anything is written: entries under the
//     build directory, relative entries other than $ORIGIN, and stub
//     directories are errors. If any dependency is missing (and not ignored
//     with a Python fnmatch pattern, Config.IgnoreMissing) or any file
//     fails the audit, nothing is written at all.
package policy

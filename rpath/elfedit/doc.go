// Package elfedit reads and rewrites the dynamic-linking information of ELF
// files: the interpreter (PT_INTERP), DT_RUNPATH/DT_RPATH, DT_SONAME and
// DT_NEEDED.
//
// It reads through the program headers, as the loaders do, so files without
// section headers work, and it reads only the headers, the dynamic section and
// the dynamic string table: never the whole file.
//
// # Reading and writing
//
// The read side stands alone: [NewFile] reads a file through any
// [io.ReaderAt], [Open] from a path, and a [Buffers] lends the buffers of
// many files' reads ([Buffers.Open], [Buffers.OpenIn]) so that reading a
// tree keeps the garbage collector idle. A [File] says what the loaders
// see: [File.Info], [File.Notes], [File.Verify].
//
// The write side takes an [Edit], turned into a [Plan] by [File.Plan] and
// written by [Plan.Apply]. [EditFile] does all of it for one file: it
// reads, plans, verifies and writes. A [Batch] is for many files that are
// written only if all of them could be planned: it embeds the Buffers
// they are read through; [Batch.Prepare] plans and verifies a file's edit
// and returns it as a [Pending], which may keep the plan (as far as the
// caller's budget says) and claim the file ([Pending.Claim]: opened for
// writing and locked until it is written); [Pending.Commit] writes it, as
// EditFile would, without planning again while the file reads the same,
// and [Pending.Close] lets it go unwritten. What a batch may hold at once
// (kept plans, claimed descriptors) the caller bounds.
//
// # Layouts
//
// The plan picks the cheapest layout that keeps every loader invariant, in
// this order:
//
//  1. [InPlace]: new strings overwrite old ones that are not shared with any
//     other string reference, and new dynamic entries take spare DT_NULL slots.
//  2. [Slack]: a grown copy of the dynamic string table goes into the zero
//     padding after the first PT_LOAD, which is extended to cover it.
//  3. [Region]: one PT_LOAD appended at the end of the file holds a copy of the
//     program header table and of whatever grew (.interp, .dynamic, .dynstr).
//     A later edit of the same file builds its region in the free slot before
//     or after the live one, so repeated edits do not grow the file without
//     bound. An ET_EXEC file's region ends with a copy of .shstrtab, so that
//     a later patchelf, whose executable layout needs a section after the
//     last one it replaces, finds one.
//
// Nothing else moves: section contents such as CUDA's .nv_fatbin stay where the
// linker put them.
//
// # Notes
//
// [File.Notes] reads the ELF notes: those of the PT_NOTE segments (what the
// loaders see) and those of SHT_NOTE sections no PT_NOTE covers. An [Edit]
// may write one ([Edit.SetNote]) into the region, under a PT_NOTE and a
// SHT_NOTE section of the requested name; remove some ([Edit.RemoveNotes]),
// their bytes zeroed; and name the notes derived from DT_NEEDED, the search
// path and the interpreter ([Edit.Derived], a loader's resolution cache),
// which every edit that changes those removes unless it writes a fresh one.
// A note and the RUNPATH it was computed from change in the same commit
// (notelayout.go).
//
// # Crash safety
//
// A plan is a list of steps ordered so that the file on disk is, after every
// step, either the original or the result as far as any loader can tell: first
// bytes nothing references (the appended region, zero padding), then header
// changes that do not change what is loaded, then a single write that switches
// from the old to the new content, then hygiene (overwriting the bytes of
// replaced strings with 'X' so old Nix store paths do not linger). Hygiene
// that follows the switch in the file rides in its write, after its bytes:
// a write interrupted in the middle leaves a prefix of it. A failed step
// rolls back the steps before it.
//
// A plan of more than one write first appends a journal past the end of
// the old and the new file (the commit's bytes, the old bytes of what is
// written up to it, what is written after it, checksums), its trailer
// first, in one write a kill cannot cut, then the body it vouches for;
// its last step cuts it away. A file that ends in one (its process was
// killed) is read by an edit ([NewFileToEdit], [Batch.OpenForEdit],
// [EditFile]) as its edit leaves it, finished when the commit's bytes are
// in place, else undone, and every plan made from it writes that state
// first ([Recover] when the edit asks nothing more): an edit run again
// after a crash leaves the bytes one run leaves. Every other read
// ([NewFile], [Open]) reads the bytes the loader maps and only notes the
// journal ([File.Interrupted]): a journal is a crash-recovery aid, never
// an input, and it is recovered only in the shape and within the bounds
// a run writes.
//
// # Hardening
//
// Every count, size and offset read from a file is checked against the file's
// size before anything is allocated. Hostile input gives an error naming the
// problem and its offset; it never panics and never allocates more than the
// file size justifies. The package has fuzz targets for reading and editing.
//
// The package knows nothing of Nix or CUDA and does not log.
package elfedit

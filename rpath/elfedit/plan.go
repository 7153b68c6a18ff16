package elfedit

import (
	"bytes"
	"debug/elf"
	"fmt"
	"slices"
)

// Strategy names the layout a plan uses (see the package documentation).
type Strategy string

// The layouts, cheapest first.
const (
	NoOp    Strategy = "no-op"
	InPlace Strategy = "in-place"
	Slack   Strategy = "slack"
	Region  Strategy = "region"
	// Recover finishes or undoes the edit a killed process left
	// unfinished in the file (journal.go), where the edit asked of the
	// file so finished asks nothing more.
	Recover Strategy = "recover"
)

// StepKind says what a step may touch, which is what makes the order of a
// plan crash-safe.
type StepKind string

// The kinds of step, in the order a plan runs them.
const (
	// StepUnused writes bytes nothing references yet: past the old end of
	// the file, or zero padding.
	StepUnused StepKind = "unused"
	// StepNeutral changes headers without changing what the loaders load
	// (a segment grown over padding, section headers).
	StepNeutral StepKind = "neutral"
	// StepCommit is the single write that switches from the old content to
	// the new one.
	StepCommit StepKind = "commit"
	// StepHygiene overwrites bytes nothing references any more, so replaced
	// store paths do not linger in the file.
	StepHygiene StepKind = "hygiene"
	// StepTruncate cuts the file to Len bytes (a dead region at the end).
	StepTruncate StepKind = "truncate"
)

// Step is one write of a plan.
type Step struct {
	Kind StepKind `json:"kind"`
	What string   `json:"what"`
	Off  int64    `json:"offset"`
	Len  int64    `json:"length"`

	data []byte
	// head is, for a commit that took in the hygiene after it
	// (joinCommit), the length of the commit's own bytes, data[:head];
	// 0 when the step is all commit. With sync, Apply flushes between the
	// two parts.
	head int64
}

// Plan is a laid-out edit of one file, ready to be applied.
type Plan struct {
	Strategy Strategy `json:"strategy"`
	Steps    []Step   `json:"steps"`
	OldSize  int64    `json:"old_size"`
	NewSize  int64    `json:"new_size"`
	// Written is the number of bytes the plan writes (holes excluded).
	Written int64 `json:"bytes_written"`

	f  *File
	fp *fingerprint // set by prepare when the plan is detached from f
	// hints name the steps' bytes that are copies of the file's (a
	// layout's moved tables), and det what a detached plan holds instead
	// of its steps' bytes (detach.go).
	hints []srcHint
	det   *detached
	// had is what Verify found in the original (checkResult allows
	// those problems in the result).
	had []Problem
	// recover is written before the steps: the file ended in the journal
	// of an interrupted edit, and the plan was made from the file as that
	// edit leaves it (File.recovery).
	recover *recovery
}

// IsNoOp reports a plan that changes nothing: applying it does not even
// open the file for writing.
func (p *Plan) IsNoOp() bool { return p.Strategy == NoOp }

// dent is one planned dynamic entry.
type dent struct {
	tag     elf.DynTag
	val     uint64
	isStr   bool
	str     string
	origOff int64 // offset of the string this entry had, -1 if the entry is new
	changed bool  // str must be given an offset
	placed  bool  // str was written over the old one in place
}

// desiredDyn applies the edit to the dynamic entries, before any string is
// placed.
func (f *File) desiredDyn(e *Edit) []dent {
	// Room for what an edit adds: a RUNPATH, a SONAME, flags, needed names.
	ents := make([]dent, 0, f.dynLen+4+len(e.AddNeeded))
	for _, d := range f.Dynamic[:f.dynLen] {
		x := dent{tag: d.Tag, val: d.Val, origOff: -1}
		if isStringTag(d.Tag) {
			x.isStr, x.origOff = true, int64(d.Val)
			x.str, _ = cstring(f.strtab, d.Val)
		}
		ents = append(ents, x)
	}
	set := func(d *dent, s string) {
		if d.str != s {
			d.str, d.changed = s, true
		}
	}
	newStr := func(tag elf.DynTag, s string) dent {
		return dent{tag: tag, isStr: true, str: s, origOff: -1, changed: true}
	}
	// DT_NEEDED
	for _, name := range e.RemoveNeeded {
		ents = slices.DeleteFunc(ents, func(d dent) bool { return d.tag == elf.DT_NEEDED && d.str == name })
	}
	for _, r := range e.ReplaceNeeded {
		for i := range ents {
			if ents[i].tag == elf.DT_NEEDED && ents[i].str == r.Old {
				set(&ents[i], r.New)
			}
		}
	}
	var add []dent
	for _, name := range e.AddNeeded {
		if !slices.ContainsFunc(ents, func(d dent) bool { return d.tag == elf.DT_NEEDED && d.str == name }) &&
			!slices.ContainsFunc(add, func(d dent) bool { return d.str == name }) {
			add = append(add, newStr(elf.DT_NEEDED, name))
		}
	}
	if len(add) > 0 {
		ents = slices.Insert(ents, 0, add...)
	}
	// DT_SONAME
	if e.Soname != nil {
		if i := slices.IndexFunc(ents, func(d dent) bool { return d.tag == elf.DT_SONAME }); i >= 0 {
			set(&ents[i], *e.Soname)
			ents = keepFirst(ents, elf.DT_SONAME)
		} else {
			at := 0
			for at < len(ents) && ents[at].tag == elf.DT_NEEDED {
				at++
			}
			ents = slices.Insert(ents, at, newStr(elf.DT_SONAME, *e.Soname))
		}
	}
	ents = addFlagEntries(ents, e)
	// DT_RUNPATH / DT_RPATH
	find := func(tag elf.DynTag) int { return slices.IndexFunc(ents, func(d dent) bool { return d.tag == tag }) }
	drop := func(tag elf.DynTag) {
		ents = slices.DeleteFunc(ents, func(d dent) bool { return d.tag == tag })
	}
	switch {
	case e.RemovePath:
		drop(elf.DT_RUNPATH)
		drop(elf.DT_RPATH)
	case e.SetPath != nil:
		want, other := elf.DT_RUNPATH, elf.DT_RPATH
		if e.Tag == TagRPath {
			want, other = elf.DT_RPATH, elf.DT_RUNPATH
		}
		iw, io := find(want), find(other)
		if e.Tag == TagKeep {
			for i := range ents {
				if ents[i].tag == elf.DT_RUNPATH || ents[i].tag == elf.DT_RPATH {
					set(&ents[i], *e.SetPath)
				}
			}
			if iw < 0 && io < 0 {
				ents = append(ents, newStr(elf.DT_RUNPATH, *e.SetPath))
			}
			break
		}
		switch {
		case iw >= 0 && io >= 0:
			drop(other)
		case io >= 0:
			for i := range ents {
				if ents[i].tag == other {
					ents[i].tag = want // a one-word retag, no string moves
				}
			}
		case iw < 0:
			ents = append(ents, newStr(want, *e.SetPath))
		}
		set(&ents[find(want)], *e.SetPath)
		ents = keepFirst(ents, want)
	}
	return ents
}

// planDynamic is the edited .dynamic's entries, and whether they differ
// from the file's. It refuses what no loader could run: a path in a
// self-relocating file, a new string without a string table.
func (f *File) planDynamic(e *Edit) (ents []dent, dynChanged bool, err error) {
	if !f.IsDynamic() {
		return nil, false, nil
	}
	ents = f.desiredDyn(e)
	// glibc's static-PIE startup (_dl_relocate_static_pie) asserts
	// that its own .dynamic has neither tag: the program would die
	// before main. Nothing would read the path anyway.
	_, hadRun := f.dynVal(elf.DT_RUNPATH)
	_, hadR := f.dynVal(elf.DT_RPATH)
	// glibc's ld.so bootstraps itself with the same code and the same
	// assertions.
	if k := f.Kind(); (k == KindStaticPIE || k == KindLoader) && !hadRun && !hadR &&
		slices.ContainsFunc(ents, func(d dent) bool { return d.tag == elf.DT_RUNPATH || d.tag == elf.DT_RPATH }) {
		what := map[Kind]string{KindStaticPIE: "static PIE", KindLoader: "dynamic loader"}[k]
		return nil, false, fmt.Errorf("%w: a %s cannot carry DT_RUNPATH or DT_RPATH (glibc's self-relocation asserts it has none)", ErrSelfRelocating, what)
	}
	// A new string needs a string table for its entry to point into.
	if _, ok := f.dynVal(elf.DT_STRTAB); !ok && slices.ContainsFunc(ents, func(d dent) bool { return d.isStr && d.changed }) {
		return nil, false, formatErr(int64(f.Progs[f.dynProg].Off), "dynamic section has no DT_STRTAB to add strings to")
	}
	dynChanged = len(ents) != f.dynLen
	for i := 0; !dynChanged && i < len(ents); i++ {
		d := ents[i]
		dynChanged = d.changed || d.tag != f.Dynamic[i].Tag || d.val != f.Dynamic[i].Val
	}
	return ents, dynChanged, nil
}

// newBuilder lays out the strings of the edited entries and the tables
// a rename or a version change rewrites.
func (f *File) newBuilder(e *Edit, ents []dent, ren *symbolRename, interp string, interpChanged, dynChanged bool, notes *noteChanges) (*builder, error) {
	var sl *strLayout
	var renOffs []uint64
	if dynChanged {
		var err error
		all := ents
		if ren != nil {
			// The new symbol names are placed with the entries' strings.
			all = append(slices.Clone(ents), ren.pseudo()...)
		}
		if sl, err = f.layoutStrings(all); err != nil {
			return nil, err
		}
		if (len(sl.patches) > 0 || len(sl.tail) > 0) && f.namesInDynstr() {
			return nil, formatErr(-1, "the section names are in the dynamic string table: changing its strings would rename sections")
		}
		for _, d := range all[len(ents):] {
			renOffs = append(renOffs, d.val)
		}
		ents = all[:len(ents)]
	} else {
		sl = &strLayout{old: f.strtab, limit: uint64(len(f.strtab))}
	}
	b := &builder{f: f, ents: ents, sl: sl, interp: interp, interpChanged: interpChanged, dynChanged: dynChanged, notes: notes,
		steps: make([]Step, 0, 16)} // a region plan has about a dozen
	if vn, err := f.renamedVerneed(e, ents); err != nil {
		return nil, err
	} else if vn != nil {
		b.copies = append(b.copies, vn)
	}
	if ren != nil {
		t, err := f.renameTables(ren, renOffs)
		if err != nil {
			return nil, err
		}
		b.copies = append(b.copies, t...)
	}
	return b, nil
}

// keepFirst removes every entry with the tag but the first. A file that
// repeats a tag the loaders keep one value of (the last) reads the same
// to every tool once an edit has set the first and dropped the others.
func keepFirst(ents []dent, tag elf.DynTag) []dent {
	seen := false
	return slices.DeleteFunc(ents, func(d dent) bool {
		if d.tag != tag {
			return false
		}
		if !seen {
			seen = true
			return false
		}
		return true
	})
}

// Plan lays out the edit. It reads nothing beyond what NewFile read, except
// the dynamic symbol and version tables when a string is replaced (to know
// whether its bytes are shared), and what Verify reads.
//
// The layouts are built for files whose headers agree with each other. On
// a file the verifier already faults (a section header at an address no
// segment gives it, notes no header describes, a name table that is not
// one), the layout may meet what it cannot see; there Plan checks the
// planned result as EditFile does before returning it, so that a plan it
// returns is one whose result verifies, whatever the input.
func (f *File) Plan(e Edit) (*Plan, error) {
	if f.journal != nil {
		return nil, fmt.Errorf("%w (the journal at 0x%x)", ErrInterrupted, f.journal.at)
	}
	p, err := f.layout(e)
	if err != nil {
		return nil, err
	}
	if f.recovery != nil {
		if p.IsNoOp() {
			p = &Plan{Strategy: Recover, OldSize: f.size, NewSize: f.size, f: f}
		}
		p.recover = f.recovery
		p.Written += f.recovery.written()
	}
	if p.IsNoOp() {
		return p, nil
	}
	p.had = f.Verify()
	if r := refusedProblem(p.had); r != nil {
		return nil, fmt.Errorf("%w: %s", ErrRefusedInput, r)
	}
	if len(p.had) > 0 {
		if _, err := p.check(&e); err != nil {
			return nil, fmt.Errorf("%w (the file already fails the verifier: %s)", err, p.had[0])
		}
	}
	return p, nil
}

// check returns the planned result after checkResult passed it.
func (p *Plan) check(e *Edit) (*File, error) {
	after, err := p.Result()
	if err != nil {
		return nil, fmt.Errorf("%w: planned result does not read back: %v", ErrVerify, err)
	}
	if err := checkResult(p.f, p.had, after, e); err != nil {
		return nil, err
	}
	return after, nil
}

// layout is Plan without the check of a faulted file's result.
func (f *File) layout(e Edit) (*Plan, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	noop := &Plan{Strategy: NoOp, OldSize: f.size, NewSize: f.size, f: f}
	if e.IsZero() {
		return noop, nil
	}
	if f.debugOnly {
		return nil, fmt.Errorf("separate debug object: nothing to edit")
	}
	if e.fieldEdit() {
		return f.planField(&e)
	}
	needDyn := e.SetPath != nil || e.RemovePath || e.Soname != nil || e.AddDebug || e.NoDefaultLib || len(e.RenameSymbols) > 0 ||
		len(e.AddNeeded)+len(e.RemoveNeeded)+len(e.ReplaceNeeded) > 0
	if needDyn && !f.IsDynamic() {
		return nil, ErrNotDynamic
	}
	if e.Interpreter != nil && f.interpProg < 0 {
		return nil, ErrNoInterpreter
	}
	ents, dynChanged, err := f.planDynamic(&e)
	if err != nil {
		return nil, err
	}
	interp := f.Interp
	if e.Interpreter != nil {
		interp = *e.Interpreter
	}
	interpChanged := interp != f.Interp
	ren, err := f.planRename(e.RenameSymbols)
	if err != nil {
		return nil, err
	}
	if ren != nil {
		dynChanged = true // DT_SYMTAB and the hash tables move
	}
	notes, err := f.planNotes(&e, f.derivedChanged(ents, interp))
	if err != nil {
		return nil, err
	}
	if !dynChanged && !interpChanged && !notes.any() {
		return noop, nil
	}
	if notes.any() && f.Header.Type == elf.ET_REL {
		return nil, fmt.Errorf("relocatable object: notes are placed by the linker")
	}
	if !slices.ContainsFunc(f.Progs, func(p elf.ProgHeader) bool { return p.Type == elf.PT_LOAD }) {
		return nil, formatErr(-1, "no PT_LOAD segment")
	}
	b, err := f.newBuilder(&e, ents, ren, interp, interpChanged, dynChanged, notes)
	if err != nil {
		return nil, err
	}
	return b.choose()
}

// choose picks the layout: the program header table as commit when notes
// change, the region for rewritten tables, else in place, then the slack
// after .dynstr, then the region.
func (b *builder) choose() (*Plan, error) {
	f, notes := b.f, b.notes
	if notes.any() {
		// Notes change: the commit must be the program header table (it
		// switches PT_NOTE), so the layouts whose commit is a write of
		// .dynamic or .dynstr cannot take the other changes with them.
		ne, err := f.editNotes(notes, false)
		if err != nil {
			return nil, err
		}
		if p, ok := b.tableOnly(ne); ok {
			return p, nil
		}
		if b.ne, err = f.editNotes(notes, true); err != nil {
			return nil, err
		}
		return b.region()
	}
	if len(b.copies) > 0 {
		// Rewritten tables move with .dynamic, in the region.
		return b.region()
	}
	if p, ok := b.inPlace(); ok {
		return p, nil
	}
	if p, ok := b.slack(); ok {
		return p, nil
	}
	return b.region()
}

// namesInDynstr reports a section name table that shares bytes with the
// dynamic string table. No linker writes one, but nothing forbids it, and
// the string layouts (in place, scrubbed, cleared after a move) would
// rename the sections under it.
func (f *File) namesInDynstr() bool {
	i := f.Header.Shstrndx
	if i <= 0 || i >= len(f.Sections) || len(f.strtab) == 0 {
		return false
	}
	s := f.Sections[i]
	return s.Type != elf.SHT_NOBITS && (rng{s.Offset, s.Offset + s.Size}).overlaps(rng{f.strOff, f.strOff + uint64(len(f.strtab))})
}

// builder holds the decisions shared by the three layouts.
type builder struct {
	f             *File
	ents          []dent
	sl            *strLayout
	interp        string
	interpChanged bool
	dynChanged    bool
	notes         *noteChanges // nil when no note changes
	ne            *noteEdit    // the note change laid out for a region
	copies        []*tableCopy // rewritten tables (.gnu.version_r, symbols), placed in the region
	steps         []Step
	hints         []srcHint // where the steps copy the file's own bytes (detach.go)
}

func (b *builder) add(kind StepKind, what string, off uint64, data []byte) {
	b.steps = append(b.steps, Step{Kind: kind, What: what, Off: int64(off), Len: int64(len(data)), data: data})
}

// dynBytes encodes the planned dynamic entries with strtab at the given
// address and size, padded with DT_NULL to slots entries.
func (b *builder) dynBytes(strAddr, strSize uint64, slots int) []byte {
	f := b.f
	es := int(f.dynSize())
	out := make([]byte, slots*es)
	for i, d := range b.ents {
		v := d.val
		switch d.tag {
		case elf.DT_STRTAB:
			v = strAddr
		case elf.DT_STRSZ:
			v = strSize
		}
		f.encodeDyn(out[i*es:], Dyn{Tag: d.tag, Val: v})
	}
	return out
}

func (b *builder) finish(s Strategy, newSize int64) *Plan {
	steps := b.steps
	if b.f.keepOld {
		steps = slices.DeleteFunc(steps, func(st Step) bool { return st.Kind == StepHygiene })
	}
	p := &Plan{Strategy: s, Steps: b.f.coalesce(steps), OldSize: b.f.size, NewSize: newSize, f: b.f, hints: b.hints}
	for _, st := range p.Steps {
		if st.Kind != StepTruncate {
			p.Written += st.Len
		}
	}
	return p
}

// diffRange returns the smallest range of new that differs from old, as an
// offset and the bytes to write.
func diffRange(old, new []byte) (int, []byte, bool) {
	lo := 0
	for lo < len(old) && old[lo] == new[lo] {
		lo++
	}
	if lo == len(old) {
		return 0, nil, false
	}
	hi := len(old)
	for hi > lo && old[hi-1] == new[hi-1] {
		hi--
	}
	return lo, new[lo:hi], true
}

// inPlace: every new string fit over an old one, the entries fit in the
// dynamic section's slots and the interpreter in PT_INTERP. It is taken only
// when the result needs a single write, so that no crash can leave half of
// the change.
func (b *builder) inPlace() (*Plan, bool) {
	f := b.f
	if b.sl.grown || len(b.ents)+1 > len(f.Dynamic) {
		return nil, false
	}
	var commits, hyg []Step
	if b.dynChanged {
		for _, r := range b.sl.overwrites {
			commits = append(commits, Step{Kind: StepCommit, What: "dynamic string in place", Off: int64(f.strOff + r.lo), data: b.sl.at(r)})
		}
		for _, r := range b.sl.scrub {
			hyg = append(hyg, Step{Kind: StepHygiene, What: "scrub replaced string", Off: int64(f.strOff + r.lo), data: b.sl.at(r)})
		}
		old := make([]byte, len(f.Dynamic)*int(f.dynSize()))
		for i, d := range f.Dynamic {
			f.encodeDyn(old[i*int(f.dynSize()):], d)
		}
		nw := b.dynBytes(f.strAddr, uint64(len(f.strtab)), len(f.Dynamic))
		if lo, data, ok := diffRange(old, nw); ok {
			commits = append(commits, Step{Kind: StepCommit, What: ".dynamic entries", Off: int64(f.Progs[f.dynProg].Off) + int64(lo), data: data})
		}
	}
	if b.interpChanged {
		p := f.Progs[f.interpProg]
		if uint64(len(b.interp))+1 > p.Filesz || f.interpShared() {
			return nil, false
		}
		buf := make([]byte, p.Filesz) // NUL padding: the kernel reads up to the first NUL
		copy(buf, b.interp)
		commits = append(commits, Step{Kind: StepCommit, What: "interpreter in place", Off: int64(p.Off), data: buf})
	}
	if len(commits) > 1 {
		return nil, false
	}
	for _, st := range append(commits, hyg...) {
		b.add(st.Kind, st.What, uint64(st.Off), st.data)
	}
	return b.finish(InPlace, f.size), true
}

// slack: the grown string table fits in the zero padding after the first
// PT_LOAD; the segment is extended over it and DT_STRTAB repointed by one
// write of .dynamic. Not used when the interpreter changes too (two commit
// writes).
func (b *builder) slack() (*Plan, bool) {
	f := b.f
	if b.interpChanged || !b.dynChanged || len(b.ents)+1 > len(f.Dynamic) {
		return nil, false
	}
	li := slices.IndexFunc(f.Progs, func(p elf.ProgHeader) bool { return p.Type == elf.PT_LOAD })
	first := f.Progs[li]
	if first.Filesz != first.Memsz {
		return nil, false
	}
	start := first.Off + first.Filesz
	endVaddr := first.Vaddr + first.Filesz
	// The grown segment keeps off the pages of the segments after it, not
	// only their bytes: glibc since 2.35 refuses an object whose first
	// segment's last page is a page of its last one ("ELF load command
	// address/offset not page-aligned"), and where it maps both, the later
	// mapping takes the page. Pages are the largest the machine's kernels
	// use; the page the segment already ends in is its own to fill.
	page := maxPageSize(f.Header.Machine)
	fileLimit, memLimit := uint64(f.size), ^uint64(0)
	for i, p := range f.Progs {
		if p.Type != elf.PT_LOAD || i == li {
			continue
		}
		if p.Off < start && p.Off+p.Filesz > start {
			return nil, false
		}
		if p.Off >= start {
			fileLimit = min(fileLimit, p.Off)
		}
		if p.Vaddr >= first.Vaddr {
			memLimit = min(memLimit, max(p.Vaddr/page*page, alignUp(endVaddr, page)), p.Vaddr)
		}
	}
	for _, r := range f.usedRanges() {
		if r.lo < start && r.hi > start {
			return nil, false
		}
		if r.lo >= start {
			fileLimit = min(fileLimit, r.lo)
		}
	}
	n := b.sl.size()
	if start+n > fileLimit || endVaddr+n > memLimit || start+n < start {
		return nil, false
	}
	// The addresses the segment grows over must be nobody's: a section
	// whose address range reaches into them (a file whose section headers
	// disagree with its segments) would be mapped by the grown segment at
	// offsets that are not its own.
	ext := rng{endVaddr, endVaddr + n}
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_ALLOC != 0 && s.Size > 0 && (rng{s.Addr, s.Addr + s.Size}).overlaps(ext) {
			return nil, false
		}
	}
	pad, err := readAt(f.r, f.size, start, n, "padding")
	if err != nil || bytes.ContainsFunc(pad, func(r rune) bool { return r != 0 }) {
		return nil, false
	}
	b.add(StepUnused, ".dynstr copy in padding after the first PT_LOAD", start, b.sl.bytes())
	b.hint(start, f.strOff, b.sl.limit)
	grown := first
	grown.Filesz += n
	grown.Memsz += n
	phdr := make([]byte, f.phdrSize())
	f.encodeProg(phdr, grown)
	b.add(StepNeutral, "first PT_LOAD extended over the padding", f.Header.Phoff+uint64(li)*uint64(f.phdrSize()), phdr)
	if si := f.dynstrSection(); si >= 0 {
		s := f.Sections[si]
		s.Offset, s.Addr, s.Size = start, endVaddr, n
		b.add(StepNeutral, ".dynstr section header", f.Header.Shoff+uint64(si)*uint64(f.shdrSize()), f.encodeSection(s))
		syms, _ := f.fixSymbols(map[int]sectionMove{si: {f.strAddr, uint64(len(f.strtab)), endVaddr}}, nil)
		b.steps = append(b.steps, syms...)
	}
	dyn := b.dynBytes(endVaddr, n, len(f.Dynamic))
	b.add(StepCommit, ".dynamic entries", f.Progs[f.dynProg].Off, dyn)
	b.scrubOld()
	return b.finish(Slack, f.size), true
}

// scrubOld tidies the old string table, which nothing references after the
// commit. When a section header describes exactly that table and no other
// section shares its bytes, the table is zeroed, so no copy of a symbol name
// or a path stays behind (patchelf clobbers a section it moved). Then every
// string that was replaced or removed, and every search path it still holds
// even where it did not change (the new copy has them, and once a later
// edit replaces them there this copy would be the one stale store path left
// in the file), is overwritten with 'X', as patchelf marks a replaced
// string, except the bytes a symbol or version name shares: patchelf leaves
// those (tests/shared-rpath.sh).
func (b *builder) scrubOld() {
	f := b.f
	if i := f.dynstrSection(); i >= 0 {
		s := f.Sections[i]
		alone := s.Offset == f.strOff && s.Size == uint64(len(f.strtab)) && s.Type != elf.SHT_NOBITS &&
			!slices.ContainsFunc(f.usedRanges(), func(r rng) bool {
				return r.overlaps(rng{s.Offset, s.Offset + s.Size}) && r != (rng{s.Offset, s.Offset + s.Size})
			})
		if alone && s.Size > 0 {
			b.add(StepHygiene, "zero the old .dynstr", s.Offset, zeros(s.Size))
		}
	}
	dead := slices.Clone(b.sl.dead)
	for _, d := range f.Dynamic[:f.dynLen] {
		if d.Tag == elf.DT_RUNPATH || d.Tag == elf.DT_RPATH {
			s, _ := cstring(f.strtab, d.Val)
			if r := (rng{d.Val, d.Val + uint64(len(s))}); !slices.Contains(dead, r) {
				dead = append(dead, r)
			}
		}
	}
	for _, d := range dead {
		for _, r := range b.sl.unkept(d) {
			if r.hi > r.lo {
				b.add(StepHygiene, "scrub replaced string in the old .dynstr", f.strOff+r.lo, bytes.Repeat([]byte{'X'}, int(r.hi-r.lo)))
			}
		}
	}
}

// sectionAt finds the allocated section of the given type at addr.
// dynstrSection is the section that describes DT_STRTAB: the one .dynsym
// links to (what tools and the verifier follow), else the allocated string
// table at its address; -1 if none.
func (f *File) dynstrSection() int {
	for _, s := range f.Sections {
		if s.Type == elf.SHT_DYNSYM && s.Link > 0 && int(s.Link) < len(f.Sections) && f.Sections[s.Link].Addr == f.strAddr {
			return int(s.Link)
		}
	}
	return f.sectionAt(elf.SHT_STRTAB, f.strAddr)
}

func (f *File) sectionAt(t elf.SectionType, addr uint64) int {
	return slices.IndexFunc(f.Sections, func(s Section) bool {
		return s.Type == t && s.Addr == addr && s.Flags&elf.SHF_ALLOC != 0
	})
}

// usedRanges lists the file ranges that hold something: sections, the
// program and section header tables.
func (f *File) usedRanges() []rng {
	var out []rng
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOBITS && s.Type != elf.SHT_NULL && s.Size > 0 {
			out = append(out, rng{s.Offset, s.Offset + s.Size})
		}
	}
	if f.Header.Phnum > 0 {
		out = append(out, rng{f.Header.Phoff, f.Header.Phoff + uint64(f.Header.Phnum)*uint64(f.Header.Phentsize)})
	}
	if f.Header.Shoff > 0 {
		out = append(out, rng{f.Header.Shoff, f.Header.Shoff + uint64(f.Header.Shnum)*uint64(f.Header.Shentsize)})
	}
	return out
}

// interpOwn returns the parts of PT_INTERP's file range that no other
// section claims. A linker script can make PT_INTERP cover more than
// .interp (patchelf's contiguous-note-sections test puts a build-id note
// under it); those bytes are not the interpreter's to overwrite or clear.
func (f *File) interpOwn() []rng {
	p := f.Progs[f.interpProg]
	own := []rng{{p.Off, p.Off + p.Filesz}}
	for _, s := range f.Sections {
		if s.Size == 0 || s.Type == elf.SHT_NOBITS || s.Flags&elf.SHF_ALLOC == 0 || s.Name == ".interp" || (s.Type == elf.SHT_PROGBITS && s.Addr == p.Vaddr) {
			continue
		}
		own = without(own, rng{s.Offset, s.Offset + s.Size})
	}
	return own
}

// interpShared says whether another section claims bytes of PT_INTERP's
// file range, so the interpreter cannot be rewritten in place.
func (f *File) interpShared() bool {
	p := f.Progs[f.interpProg]
	own := f.interpOwn()
	return len(own) != 1 || own[0] != (rng{p.Off, p.Off + p.Filesz})
}

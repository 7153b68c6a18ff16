package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/urfave/cli/v3"
)

// The man page is written from the command tree, like --help, when
// `cudapatch man` runs; nix/package.nix installs what the binary it built
// prints, so the page always describes that binary.

func manCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:        "man",
		Usage:       "print the manual page (roff, for man -l -)",
		Description: "cudapatch man > cudapatch.1; the Nix package installs it.",
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Present() {
				return withCode(exitUsage, fmt.Errorf("man: takes no arguments"))
			}
			_, err := fmt.Fprint(g.stdout, manPage(docCommand(cmd.Root(), ""), g.version))
			return err
		},
	}
}

// roff escapes text for a roff line: backslashes, and a leading . or '
// that roff would read as a request. "…" becomes "...": groff has no glyph
// for it on an ASCII terminal (LANG unset or C) and warns on every page view.
func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "…", "...")
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

// roffOpt writes an option name in bold with its hyphens as \-.
func roffOpt(s string) string { return `\fB` + strings.ReplaceAll(s, "-", `\-`) + `\fR` }

func manFlags(b *strings.Builder, fs []flagDoc) {
	for _, f := range fs {
		b.WriteString(".TP\n")
		var names []string
		if f.Short != "" {
			names = append(names, roffOpt("-"+f.Short))
		}
		names = append(names, roffOpt("--"+f.Long))
		line := strings.Join(names, ", ")
		if f.Arg != "" {
			line += ` \fI` + roff(f.Arg) + `\fR`
		}
		b.WriteString(line + "\n" + roff(f.text()) + "\n")
	}
}

// manSynopsis writes usage lines with the program and command names bold
// and the rest as written.
func manSynopsis(b *strings.Builder, d *cmdDoc) {
	for i, line := range d.Synopsis {
		if i > 0 {
			b.WriteString(".br\n")
		}
		rest := strings.TrimPrefix(line, d.Path)
		fmt.Fprintf(b, "\\fB%s\\fR%s\n", roff(d.Path), roff(rest))
	}
}

// manPage is the whole page. Its date is the commit's, so that the page of
// a build is reproducible; builds without VCS information have none.
func manPage(root *cmdDoc, v versionInfo) string {
	var b strings.Builder
	b.WriteString(".\\\" Written by `cudapatch man` from the command definitions.\n")
	fmt.Fprintf(&b, ".TH CUDAPATCH 1 \"%s\" \"cudapatch %s\" \"User Commands\"\n", roff(v.Date), roff(v.Version))
	fmt.Fprintf(&b, ".SH NAME\ncudapatch \\- %s\n", roff(root.Usage))
	b.WriteString(".SH SYNOPSIS\n")
	manSynopsis(&b, root)
	b.WriteString(".SH DESCRIPTION\n")
	manParagraphs(&b, root.Description, true)
	b.WriteString(".SH OPTIONS\nThe options of the default job, and of \\fBcudapatch patch\\fR:\n")
	manFlags(&b, root.Flags)
	b.WriteString(".SH COMMANDS\n")
	for _, c := range root.Commands {
		fmt.Fprintf(&b, ".SS %s\n", roff(c.Name))
		manSynopsis(&b, c)
		b.WriteString(".PP\n" + roff(upperFirst(c.Usage)) + ".\n")
		manParagraphs(&b, c.Description, false)
		if c.Name == "patch" {
			b.WriteString(".PP\nIts options are those of the default job (\\fBOPTIONS\\fR above).\n")
			continue
		}
		if c.OwnOptions != "" {
			b.WriteString(".PP\n.nf\n")
			for _, l := range strings.Split(strings.TrimRight(c.OwnOptions, "\n"), "\n") {
				b.WriteString(roff(strings.ReplaceAll(l, "\t\t", "  ")) + "\n")
			}
			b.WriteString(".fi\n")
		}
		manFlags(&b, c.Flags)
	}
	b.WriteString(manTail)
	b.WriteString(".SH EXAMPLES\n")
	for i, e := range manExamples {
		if i > 0 {
			b.WriteString(".PP\n")
		}
		b.WriteString(roff(e.what) + "\n.PP\n.RS\n.nf\n" + strings.ReplaceAll(roff(e.cmd), "-", `\-`) + "\n.fi\n.RE\n")
	}
	b.WriteString(manSeeAlso)
	return b.String()
}

// manExamples are the man page's EXAMPLES: a command line as typed, and
// what it does. TestManExamples holds each to the command tree (every
// command and flag named exists).
var manExamples = []struct{ cmd, what string }{
	{`cudapatch --search "$zlib/lib" --search "$cudart/lib" "$out"`,
		"In a Nix build (the hook runs this for you): patch every ELF file below $out in one pass, resolving each dependency against $out, then the --search directories; the interpreter and libc come from $NIX_BINTOOLS."},
	{`cudapatch --dry-run -v --search deps/lib out`,
		"Outside Nix: decide and verify every file below out without writing (each line ends \"(not written)\"), and log where each dependency resolved."},
	{`cudapatch out/lib/libfoo.so`,
		"Patch one library. When libfoo.so is a link to libfoo.so.1 in the same directory, libfoo.so.1 is patched."},
	{`cudapatch lint out`,
		"Check a patched tree against the rules (cudapatch lint --list-rules); exit 1 on findings."},
	{`cudapatch explain out/bin/app`,
		"Say which file the loader would take for each library out/bin/app needs, and which step of its search found it."},
	{`cudapatch doctor out/bin/app`,
		"Check this machine's NVIDIA driver setup, and which libcuda.so.1 out/bin/app would load."},
	{`sudo cudapatch doctor --fix`,
		"Make the driver link /run/opengl-driver/lib and the tmpfiles.d file that makes it again at boot."},
	{`cudapatch patchelf --print-rpath out/bin/app`,
		"The drop-in patchelf: patchelf's options, messages and exit codes."},
}

// manParagraphs writes a Description: text paragraphs filled, indented
// ones as they are.
func manParagraphs(b *strings.Builder, desc string, first bool) {
	for _, p := range paragraphs(desc) {
		if !first {
			b.WriteString(".PP\n")
		}
		first = false
		if !p.pre {
			b.WriteString(roff(p.text) + "\n")
			continue
		}
		b.WriteString(".RS\n.nf\n")
		for _, l := range strings.Split(p.text, "\n") {
			b.WriteString(roff(strings.TrimPrefix(l, "  ")) + "\n")
		}
		b.WriteString(".fi\n.RE\n")
	}
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// manTail is the part of the page that is not in any --help.
const manTail = `.SH EXIT STATUS
.TP
0
Success. For the main job: every file was patched, unchanged or skipped.
.TP
1
The job found problems: missing dependencies or a RUNPATH audit failure
(nothing is written then), lint findings at or above \fB\-\-fail\-on\fR,
problems found by \fBdoctor\fR, a broken invariant found by \fBverify\fR,
a library \fBexplain\fR cannot find.
.TP
2
Bad usage, or a file that could not be read, parsed or written. The main job
counts such a file as failed and writes nothing unless the failure happened
while writing.
.PP
The main job's last line counts every file exactly once:
.IP
cudapatch: patched \fIN\fR files, \fIU\fR unchanged, \fIS\fR skipped, \fIF\fR failed, \fIM\fR missing dependencies
.PP
with "would patch" after \fB\-\-dry\-run\fR, and "nothing written: would patch"
when an error or a missing dependency stopped the job before it wrote.
.SH ENVIRONMENT
.TP
.B NIX_BINTOOLS
The default \fB\-\-interpreter\fR and \fB\-\-libc\fR, from its
nix\-support/dynamic\-linker and nix\-support/orig\-libc.
.TP
.BR NIX_BUILD_TOP ", " TMPDIR
Inside a Nix build, RUNPATH entries below them fail the audit, as /build does.
.TP
.B LD_LIBRARY_PATH
Read by \fBexplain\fR (without \fB\-\-root\fR) and \fBdoctor\fR, which report what it shadows.
.TP
.B NO_COLOR
Turns off the colours of \fBlint\fR's text output.
.TP
.B GOMEMLIMIT
The Go heap's soft limit; unless set, 56 MiB, and for the main job 16 MiB a job when that is more.
.TP
.B GOGC
How much the Go heap may grow between collections, in percent of what is live; 400 unless set.
.TP
.B NIX_STORE
The store of the main job's \fB\-\-relative\-rpaths\fR and of \fBlint\fR when \fB\-\-store\-dir\fR is not given; /nix/store unless set.
`

// manSeeAlso ends the page, after the EXAMPLES.
const manSeeAlso = `.SH SEE ALSO
.BR patchelf (1),
.BR ld.so (8),
.BR ldconfig (8),
.BR tmpfiles.d (5)
.PP
The README and docs/ of https://github.com/cudapatch/cudapatch.
`

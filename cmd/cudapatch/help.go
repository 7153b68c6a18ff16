package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/urfave/cli/v3"
)

// This file turns the command tree into what a user reads: --help, usage
// errors, and (man.go, completion.go) the man page and the shell
// completions. All of them are rendered from one model, cmdDoc, taken from
// the *cli.Command definitions, so a flag added to a command appears in all
// four with nothing else to edit.

// helpWidth is where help text wraps: a terminal's 80 columns.
const helpWidth = 80

// cmdDoc is the documentation model of one command.
type cmdDoc struct {
	Path        string   // "cudapatch lint"
	Name        string   // "lint"; "cudapatch" for the root
	Usage       string   // one line
	Synopsis    []string // usage lines, each starting with Path
	Description string
	Flags       []flagDoc
	Commands    []*cmdDoc // visible subcommands, root only
	// OwnOptions is set for commands that parse their own command line
	// (patchelf, auto-patchelf): their option summary, as their --help
	// prints it.
	OwnOptions string
	cmd        *cli.Command
}

// flagDoc is the documentation model of one flag.
type flagDoc struct {
	Long       string   // "jobs"
	Short      string   // "j", or ""
	Arg        string   // the placeholder: "N", "DIR", "all|needed|none"; "" for a switch
	Choices    []string // the values an enumerated placeholder allows
	Usage      string   // without the placeholder's backquotes
	Default    string   // shown default, "" for none
	Repeatable bool
}

// placeholder matches the `NAME` a flag's usage marks as its value.
var placeholder = regexp.MustCompile("`([^`]+)`")

func docFlag(f cli.Flag) flagDoc {
	d := flagDoc{}
	for _, n := range f.Names() {
		switch {
		case len(n) == 1 && d.Short == "":
			d.Short = n
		case d.Long == "":
			d.Long = n
		}
	}
	df, ok := f.(cli.DocGenerationFlag)
	if !ok {
		return d
	}
	usage := df.GetUsage()
	if df.TakesValue() {
		if m := placeholder.FindStringSubmatch(usage); m != nil {
			d.Arg = m[1]
		}
		if strings.Contains(d.Arg, "|") {
			d.Choices = strings.Split(d.Arg, "|")
		}
		if mv, ok := f.(cli.DocGenerationMultiValueFlag); ok {
			d.Repeatable = mv.IsMultiValueFlag()
		}
		if df.IsDefaultVisible() {
			d.Default = df.GetDefaultText()
			if d.Default == "" {
				d.Default = df.GetValue()
				if s, err := strconv.Unquote(d.Default); err == nil {
					d.Default = s
				}
				if d.Default == "0" || d.Default == "[]" {
					d.Default = ""
				}
			}
		}
	}
	d.Usage = placeholder.ReplaceAllString(usage, "$1")
	return d
}

// names is how help shows a flag: "-j, --jobs N" or "    --search DIR".
func (f flagDoc) names() string {
	s := "    "
	if f.Short != "" {
		s = "-" + f.Short + ", "
	}
	s += "--" + f.Long
	if f.Arg != "" {
		s += " " + f.Arg
	}
	return s
}

// text is the flag's explanation with its default.
func (f flagDoc) text() string {
	if f.Default != "" {
		return f.Usage + " (default: " + f.Default + ")"
	}
	return f.Usage
}

func docCommand(cmd *cli.Command, parent string) *cmdDoc {
	d := &cmdDoc{Name: cmd.Name, Path: cmd.Name, Usage: cmd.Usage, Description: cmd.Description, cmd: cmd}
	if parent != "" {
		d.Path = parent + " " + cmd.Name
	}
	if cmd.SkipFlagParsing {
		d.OwnOptions = cmd.UsageText
		d.Synopsis = []string{d.Path + " " + cmd.ArgsUsage}
	} else {
		if cmd.UsageText != "" {
			d.Synopsis = strings.Split(cmd.UsageText, "\n")
		} else {
			s := d.Path + " [OPTIONS]"
			if cmd.ArgsUsage != "" {
				s += " " + cmd.ArgsUsage
			}
			d.Synopsis = []string{s}
		}
		for _, f := range cmd.Flags {
			if vf, ok := f.(cli.VisibleFlag); ok && !vf.IsVisible() {
				continue
			}
			d.Flags = append(d.Flags, docFlag(f))
		}
	}
	for _, c := range cmd.Commands {
		if !c.Hidden {
			d.Commands = append(d.Commands, docCommand(c, d.Path))
		}
	}
	return d
}

// help renders the --help text.
func (d *cmdDoc) help() string {
	var b strings.Builder
	head := d.Path + " - "
	fmt.Fprintf(&b, "%s%s\n\nUsage:\n", head, wrapText(d.Usage, len(head), helpWidth))
	for _, s := range d.Synopsis {
		fmt.Fprintf(&b, "  %s\n", s)
	}
	for _, p := range paragraphs(d.Description) {
		b.WriteString("\n")
		if p.pre {
			b.WriteString(p.text + "\n")
		} else {
			b.WriteString(wrapText(p.text, 0, helpWidth) + "\n")
		}
	}
	if len(d.Commands) > 0 {
		b.WriteString("\nCommands:\n")
		w := 0
		for _, c := range d.Commands {
			w = max(w, len(c.Name))
		}
		for _, c := range d.Commands {
			writeColumns(&b, c.Name, c.Usage, w+4)
		}
	}
	if len(d.Flags) > 0 {
		if len(d.Commands) > 0 {
			b.WriteString("\nOptions (of patch, the default command):\n")
		} else {
			b.WriteString("\nOptions:\n")
		}
		w := 0
		for _, f := range d.Flags {
			if n := len(f.names()); n <= maxFlagColumn {
				w = max(w, n)
			}
		}
		for _, f := range d.Flags {
			writeColumns(&b, f.names(), f.text(), w+4)
		}
	}
	if len(d.Commands) > 0 {
		fmt.Fprintf(&b, "\n%s\nRun '%s COMMAND --help' for the options of a command.\n", exitStatusHelp, d.Path)
	}
	return b.String()
}

// maxFlagColumn is the widest flag column; a longer flag has its
// explanation on the next line.
const maxFlagColumn = 26

// exitStatusHelp is the root help's summary of the exit codes (README:
// "Usage" has the table; docs/usage.md the summary line's counts).
const exitStatusHelp = `Exit status: 0 success; 1 the job found problems (missing dependencies, an
audit or lint finding, a doctor problem; nothing is written); 2 bad usage, or
a file that could not be read or written.`

// writeColumns writes "  left   right" with right starting at column
// indent+2 and wrapped there; a left too wide puts right on the next line.
func writeColumns(b *strings.Builder, left, right string, indent int) {
	pad := indent + 2
	line := "  " + left
	if len(line) >= pad-1 {
		b.WriteString(line + "\n")
		line = ""
	}
	line += strings.Repeat(" ", pad-len(line))
	b.WriteString(line + wrapText(right, pad, helpWidth) + "\n")
}

// wrapText wraps s to width, continuation lines indented by indent; the
// first line is taken to start at column indent.
func wrapText(s string, indent, width int) string {
	words := strings.Fields(s)
	if len(words) == 0 {
		return ""
	}
	var b strings.Builder
	col := indent
	for i, w := range words {
		switch {
		case i == 0:
		case col+1+len(w) > width:
			b.WriteString("\n" + strings.Repeat(" ", indent))
			col = indent
		default:
			b.WriteString(" ")
			col++
		}
		b.WriteString(w)
		col += len(w)
	}
	return b.String()
}

// paragraph is a part of a command's Description: text to wrap, or lines
// indented by two spaces (commands, examples) kept as they are.
type paragraph struct {
	text string
	pre  bool
}

// paragraphs splits a Description at blank lines; the lines of a text
// paragraph are joined.
func paragraphs(desc string) []paragraph {
	var out []paragraph
	for _, p := range strings.Split(desc, "\n\n") {
		if strings.TrimSpace(p) == "" {
			continue
		}
		if strings.HasPrefix(p, "  ") {
			out = append(out, paragraph{text: strings.TrimRight(p, "\n"), pre: true})
			continue
		}
		out = append(out, paragraph{text: strings.Join(strings.Fields(p), " ")})
	}
	return out
}

// finish completes the command tree once every command is defined: each
// command gets -h/--help and a usage-error handler, and its help text is
// rendered from the tree. urfave/cli prints help through its templates
// when a flag named help is set; each command's template is its rendered
// text, so the library's own layout never shows.
func finish(g *globals, root *cli.Command) {
	var walk func(cmd *cli.Command, parent string)
	walk = func(cmd *cli.Command, parent string) {
		// No library-made help flag or help command; and with HideHelp,
		// the library prints a command's help from its CustomHelpTemplate.
		cmd.HideHelp = true
		path := cmd.Name
		if parent != "" {
			path = parent + " " + cmd.Name
		}
		if !cmd.SkipFlagParsing {
			cmd.Flags = append(cmd.Flags, &cli.BoolFlag{Name: "help", Aliases: []string{"h"}, Usage: "show this help", Local: true})
		}
		// Printed after "cudapatch: ", like every other error.
		who := ""
		if parent != "" {
			who = strings.TrimPrefix(path, root.Name+" ") + ": "
		}
		cmd.OnUsageError = func(_ context.Context, _ *cli.Command, err error, _ bool) error {
			return withCode(exitUsage, fmt.Errorf("%s%s (see '%s --help')", who, usageMessage(err), path))
		}
		// "cudapatch --help PATH": help of the root, not "no help topic".
		cmd.CommandNotFound = func(context.Context, *cli.Command, string) {
			fmt.Fprint(g.stdout, docCommand(cmd, parent).help())
		}
		for _, c := range cmd.Commands {
			walk(c, path)
		}
	}
	walk(root, "")
	// The root's flags are persistent in urfave/cli: a subcommand parses
	// them too (Local would stop that, but urfave/cli v3.6 then keeps only
	// the last value of a repeated flag, urfave/cli#2281). Given to any
	// command, before or after its name, they are an error.
	own := root.Flags
	for _, c := range root.Commands {
		action, name := c.Action, c.Name
		c.Action = func(ctx context.Context, cmd *cli.Command) error {
			for _, f := range own {
				if !f.IsSet() {
					continue
				}
				flag := "--" + f.Names()[0]
				if name == "patch" {
					return withCode(exitUsage, fmt.Errorf("patch: %s goes after 'patch' (cudapatch patch [OPTIONS] PATH...)", flag))
				}
				return withCode(exitUsage, fmt.Errorf("%s: %s is an option of the main job, not of %s (see 'cudapatch %s --help')", name, flag, name, name))
			}
			return action(ctx, cmd)
		}
	}
	var render func(cmd *cli.Command, parent string)
	render = func(cmd *cli.Command, parent string) {
		d := docCommand(cmd, parent)
		tmpl := literalTemplate(d.help())
		cmd.CustomHelpTemplate = tmpl
		if parent == "" {
			cmd.CustomRootCommandHelpTemplate = tmpl
		}
		for _, c := range cmd.Commands {
			render(c, d.Path)
		}
	}
	render(root, "")
}

// literalTemplate is a text/template that prints s as it is.
func literalTemplate(s string) string {
	return strings.ReplaceAll(s, "{{", `{{"{{"}}`)
}

var (
	unknownFlag  = regexp.MustCompile(`^flag provided but not defined: -(.+)$`)
	needsValue   = regexp.MustCompile(`^flag needs an argument: (.+)$`)
	invalidValue = regexp.MustCompile(`^invalid value "(.*)" for flag -([^:]+): (.*)$`)
)

// usageMessage rewords urfave/cli's parse errors the way they are typed:
// "--bogus", not "-bogus".
func usageMessage(err error) string {
	s := err.Error()
	if m := unknownFlag.FindStringSubmatch(s); m != nil {
		return "unknown flag " + dashes(m[1])
	}
	if m := needsValue.FindStringSubmatch(s); m != nil {
		return "flag " + dashes(strings.TrimLeft(m[1], "-")) + " needs a value"
	}
	if m := invalidValue.FindStringSubmatch(s); m != nil {
		why := m[3]
		var ne *strconv.NumError
		if errors.As(err, &ne) || strings.Contains(why, "strconv.") {
			why = "want a whole number"
		}
		return fmt.Sprintf("invalid value %q for %s: %s", m[1], dashes(m[2]), why)
	}
	return s
}

func dashes(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// oneOf is a flag validator that accepts only the given values; the help
// shows them as the placeholder a|b|c.
func oneOf(values ...string) func(string) error {
	return func(v string) error {
		for _, ok := range values {
			if v == ok {
				return nil
			}
		}
		return fmt.Errorf("want %s", orList(values))
	}
}

// atLeast is a validator of integer flags.
func atLeast(n int) func(int) error {
	return func(v int) error {
		if v < n {
			return fmt.Errorf("want at least %d", n)
		}
		return nil
	}
}

// orList writes "a, b or c".
func orList(values []string) string {
	if len(values) < 2 {
		return strings.Join(values, "")
	}
	return strings.Join(values[:len(values)-1], ", ") + " or " + values[len(values)-1]
}

// helpCommand is "cudapatch help [COMMAND]".
func helpCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:      "help",
		Usage:     "show the help of cudapatch or of COMMAND",
		ArgsUsage: "[COMMAND]",
		// urfave/cli shows the root's help for "help --help" when it parses
		// the flags of a command named help; this one parses its own.
		SkipFlagParsing: true,
		Action: func(ctx context.Context, cmd *cli.Command) error {
			root := cmd.Root()
			target := root
			switch a := cmd.Args().First(); {
			case a == "--help" || a == "-h":
				target = cmd
			case strings.HasPrefix(a, "-"):
				return withCode(exitUsage, fmt.Errorf("help: unknown flag %s (see 'cudapatch help --help')", a))
			case a != "":
				target = root.Command(a)
				if target == nil || cmd.Args().Len() > 1 {
					return withCode(exitUsage, fmt.Errorf("help: no command %q (see 'cudapatch --help')", strings.Join(cmd.Args().Slice(), " ")))
				}
			}
			if target.SkipFlagParsing && target.UsageText != "" {
				// The options of patchelf and auto-patchelf, as their
				// own --help prints them.
				_, err := fmt.Fprintln(g.stdout, strings.TrimRight(target.UsageText, "\n"))
				return err
			}
			_, err := fmt.Fprint(g.stdout, docCommand(target, parentPath(target)).help())
			return err
		},
	}
}

func parentPath(cmd *cli.Command) string {
	var names []string
	for p := cmd.Lineage(); len(p) > 1; p = p[1:] {
		names = append([]string{p[1].Name}, names...)
	}
	return strings.Join(names, " ")
}

package main

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/urfave/cli/v3"
)

// The completion scripts are static: written from the command tree when
// `cudapatch completion SHELL` runs, so they never call the binary while
// the user types, and nix/package.nix installs the output of the binary it
// just built (they always match it). Each flag's value is completed by its
// placeholder: DIR completes directories, FILE and PATH files, a|b|c its
// words, anything else nothing.

func completionCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print the completion script for bash, zsh or fish",
		ArgsUsage: "bash|zsh|fish",
		Description: "The scripts are written from the command definitions and complete commands, flags and their values " +
			"(directories for DIR, the words of a|b|c). The Nix package installs all three; by hand:\n\n" +
			"  cudapatch completion bash > ~/.local/share/bash-completion/completions/cudapatch\n" +
			"  cudapatch completion zsh > ~/.zfunc/_cudapatch    # a directory in $fpath\n" +
			"  cudapatch completion fish > ~/.config/fish/completions/cudapatch.fish",
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() != 1 {
				return withCode(exitUsage, fmt.Errorf("completion: want one SHELL: bash, zsh or fish"))
			}
			d := docCommand(cmd.Root(), "")
			var script string
			switch sh := cmd.Args().First(); sh {
			case "bash":
				script = bashCompletion(d)
			case "zsh":
				script = zshCompletion(d)
			case "fish":
				script = fishCompletion(d)
			default:
				return withCode(exitUsage, fmt.Errorf("completion: unknown shell %q (want bash, zsh or fish)", sh))
			}
			_, err := fmt.Fprint(g.stdout, script)
			return err
		},
	}
}

// valueKind says how a placeholder's value is completed.
type valueKind int

const (
	valueNone  valueKind = iota // a switch: no value
	valueFree                   // a number, a pattern: nothing to offer
	valueDir                    // a directory
	valueFile                   // a file
	valueWords                  // one of Choices
)

func kindOf(arg string, choices []string) valueKind {
	switch {
	case arg == "":
		return valueNone
	case len(choices) > 0:
		return valueWords
	case arg == "DIR":
		return valueDir
	case arg == "FILE" || arg == "PATH":
		return valueFile
	}
	return valueFree
}

// positional is what a command's operands are: files, command names, or
// the words of an a|b|c ArgsUsage.
func (d *cmdDoc) positional() (valueKind, []string) {
	arg := strings.Trim(strings.TrimSuffix(d.cmd.ArgsUsage, "..."), "[]")
	switch {
	case strings.Contains(arg, "|"):
		return valueWords, strings.Split(arg, "|")
	case arg == "COMMAND":
		return valueWords, nil // filled by the caller: the root's commands
	case arg == "":
		return valueNone, nil
	}
	return valueFile, nil
}

// ownOption matches an option in the usage text of patchelf and
// auto-patchelf: "[--set-rpath RPATH]", "[--paths [PATH ...]]".
var ownOption = regexp.MustCompile(`\[(--[a-z][a-z0-9-]*)(?: \[?([A-Z_]+))?`)

// completionFlags lists a command's flags for the completion scripts; for
// patchelf and auto-patchelf they are read from their usage text.
func (d *cmdDoc) completionFlags() []flagDoc {
	if d.OwnOptions == "" {
		return d.Flags
	}
	var out []flagDoc
	seen := map[string]bool{}
	for _, m := range ownOption.FindAllStringSubmatch(d.OwnOptions, -1) {
		name := strings.TrimPrefix(m[1], "--")
		if seen[name] {
			continue
		}
		seen[name] = true
		arg := m[2]
		switch arg {
		case "FILENAME":
			arg = "FILE"
		case "LIBRARY", "PREFIXES", "RPATH", "SONAME", "SIZE", "NEW_LIBRARY":
			arg = "VALUE"
		}
		out = append(out, flagDoc{Long: name, Arg: arg})
	}
	return out
}

func commandNames(d *cmdDoc) []string {
	var out []string
	for _, c := range d.Commands {
		out = append(out, c.Name)
	}
	return out
}

// shellQuote quotes s for sh in single quotes.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func bashCompletion(root *cmdDoc) string {
	var b strings.Builder
	names := commandNames(root)
	b.WriteString("# bash completion for cudapatch, written by `cudapatch completion bash` from\n")
	b.WriteString("# its command definitions. Source it, or install it as\n")
	b.WriteString("# share/bash-completion/completions/cudapatch.\n\n")
	// _cudapatch_value COMMAND FLAG prints how FLAG's value completes:
	// -d directories, -f files, -n nothing, or the words; nothing for a switch.
	b.WriteString("_cudapatch_value() {\n\tcase \"$1 $2\" in\n")
	emit := func(cmd string, f flagDoc) {
		k := kindOf(f.Arg, f.Choices)
		if k == valueNone {
			return
		}
		pats := []string{shellQuote(cmd + " --" + f.Long)}
		if f.Short != "" {
			pats = append(pats, shellQuote(cmd+" -"+f.Short))
		}
		var out string
		switch k {
		case valueDir:
			out = "-d"
		case valueFile:
			out = "-f"
		case valueWords:
			out = strings.Join(f.Choices, " ")
		default:
			out = "-n"
		}
		fmt.Fprintf(&b, "\t%s) echo %s ;;\n", strings.Join(pats, " | "), shellQuote(out))
	}
	for _, f := range root.Flags {
		emit("", f)
	}
	for _, c := range root.Commands {
		for _, f := range c.completionFlags() {
			emit(c.Name, f)
		}
	}
	b.WriteString("\tesac\n}\n\n")

	b.WriteString("_cudapatch() {\n")
	b.WriteString("\tlocal cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}\n")
	b.WriteString("\tlocal cmd= root= i w v\n")
	b.WriteString("\t# The command is the first operand, unless that is a PATH of the default job.\n")
	b.WriteString("\tfor ((i = 1; i < COMP_CWORD; i++)); do\n\t\tw=${COMP_WORDS[i]}\n")
	b.WriteString("\t\tif [[ $w == -* ]]; then\n")
	b.WriteString("\t\t\tv=$(_cudapatch_value \"$cmd\" \"$w\")\n")
	b.WriteString("\t\t\t[[ -n $v && $w != *=* ]] && ((i++))\n")
	b.WriteString("\t\telif [[ -z $cmd && -z $root ]]; then\n")
	fmt.Fprintf(&b, "\t\t\tcase $w in\n\t\t\t%s) cmd=$w ;;\n\t\t\t*) root=1 ;;\n\t\t\tesac\n", strings.Join(names, " | "))
	b.WriteString("\t\tfi\n\tdone\n")
	b.WriteString("\tif [[ $prev == -* ]]; then\n")
	b.WriteString("\t\tv=$(_cudapatch_value \"$cmd\" \"$prev\")\n")
	b.WriteString("\t\tcase $v in\n")
	b.WriteString("\t\t'') ;;\n")
	b.WriteString("\t\t-d) COMPREPLY=($(compgen -d -- \"$cur\")); return ;;\n")
	b.WriteString("\t\t-f) COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n")
	b.WriteString("\t\t-n) COMPREPLY=(); return ;;\n")
	b.WriteString("\t\t*) COMPREPLY=($(compgen -W \"$v\" -- \"$cur\")); return ;;\n")
	b.WriteString("\t\tesac\n\tfi\n")
	b.WriteString("\tif [[ $cur == -* ]]; then\n\t\tcase $cmd in\n")
	flagWords := func(fs []flagDoc) string {
		var w []string
		for _, f := range fs {
			w = append(w, "--"+f.Long)
			if f.Short != "" {
				w = append(w, "-"+f.Short)
			}
		}
		return strings.Join(w, " ")
	}
	fmt.Fprintf(&b, "\t\t'') COMPREPLY=($(compgen -W %s -- \"$cur\")) ;;\n", shellQuote(flagWords(root.Flags)))
	for _, c := range root.Commands {
		fmt.Fprintf(&b, "\t\t%s) COMPREPLY=($(compgen -W %s -- \"$cur\")) ;;\n", c.Name, shellQuote(flagWords(c.completionFlags())))
	}
	b.WriteString("\t\tesac\n\t\treturn\n\tfi\n")
	b.WriteString("\tcase $cmd in\n")
	fmt.Fprintf(&b, "\t'') [[ -z $root ]] && COMPREPLY=($(compgen -W %s -- \"$cur\"))\n", shellQuote(strings.Join(names, " ")))
	b.WriteString("\t\tCOMPREPLY+=($(compgen -f -- \"$cur\")) ;;\n")
	for _, c := range root.Commands {
		k, words := c.positional()
		switch {
		case k == valueNone:
			fmt.Fprintf(&b, "\t%s) COMPREPLY=() ;;\n", c.Name)
		case k == valueWords && words == nil:
			fmt.Fprintf(&b, "\t%s) COMPREPLY=($(compgen -W %s -- \"$cur\")) ;;\n", c.Name, shellQuote(strings.Join(names, " ")))
		case k == valueWords:
			fmt.Fprintf(&b, "\t%s) COMPREPLY=($(compgen -W %s -- \"$cur\")) ;;\n", c.Name, shellQuote(strings.Join(words, " ")))
		}
	}
	b.WriteString("\t*) COMPREPLY=($(compgen -f -- \"$cur\")) ;;\n\tesac\n}\n\n")
	b.WriteString("complete -o filenames -o bashdefault -F _cudapatch cudapatch\n")
	return b.String()
}

// zshDesc escapes a description for an _arguments spec.
func zshDesc(s string) string {
	r := strings.NewReplacer(`\`, `\\`, "[", `\[`, "]", `\]`, ":", `\:`)
	return r.Replace(s)
}

func zshSpecs(fs []flagDoc) []string {
	var out []string
	for _, f := range fs {
		action := ""
		switch kindOf(f.Arg, f.Choices) {
		case valueDir:
			action = ":" + zshDesc(f.Arg) + ":_files -/"
		case valueFile:
			action = ":" + zshDesc(f.Arg) + ":_files"
		case valueWords:
			action = ":" + zshDesc(f.Arg) + ":(" + strings.Join(f.Choices, " ") + ")"
		case valueFree:
			action = ":" + zshDesc(f.Arg) + ": "
		}
		eq := ""
		if f.Arg != "" {
			eq = "="
		}
		desc := "[" + zshDesc(f.Usage) + "]"
		rep := ""
		if f.Repeatable {
			rep = "*"
		}
		if f.Short != "" {
			short := "+"
			if f.Arg == "" {
				short = ""
			}
			out = append(out, shellQuote("(-"+f.Short+" --"+f.Long+")")+"{"+
				shellQuote("-"+f.Short+short)+","+shellQuote("--"+f.Long+eq)+"}"+shellQuote(desc+action))
			continue
		}
		out = append(out, shellQuote(rep+"--"+f.Long+eq+desc+action))
	}
	return out
}

func zshCompletion(root *cmdDoc) string {
	var b strings.Builder
	b.WriteString("#compdef cudapatch\n")
	b.WriteString("# zsh completion for cudapatch, written by `cudapatch completion zsh` from\n")
	b.WriteString("# its command definitions. Install it as _cudapatch in a directory of $fpath.\n\n")
	b.WriteString("_cudapatch() {\n")
	b.WriteString("\tlocal curcontext=$curcontext state state_descr line ret=1\n")
	b.WriteString("\ttypeset -A opt_args\n")
	b.WriteString("\tlocal -a commands=(\n")
	for _, c := range root.Commands {
		fmt.Fprintf(&b, "\t\t%s\n", shellQuote(c.Name+":"+strings.ReplaceAll(c.Usage, ":", `\:`)))
	}
	b.WriteString("\t)\n")
	b.WriteString("\tlocal -a patch_flags=(\n")
	for _, s := range zshSpecs(root.Flags) {
		fmt.Fprintf(&b, "\t\t%s\n", s)
	}
	b.WriteString("\t)\n")
	b.WriteString("\t_arguments -C : \"${patch_flags[@]}\" '1: :->first' '*:: :->rest' && ret=0\n")
	b.WriteString("\tcase $state in\n")
	b.WriteString("\tfirst)\n\t\t_alternative 'commands:command:_describe -t commands command commands' 'files:PATH:_files' && ret=0\n\t\t;;\n")
	b.WriteString("\trest)\n\t\tcurcontext=${curcontext%:*:*}:cudapatch-$line[1]:\n")
	b.WriteString("\t\tcase $line[1] in\n")
	for _, c := range root.Commands {
		specs := zshSpecs(c.completionFlags())
		k, words := c.positional()
		switch {
		case k == valueNone:
		case k == valueWords && words == nil:
			specs = append(specs, `'1: :_describe -t commands command commands'`)
		case k == valueWords:
			specs = append(specs, shellQuote("1:"+zshDesc(c.cmd.ArgsUsage)+":("+strings.Join(words, " ")+")"))
		default:
			specs = append(specs, shellQuote("*:"+zshDesc(strings.Trim(c.cmd.ArgsUsage, "[]."))+":_files"))
		}
		fmt.Fprintf(&b, "\t\t%s)\n\t\t\t_arguments : \\\n", c.Name)
		for _, s := range specs {
			fmt.Fprintf(&b, "\t\t\t\t%s \\\n", s)
		}
		b.WriteString("\t\t\t\t&& ret=0\n\t\t\t;;\n")
	}
	b.WriteString("\t\t*)\n\t\t\t_arguments : \"${patch_flags[@]}\" '*:PATH:_files' && ret=0\n\t\t\t;;\n")
	b.WriteString("\t\tesac\n\t\t;;\n\tesac\n\treturn ret\n}\n\n")
	b.WriteString("if [[ $zsh_eval_context[-1] == loadautofunc ]]; then\n\t_cudapatch \"$@\"\nelse\n\tcompdef _cudapatch cudapatch\nfi\n")
	return b.String()
}

func fishCompletion(root *cmdDoc) string {
	var b strings.Builder
	names := commandNames(root)
	b.WriteString("# fish completion for cudapatch, written by `cudapatch completion fish` from\n")
	b.WriteString("# its command definitions. Install it as completions/cudapatch.fish.\n\n")
	// __cudapatch_command prints the command being completed: a command's
	// name, "" at the start, or "patch" once a PATH of the default job came.
	var valueFlags []string
	for _, f := range root.Flags {
		if f.Arg != "" {
			valueFlags = append(valueFlags, "--"+f.Long)
			if f.Short != "" {
				valueFlags = append(valueFlags, "-"+f.Short)
			}
		}
	}
	sort.Strings(valueFlags)
	b.WriteString("function __cudapatch_command\n")
	b.WriteString("\tset -l words (commandline -opc)\n\tset -e words[1]\n\tset -l skip 0\n")
	b.WriteString("\tfor w in $words\n")
	b.WriteString("\t\tif test $skip = 1\n\t\t\tset skip 0\n\t\t\tcontinue\n\t\tend\n")
	b.WriteString("\t\tswitch $w\n")
	fmt.Fprintf(&b, "\t\tcase %s\n\t\t\techo $w\n\t\t\treturn\n", strings.Join(names, " "))
	fmt.Fprintf(&b, "\t\tcase %s\n\t\t\tset skip 1\n", strings.Join(valueFlags, " "))
	b.WriteString("\t\tcase '-*'\n")
	b.WriteString("\t\tcase '*'\n\t\t\techo patch\n\t\t\treturn\n")
	b.WriteString("\t\tend\n\tend\n\techo ''\nend\n\n")
	b.WriteString("function __cudapatch_in\n\tcontains -- (__cudapatch_command) $argv\nend\n\n")
	fishFlags := func(cond string, fs []flagDoc) {
		for _, f := range fs {
			line := fmt.Sprintf("complete -c cudapatch -n %s -l %s", shellQuote(cond), f.Long)
			if f.Short != "" {
				line += " -s " + f.Short
			}
			switch kindOf(f.Arg, f.Choices) {
			case valueDir:
				line += " -x -a '(__fish_complete_directories (commandline -ct))'"
			case valueFile:
				line += " -r -F"
			case valueWords:
				line += " -x -a " + shellQuote(strings.Join(f.Choices, " "))
			case valueFree:
				line += " -x"
			}
			if f.Usage != "" {
				line += " -d " + shellQuote(f.Usage)
			}
			b.WriteString(line + "\n")
		}
	}
	b.WriteString("# The default job (cudapatch [OPTIONS] PATH...) and its commands.\n")
	for _, c := range root.Commands {
		fmt.Fprintf(&b, "complete -c cudapatch -n %s -a %s -d %s\n", shellQuote("__cudapatch_in ''"), c.Name, shellQuote(c.Usage))
	}
	fishFlags("__cudapatch_in '' patch", root.Flags)
	for _, c := range root.Commands {
		if c.Name == "patch" {
			continue
		}
		fmt.Fprintf(&b, "\n# %s\n", c.Path)
		cond := "__cudapatch_in " + c.Name
		fishFlags(cond, c.completionFlags())
		k, words := c.positional()
		switch {
		case k == valueNone:
			fmt.Fprintf(&b, "complete -c cudapatch -n %s -f\n", shellQuote(cond))
		case k == valueWords && words == nil:
			fmt.Fprintf(&b, "complete -c cudapatch -n %s -f -a %s\n", shellQuote(cond), shellQuote(strings.Join(names, " ")))
		case k == valueWords:
			fmt.Fprintf(&b, "complete -c cudapatch -n %s -f -a %s\n", shellQuote(cond), shellQuote(strings.Join(words, " ")))
		}
	}
	return b.String()
}

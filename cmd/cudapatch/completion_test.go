package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v3"
)

func needShell(t *testing.T, name, debianPackage string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Fatalf("%s is not on PATH (Debian: apt-get install %s; .ci/run installs it)", name, debianPackage)
	}
}

// bashHarness completes the line $2 with the script $1 as bash would
// (COMP_WORDS split at blanks) and prints COMPREPLY.
const bashHarness = `source "$1"
line=$2
read -ra COMP_WORDS <<<"$line"
[[ $line == *' ' ]] && COMP_WORDS+=('')
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
COMP_LINE=$line
COMP_POINT=${#line}
_cudapatch cudapatch "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}"
`

// zshInit runs inside an interactive zsh on a pseudo-terminal: it loads
// the completion system and prints every match compadd adds, between two
// markers printed before and after completion.
const zshInit = `PROMPT=''
autoload -Uz compinit && compinit -u -d "$ZDOTDIR/.zcompdump"
bindkey '^I' complete-word
marker() { print -rn -- $'\n<<MARK>>\n' }
compprefuncs=(marker)
comppostfuncs=(marker exit)
zstyle ':completion:*' list-grouped false
zstyle ':completion:*' insert-tab false
compadd() {
	if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then
		builtin compadd "$@"
		return
	fi
	local -a hits
	builtin compadd -A hits "$@"
	(( $#hits )) || return 1
	builtin compadd -Q "$@"
	local h
	for h in $hits; do print -r -- "MATCH:$IPREFIX$h"; done
}
`

// zshHarness types line $2 and a TAB into zsh with _cudapatch in $fpath
// (directory $1) and prints the matches.
const zshHarness = `zmodload zsh/zpty
zpty z "zsh -f -i"
zpty -w z "fpath=($1 \$fpath); source $ZDOTDIR/init.zsh"
zpty -w z "$2"$'\t'
local out= l
while zpty -r z l; do out+=$l; [[ $out == *'<<MARK>>'*'<<MARK>>'* ]] && break; done
print -r -- "$out" | tr -d '\r' | sed -n 's/^MATCH://p'
zpty -d z
`

// TestCompletionScripts completes command lines in real bash, zsh and fish
// with the scripts `cudapatch completion SHELL` prints, in a directory
// holding a directory d1 and a file f1: commands, each command's flags,
// the words of a|b|c values, directories only for DIR, and a PATH of the
// default job ending the commands.
func TestCompletionScripts(t *testing.T) {
	needShell(t, "bash", "bash")
	needShell(t, "zsh", "zsh")
	needShell(t, "fish", "fish")
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	require.NoError(t, os.MkdirAll(filepath.Join(work, "d1"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(work, "f1"), nil, 0o644))
	script := func(shell string) string {
		out, errOut, code := runFixed(t, nil, "completion", shell)
		require.Equal(t, exitOK, code, errOut)
		return out
	}
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "fn"), 0o755))
	for name, content := range map[string]string{
		"cudapatch.bash": script("bash"), "fn/_cudapatch": script("zsh"), "cudapatch.fish": script("fish"),
		"bash-harness": bashHarness, "zsh-harness": zshHarness, "init.zsh": zshInit,
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
	// A shell that hangs (zsh waiting for a marker that never comes) is
	// killed after a minute.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shells := map[string]func(line string) *exec.Cmd{
		"bash": func(line string) *exec.Cmd {
			return exec.CommandContext(ctx, "bash", "--norc", "--noprofile", filepath.Join(dir, "bash-harness"), filepath.Join(dir, "cudapatch.bash"), line)
		},
		"zsh": func(line string) *exec.Cmd {
			c := exec.CommandContext(ctx, "zsh", "-f", filepath.Join(dir, "zsh-harness"), filepath.Join(dir, "fn"), line)
			c.Env = append(os.Environ(), "ZDOTDIR="+dir)
			return c
		},
		"fish": func(line string) *exec.Cmd {
			return exec.CommandContext(ctx, "fish", "--no-config", "-c", "source "+filepath.Join(dir, "cudapatch.fish")+"; complete -C "+shellQuote(line))
		},
	}
	commands := []string{"auto-patchelf", "completion", "doctor", "explain", "help", "lint", "man", "patch", "patchelf", "print", "selector", "verify"}
	for _, tc := range []struct {
		line string
		want []string
	}{
		{"cudapatch li", []string{"lint"}},
		{"cudapatch help ", commands},
		{"cudapatch completion ", []string{"bash", "fish", "zsh"}},
		{"cudapatch --driver-link-for ", []string{"all", "needed", "none"}},
		{"cudapatch patch --driver-link-for n", []string{"needed", "none"}},
		{"cudapatch lint --format ", []string{"json", "junit", "sarif", "text"}},
		{"cudapatch lint --fo", []string{"--format"}},
		{"cudapatch --search ", []string{"d1"}},
		{"cudapatch --search d1 li", []string{"lint"}},
		{"cudapatch f1 ", []string{"d1", "f1"}},
		{"cudapatch doctor --", []string{"--driver-link", "--dry-run", "--fix", "--help", "--json", "--proc", "--root", "--sys"}},
		{"cudapatch patchelf --set-r", []string{"--set-rpath"}},
		{"cudapatch auto-patchelf --li", []string{"--libs"}},
	} {
		for _, sh := range []string{"bash", "zsh", "fish"} {
			cmd := shells[sh](tc.line)
			cmd.Dir = work
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s %q: %s", sh, tc.line, out)
			var got []string
			for _, l := range strings.Split(string(out), "\n") {
				l, _, _ = strings.Cut(l, "\t") // fish: candidate TAB description
				if l = strings.TrimSuffix(l, "/"); l != "" && !slices.Contains(got, l) {
					got = append(got, l)
				}
			}
			sort.Strings(got)
			assert.Equal(t, tc.want, got, "%s completes %q", sh, tc.line)
		}
	}
}

// TestManPage: `cudapatch man` is its golden file, mandoc finds nothing to
// warn about, and man renders it; every flag of every command is in it.
func TestManPage(t *testing.T) {
	needShell(t, "mandoc", "mandoc")
	needShell(t, "man", "man-db")
	v := testVersion
	v.Date = "2026-11-22"
	page := manPage(docCommand(treeCommands(t)[0], ""), v)
	out, _, code := runFixed(t, nil, "man")
	require.Equal(t, exitOK, code)
	assert.Equal(t, manPage(docCommand(treeCommands(t)[0], ""), testVersion), out)
	goldenFile(t, "man/cudapatch.1", page)
	p := filepath.Join(t.TempDir(), "cudapatch.1")
	require.NoError(t, os.WriteFile(p, []byte(page), 0o644))
	lint, err := exec.Command("mandoc", "-T", "lint", "-W", "warning", p).CombinedOutput()
	assert.NoError(t, err, "mandoc -T lint: %s", lint)
	cmd := exec.Command("man", "-l", p)
	// LC_ALL=C: a fresh machine may have no UTF-8 locale, and groff then
	// warns on every glyph it cannot show in ASCII.
	cmd.Env = append(os.Environ(), "MANWIDTH=80", "MANPAGER=cat", "PAGER=cat", "LC_ALL=C")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	text, err := cmd.Output()
	require.NoError(t, err, stderr.String())
	assert.Empty(t, stderr.String())
	for _, c := range treeCommands(t) {
		for _, f := range docCommand(c, "").Flags {
			assert.Contains(t, string(text), "--"+f.Long, "man page lacks %s --%s", c.Name, f.Long)
		}
	}
}

// TestManExamples: the man page has EXAMPLES, each a command line of this
// binary (its command exists and takes every flag named; the drop-in
// patchelf's are patchelf's), and its ENVIRONMENT names every variable the
// commands read, NIX_STORE included.
func TestManExamples(t *testing.T) {
	page := manPage(docCommand(treeCommands(t)[0], ""), testVersion)
	ex := strings.Index(page, "\n.SH EXAMPLES\n")
	env := strings.Index(page, "\n.SH ENVIRONMENT\n")
	require.Positive(t, ex, "no EXAMPLES section")
	require.Positive(t, env, "no ENVIRONMENT section")
	for _, v := range []string{"NIX_BINTOOLS", "NIX_BUILD_TOP", "NIX_STORE", "LD_LIBRARY_PATH", "NO_COLOR", "GOMEMLIMIT", "GOGC"} {
		assert.Regexp(t, `\n\.BR? `+v+`\b`, page[env:ex], "ENVIRONMENT lacks %s", v)
	}
	require.NotEmpty(t, manExamples)
	cmds := map[string]*cli.Command{}
	for _, c := range treeCommands(t) {
		cmds[c.Name] = c
	}
	for _, e := range manExamples {
		assert.Contains(t, page[ex:], strings.ReplaceAll(roff(e.cmd), "-", `\-`)+"\n", "example %q not in the page", e.cmd)
		words := strings.Fields(strings.TrimPrefix(e.cmd, "sudo "))
		require.Equal(t, "cudapatch", words[0], e.cmd)
		c := cmds["cudapatch"]
		if len(words) > 1 && cmds[words[1]] != nil {
			c, words = cmds[words[1]], words[1:]
		}
		if c.SkipFlagParsing {
			continue // patchelf's own options
		}
		flags := map[string]bool{}
		for _, f := range docCommand(c, "").Flags {
			flags["--"+f.Long] = true
			if f.Short != "" {
				flags["-"+f.Short] = true
			}
		}
		for _, w := range words[1:] {
			if strings.HasPrefix(w, "-") {
				assert.True(t, flags[w], "example %q: %s takes no %s", e.cmd, c.Name, w)
			}
		}
	}
}

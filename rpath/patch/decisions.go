package patch

import (
	"context"
	"debug/elf"
	"log/slog"

	"github.com/cudapatch/cudapatch/rpath/policy"
)

// logDecisions logs, at debug level (the CLI's --verbose), every decision
// of the decide phase in the report's order: why a file was skipped, and
// for each dependency of a file where it resolved, or why it needs no
// RUNPATH entry, is ignored or is missing. The keys are stable: file,
// needed, source, how, path, entry, why, pattern, hint, reason, and for a
// name that is no DT_NEEDED the evidence: evidence (its kind), string,
// in (the file holding the string).
func (c *job) logDecisions(ctx context.Context, files []*File) {
	if !c.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	for _, f := range files {
		if f.Skipped != "" {
			c.log.LogAttrs(ctx, slog.LevelDebug, "skipped", slog.String("file", f.Path), slog.String("reason", f.Skipped))
			continue
		}
		if f.DlopenError != "" {
			c.log.LogAttrs(ctx, slog.LevelDebug, "dlopen discovery", slog.String("file", f.Path), slog.String("error", f.DlopenError))
		}
		for _, d := range f.Deps {
			attrs := []slog.Attr{slog.String("file", f.Path), slog.String("needed", d.Name), slog.String("source", d.Source), slog.String("how", d.How)}
			switch d.How {
			case policy.HowStore:
				attrs = append(attrs, slog.String("path", d.Path))
				if d.Entry != "" {
					attrs = append(attrs, slog.String("entry", d.Entry))
				}
			case policy.HowLibc:
				attrs = append(attrs, slog.String("path", d.Path), slog.String("why", "in the libc directory: the interpreter finds it, no RUNPATH entry"))
			case policy.HowAbsolute:
				attrs = append(attrs, slog.String("path", d.Path), slog.String("why", "DT_NEEDED is an absolute path"))
			case policy.HowDriver:
				link := c.DriverLink
				if f.facts.machine == elf.EM_386 {
					link = c.DriverLink32
				}
				attrs = append(attrs, slog.String("why", "an NVIDIA driver library: found at run time through "+link))
			case policy.HowIgnored:
				attrs = append(attrs, slog.String("why", "found nowhere, ignored"), slog.String("pattern", d.Pattern))
			case policy.HowVersioned:
				attrs = append(attrs, slog.String("path", d.Path), slog.String("why", "dlopen name found with a version only: its directory added, no note entry"))
			case policy.HowFound:
				why := "dlopen name found, not added (dlopen mode report)"
				if c.Dlopen == policy.DlopenResolve {
					why = "dlopen name found, added to the files that may call dlopen for it (this one does not import dlopen)"
				}
				attrs = append(attrs, slog.String("path", d.Path), slog.String("why", why))
			case policy.HowOutsideCaller:
				attrs = append(attrs, slog.String("path", d.Path), slog.String("why", "dlopen name found, loaded by a library outside the outputs: not added"), slog.String("hint", d.Hint))
			case policy.HowUnresolved:
				attrs = append(attrs, slog.String("why", "dlopen name found nowhere: not added, no error"))
			case policy.HowMissing:
				attrs = append(attrs, slog.String("why", "found nowhere"))
				if d.Hint != "" {
					attrs = append(attrs, slog.String("hint", d.Hint))
				}
			}
			if e := d.Evidence; e.Kind != "" {
				attrs = append(attrs, slog.String("evidence", e.Kind), slog.String("string", e.String), slog.String("in", e.File))
			}
			if d.From != "" {
				attrs = append(attrs, slog.String("caller_for", d.From)) // it may make the dlopen call for that file
			}
			c.log.LogAttrs(ctx, slog.LevelDebug, "dependency", attrs...)
		}
	}
}

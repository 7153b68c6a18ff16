package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/cudapatch/cudapatch/internal/printable"
	"github.com/cudapatch/cudapatch/rpath/patch"
)

// writeSymbols reports the symbol check's findings on stderr: one line
// each for errors and warnings, one a file for driver libraries not
// checked, then a count; with --structured-logs, one slog record each
// (keys file, object, symbol, version, library, use, class, severity,
// pattern, message). A library's references left to the program that
// loads it, and findings an ignore pattern matched, are in --json only
// (and counted).
func (g *globals) writeSymbols(ctx context.Context, rep *patch.Report, out output) {
	ignored, left := 0, 0
	for _, f := range rep.Files {
		for _, s := range f.Symbols {
			if out == outEvents {
				g.logSymbol(ctx, s)
			}
			switch {
			case s.Severity == patch.SeverityIgnored:
				ignored++
				continue
			case s.Class == patch.ClassLeftToProgram:
				left++
				continue
			case out == outEvents:
				continue
			}
			prefix := "cudapatch: "
			switch s.Severity {
			case patch.SeverityError:
				prefix = "error: "
			case patch.SeverityWarning:
				prefix = "warning: "
			}
			printable.Fprintf(g.stderr, "%s%s: %s\n", prefix, f.Path, symbolLine(s))
		}
	}
	if rep.SymbolErrors+rep.SymbolWarnings+ignored > 0 || left > 0 {
		var parts []string
		if rep.SymbolErrors > 0 {
			parts = append(parts, plural(rep.SymbolErrors, "load-fatal finding"))
		}
		if rep.SymbolWarnings > 0 {
			parts = append(parts, plural(rep.SymbolWarnings, "warning"))
		}
		if ignored > 0 {
			parts = append(parts, fmt.Sprintf("%d ignored by pattern", ignored))
		}
		if left > 0 {
			parts = append(parts, fmt.Sprintf("%s of libraries left to the programs that load them", plural(left, "reference")))
		}
		fmt.Fprintf(g.stderr, "cudapatch: symbols: %s (--json lists them)\n", strings.Join(parts, ", "))
	}
}

// symbolLine is a finding as "CLASS: symbol NAME@VERSION (USE, required
// by OBJECT): MESSAGE", for a version need "CLASS: version V of LIB
// (required by OBJECT): MESSAGE", for a file "CLASS: MESSAGE".
func symbolLine(s patch.SymbolFinding) string {
	switch {
	case s.Class == patch.ClassSkippedDriver || s.Class == patch.ClassNotChecked:
		return s.Message
	case s.Symbol == "" && s.Version == "":
		// A file of the closure as a whole (a table out of bounds).
		return s.Class + ": " + s.Message
	case s.Symbol == "":
		return fmt.Sprintf("%s: version %s of %s (required by %s): %s", s.Class, s.Version, s.Library, s.Object, s.Message)
	}
	return fmt.Sprintf("%s: symbol %s (%s, required by %s): %s", s.Class, s.Name(), s.Use, s.Object, s.Message)
}

// logSymbol writes one finding as a slog record.
func (g *globals) logSymbol(ctx context.Context, s patch.SymbolFinding) {
	level := slog.LevelInfo
	switch s.Severity {
	case patch.SeverityError:
		level = slog.LevelError
	case patch.SeverityWarning:
		level = slog.LevelWarn
	}
	g.log.LogAttrs(ctx, level, "symbol",
		slog.String("file", s.File), slog.String("object", s.Object), slog.String("symbol", s.Symbol),
		slog.String("version", s.Version), slog.String("library", s.Library), slog.String("use", s.Use),
		slog.String("class", s.Class), slog.String("severity", s.Severity), slog.String("pattern", s.Pattern),
		slog.String("message", s.Message))
}

package lint

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/cudapatch/cudapatch/internal/printable"
)

// WriteText writes the findings for people: grouped by file, one line per
// finding, then a summary line. color adds ANSI colours to the levels; the
// caller decides (a terminal, not a pipe).
func WriteText(w io.Writer, r *Report, color bool) error {
	ew := &errWriter{w: w}
	paint := func(s Severity, text string) string {
		if !color {
			return text
		}
		code := map[Severity]string{Error: "31;1", Warning: "33;1", Info: "36"}[s]
		return "\x1b[" + code + "m" + text + "\x1b[0m"
	}
	last := ""
	files := 0
	for _, f := range r.Findings {
		if f.Path != last {
			if last != "" {
				ew.printf("\n")
			}
			last = f.Path
			files++
			if color {
				ew.printf("\x1b[1m%s\x1b[0m\n", printable.String(f.Path))
			} else {
				ew.printf("%s\n", printable.String(f.Path))
			}
		}
		ew.printf("  %s %s %s: %s\n", paint(f.Severity, fmt.Sprintf("%-7s", f.Severity)), f.Rule, f.Name, printable.String(f.Message))
	}
	if len(r.Findings) > 0 {
		ew.printf("\n")
	}
	for _, s := range r.Skipped {
		ew.printf("%s: skipped: %s\n", printable.String(s.Path), printable.String(s.Reason))
	}
	count := map[Severity]int{}
	for _, f := range r.Findings {
		count[f.Severity]++
	}
	skipped := ""
	if len(r.Skipped) > 0 {
		skipped = fmt.Sprintf(" (%d skipped)", len(r.Skipped))
	}
	ew.printf("%s checked%s, %d with findings: %s, %s, %d info\n",
		countOf(len(r.Files), "ELF file"), skipped, files, countOf(count[Error], "error"), countOf(count[Warning], "warning"), count[Info])
	return ew.err
}

// WriteJSON writes the report as one indented JSON object; strings that
// are not UTF-8 keep their bytes (printable.EncodeJSON).
func WriteJSON(w io.Writer, r *Report) error {
	return printable.EncodeJSON(w, r, "  ")
}

// SARIF 2.1.0, the subset GitHub code scanning reads
// (https://docs.oasis-open.org/sarif/sarif/v2.1.0/sarif-v2.1.0.html).
type (
	sarifLog struct {
		Schema  string     `json:"$schema"`
		Version string     `json:"version"`
		Runs    []sarifRun `json:"runs"`
	}
	sarifRun struct {
		Tool    sarifTool     `json:"tool"`
		Results []sarifResult `json:"results"`
	}
	sarifTool struct {
		Driver sarifDriver `json:"driver"`
	}
	sarifDriver struct {
		Name           string      `json:"name"`
		Version        string      `json:"version,omitempty"`
		InformationURI string      `json:"informationUri"`
		Rules          []sarifRule `json:"rules"`
	}
	sarifRule struct {
		ID                   string        `json:"id"`
		Name                 string        `json:"name"`
		ShortDescription     sarifText     `json:"shortDescription"`
		HelpURI              string        `json:"helpUri"`
		DefaultConfiguration sarifRuleConf `json:"defaultConfiguration"`
	}
	sarifRuleConf struct {
		Level string `json:"level"`
	}
	sarifText struct {
		Text string `json:"text"`
	}
	sarifResult struct {
		RuleID    string          `json:"ruleId"`
		RuleIndex int             `json:"ruleIndex"`
		Level     string          `json:"level"`
		Message   sarifText       `json:"message"`
		Locations []sarifLocation `json:"locations"`
	}
	sarifLocation struct {
		PhysicalLocation sarifPhysical `json:"physicalLocation"`
	}
	sarifPhysical struct {
		ArtifactLocation sarifArtifact `json:"artifactLocation"`
	}
	sarifArtifact struct {
		URI string `json:"uri"`
	}
)

// SARIFSchema is the $schema of the SARIF output.
const SARIFSchema = "https://json.schemastore.org/sarif-2.1.0.json"

// InformationURI is the tool's home page, named in SARIF output.
const InformationURI = "https://github.com/cudapatch/cudapatch"

func sarifLevel(s Severity) string {
	switch s {
	case Error:
		return "error"
	case Warning:
		return "warning"
	}
	return "note"
}

// fileURI turns a path into a SARIF artifact URI: relative paths stay
// relative (GitHub resolves them against the repository), absolute ones
// become file URIs.
func fileURI(p string) string {
	p = filepath.ToSlash(p)
	u := url.URL{Path: p}
	if strings.HasPrefix(p, "/") {
		u.Scheme = "file"
	}
	return u.String()
}

// WriteSARIF writes the report as a SARIF 2.1.0 log with one run. Every
// rule is listed in tool.driver.rules, so results can point at theirs by
// index; a finding's level is its effective severity.
func WriteSARIF(w io.Writer, r *Report, version string) error {
	drv := sarifDriver{Name: "cudapatch", Version: version, InformationURI: InformationURI}
	index := map[string]int{}
	for i, rule := range rules {
		index[rule.ID] = i
		drv.Rules = append(drv.Rules, sarifRule{
			ID: rule.ID, Name: rule.Name, ShortDescription: sarifText{rule.Summary},
			HelpURI: rule.HelpURI(), DefaultConfiguration: sarifRuleConf{sarifLevel(rule.Severity)},
		})
	}
	run := sarifRun{Tool: sarifTool{drv}, Results: []sarifResult{}}
	for _, f := range r.Findings {
		run.Results = append(run.Results, sarifResult{
			RuleID: f.Rule, RuleIndex: index[f.Rule], Level: sarifLevel(f.Severity),
			Message:   sarifText{f.Message},
			Locations: []sarifLocation{{sarifPhysical{sarifArtifact{fileURI(f.Path)}}}},
		})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(sarifLog{SARIFSchema, "2.1.0", []sarifRun{run}})
}

// JUnit XML, as Jenkins and GitLab read it.
type (
	junitSuites struct {
		XMLName  xml.Name     `xml:"testsuites"`
		Name     string       `xml:"name,attr"`
		Tests    int          `xml:"tests,attr"`
		Failures int          `xml:"failures,attr"`
		Suites   []junitSuite `xml:"testsuite"`
	}
	junitSuite struct {
		Name     string      `xml:"name,attr"`
		Tests    int         `xml:"tests,attr"`
		Failures int         `xml:"failures,attr"`
		Skipped  int         `xml:"skipped,attr,omitempty"`
		Cases    []junitCase `xml:"testcase"`
	}
	junitCase struct {
		Name      string         `xml:"name,attr"`
		ClassName string         `xml:"classname,attr"`
		Skipped   *junitSkipped  `xml:"skipped"`
		Failures  []junitFailure `xml:"failure"`
		SystemOut string         `xml:"system-out,omitempty"`
	}
	junitSkipped struct {
		Message string `xml:"message,attr"`
	}
	junitFailure struct {
		Type    string `xml:"type,attr"`
		Message string `xml:"message,attr"`
		Text    string `xml:",chardata"`
	}
)

// WriteJUnit writes one test case per ELF file checked. Findings at or
// above failOn are failures; lower ones go to the case's system-out, so a
// CI page shows them without failing. A skipped file is a skipped case
// whose message is the reason.
func WriteJUnit(w io.Writer, r *Report, failOn Severity) error {
	byFile := map[string][]Finding{}
	for _, f := range r.Findings {
		byFile[f.Path] = append(byFile[f.Path], f)
	}
	s := junitSuite{Name: "cudapatch lint", Tests: len(r.Files)}
	for _, p := range r.Files {
		c := junitCase{Name: p, ClassName: "cudapatch.lint"}
		var out []string
		for _, f := range byFile[p] {
			line := fmt.Sprintf("%s %s %s: %s", f.Severity, f.Rule, f.Name, f.Message)
			if f.Severity >= failOn {
				c.Failures = append(c.Failures, junitFailure{Type: f.Rule, Message: f.Name + ": " + f.Message, Text: line})
			} else {
				out = append(out, line)
			}
		}
		if len(c.Failures) > 0 {
			s.Failures++
		}
		c.SystemOut = strings.Join(out, "\n")
		s.Cases = append(s.Cases, c)
	}
	for _, sk := range r.Skipped {
		s.Cases = append(s.Cases, junitCase{Name: sk.Path, ClassName: "cudapatch.lint", Skipped: &junitSkipped{Message: sk.Reason}})
		s.Tests++
		s.Skipped++
	}
	doc := junitSuites{Name: "cudapatch lint", Tests: s.Tests, Failures: s.Failures, Suites: []junitSuite{s}}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}

// countOf writes "1 error", "2 errors", "0 errors".
func countOf(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

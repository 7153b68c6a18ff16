// Package lint checks the RUNPATHs, interpreters and dependencies of the ELF
// files in a tree (a Nix output, an unpacked wheel, a container root) for
// the faults that make CUDA programs fail at run time, without executing
// anything from the tree. It builds on rpath (the driver and stub policy),
// rpath/elfedit (reading and verifying files) and rpath/ldso (the loader
// simulation), and returns its findings as data; the formats in this
// package (text, JSON, SARIF 2.1.0, JUnit XML) only render them.
//
// Every rule has a stable ID (CP001…), a name, a default severity and an
// entry in docs/lint.md. Rules are selected with [Options.Enable] and
// [Options.Disable] and with a configuration file ([Config]) at the root of each
// tree, .cudapatch-lint.json, which can also silence rules for path globs.
//
// The package never prints and never exits; Lint returns a [Report].
package lint

// Package docs holds no code: its tests keep the repository's documents
// honest. The README's measured figures must be those of bench/RESULTS.md
// (which bench/run.sh writes), docs/README.md must list every document,
// and every relative link between documents must resolve. The README and
// CHANGELOG stay within their line bounds, .ci/run runs exactly the
// README's test command, the RUNPATH order is written out only in the
// README and policy.Decide, and no run log or machine path is kept.
package docs

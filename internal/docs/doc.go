// Package docs holds no code: its tests keep the repository's documents
// honest. The README's measured figures must be those of bench/RESULTS.md
// (which bench/run.sh writes), docs/README.md must list every document,
// and every relative link between documents must resolve.
package docs

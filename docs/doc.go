// Package docs holds tenure's documentation, in Markdown: the user guides
// (guides/), the design (design/), the Prometheus configuration
// (prometheus/) and the figures of the benchmarks and the dashboard. It has
// no code. Its tests keep the documentation's references whole: every
// relative link and anchor in the repository's Markdown resolves, and every
// docs/ path and every section that a source file names exists.
package docs

// Package report renders benchmark results for people: a markdown table
// with the machine they were taken on ([WriteMarkdown]) and a bar chart of
// each implementation's ratio to the baseline (goroutines, or raw NATS for
// the remote workloads) as a standalone SVG file ([WriteSVG]), drawn here with the standard library alone so the
// bench module needs no plotting dependency.
//
// Both writers take plain values (a [Table], a [Chart]) that the harness
// fills in; they do no measuring and no statistics of their own.
package report

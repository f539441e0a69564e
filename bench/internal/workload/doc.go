// Package workload is what every benchmark binary under impl/ shares: the
// names and sizes of the workloads (see docs/benchmarks.md), the expected
// answers each run checks itself against, a [Meter] that times the
// measured part of a run and counts its allocations, and [Main], the
// command-line entry point that runs one workload once and prints one JSON
// [Result] for the harness.
//
// A run is one process: the harness starts a fresh binary for every
// (implementation, workload, round), so the Go runtime's heap, stacks and
// peak RSS of one run never leak into another, and implementations that
// cannot be linked together (protoactor-go and hollywood both register
// the protobuf file actor.proto) never share a binary.
package workload

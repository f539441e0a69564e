package scheduler

// Exported for the external test package's benchmarks.
var WithoutFairness = withoutFairness

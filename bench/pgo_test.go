package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPGO runs the harness with -pgo on two workloads of this scheduler:
// it profiles one run of each of their variants, rebuilds the binary
// with the merged profile (which buildWithProfile checks in the binary's
// build information), and says so in the report.
func TestPGO(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the benchmark binaries twice")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"-quick", "-pgo", "-impls", "sched", "-workloads", "spawn,fib", "-out", dir}, &stdout, &stderr)
	require.Equal(t, 0, code, "exit code; progress:\n%s", stderr.String())
	require.Contains(t, stderr.String(), "profiling sched: spawn ")
	require.Contains(t, stderr.String(), "profiling sched: fib ")
	require.Contains(t, stderr.String(), "building sched with its profile")

	md, err := os.ReadFile(filepath.Join(dir, "latest.md"))
	require.NoError(t, err)
	require.Contains(t, string(md), "- Built with profile-guided optimisation (-pgo)")
	require.Regexp(t, `sched: spawn/\w+, .*fib`, string(md), "the report names the runs the profile came from")

	// A report redrawn from the saved run keeps the line.
	stdout.Reset()
	require.Equal(t, 0, run(ctx, []string{"-from", filepath.Join(dir, "latest.json"), "-out", ""}, &stdout, &bytes.Buffer{}))
	require.Contains(t, stdout.String(), "profile-guided", "a saved -pgo run keeps its line")
}

// TestCheckPGO: a binary built without a profile (this test binary) is
// refused with errNoPGO.
func TestCheckPGO(t *testing.T) {
	self, err := os.Executable()
	require.NoError(t, err)
	require.ErrorIs(t, checkPGO(self), errNoPGO)
}

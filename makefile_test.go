package scheduler_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// makeWithFakeGo runs make with args in the module's root, with GO set to
// a script that records each call instead of running go, and a chromium
// on PATH that does nothing (so that `make test` never installs one). It
// returns make's output and the go commands it ran, one a line.
func makeWithFakeGo(t *testing.T, args ...string) (out, ran string) {
	t.Helper()
	makePath, err := exec.LookPath("make")
	if err != nil {
		t.Skip("make is not installed")
	}
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	fakeGo := filepath.Join(dir, "go")
	require.NoError(t, os.WriteFile(fakeGo, []byte("#!/bin/sh\necho \"go $*\" >> '"+calls+"'\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "chromium"), []byte("#!/bin/sh\nexit 0\n"), 0o755))

	cmd := exec.Command(makePath, append(args, "GO="+fakeGo)...)
	cmd.Env = append(os.Environ(), "MAKEFLAGS=", "MFLAGS=", "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "make %v:\n%s", args, b)
	r, err := os.ReadFile(calls)
	if !os.IsNotExist(err) {
		require.NoError(t, err)
	}
	return strings.ReplaceAll(string(b), fakeGo, "go"), string(r)
}

// nestedModules lists the directories of the nested modules (each has a
// go.mod of its own).
func nestedModules(t *testing.T) []string {
	t.Helper()
	mods, err := filepath.Glob("*/go.mod")
	require.NoError(t, err)
	require.NotEmpty(t, mods, "no nested module found")
	for i, m := range mods {
		mods[i] = filepath.Dir(m)
	}
	return mods
}

// TestMakeDryRunRunsNothing: `make -n test` shows the commands of the
// README's test target without running them, as make's -n promises, for
// the root module and every nested one. make runs a recipe line that
// calls a sub-make even under -n (so that the sub-make can print its own
// commands), so a line that both calls a sub-make and runs go would run
// the tests of a nested module.
func TestMakeDryRunRunsNothing(t *testing.T) {
	out, ran := makeWithFakeGo(t, "-n", "test")
	require.Empty(t, ran, "make -n test ran go; its output:\n%s", out)

	mods := nestedModules(t)
	for _, m := range mods {
		require.Contains(t, out, "== module "+m, "make -n test does not show the tests of %s", m)
	}
	require.Equal(t, len(mods)+1, strings.Count(out, "go vet ./..."),
		"make -n test should show one go vet per module (the root and %v):\n%s", mods, out)
	require.Equal(t, len(mods)+1, strings.Count(out, "go test -race -shuffle=on"),
		"make -n test should show one race-enabled go test per module (the root and %v):\n%s", mods, out)
}

// TestMakeTestRunsEveryModule: `make test` runs go vet and the
// race-enabled tests of the root module and of every nested module, as
// the README says.
func TestMakeTestRunsEveryModule(t *testing.T) {
	out, ran := makeWithFakeGo(t, "test")
	mods := nestedModules(t)
	require.Equal(t, len(mods)+1, strings.Count(ran, "go vet ./...\n"),
		"make test should run one go vet per module (the root and %v); it ran:\n%s\nits output:\n%s", mods, ran, out)
	require.Equal(t, len(mods)+1, strings.Count(ran, "go test -race -shuffle=on -timeout 10m ./...\n"),
		"make test should run one race-enabled go test per module (the root and %v); it ran:\n%s\nits output:\n%s", mods, ran, out)
	for _, m := range mods {
		require.Contains(t, out, "== module "+m, "make test does not say it tests %s", m)
	}
}

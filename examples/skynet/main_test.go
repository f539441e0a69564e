package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// mainArgsEnv, when set, makes the test binary run the example's main
// with the arguments it holds (a JSON list): see runMain.
const mainArgsEnv = "SKYNET_EXAMPLE_MAIN_ARGS"

func TestMain(m *testing.M) {
	if raw, ok := os.LookupEnv(mainArgsEnv); ok {
		var args []string
		if err := json.Unmarshal([]byte(raw), &args); err != nil {
			panic(err)
		}
		os.Args = append([]string{"skynet"}, args...)
		main()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// runMain runs the example's main with args in a child process (this
// test binary) and returns its exit code, standard output and standard
// error.
func runMain(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), mainArgsEnv+"="+string(raw))
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("running main %q: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("main %q did not end within a minute", args)
	}
	return code, out.String(), errOut.String()
}

// TestRun runs the example at a small size; run checks its own result.
func TestRun(t *testing.T) {
	if err := run(10_000, 2); err != nil {
		t.Fatal(err)
	}
}

// TestRunRefusesBadSizes: a number of leaves that is not a power of ten
// (or not positive) cannot be split ten ways down to single leaves, and
// a negative number of workers is no count; run refuses both at once
// with errUsage instead of starting anything.
func TestRunRefusesBadSizes(t *testing.T) {
	for _, tt := range []struct{ leaves, workers int }{
		{500, 1}, {0, 1}, {-10, 1}, {20, 1}, {1000, -1},
	} {
		done := make(chan error, 1)
		go func() { done <- run(tt.leaves, tt.workers) }()
		select {
		case err := <-done:
			if !errors.Is(err, errUsage) {
				t.Errorf("run(%d, %d) = %v, want errUsage", tt.leaves, tt.workers, err)
			}
		case <-time.After(500 * time.Millisecond):
			t.Fatalf("run(%d, %d) did not return: it started a tree that never ends", tt.leaves, tt.workers)
		}
	}
}

// TestMainOutput: the program prints the sum and the size of the tree
// and exits 0; a bad flag value is refused with a message and exit
// status 2.
func TestMainOutput(t *testing.T) {
	code, stdout, stderr := runMain(t, "-leaves", "100", "-workers", "1")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != 2 || lines[0] != "sum 4950" || !strings.HasPrefix(lines[1], "111 processes on 1 workers in ") {
		t.Errorf("printed:\n%s\nwant the line \"sum 4950\", then \"111 processes on 1 workers in ...\"", stdout)
	}

	for _, args := range [][]string{{"-leaves", "500"}, {"-workers", "-2"}, {"-leaves", "x"}} {
		code, stdout, stderr := runMain(t, args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, args[0]) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2, nothing on stdout and a message naming %s", args, code, stdout, stderr, args[0])
		}
	}

	code, stdout, stderr = runMain(t, "extra")
	if code != 2 || stdout != "" || !strings.Contains(stderr, "extra") {
		t.Errorf("with an argument: exit %d, stdout %q, stderr %q; want exit 2, nothing on stdout and a message naming it", code, stdout, stderr)
	}
}

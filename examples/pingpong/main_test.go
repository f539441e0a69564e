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
const mainArgsEnv = "PINGPONG_EXAMPLE_MAIN_ARGS"

func TestMain(m *testing.M) {
	if raw, ok := os.LookupEnv(mainArgsEnv); ok {
		var args []string
		if err := json.Unmarshal([]byte(raw), &args); err != nil {
			panic(err)
		}
		os.Args = append([]string{"pingpong"}, args...)
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
	if err := run(10_000); err != nil {
		t.Fatal(err)
	}
}

// TestRunRefusesNoMessages: a rally of no messages (or fewer) cannot be
// played; run refuses it with errUsage.
func TestRunRefusesNoMessages(t *testing.T) {
	for _, n := range []int{0, -5} {
		if err := run(n); !errors.Is(err, errUsage) {
			t.Errorf("run(%d) = %v, want errUsage", n, err)
		}
	}
}

// TestMainOutput: the program prints how many messages went back and
// forth and the cost of each, and exits 0; a bad -n is refused with a
// message and exit status 2.
func TestMainOutput(t *testing.T) {
	for _, n := range []string{"1", "1000"} {
		code, stdout, stderr := runMain(t, "-n", n)
		if code != 0 {
			t.Fatalf("-n %s: exit %d, stderr:\n%s", n, code, stderr)
		}
		if !strings.HasPrefix(stdout, n+" messages in ") || !strings.HasSuffix(stdout, " per message\n") || strings.Count(stdout, "\n") != 1 {
			t.Errorf("-n %s printed %q, want one line \"%s messages in ...: ... per message\"", n, stdout, n)
		}
	}
	for _, n := range []string{"0", "-3", "many"} {
		code, stdout, stderr := runMain(t, "-n", n)
		if code != 2 || stdout != "" || !strings.Contains(stderr, "-n") {
			t.Errorf("-n %s: exit %d, stdout %q, stderr %q; want exit 2, nothing on stdout and a message naming -n", n, code, stdout, stderr)
		}
	}

	code, stdout, stderr := runMain(t, "extra")
	if code != 2 || stdout != "" || !strings.Contains(stderr, "extra") {
		t.Errorf("with an argument: exit %d, stdout %q, stderr %q; want exit 2, nothing on stdout and a message naming it", code, stdout, stderr)
	}
}

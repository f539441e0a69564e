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

// mainArgsEnv holds, in a child that TestMainRefusesArguments started,
// the arguments (a JSON list) its main runs with instead of the tests.
const mainArgsEnv = "TWONODE_MAIN_ARGS"

func TestMain(m *testing.M) {
	if raw, ok := os.LookupEnv(mainArgsEnv); ok {
		var args []string
		if err := json.Unmarshal([]byte(raw), &args); err != nil {
			os.Stderr.WriteString("the arguments: " + err.Error() + "\n")
			os.Exit(3)
		}
		os.Args = append([]string{"twonode"}, args...)
		main()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// TestMainRefusesArguments: the program takes no arguments, and refuses
// a stray one, as a flag it does not know, as a usage error: exit status
// 2, nothing on standard output, and a message that names it; it does
// not start the nodes. Its main runs in a child process, this test binary
// again.
func TestMainRefusesArguments(t *testing.T) {
	for _, args := range [][]string{{"extra"}, {"one", "two"}, {"-x"}} {
		raw, err := json.Marshal(args)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), mainArgsEnv+"="+string(raw))
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err = cmd.Run()
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut {
			t.Fatalf("%q: main did not end within a minute", args)
		}
		code := 0
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			code = exit.ExitCode()
		case err != nil:
			t.Fatalf("%q: running main: %v", args, err)
		}
		if code != 2 || stdout.String() != "" || !strings.Contains(stderr.String(), args[len(args)-1]) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2, nothing on stdout and a message naming %s",
				args, code, stdout.String(), stderr.String(), args[len(args)-1])
		}
	}
}

// TestRun runs the example and checks every line it prints: the
// counter on node b adds the ten numbers node a sent it, the awaited
// square answers, the monitor sees the counter end with its total, and
// the message sent after the end comes back as not found.
func TestRun(t *testing.T) {
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"a: started a counter on node b",
		"a: the counter's total of 1..10 is 55",
		"a: a square awaited on b says 7*7 = 49",
		"a: the counter ended (done) with json:55",
		`a: "too late" came back: process not found: true`,
	}
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("printed %d lines, want %d:\n%s", len(got), len(want), out.String())
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: got %q, want %q", i+1, got[i], want[i])
		}
	}
}

// Package mainrun lets an example's tests run the example's main in a
// child process, to check what the program prints and its exit status
// as a user sees them: the test binary runs itself again with the
// arguments in an environment variable, and the child's TestMain calls
// main with them instead of running tests.
//
// It is for the examples' tests only.
package mainrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// argsEnv holds, in a child, the arguments its main runs with (a JSON
// list). Each example's test binary is its own program, so one name
// serves them all.
const argsEnv = "PROCSCHED_EXAMPLE_MAIN_ARGS"

// limit bounds each child's run.
const limit = time.Minute

// IfChild runs main as the program name with the arguments the parent
// gave and exits 0 when main returns, if this test binary is a child
// that Run started; otherwise it returns at once. Call it first in
// TestMain.
func IfChild(name string, main func()) {
	raw, ok := os.LookupEnv(argsEnv)
	if !ok {
		return
	}
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		fmt.Fprintf(os.Stderr, "mainrun: the arguments %q: %v\n", raw, err)
		os.Exit(3)
	}
	os.Args = append([]string{name}, args...)
	main()
	os.Exit(0)
}

// Run runs the example's main with args in a child process (this test
// binary again, whose TestMain calls IfChild) and returns its exit
// status, standard output and standard error. It fails the test if the
// child cannot be started or does not end within a minute. Test
// goroutine only.
func Run(t testing.TB, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), argsEnv+"="+string(raw))
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("main %q did not end within %v", args, limit)
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("running main %q: %v", args, err)
	}
	return code, out.String(), errOut.String()
}

// Refused runs main with args, as Run does, and fails the test unless
// the program refused them as a usage error: exit status 2, nothing on
// standard output, and a message on standard error that contains named
// (the flag or argument at fault). Test goroutine only.
func Refused(t testing.TB, named string, args ...string) {
	t.Helper()
	code, stdout, stderr := Run(t, args...)
	if code != 2 || stdout != "" || !strings.Contains(stderr, named) {
		t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2, nothing on stdout and a message naming %s", args, code, stdout, stderr, named)
	}
}

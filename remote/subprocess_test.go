package remote_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/remote"
)

// A node in a second OS process: the test binary, run again with
// subprocessEnv set, runs subprocessMain instead of the tests.
const (
	subprocessURL  = "PROCSCHED_REMOTE_URL"
	subprocessName = "PROCSCHED_REMOTE_NAME"
)

// subprocessMain runs the role named name and returns the exit code. The
// "node" role joins cluster "test" as a node with the "echo" kind,
// prints "ready" and its number, and closes when its standard input
// closes.
func subprocessMain(name string) int {
	if name != "node" {
		fmt.Fprintf(os.Stderr, "unknown role %q\n", name)
		return 2
	}
	node, err := remote.New(remote.Config{
		Cluster: "test", Name: os.Getenv(subprocessName), URL: os.Getenv(subprocessURL),
		Heartbeat: 50 * time.Millisecond, FailureTimeout: 5 * time.Second,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, err := scheduler.New(scheduler.WithNode(node.Node()), scheduler.WithTransport(node))
	if err == nil {
		err = node.Register("echo", func() scheduler.Process { return &echo{} })
	}
	if err == nil {
		err = node.Start(context.Background(), s)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("ready %d\n", node.Node())
	_, _ = io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), tWait)
	defer cancel()
	_ = node.Close(ctx)
	_ = s.Shutdown(ctx)
	return 0
}

// tSubprocess is a node running in another process.
type tSubprocess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	num   uint32
}

// tStartSubprocess starts a node named name in another process and waits
// until it is ready; the end of the test closes it if it still runs.
func tStartSubprocess(t testing.TB, url, name string) *tSubprocess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), subprocessEnv+"=node", subprocessURL+"="+url, subprocessName+"="+name)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	h := &tSubprocess{cmd: cmd, stdin: stdin}
	t.Cleanup(h.stop)
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			ready <- sc.Text()
		}
		close(ready)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	line := tRecv(t, ready, "the node in the other process to be ready")
	num, err := strconv.ParseUint(strings.TrimPrefix(line, "ready "), 10, 32)
	require.NoError(t, err, "the other process said %q", line)
	h.num = uint32(num)
	return h
}

// kill kills the process with SIGKILL: no goodbye, no flush.
func (h *tSubprocess) kill() {
	_ = h.cmd.Process.Kill()
	_ = h.cmd.Wait()
}

// stop closes the process's node gracefully and waits for it to exit.
func (h *tSubprocess) stop() {
	_ = h.stdin.Close()
	_ = h.cmd.Wait()
}

package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The -load option measures behaviour under CPU contention: during each
// run, a separate process keeps N goroutines (on N threads) busy in a
// tight loop, as other programs on a shared machine do. A separate
// process, not goroutines in the measured one, because the measured
// binary's Go runtime must not know about the load: it competes for the
// cores through the operating system's scheduler, as in production.

// busyArg is the hidden first argument that turns the harness binary into
// the load process: "bench -busy-load N" spins N goroutines until its
// standard input is closed.
const busyArg = "-busy-load"

// maxLoad is the most goroutines -load takes. Each spins on a processor
// and a thread of its own, and the Go runtime ends a program that has
// more than 10,000 threads (see runtime/debug.SetMaxThreads): a larger
// load would die before the runs, or during them, so it is refused
// before anything is built. The margin leaves room for the load
// process's reporting goroutine and the runtime's own threads.
const maxLoad = 9000

// loadReady is the line the load process writes on its standard output
// once every one of its goroutines is spinning.
const loadReady = "spinning"

// loadStartLimit bounds how long startLoad waits for the load process to
// say it is spinning.
const loadStartLimit = 30 * time.Second

// busyLoad is the load process's main: n goroutines spin, and once each
// has done a first round of work it says so (loadReady on standard
// output); they spin until stdin reaches EOF (the harness closes it, or
// dies).
func busyLoad(arg string) int {
	n, err := strconv.Atoi(arg)
	if err != nil || n < 1 {
		fmt.Fprintf(os.Stderr, "bench %s %q: need a positive count\n", busyArg, arg)
		return 2
	}
	// One processor for each spinning goroutine, and one for this one,
	// which reports and reads: it never takes a spinner's thread.
	runtime.GOMAXPROCS(n + 1)
	var started sync.WaitGroup
	started.Add(n)
	for range n {
		go spin(started.Done)
	}
	started.Wait()
	fmt.Println(loadReady)
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// spin keeps one thread busy with arithmetic the compiler cannot remove;
// it calls started after its first round.
func spin(started func()) {
	x := uint64(1)
	for {
		for range 1 << 20 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
		}
		if x == 0 {
			fmt.Println(x) // never: keeps x observable
		}
		if started != nil {
			started()
			started = nil
		}
	}
}

// loader is a running load process.
type loader struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// startLoad starts a load process of n busy goroutines and returns once
// all of them spin, so that the run it surrounds is loaded from its
// start; n 0 starts nothing.
func startLoad(n int) (*loader, error) {
	if n == 0 {
		return nil, nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, busyArg, strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	cmd.WaitDelay = 2 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the load process: %w", err)
	}
	l := &loader{cmd: cmd, stdin: stdin}
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if strings.TrimSpace(s) == loadReady {
			return l, nil
		}
		_ = l.stop() // it ended, or said something else
		return nil, fmt.Errorf("the load process did not start spinning (it wrote %q)", s)
	case <-time.After(loadStartLimit):
		_ = cmd.Process.Kill()
		_ = l.stop()
		<-line
		return nil, fmt.Errorf("the load process did not start spinning within %v", loadStartLimit)
	}
}

// stop ends the load process and waits for it. It returns an error if
// the process did not end by exiting 0 once its input closed: it died
// (killed, out of memory) or failed, so the run it surrounded may have
// gone without the load for part of its time. Nil l is no load.
func (l *loader) stop() error {
	if l == nil {
		return nil
	}
	_ = l.stdin.Close()
	if err := l.cmd.Wait(); err != nil {
		return fmt.Errorf("the load process ended during the run: %w", err)
	}
	return nil
}

// Command twonode runs two nodes of one cluster in one program, with an
// embedded NATS server, so that it needs no setup: a process on node "a"
// starts processes on node "b", sends them messages, awaits a result,
// monitors one until it ends, and gets back a message sent too late.
//
//	cd remote && go run ./examples/twonode
//
// It takes no arguments: a stray one is refused with exit status 2, as a
// flag it does not know is; a failure of the run exits with status 1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
	"github.com/procsched/scheduler/remote"
)

func main() {
	flag.Parse()
	if flag.NArg() > 0 {
		log.Printf("unexpected arguments %q: the program takes none", flag.Args())
		os.Exit(2)
	}
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// run runs the two nodes and the driver, which writes what it sees to w.
func run(w io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
	if err != nil {
		return err
	}
	srv.Start()
	defer func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}()
	if !srv.ReadyForConnections(10 * time.Second) {
		return errors.New("the NATS server did not start")
	}

	a, err := join(ctx, srv.ClientURL(), "a")
	if err != nil {
		return err
	}
	defer a.close()
	b, err := join(ctx, srv.ClientURL(), "b")
	if err != nil {
		return err
	}
	defer b.close()
	if err := b.node.Register("counter", func() scheduler.Process { return &counter{} }); err != nil {
		return err
	}
	if err := b.node.Register("square", func() scheduler.Process { return &square{} }); err != nil {
		return err
	}
	if _, err := a.node.WaitPeer(ctx, "b"); err != nil {
		return err
	}
	if _, err := b.node.WaitPeer(ctx, "a"); err != nil {
		return err
	}

	h, err := a.sched.Submit(ctx, &driver{node: a.node, w: w}, "run", nil)
	if err != nil {
		return err
	}
	_, err = h.Wait(ctx)
	return err
}

// member is a node and its scheduler.
type member struct {
	node  *remote.Node
	sched *scheduler.Scheduler
}

// join starts a node named name and its scheduler.
func join(ctx context.Context, url, name string) (*member, error) {
	node, err := remote.New(remote.Config{Cluster: "example", Name: name, URL: url})
	if err != nil {
		return nil, err
	}
	s, err := scheduler.New(scheduler.WithNode(node.Node()), scheduler.WithTransport(node))
	if err != nil {
		_ = node.Close(ctx)
		return nil, err
	}
	if err := node.Start(ctx, s); err != nil {
		_ = node.Close(ctx)
		_ = s.Shutdown(ctx)
		return nil, err
	}
	return &member{node: node, sched: s}, nil
}

// close leaves the cluster, then stops the scheduler.
func (m *member) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = m.node.Close(ctx)
	_ = m.sched.Shutdown(ctx)
}

// counter adds the numbers it is sent. "total" asks for the sum, sent
// back to the asker; "stop" ends it with the sum as its result.
type counter struct{ total int }

func (c *counter) Init(context.Context, string, payload.Payloads) error { return nil }

func (c *counter) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	for _, ev := range evs {
		switch ev.Type {
		case scheduler.EventCancel:
			out.Done(payload.Of(c.total))
		case scheduler.EventMessage:
			if cmd, ok := ev.Data.(string); ok {
				switch cmd {
				case "total":
					out.Tell(ev.From, payload.Of(c.total))
				case "stop":
					out.Done(payload.Of(c.total))
				}
				continue
			}
			// A number, sent as payload.Of(n): it crossed as JSON, so
			// the payload is read whole from ev.Result (ev.Data holds
			// only the JSON text).
			n, err := payload.As[int](ev.Result())
			if err != nil {
				return err
			}
			c.total += n
		}
	}
	return nil
}

func (c *counter) Close() {}

// square ends at once with the square of its input.
type square struct{ n int }

func (s *square) Init(_ context.Context, _ string, in payload.Payloads) error {
	return in.Decode(&s.n)
}

func (s *square) Step(_ []scheduler.Event, out *scheduler.StepOutput) error {
	out.Done(payload.Of(s.n * s.n))
	return nil
}

func (s *square) Close() {}

// driver runs on node a and uses the processes of node b.
type driver struct {
	node    *remote.Node
	w       io.Writer // where it says what it sees
	counter relay.PID
}

// The tags of the driver's yields.
const (
	tagSpawn = iota + 1
	tagSquare
	tagWatch
)

func (d *driver) Init(context.Context, string, payload.Payloads) error { return nil }

func (d *driver) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	if len(evs) == 0 { // first step
		out.Yield(tagSpawn, d.node.SpawnCommand(), remote.Spawn{Node: "b", Kind: "counter", Method: "run"})
		return nil
	}
	for _, ev := range evs {
		if ev.Type == scheduler.EventYieldComplete && ev.Error != nil {
			return ev.Error
		}
		switch {
		case ev.Type == scheduler.EventYieldComplete && ev.Tag == tagSpawn:
			d.counter = ev.From
			fmt.Fprintf(d.w, "a: started a counter on node %s\n", d.node.Named(d.counter).Node)
			for i := 1; i <= 10; i++ {
				out.Tell(d.counter, payload.Of(i))
			}
			out.Tell(d.counter, "total")
		case ev.Type == scheduler.EventMessage && ev.Error == nil:
			total, err := payload.As[int](ev.Result())
			if err != nil {
				return err
			}
			fmt.Fprintf(d.w, "a: the counter's total of 1..10 is %d\n", total)
			out.Yield(tagSquare, d.node.SpawnCommand(), remote.Spawn{Node: "b", Kind: "square", Method: "run", Input: payload.Values(7), Await: true})
		case ev.Type == scheduler.EventYieldComplete && ev.Tag == tagSquare:
			sq, err := payload.As[int](ev.Result())
			if err != nil {
				return err
			}
			fmt.Fprintf(d.w, "a: a square awaited on b says 7*7 = %d\n", sq)
			out.Monitor(tagWatch, d.counter)
			out.Tell(d.counter, "stop")
		case ev.Type == scheduler.EventYieldComplete && ev.Tag == tagWatch:
			exit := ev.Data.(scheduler.Exit)
			fmt.Fprintf(d.w, "a: the counter ended (%v) with %v\n", exit.Reason, exit.Result)
			out.Tell(d.counter, "too late")
		case ev.Type == scheduler.EventMessage:
			fmt.Fprintf(d.w, "a: %q came back: process not found: %v\n", ev.Data, errors.Is(ev.Error, scheduler.ErrProcessNotFound))
			out.Done(payload.Payload{})
		}
	}
	return nil
}

func (d *driver) Close() {}

package remote_test

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
	"github.com/procsched/scheduler/remote"
)

// greeter answers each message with a greeting to its sender.
type greeter struct{}

func (greeter) Init(context.Context, string, payload.Payloads) error { return nil }
func (greeter) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	for _, ev := range evs {
		if name, ok := ev.Data.(string); ok {
			out.Tell(ev.From, "hello, "+name)
		}
		if ev.Type == scheduler.EventCancel {
			out.Done(payload.Payload{})
		}
	}
	return nil
}
func (greeter) Close() {}

// Two nodes of a cluster, each a scheduler with a node, in one program:
// a process on node a tells a process on node b, which answers.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, _ := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
	srv.Start()
	defer srv.WaitForShutdown()
	defer srv.Shutdown()
	srv.ReadyForConnections(10 * time.Second)

	start := func(name string) (*remote.Node, *scheduler.Scheduler) {
		node, err := remote.New(remote.Config{Cluster: "example", Name: name, URL: srv.ClientURL()})
		if err != nil {
			panic(err)
		}
		s, _ := scheduler.New(scheduler.WithNode(node.Node()), scheduler.WithTransport(node))
		if err := node.Start(ctx, s); err != nil {
			panic(err)
		}
		return node, s
	}
	a, sa := start("a")
	b, sb := start("b")
	defer func() { // leave the cluster, then stop the schedulers
		_ = a.Close(ctx)
		_ = b.Close(ctx)
		_ = sa.Shutdown(ctx)
		_ = sb.Shutdown(ctx)
	}()
	if _, err := a.WaitPeer(ctx, "b"); err != nil {
		panic(err)
	}

	g, _ := sb.Submit(ctx, greeter{}, "run", nil)
	h, _ := sa.Submit(ctx, &asker{to: g.PID(), node: a}, "run", nil)
	res, _ := h.Wait(ctx)
	fmt.Println(res.Value())
	// Output: "hello, a" from a process on node b
}

// asker tells its name to a process and ends with the answer.
type asker struct {
	to   relay.PID
	node *remote.Node
}

func (*asker) Init(context.Context, string, payload.Payloads) error { return nil }
func (k *asker) Step(evs []scheduler.Event, out *scheduler.StepOutput) error {
	if len(evs) == 0 {
		out.Tell(k.to, "a")
		return nil
	}
	for _, ev := range evs {
		if ev.Type == scheduler.EventMessage {
			out.Done(payload.Of(fmt.Sprintf("%q from a process on node %s", ev.Data, k.node.Named(ev.From).Node)))
		}
	}
	return nil
}
func (*asker) Close() {}

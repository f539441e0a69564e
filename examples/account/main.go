// Command account is the complete example of docs/process-model.md: a
// bank account process that keeps a balance, answers messages, and audits
// large deposits through an asynchronous command bounded by a timeout.
//
//	go run ./examples/account
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
)

// cmdAudit is a command of our own: audit a deposit.
const cmdAudit = scheduler.FirstUserCommand

// The messages an account understands.
type (
	deposit   struct{ amount int }
	closeBook struct{}
)

// statement is what an account finishes with: its balance, and how many
// deposits the audit rejected or did not answer in time.
type statement struct{ Balance, Rejected int }

// account accepts small deposits at once and large ones after an audit
// that must answer within auditTimeout. On closeBook it finishes, once no
// audit is pending, with its statement.
type account struct {
	balance  int
	auditing map[uint64]int // pending audits by tag: the amount
	nextTag  uint64
	closing  bool
	rejected int
}

const auditTimeout = 50 * time.Millisecond

func (a *account) Init(_ context.Context, method string, in payload.Payloads) error {
	if method != "open" {
		return fmt.Errorf("%w: %q", scheduler.ErrUnknownMethod, method)
	}
	a.auditing = map[uint64]int{}
	return in.Decode(&a.balance)
}

func (a *account) Step(events []scheduler.Event, out *scheduler.StepOutput) error {
	for _, ev := range events {
		switch ev.Type {
		case scheduler.EventCancel:
			a.closing = true
		case scheduler.EventMessage:
			switch m := ev.Data.(type) {
			case deposit:
				if m.amount < 1000 {
					a.balance += m.amount
					continue
				}
				// Tags encode intent: the audit gets an even tag, its
				// deadline the next odd one.
				a.nextTag += 2
				a.auditing[a.nextTag] = m.amount
				out.Yield(a.nextTag, cmdAudit, m.amount)
				out.Sleep(a.nextTag+1, auditTimeout)
			case closeBook:
				a.closing = true
			}
		case scheduler.EventYieldComplete:
			if amount, ok := a.auditing[ev.Tag]; ok { // the audit answered first
				delete(a.auditing, ev.Tag)
				if ev.Error == nil {
					a.balance += amount
				} else {
					a.rejected++
				}
			} else if _, ok := a.auditing[ev.Tag-1]; ok && ev.Tag%2 == 1 { // the deadline came first
				delete(a.auditing, ev.Tag-1)
				a.rejected++
			}
			// Anything else completes an audit that is already settled.
		}
	}
	if a.closing && len(a.auditing) == 0 {
		out.Done(payload.Of(statement{a.balance, a.rejected}))
	}
	return nil
}

func (a *account) Close() {}

// audit is the handler of cmdAudit: it hands the call to an "audit
// service" (here a timer) that answers a few milliseconds later.
func audit(c scheduler.Call) error {
	amount, ok := c.Arg.(int)
	if !ok {
		return fmt.Errorf("audit: want an amount, got %T", c.Arg)
	}
	done := c.Completion()
	time.AfterFunc(5*time.Millisecond, func() {
		var err error
		if amount > 1_000_000 {
			err = fmt.Errorf("audit: %d needs a human", amount)
		}
		_ = done.Complete(nil, err)
	})
	return nil
}

func main() {
	flag.Parse()
	if flag.NArg() > 0 {
		log.Printf("unexpected arguments %q: the program takes no arguments", flag.Args())
		os.Exit(2)
	}
	st, err := run()
	if err != nil {
		log.Print(err)
		os.Exit(1)
	}
	deposits := "deposits"
	if st.Rejected == 1 {
		deposits = "deposit"
	}
	fmt.Printf("final balance %d (%d %s rejected by the audit)\n", st.Balance, st.Rejected, deposits)
}

// run opens an account with 100, deposits 50, 5,000 and 2,000,000 (which
// the audit rejects), closes it and returns its statement.
func run() (statement, error) {
	s, err := scheduler.New(scheduler.WithHandler(cmdAudit, audit))
	if err != nil {
		return statement{}, err
	}
	defer s.Shutdown(context.Background())

	ctx := context.Background()
	h, err := s.Submit(ctx, &account{}, "open", payload.Values(100))
	if err != nil {
		return statement{}, err
	}
	for _, m := range []any{deposit{50}, deposit{5000}, deposit{2_000_000}, closeBook{}} {
		if err := s.Tell(h.PID(), m); err != nil {
			return statement{}, err
		}
	}
	res, err := h.Wait(ctx)
	if err != nil {
		return statement{}, err
	}
	return payload.As[statement](res)
}

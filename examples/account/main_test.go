package main

import (
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/procsched/scheduler/examples/internal/mainrun"

	"github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/schedtest"
)

func TestMain(m *testing.M) {
	mainrun.IfChild("account", main)
	goleak.VerifyTestMain(m)
}

// TestMainOutput: the program prints the account's statement and exits
// 0; it takes no arguments, and refuses one with exit status 2.
func TestMainOutput(t *testing.T) {
	code, stdout, stderr := mainrun.Run(t)
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	if stdout != "final balance 5150 (1 deposit rejected by the audit)\n" && stdout != "final balance 150 (2 deposits rejected by the audit)\n" {
		t.Errorf("printed %q, want \"final balance 5150 (1 deposit rejected by the audit)\" (or 150 with 2 rejected)", stdout)
	}
	// It has no flags either: the refusal says it takes nothing.
	mainrun.Refused(t, `unexpected arguments ["extra"]: the program takes no arguments`, "extra")
}

// TestRun runs the example: the deposit of 2,000,000 is always rejected,
// the others are taken, and every deposit is either in the balance or
// counted as rejected. (The audit of 5,000 answers long before its
// deadline, but on a loaded machine it could miss it: then it is
// rejected too, and the statement says so.)
func TestRun(t *testing.T) {
	st, err := run()
	if err != nil {
		t.Fatal(err)
	}
	if st != (statement{Balance: 5150, Rejected: 1}) && st != (statement{Balance: 150, Rejected: 2}) {
		t.Errorf("statement %+v, want balance 5150 with one deposit rejected (or 150 with two, if the audit of 5000 came late)", st)
	}
}

// TestAccountAudits: small deposits are taken at once; a large one waits
// for its audit, is taken if the audit approves and rejected if it
// fails; closing waits for every pending audit.
func TestAccountAudits(t *testing.T) {
	s := schedtest.New(t)
	audits := s.FakeLater(cmdAudit)
	pid := s.Start(&account{}, "open", payload.Values(100))
	for _, m := range []any{deposit{50}, deposit{5000}, deposit{2_000_000}, closeBook{}} {
		if err := s.Send(pid, m); err != nil {
			t.Fatal(err)
		}
	}
	s.RunUntilIdle()
	if s.Ended(pid) {
		t.Fatal("the account closed with two audits pending")
	}
	if n := audits.Len(); n != 2 {
		t.Fatalf("%d audits asked for, want 2 (the deposits of 1,000 or more)", n)
	}
	first, second := audits.Next(), audits.Next()
	if first.Arg != 5000 || second.Arg != 2_000_000 {
		t.Fatalf("audits of %v and %v, want 5000 and 2000000", first.Arg, second.Arg)
	}
	if err := first.Token().Complete(nil, nil); err != nil {
		t.Fatal(err)
	}
	s.RunUntilIdle()
	if s.Ended(pid) {
		t.Fatal("the account closed with an audit pending")
	}
	if err := second.Token().Complete(nil, errors.New("needs a human")); err != nil {
		t.Fatal(err)
	}
	s.RunUntilIdle()
	res, err := s.Result(pid)
	if err != nil {
		t.Fatal(err)
	}
	if st := res.Value(); st != (statement{Balance: 5150, Rejected: 1}) {
		t.Errorf("statement %+v, want balance 5150 with one deposit rejected", st)
	}
}

// TestAccountAuditDeadline: an audit that does not answer within
// auditTimeout rejects its deposit, and its answer when it comes is
// ignored: the deposit stays out of the balance.
func TestAccountAuditDeadline(t *testing.T) {
	s := schedtest.New(t)
	audits := s.FakeLater(cmdAudit)
	pid := s.Start(&account{}, "open", payload.Values(100))
	if err := s.Send(pid, deposit{5000}); err != nil {
		t.Fatal(err)
	}
	s.RunUntilIdle()
	late := audits.Next()
	s.Advance(auditTimeout) // the deadline comes first
	if err := late.Token().Complete(nil, nil); err != nil && !errors.Is(err, scheduler.ErrYieldNotPending) {
		t.Fatal(err)
	}
	if err := s.Send(pid, closeBook{}); err != nil {
		t.Fatal(err)
	}
	s.RunUntilIdle()
	res, err := s.Result(pid)
	if err != nil {
		t.Fatal(err)
	}
	if st := res.Value(); st != (statement{Balance: 100, Rejected: 1}) {
		t.Errorf("statement %+v, want balance 100 with the late-audited deposit rejected", st)
	}
}

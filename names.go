package scheduler

import (
	"errors"
	"fmt"
	"sync"

	"github.com/procsched/scheduler/relay"
)

// Names: a process can be registered under a name, unique within its
// scheduler, so that others find it without being handed its PID. The
// name is released when the process ends. The registry is a map under a
// read-write lock: lookups are what services do often (a send by name),
// registrations are rare.
//
// A process ends, for its names as for everything else, when its final
// step returns (it is gone: see proc.gone), but its end removes its
// entries from the map only after its Close. An entry whose holder is
// gone is therefore a free name: Lookup and Unregister find nothing
// there and Register gives it to its new holder, each deciding under
// the registry's lock, so that a caller told the process has ended
// never finds it by name afterwards. The end's removal skips a name
// that has passed to another process meanwhile.

// names is a scheduler's registry of process names.
type names struct {
	mu     sync.RWMutex // guards byName
	byName map[string]relay.PID
}

// Register gives the live process pid the name, so that [Scheduler.Lookup],
// [Scheduler.TellName] and [StepOutput.TellName] find it. A name is unique
// within the scheduler and stays registered until the process ends (then it
// is released) or [Scheduler.Unregister] is called; a process may have
// several names. The process ends, for its names, when its final step
// returns, as for [Scheduler.Tell]: from then on, while its Close runs
// too, no call finds it by a name and another process may take the name.
// Any goroutine.
//
// It returns an error wrapping [ErrNameTaken] if another process has the
// name (registering the same process again under its own name is not an
// error), [ErrInvalidName] for an empty name, [ErrProcessNotFound] if pid
// is not a live process of this scheduler, and [ErrClosed] after Shutdown.
func (s *Scheduler) Register(name string, pid relay.PID) error {
	if name == "" {
		return fmt.Errorf("%w: the empty name", ErrInvalidName)
	}
	if s.phase.Load() == phaseStopped {
		return ErrClosed
	}
	p, err := s.lookup(pid)
	if err != nil {
		return err
	}
	s.names.mu.Lock()
	defer s.names.mu.Unlock()
	holder, held := s.names.byName[name]
	if held && holder != pid {
		if s.nameHolderLive(holder) {
			return fmt.Errorf("%w: %q is %v's", ErrNameTaken, name, holder)
		}
		held = false // its holder has ended: the name is free
	}
	// Recorded on the process under its lock, so that its end, which
	// releases its names after closing it under that lock, cannot miss
	// this one: either the process is gone now and nothing is
	// registered, or its end will see the name. A name it holds already
	// is refused too once it is gone, as any other name: it has ended.
	p.mu.Lock()
	if p.gone(pid.ID) {
		p.mu.Unlock()
		return fmt.Errorf("%w: %v", ErrProcessNotFound, pid)
	}
	if held {
		p.mu.Unlock()
		return nil // its own name again
	}
	x := p.getLive()
	x.names = append(x.names, name)
	p.mu.Unlock()
	if s.names.byName == nil {
		s.names.byName = make(map[string]relay.PID)
	}
	s.names.byName[name] = pid
	return nil
}

// Unregister releases name, whichever process holds it: it goes by the
// name, not by a process, so an Unregister meant for a process whose name
// has since passed to another (after an Unregister, or that process's
// end) releases the other's. A name leaves its process only through
// Unregister or the process's end: a process that unregisters its own
// name from its step releases its own, unless other code unregistered it
// meanwhile. It returns an error wrapping [ErrNameNotFound] if no process
// has it, and [ErrClosed] after Shutdown (see [Scheduler.Lookup]). Any
// goroutine.
func (s *Scheduler) Unregister(name string) error {
	s.names.mu.Lock()
	pid, ok := s.names.byName[name]
	if ok {
		delete(s.names.byName, name) // a gone holder's too: it is free
		ok = false
		if p, err := s.lookup(pid); err == nil {
			p.mu.Lock()
			// A gone process's names are frozen: whoever ends it reads
			// them without the lock to release them.
			if !p.gone(pid.ID) {
				ok = true
				if x := p.live(); x != nil {
					x.dropName(name)
				}
			}
			p.mu.Unlock()
		}
	}
	s.names.mu.Unlock()
	if !ok {
		return s.nameMissing(name)
	}
	return nil
}

// Lookup returns the PID of the process registered under name, or an error
// wrapping [ErrNameNotFound]. After Shutdown it returns [ErrClosed]: the
// names were released with their processes, and a caller that stops on
// ErrClosed must not take the stop for a name not registered yet. Any
// goroutine.
func (s *Scheduler) Lookup(name string) (relay.PID, error) {
	s.names.mu.RLock()
	pid, ok := s.names.byName[name]
	s.names.mu.RUnlock()
	// Asked after the lock: a process once gone stays gone, so a holder
	// found live now was live when the map named it, and one found gone
	// left the name free at the moment it went, between the two.
	if !ok || !s.nameHolderLive(pid) {
		return relay.PID{}, s.nameMissing(name)
	}
	return pid, nil
}

// nameHolderLive reports whether pid, which holds a name in the
// registry, is a live process: one that is gone holds no name any more,
// though its end has not yet removed it from the map. Register and
// Unregister call it with s.names.mu held, so that the answer and the
// map's entry hold together; Lookup after its read of the map.
//
// It takes no lock of the process: whoever ends a published process
// stores Ended in its state word as the final step returns (or as a
// shutdown deadline forces it), before it closes the process under its
// lock, so the state word's load sees the end as soon as proc.gone does
// under the lock; and a record reused by a process whose Init runs
// keeps Ended until it is published. A lock here would make every
// Lookup, and so every send by name, contend with the holder's own
// mailbox.
func (s *Scheduler) nameHolderLive(pid relay.PID) bool {
	if pid.Node != s.node {
		return false
	}
	p := s.table.lookup(pid.ID)
	return p != nil && p.id.Load() == pid.ID && p.state.Load()&stateMask != stEnded
}

// nameMissing is the error for a name no process has: [ErrClosed] once
// the scheduler has stopped (every process has ended by then, so no name
// is registered), an error wrapping [ErrNameNotFound] before.
func (s *Scheduler) nameMissing(name string) error {
	if s.phase.Load() == phaseStopped {
		return ErrClosed
	}
	return fmt.Errorf("%w: %q", ErrNameNotFound, name)
}

// TellName is [Scheduler.Tell] to the process registered under name. It
// returns an error wrapping [ErrNameNotFound] if no process has the name,
// and otherwise what Tell returns. A process that ends as the message is
// sent, after TellName found it by the name, had the name no more by the
// time the message would have reached it: the message is not delivered
// and the error wraps both [ErrNameNotFound] and [ErrProcessNotFound].
// After Shutdown it returns [ErrClosed], as Tell and [Scheduler.Lookup]
// do. Any goroutine.
func (s *Scheduler) TellName(name string, msg any) error {
	pid, err := s.Lookup(name)
	if err != nil {
		return err
	}
	if err := s.Tell(pid, msg); err != nil {
		if errors.Is(err, ErrProcessNotFound) {
			// Its end released the name between the lookup and the send.
			return fmt.Errorf("%w: %q, whose process ended: %w", ErrNameNotFound, name, err)
		}
		return err
	}
	return nil
}

// releaseNames removes the names of the ended process pid from the
// registry; names is what its procExtra held when it was closed. Called
// once, by whoever ended the process, after closing it.
func (s *Scheduler) releaseNames(pid relay.PID, names []string) {
	s.names.mu.Lock()
	for _, name := range names {
		if s.names.byName[name] == pid {
			delete(s.names.byName, name)
		}
	}
	s.names.mu.Unlock()
}

// dropName removes name from the process's names. Called with proc.mu
// held.
func (x *procLive) dropName(name string) {
	for i, n := range x.names {
		if n == name {
			last := len(x.names) - 1
			x.names[i] = x.names[last]
			x.names[last] = ""
			x.names = x.names[:last]
			return
		}
	}
}

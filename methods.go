package scheduler

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// methodTable interns entry-point names, so that a process record holds a
// 2-byte ID instead of a 16-byte string. Programs use a handful of
// methods; past maxMethods distinct names, new ones are not interned and
// the process keeps its name in its procExtra instead.
type methodTable struct {
	_     [cacheLine]byte
	ids   atomic.Pointer[map[string]*methodEntry] // replaced copy-on-write under mu; read without a lock
	names atomic.Pointer[[]string]                // names[id]; id 0 is "not interned"
	mu    sync.Mutex
	// last is the entry of the latest name found in ids: found for a
	// caller outside the workers, or for a worker whose own cache
	// missed. Most callers submit one kind of process over and over.
	last atomic.Pointer[methodEntry]
	_    [cacheLine]byte
}

// methodEntry is an interned name; entries are never changed, so one can
// be shared through an atomic pointer without copying.
//
// A Submit from outside the workers reads the table's last entry, so the
// table and each entry take cache lines of their own: a 24-byte entry
// would otherwise share a line with whatever small objects the program
// allocated next to it, and if another core writes one of those (a
// shared counter, say), every such Submit misses on the entry. The
// padding costs 40 bytes per interned name and two lines for the table.
type methodEntry struct {
	name string
	id   uint16
	_    [cacheLine - 24]byte
}

// maxMethods bounds the interned names. IDs run from 1 to maxMethods, so
// they fit the two bytes a process record gives them (the constant
// conversion below fails to compile otherwise).
const maxMethods = 4096

const _ = uint16(maxMethods)

// newMethodTable returns an empty table. Called by New.
func newMethodTable() *methodTable {
	t := &methodTable{}
	ids := map[string]*methodEntry{}
	names := []string{""}
	t.ids.Store(&ids)
	t.names.Store(&names)
	return t
}

// id returns the ID of method, interning it if there is room, or 0.
// Any goroutine: lookups are lock-free, interning takes the table's lock.
func (t *methodTable) id(method string) uint16 {
	if e := t.last.Load(); e != nil && e.name == method {
		return e.id
	}
	if e, ok := (*t.ids.Load())[method]; ok {
		t.last.Store(e)
		return e.id
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.ids.Load()
	if e, ok := old[method]; ok {
		return e.id
	}
	names := *t.names.Load()
	if len(names) > maxMethods {
		return 0
	}
	ids := make(map[string]*methodEntry, len(old)+1)
	for k, v := range old {
		ids[k] = v
	}
	id := uint16(len(names))
	ids[method] = &methodEntry{name: method, id: id}
	names = append(names[:len(names):len(names)], method)
	t.names.Store(&names)
	t.ids.Store(&ids)
	return id
}

// name returns the method with this ID.
// Any goroutine.
func (t *methodTable) name(id uint16) string {
	return (*t.names.Load())[id]
}

// methodOf returns p's entry point.
// Any goroutine.
func (s *Scheduler) methodOf(p *proc) string {
	if p.methodID != 0 {
		return s.methods.name(p.methodID)
	}
	if x := p.extra.Load(); x != nil && x.start != nil {
		return x.start.method
	}
	return ""
}

// cachedMethod returns the ID w cached for method, if method is the very
// string w cached (the same bytes in memory, as a constant in the
// caller's code is each time), inline, with no call. w may be nil (a
// caller outside the workers, whose cache is the table's: see
// lastMethod). Owner only, or nil.
func (w *worker) cachedMethod(method string) (uint16, bool) {
	// lastMethod is empty until an ID was cached, and a method never is.
	if w != nil && sameString(method, w.lastMethod) {
		return w.lastMethodID, true
	}
	return 0, false
}

// lastMethod returns the ID of method if it is the very string of the
// table's last entry (the same bytes in memory, as cachedMethod
// compares), the name a caller outside the workers, starting processes
// in a loop, passes each time: it spares id's comparison of the bytes
// and its call. Any goroutine.
func (t *methodTable) lastMethod(method string) (uint16, bool) {
	if e := t.last.Load(); e != nil && sameString(method, e.name) {
		return e.id, true
	}
	return 0, false
}

// sameString reports whether a and b are the very same string: the same
// length and the same bytes in memory, which strings never change, so
// they are equal without a look at the bytes. Equal strings elsewhere in
// memory are not the same. Any goroutine.
func sameString(a, b string) bool {
	return len(a) == len(b) && unsafe.StringData(a) == unsafe.StringData(b)
}

// internMethod returns the ID of method, consulting w's one-entry cache
// first (a worker spawning children usually names the same method), or,
// outside the workers, the table's last entry; the caller tries
// cachedMethod before.
// Any goroutine; w is the calling worker, or nil outside the workers.
func (s *Scheduler) internMethod(method string, w *worker) uint16 {
	if w == nil {
		if id, ok := s.methods.lastMethod(method); ok {
			return id
		}
	} else if w.lastMethodID != 0 && w.lastMethod == method {
		return w.lastMethodID
	}
	id := s.methods.id(method)
	if w != nil && id != 0 {
		w.lastMethod, w.lastMethodID = method, id
	}
	return id
}

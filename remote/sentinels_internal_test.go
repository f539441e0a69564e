package remote

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// sentinels are the exported error values of this package, the
// scheduler, payload and relay, by the name a source file declares them
// under.
var sentinels = map[string]error{
	"remote.ErrNodeDown": ErrNodeDown, "remote.ErrUnknownNode": ErrUnknownNode,
	"remote.ErrBackpressure": ErrBackpressure, "remote.ErrNotEncodable": ErrNotEncodable,
	"remote.ErrDisconnected": ErrDisconnected, "remote.ErrClosed": ErrClosed,
	"remote.ErrUnknownKind": ErrUnknownKind, "remote.ErrInvalidConfig": ErrInvalidConfig,
	"remote.ErrNameConflict": ErrNameConflict,

	"scheduler.ErrClosed": scheduler.ErrClosed, "scheduler.ErrProcessNotFound": scheduler.ErrProcessNotFound,
	"scheduler.ErrUnknownCommand": scheduler.ErrUnknownCommand, "scheduler.ErrNotEnded": scheduler.ErrNotEnded,
	"scheduler.ErrYieldNotPending": scheduler.ErrYieldNotPending, "scheduler.ErrDuplicateTag": scheduler.ErrDuplicateTag,
	"scheduler.ErrNilProcess": scheduler.ErrNilProcess, "scheduler.ErrEmptyMethod": scheduler.ErrEmptyMethod,
	"scheduler.ErrUnknownMethod": scheduler.ErrUnknownMethod, "scheduler.ErrInit": scheduler.ErrInit,
	"scheduler.ErrPanic": scheduler.ErrPanic, "scheduler.ErrInvalidOption": scheduler.ErrInvalidOption,
	"scheduler.ErrInvalidCommand": scheduler.ErrInvalidCommand, "scheduler.ErrCommandTaken": scheduler.ErrCommandTaken,
	"scheduler.ErrMailboxFull": scheduler.ErrMailboxFull, "scheduler.ErrDropped": scheduler.ErrDropped,
	"scheduler.ErrTooManyProcesses": scheduler.ErrTooManyProcesses, "scheduler.ErrForced": scheduler.ErrForced,
	"scheduler.ErrTerminated": scheduler.ErrTerminated, "scheduler.ErrShuttingDown": scheduler.ErrShuttingDown,
	"scheduler.ErrEnded": scheduler.ErrEnded, "scheduler.ErrShutdownStarted": scheduler.ErrShutdownStarted,
	"scheduler.ErrNameTaken": scheduler.ErrNameTaken, "scheduler.ErrNameNotFound": scheduler.ErrNameNotFound,
	"scheduler.ErrInvalidName": scheduler.ErrInvalidName, "scheduler.ErrNoReply": scheduler.ErrNoReply,
	"scheduler.ErrYieldCancelled": scheduler.ErrYieldCancelled, "scheduler.ErrTimeout": scheduler.ErrTimeout,
	"scheduler.ErrPoolFull": scheduler.ErrPoolFull, "scheduler.ErrNilContext": scheduler.ErrNilContext,
	"scheduler.ErrGoexit": scheduler.ErrGoexit,

	"payload.ErrNoValue": payload.ErrNoValue, "payload.ErrTypeMismatch": payload.ErrTypeMismatch,
	"payload.ErrInvalidTarget": payload.ErrInvalidTarget, "payload.ErrDecode": payload.ErrDecode,
	"payload.ErrEncode": payload.ErrEncode, "payload.ErrArity": payload.ErrArity,
	"payload.ErrInvalidFormat": payload.ErrInvalidFormat,

	"relay.ErrInvalidPID": relay.ErrInvalidPID,
}

// TestEverySentinelCrosses: a failure reported by another node matches,
// with errors.Is, every sentinel of this package, the scheduler, payload
// and relay that it matched there, as the package documentation says,
// so that the same checks work for local and remote failures: a process
// of another node that ends with scheduler.ErrTimeout, say, is seen to
// end with it. The list of sentinels is checked against the packages'
// sources, so that one added there is added here, and to wireErrors.
func TestEverySentinelCrosses(t *testing.T) {
	for dir, pkg := range map[string]string{".": "remote", "..": "scheduler", "../payload": "payload", "../relay": "relay"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.VAR {
					continue
				}
				for _, spec := range g.Specs {
					for _, id := range spec.(*ast.ValueSpec).Names {
						if id.IsExported() && strings.HasPrefix(id.Name, "Err") {
							if _, ok := sentinels[pkg+"."+id.Name]; !ok {
								t.Errorf("%s declares %s.%s, which this test's list of sentinels leaves out", name, pkg, id.Name)
							}
						}
					}
				}
			}
		}
	}
	for name, target := range sentinels {
		err := fmt.Errorf("failed there: %w", target)
		got := newRemoteError("b", relay.PID{Node: 1, ID: 1}, errorCode(err), err.Error())
		if !errors.Is(got, target) {
			t.Errorf("a failure matching %s on another node does not match it here", name)
		}
		for other, o := range sentinels {
			if other != name && errors.Is(got, o) != errors.Is(err, o) {
				t.Errorf("a failure matching %s: errors.Is(_, %s) is %v there, %v here", name, other, errors.Is(err, o), errors.Is(got, o))
			}
		}
	}
}

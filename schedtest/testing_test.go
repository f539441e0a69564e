package schedtest_test

import (
	"fmt"
	"testing"
)

// exampleT is the testing.TB the examples give the kit, since an example
// has no *testing.T: a failure panics, and the cleanups are left to the
// example (which shuts the simulation down itself if it needs to).
type exampleT struct {
	testing.TB
}

func (t *exampleT) Helper()                   {}
func (t *exampleT) Cleanup(func())            {}
func (t *exampleT) Errorf(f string, a ...any) { panic("example: " + fmt.Sprintf(f, a...)) }
func (t *exampleT) Fatalf(f string, a ...any) { panic("example: " + fmt.Sprintf(f, a...)) }

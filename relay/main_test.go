package relay_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The package starts no goroutines; this keeps it that way, and catches test
// doubles (such as a Receiver) that leave one behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

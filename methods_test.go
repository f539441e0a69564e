package scheduler_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/payload"
)

// Tests of the method names (methods.go).

// TestManyMethodNames: processes with more distinct entry points than
// are interned still report their own.
func TestManyMethodNames(t *testing.T) {
	s := newScheduler(t)
	for i := range 5000 {
		method := fmt.Sprintf("m%d", i)
		h, err := s.Submit(context.Background(), &probe{step: untilCancel, init: func(_ context.Context, got string, _ payload.Payloads) error {
			if got != method {
				return fmt.Errorf("Init got %q, want %q", got, method)
			}
			return nil
		}}, method, nil)
		require.NoError(t, err)
		if i%1000 == 999 {
			info, ok := findProcess(s, h.PID())
			require.True(t, ok)
			require.Equal(t, method, info.Method)
		}
		require.NoError(t, s.Terminate(h.PID()))
	}
}

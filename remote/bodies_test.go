package remote_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
)

// tWrapped is a Go value with payloads inside.
type tWrapped struct {
	N int
	P payload.Payload
	B payload.Payload
}

// TestPayloadsCross: a payload of each format, payloads holding
// payloads, a Go value with payloads inside and the zero payload reach a
// process on another node so that it reads them as one on the sender's
// node would: bytes and JSON as they were, a Go value as its JSON, which
// payload.As reads into the same types; Payloads element by element. And
// each comes back to its sender the same way when its recipient has
// ended.
func TestPayloadsCross(t *testing.T) {
	_, a, b := tTwoNodes(t, nil)
	recv, got := tCollector(t, b.S, 16)
	ended := tSubmit(t, b.S, func(_ *tProc, _ int, _ []scheduler.Event, out *scheduler.StepOutput) error {
		out.Done(payload.Payload{})
		return nil
	})
	_, err := tWaitResult(t, ended)
	require.NoError(t, err)

	wrapped := tWrapped{N: 7, P: payload.Of(3), B: payload.Bytes([]byte("x"))}
	for _, tc := range []struct {
		name  string
		body  any
		check func(t *testing.T, ev scheduler.Event)
	}{
		{"bytes", payload.Bytes([]byte("raw")), func(t *testing.T, ev scheduler.Event) {
			assert.Equal(t, []byte("raw"), ev.Data)
			assert.Equal(t, payload.FormatBytes, ev.Result().Format())
		}},
		{"JSON", payload.RawJSON([]byte(`{"n":1}`)), func(t *testing.T, ev scheduler.Event) {
			assert.Equal(t, []byte(`{"n":1}`), ev.Data)
			assert.Equal(t, payload.FormatJSON, ev.Result().Format())
		}},
		{"a Go value", payload.Of(42), func(t *testing.T, ev scheduler.Event) {
			assert.Equal(t, []byte(`42`), ev.Data, "its JSON text")
			n, err := payload.As[int](ev.Result())
			require.NoError(t, err)
			assert.Equal(t, 42, n)
		}},
		{"a Go value with payloads inside", payload.Of(wrapped), func(t *testing.T, ev scheduler.Event) {
			w, err := payload.As[tWrapped](ev.Result())
			require.NoError(t, err)
			assert.Equal(t, 7, w.N)
			n, err := payload.As[int](w.P)
			require.NoError(t, err)
			assert.Equal(t, 3, n)
			x, err := payload.As[[]byte](w.B)
			require.NoError(t, err)
			assert.Equal(t, []byte("x"), x)
		}},
		{"payloads", payload.Payloads{payload.Of("one"), payload.Bytes([]byte("two")), {}}, func(t *testing.T, ev scheduler.Event) {
			ps, ok := ev.Data.(payload.Payloads)
			require.True(t, ok, "%T", ev.Data)
			require.Len(t, ps, 3)
			s, err := payload.As[string](ps[0])
			require.NoError(t, err)
			assert.Equal(t, "one", s)
			assert.Equal(t, payload.FormatBytes, ps[1].Format())
			assert.Equal(t, []byte("two"), ps[1].Value())
			assert.True(t, ps[2].IsZero())
		}},
		{"the zero payload", payload.Payload{}, func(t *testing.T, ev scheduler.Event) {
			assert.Nil(t, ev.Data)
			assert.True(t, ev.Result().IsZero())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, a.S.Tell(recv.PID(), tc.body))
			ev := tRecv(t, got, "the message")
			require.NoError(t, ev.Error)
			tc.check(t, ev)
			// Locally, the same reads give the same answers.
			local, gotLocal := tCollector(t, a.S, 1)
			require.NoError(t, a.S.Tell(local.PID(), tc.body))
			if tc.name != "a Go value" { // its Data is the value itself here
				tc.check(t, tRecv(t, gotLocal, "the local message"))
			}
			require.NoError(t, a.S.Terminate(local.PID()))

			bounce := tBounceOf(t, a.S, ended.PID(), tc.body)
			assert.ErrorIs(t, bounce.Error, scheduler.ErrProcessNotFound)
			tc.check(t, bounce)
		})
	}
}

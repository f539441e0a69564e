package relay_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

var errUnknownPID = errors.New("mailboxes: unknown PID")

// mailboxes is the smallest useful Receiver: one slice of messages per known
// PID. It stands for the scheduler in tests of code that only sends.
type mailboxes struct {
	mu    sync.Mutex // protects boxes
	boxes map[relay.PID][]relay.Message
}

var _ relay.Receiver = (*mailboxes)(nil)

func newMailboxes(pids ...relay.PID) *mailboxes {
	m := &mailboxes{boxes: make(map[relay.PID][]relay.Message)}
	for _, pid := range pids {
		m.boxes[pid] = nil
	}
	return m
}

func (m *mailboxes) Send(msg relay.Message) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	box, ok := m.boxes[msg.To]
	if !ok {
		return fmt.Errorf("%w %v", errUnknownPID, msg.To)
	}
	m.boxes[msg.To] = append(box, msg)
	return nil
}

func TestReceiver(t *testing.T) {
	a, b := relay.PID{ID: 1}, relay.PID{ID: 2}
	var r relay.Receiver = newMailboxes(a, b)

	for i := range 3 {
		require.NoError(t, r.Send(relay.Message{From: a, To: b, Data: payload.Of(i)}))
	}
	err := r.Send(relay.Message{From: a, To: relay.PID{ID: 99}})
	require.ErrorIs(t, err, errUnknownPID)
	assert.Contains(t, err.Error(), "<0.99>")

	got := r.(*mailboxes).boxes[b]
	require.Len(t, got, 3)
	for i, msg := range got {
		n, err := payload.As[int](msg.Data.(payload.Payload))
		require.NoError(t, err)
		assert.Equal(t, i, n, "messages from one sender arrive in order")
	}
}

func TestMessageString(t *testing.T) {
	long := strings.Repeat("é", 40) // 80 bytes: cut at a rune boundary
	tests := []struct {
		name string
		msg  relay.Message
		want string
	}{
		{"empty", relay.Message{}, "<0.0> -> <0.0> <nil>"},
		{"from outside", relay.Message{To: relay.PID{ID: 2}, Data: 1}, "<0.0> -> <0.2> 1"},
		{"payload", relay.Message{From: relay.PID{ID: 1}, To: relay.PID{Node: 3, ID: 2}, Data: payload.Of("a")}, "<0.1> -> <3.2> go:string(a)"},
		{
			"returned",
			relay.Message{From: relay.PID{ID: 2}, To: relay.PID{ID: 1}, Data: 7, Err: errors.New("gone")},
			"<0.2> -> <0.1> undelivered (gone): 7",
		},
		{"long body", relay.Message{Data: long}, "<0.0> -> <0.0> " + strings.Repeat("é", 32) + "..."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.msg.String())
		})
	}
}

func TestMessageIsBounce(t *testing.T) {
	assert.False(t, relay.Message{}.IsBounce(), "the zero Message")
	assert.False(t, relay.Message{Data: 1}.IsBounce())
	assert.True(t, relay.Message{Err: errors.New("x")}.IsBounce())
}

// TestMessageStringCut pins where String cuts a long body: a body of up to
// 64 bytes is shown whole, a longer one is cut to at most 64 bytes, at a
// rune boundary, and marked with "...". A body that is not valid UTF-8
// keeps its first 64 bytes too: looking for a rune boundary backs off no
// further than a rune could reach.
func TestMessageStringCut(t *testing.T) {
	const prefix = "<0.0> -> <0.0> "
	tests := []struct {
		name string
		data string
		want string
	}{
		{"64 bytes", strings.Repeat("a", 64), strings.Repeat("a", 64)},
		{"65 bytes", strings.Repeat("a", 65), strings.Repeat("a", 64) + "..."},
		{"4-byte rune across the cut", strings.Repeat("a", 62) + "😀" + "b", strings.Repeat("a", 62) + "..."},
		{"4-byte rune ending at the cut", strings.Repeat("a", 60) + "😀" + "b", strings.Repeat("a", 60) + "😀..."},
		{"invalid UTF-8", strings.Repeat("\x80", 100), strings.Repeat("\x80", 64) + "..."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, prefix+tt.want, relay.Message{Data: tt.data}.String())
		})
	}
}

// TestMessageStringOneLine: String is for logs, so it writes one line of
// bounded length whatever the error and the body say: control characters
// in either (a newline, a carriage return, a tab) are written as Go
// escapes, and an error's text longer than 128 bytes is cut, at a rune
// boundary, and marked with "...", as a long body is at 64.
func TestMessageStringOneLine(t *testing.T) {
	from, to := relay.PID{ID: 2}, relay.PID{ID: 1}
	tests := []struct {
		name string
		msg  relay.Message
		want string
	}{
		{
			"newline in the error",
			relay.Message{From: from, To: to, Data: 7, Err: errors.New("gone\nfake: <0.9> -> <0.1> 8")},
			`<0.2> -> <0.1> undelivered (gone\nfake: <0.9> -> <0.1> 8): 7`,
		},
		{
			"control characters in the body",
			relay.Message{From: from, To: to, Data: "a\r\nb\tc\x00d\u0085e\u2028f"},
			`<0.2> -> <0.1> a\r\nb\tc\x00d\u0085e\u2028f`,
		},
		{
			"long error",
			relay.Message{From: from, To: to, Data: 7, Err: errors.New(strings.Repeat("é", 100))},
			"<0.2> -> <0.1> undelivered (" + strings.Repeat("é", 64) + "...): 7",
		},
		{
			"error of 128 bytes",
			relay.Message{From: from, To: to, Data: 7, Err: errors.New(strings.Repeat("x", 128))},
			"<0.2> -> <0.1> undelivered (" + strings.Repeat("x", 128) + "): 7",
		},
		{
			"long body of newlines",
			relay.Message{Data: strings.Repeat("\n", 100)},
			"<0.0> -> <0.0> " + strings.Repeat(`\n`, 64) + "...",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.msg.String()
			assert.Equal(t, tt.want, got)
			assert.NotContains(t, got, "\n", "one line")
		})
	}
}

// TestMessageJSON: a Message marshals to JSON with its error as its text
// (null when there is none), not as the empty object encoding/json makes
// of an error interface, so JSON logs keep why a message came back. The
// PIDs are their text and a payload body what it holds.
func TestMessageJSON(t *testing.T) {
	tests := []struct {
		name string
		msg  relay.Message
		want string
	}{
		{"zero", relay.Message{}, `{"From":"<0.0>","To":"<0.0>","Data":null,"Err":null}`},
		{
			"message",
			relay.Message{From: relay.PID{ID: 1}, To: relay.PID{Node: 3, ID: 2}, Data: payload.Of(map[string]int{"n": 1})},
			`{"From":"<0.1>","To":"<3.2>","Data":{"n":1},"Err":null}`,
		},
		{
			"returned",
			relay.Message{From: relay.PID{ID: 2}, To: relay.PID{ID: 1}, Data: "hi", Err: fmt.Errorf("gone: %w", errUnknownPID)},
			`{"From":"<0.2>","To":"<0.1>","Data":"hi","Err":"gone: mailboxes: unknown PID"}`,
		},
		{
			"an error's text is whole and escaped",
			relay.Message{Err: errors.New("line 1\nline 2 " + strings.Repeat("x", 200))},
			`{"From":"<0.0>","To":"<0.0>","Data":null,"Err":"line 1\nline 2 ` + strings.Repeat("x", 200) + `"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			require.NoError(t, enc.Encode(tt.msg))
			assert.Equal(t, tt.want+"\n", b.String())
			// encoding/json.Marshal gives the same, with < and > escaped.
			got, err := json.Marshal(tt.msg)
			require.NoError(t, err)
			assert.JSONEq(t, tt.want, string(got))
		})
	}
	t.Run("a body JSON cannot encode", func(t *testing.T) {
		_, err := json.Marshal(relay.Message{Data: make(chan int)})
		var unsupported *json.UnsupportedTypeError
		require.ErrorAs(t, err, &unsupported)
	})
}

// TestValuesConcurrentReads: PID and Message are plain values, so any
// number of goroutines may read one and call its methods at once. Run with
// -race, this fails if a method writes to its value (a cached text, say).
func TestValuesConcurrentReads(t *testing.T) {
	pid := relay.PID{Node: 3, ID: 42}
	msg := relay.Message{From: pid, To: relay.PID{ID: 7}, Data: strings.Repeat("x", 100), Err: errors.New("gone")}
	wantPID, wantMsg := pid.String(), msg.String()
	const readers = 8
	failures := make(chan string, readers)
	var wg sync.WaitGroup
	for range readers {
		wg.Go(func() {
			for range 100 {
				text, _ := pid.MarshalText()
				appended, _ := pid.AppendText(nil)
				parsed, err := relay.Parse(wantPID)
				switch {
				case pid.String() != wantPID, string(text) != wantPID, string(appended) != wantPID:
					failures <- "a PID's text changed"
					return
				case err != nil || parsed != pid || pid.IsZero():
					failures <- "a PID read differently"
					return
				case msg.String() != wantMsg || !msg.IsBounce():
					failures <- "a Message read differently"
					return
				}
			}
		})
	}
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Error(f)
	}
}

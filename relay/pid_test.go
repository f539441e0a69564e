package relay_test

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/relay"
)

// PIDs must be usable as map keys; this fails to compile otherwise.
var _ = map[relay.PID]struct{}{}

func TestPIDSize(t *testing.T) {
	assert.Equal(t, uintptr(16), unsafe.Sizeof(relay.PID{}))
}

func TestPIDIsZero(t *testing.T) {
	assert.True(t, relay.PID{}.IsZero())
	assert.False(t, relay.PID{ID: 1}.IsZero())
	assert.False(t, relay.PID{Node: 1}.IsZero())
}

var validPIDs = []struct {
	pid  relay.PID
	text string
}{
	{relay.PID{}, "<0.0>"},
	{relay.PID{ID: 42}, "<0.42>"},
	{relay.PID{Node: 1, ID: 1}, "<1.1>"},
	{relay.PID{Node: 10, ID: 100}, "<10.100>"},
	{relay.PID{Node: 7}, "<7.0>"},
	{relay.PID{Node: math.MaxUint32, ID: 1}, "<4294967295.1>"},
	{relay.PID{Node: 0, ID: math.MaxUint64}, "<0.18446744073709551615>"},
	{relay.PID{Node: math.MaxUint32, ID: math.MaxUint64}, "<4294967295.18446744073709551615>"},
}

func TestPIDText(t *testing.T) {
	for _, tt := range validPIDs {
		t.Run(tt.text, func(t *testing.T) {
			assert.Equal(t, tt.text, tt.pid.String())

			got, err := relay.Parse(tt.text)
			require.NoError(t, err)
			assert.Equal(t, tt.pid, got)
			assert.Equal(t, tt.pid, relay.MustParse(tt.text))

			text, err := tt.pid.MarshalText()
			require.NoError(t, err)
			assert.Equal(t, tt.text, string(text))

			appended, err := tt.pid.AppendText([]byte("pid="))
			require.NoError(t, err)
			assert.Equal(t, "pid="+tt.text, string(appended))

			var un relay.PID
			require.NoError(t, un.UnmarshalText([]byte(tt.text)))
			assert.Equal(t, tt.pid, un)
		})
	}
}

func TestParseInvalid(t *testing.T) {
	tests := []struct {
		name string
		in   string
	}{
		{"empty", ""},
		{"open bracket only", "<"},
		{"close bracket only", ">"},
		{"brackets only", "<>"},
		{"dot only", "<.>"},
		{"missing id", "<0.>"},
		{"missing node", "<.0>"},
		{"missing dot", "<42>"},
		{"no brackets", "0.42"},
		{"missing close bracket", "<0.42"},
		{"missing open bracket", "0.42>"},
		{"doubled brackets", "<<0.42>>"},
		{"square brackets", "[0.42]"},
		{"comma", "<0,42>"},
		{"two dots", "<0.4.2>"},
		{"adjacent dots", "<0..42>"},
		{"leading zero node", "<00.42>"},
		{"leading zero id", "<0.042>"},
		{"zero id padded", "<0.00>"},
		{"plus node", "<+1.42>"},
		{"plus id", "<1.+42>"},
		{"minus node", "<-1.42>"},
		{"minus id", "<1.-42>"},
		{"space inside", "< 1.42>"},
		{"space before close", "<1.42 >"},
		{"space around dot", "<1 . 42>"},
		{"leading space", " <1.42>"},
		{"trailing space", "<1.42> "},
		{"trailing newline", "<1.42>\n"},
		{"trailing text", "<1.42>x"},
		{"leading text", "pid<1.42>"},
		{"hex", "<0x1.42>"},
		{"underscore", "<1_0.42>"},
		{"exponent", "<1.4e2>"},
		{"letters", "<a.b>"},
		{"non-ASCII digit", "<١.42>"},
		{"fullwidth digit", "<１.42>"},
		{"NUL", "<1.4\x002>"},
		{"node overflow", "<4294967296.1>"},
		{"node far overflow", "<99999999999.1>"},
		{"id overflow", "<1.18446744073709551616>"},
		{"id far overflow", "<1.99999999999999999999>"},
		{"id far too long", "<1.100000000000000000000000>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := relay.Parse(tt.in)
			require.ErrorIs(t, err, relay.ErrInvalidPID)
			assert.Equal(t, relay.PID{}, got)
			assert.True(t, strings.HasPrefix(err.Error(), "relay: "), "error %q lacks the package prefix", err)
			assert.Contains(t, err.Error(), strconv.Quote(tt.in), "the error quotes the input")

			// UnmarshalText rejects the same input, and leaves its receiver alone.
			un := relay.PID{Node: 3, ID: 9}
			unErr := un.UnmarshalText([]byte(tt.in))
			require.ErrorIs(t, unErr, relay.ErrInvalidPID)
			assert.Equal(t, err.Error(), unErr.Error())
			assert.Equal(t, relay.PID{Node: 3, ID: 9}, un)

			assert.Panics(t, func() { relay.MustParse(tt.in) })
		})
	}
}

func TestParseErrorQuotesLongInputShortly(t *testing.T) {
	in := "<1." + strings.Repeat("9", 10000) + ">"
	_, err := relay.Parse(in)
	require.ErrorIs(t, err, relay.ErrInvalidPID)
	assert.Less(t, len(err.Error()), 200, "error: %s", err)
	assert.Contains(t, err.Error(), strconv.Quote(in[:64]))
	assert.Contains(t, err.Error(), "10004 bytes")
}

// TestParseErrorQuotesLongInputAtRuneBoundary: the quoted part of a long
// input ends at a rune boundary, so that the error shows no byte the input
// does not have; it still quotes its first 64 bytes, give or take the
// bytes of one rune.
func TestParseErrorQuotesLongInputAtRuneBoundary(t *testing.T) {
	in := "<1." + strings.Repeat("é", 40) + ">" // é is 2 bytes: byte 64 is the middle of one
	_, err := relay.Parse(in)
	require.ErrorIs(t, err, relay.ErrInvalidPID)
	assert.Contains(t, err.Error(), strconv.Quote(in[:63])+"…")
	assert.NotContains(t, err.Error(), `\x`, "the quote shows a byte the input does not have")
}

// TestMustParsePanicValue: MustParse panics with Parse's error itself, so
// that code which recovers can test it with errors.Is, and the panic
// message the runtime prints is that error's text.
func TestMustParsePanicValue(t *testing.T) {
	_, want := relay.Parse("<x>")
	require.Error(t, want)
	defer func() {
		r := recover()
		err, ok := r.(error)
		require.True(t, ok, "panic value %#v is not an error", r)
		require.ErrorIs(t, err, relay.ErrInvalidPID)
		assert.Equal(t, want.Error(), err.Error(), "Parse's error")
		assert.True(t, strings.HasPrefix(err.Error(), "relay: "), "panic %q lacks the package prefix", err)
		assert.Contains(t, err.Error(), `"<x>"`)
	}()
	relay.MustParse("<x>")
	t.Fatal("MustParse did not panic")
}

func TestPIDJSON(t *testing.T) {
	type envelope struct {
		From relay.PID  `json:"from"`
		To   *relay.PID `json:"to,omitempty"`
	}
	to := relay.PID{Node: 2, ID: 9}

	t.Run("struct field", func(t *testing.T) {
		in := envelope{From: relay.PID{ID: 42}, To: &to}
		b, err := json.Marshal(in)
		require.NoError(t, err)
		assert.JSONEq(t, `{"from":"<0.42>","to":"<2.9>"}`, string(b))

		var out envelope
		require.NoError(t, json.Unmarshal(b, &out))
		assert.Equal(t, in, out)
	})
	t.Run("zero field", func(t *testing.T) {
		b, err := json.Marshal(envelope{})
		require.NoError(t, err)
		assert.JSONEq(t, `{"from":"<0.0>"}`, string(b))
	})
	t.Run("map keys", func(t *testing.T) {
		in := map[relay.PID]int{{ID: 1}: 10, {Node: 4294967295, ID: 2}: 20}
		b, err := json.Marshal(in)
		require.NoError(t, err)
		assert.JSONEq(t, `{"<0.1>":10,"<4294967295.2>":20}`, string(b))

		var out map[relay.PID]int
		require.NoError(t, json.Unmarshal(b, &out))
		assert.Equal(t, in, out)
	})
	t.Run("invalid value", func(t *testing.T) {
		var out envelope
		err := json.Unmarshal([]byte(`{"from":"<0.042>"}`), &out)
		assert.ErrorIs(t, err, relay.ErrInvalidPID)
	})
	t.Run("invalid key", func(t *testing.T) {
		var out map[relay.PID]int
		err := json.Unmarshal([]byte(`{"0.1":1}`), &out)
		assert.ErrorIs(t, err, relay.ErrInvalidPID)
	})
	t.Run("not a string", func(t *testing.T) {
		var out envelope
		err := json.Unmarshal([]byte(`{"from":42}`), &out)
		var typeErr *json.UnmarshalTypeError
		assert.ErrorAs(t, err, &typeErr)
	})
}

// Sinks keep the compiler from discarding the work measured below.
var (
	sinkPID    relay.PID
	sinkString string
	sinkBytes  []byte
	sinkErr    error
)

func TestPIDAllocations(t *testing.T) {
	pid := relay.PID{Node: math.MaxUint32, ID: math.MaxUint64}
	text := pid.String()
	textBytes := []byte(text)
	// AppendText's doc: room for 33 bytes is room for any PID's text.
	require.Len(t, text, 33, "the longest PID text")
	buf := make([]byte, 0, 33)
	prefixed := append(make([]byte, 0, 4+33), "pid="...)
	tests := []struct {
		name string
		want float64
		f    func()
	}{
		{"AppendText", 0, func() { sinkBytes, sinkErr = pid.AppendText(buf[:0]) }},
		{"AppendText after a prefix", 0, func() { sinkBytes, sinkErr = pid.AppendText(prefixed) }},
		{"Parse", 0, func() { sinkPID, sinkErr = relay.Parse(text) }},
		{"UnmarshalText", 0, func() { sinkErr = sinkPID.UnmarshalText(textBytes) }},
		{"String", 1, func() { sinkString = pid.String() }},
		{"MarshalText", 1, func() { sinkBytes, sinkErr = pid.MarshalText() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, testing.AllocsPerRun(100, tt.f))
		})
	}
}

func FuzzParse(f *testing.F) {
	for _, tt := range validPIDs {
		f.Add(tt.text)
	}
	for _, s := range []string{"", "<>", "<0.042>", "<+1.1>", "<4294967296.1>", "<1.18446744073709551616>", "<1.1>x", "<١.1>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		pid, err := relay.Parse(s)
		var un relay.PID
		unErr := un.UnmarshalText([]byte(s))
		if err != nil {
			require.ErrorIs(t, err, relay.ErrInvalidPID)
			require.Error(t, unErr, "UnmarshalText accepts what Parse rejects")
			return
		}
		require.Equal(t, s, pid.String(), "Parse accepted a non-canonical form")
		require.NoError(t, unErr)
		require.Equal(t, pid, un)
	})
}

func FuzzPIDRoundTrip(f *testing.F) {
	f.Add(uint32(0), uint64(0))
	f.Add(uint32(0), uint64(42))
	f.Add(uint32(math.MaxUint32), uint64(math.MaxUint64))
	f.Fuzz(func(t *testing.T, node uint32, id uint64) {
		pid := relay.PID{Node: node, ID: id}
		got, err := relay.Parse(pid.String())
		require.NoError(t, err)
		require.Equal(t, pid, got)

		text, err := pid.MarshalText()
		require.NoError(t, err)
		var un relay.PID
		require.NoError(t, un.UnmarshalText(text))
		require.Equal(t, pid, un)
	})
}

func BenchmarkPIDString(b *testing.B) {
	pid := relay.PID{Node: 3, ID: 123456789}
	b.ReportAllocs()
	for b.Loop() {
		sinkString = pid.String()
	}
}

func BenchmarkPIDAppendText(b *testing.B) {
	pid := relay.PID{Node: 3, ID: 123456789}
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		sinkBytes, sinkErr = pid.AppendText(buf[:0])
	}
}

func BenchmarkParse(b *testing.B) {
	b.Run("short", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sinkPID, sinkErr = relay.Parse("<3.123456789>")
		}
	})
	b.Run("max", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sinkPID, sinkErr = relay.Parse("<4294967295.18446744073709551615>")
		}
	})
}

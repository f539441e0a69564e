package remote

import (
	"testing"
)

// FuzzDecodeBatch feeds the batch decoder arbitrary bytes. It must never
// panic; a batch it accepts names only processes of the receiving node as
// recipients and of the sending node as senders, and encodes back to the
// same frames.
func FuzzDecodeBatch(f *testing.F) {
	all := tFrames()
	f.Add(tEncode(all, 1))
	for i := range all {
		f.Add(tEncode(all[i:i+1], uint64(i)))
	}
	marker := make([]byte, headerLen)
	writeHeader(marker, tSender, 0, 9, flagSync)
	f.Add(marker)
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := readHeader(data); err != nil {
			return
		}
		var d decoder
		frames, err := d.decode(data, tSender, tSelf)
		if err != nil {
			return
		}
		for i, fr := range frames {
			if !fr.to.IsZero() && fr.to.Node != tSelf {
				t.Fatalf("frame %d names recipient %v of another node", i, fr.to)
			}
			if !fr.from.IsZero() && fr.from.Node != tSender {
				t.Fatalf("frame %d names sender %v of another node", i, fr.from)
			}
		}
		// Copy what the second decode would otherwise overwrite.
		first := append([]frame(nil), frames...)
		again := tEncode(first, 1)
		var d2 decoder
		got, err := d2.decode(again, tSender, tSelf)
		if err != nil {
			t.Fatalf("re-encoded batch does not decode: %v", err)
		}
		if len(got) != len(first) {
			t.Fatalf("re-encoded batch has %d frames, want %d", len(got), len(first))
		}
		for i := range got {
			if !framesEqual(got[i], first[i]) {
				t.Fatalf("frame %d: re-encoded %+v, want %+v", i, got[i], first[i])
			}
		}
	})
}

// FuzzDecodeControl feeds the control decoder arbitrary bytes: it must
// never panic, and a message it accepts encodes back to itself.
func FuzzDecodeControl(f *testing.F) {
	for _, m := range []ctlMsg{
		{typ: ctlHello, sender: 5, flags: flagDirect, name: "a"},
		{typ: ctlHeartbeat, sender: 5, name: "b"},
		{typ: ctlGrant, sender: 5, seq: 300},
		{typ: ctlProbe, sender: 1},
	} {
		f.Add(appendCtl(nil, m))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decodeCtl(data)
		if err != nil {
			return
		}
		got, err := decodeCtl(appendCtl(nil, m))
		if err != nil || got != m {
			t.Fatalf("re-encoded %+v decodes to %+v, %v", m, got, err)
		}
	})
}

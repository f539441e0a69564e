package prefetch

import (
	"bytes"
	"testing"
	"unsafe"
)

// The prefetches neither fault, whatever the address, nor change the
// memory they ask for: a wrong encoding of the bytes written out in the
// assembly would do one or the other.
func TestPrefetchesChangeNothing(t *testing.T) {
	buf := make([]byte, 256)
	for i := range buf {
		buf[i] = byte(i*7 + 3)
	}
	want := bytes.Clone(buf)
	Write2(unsafe.Pointer(&buf[0]))
	Write2(unsafe.Pointer(&buf[100]))
	Lines2(unsafe.Pointer(&buf[0]), unsafe.Pointer(&buf[130]))
	Write2(nil)
	Lines2(nil, nil)
	if !bytes.Equal(buf, want) {
		t.Fatalf("memory changed by a prefetch:\n got %v\nwant %v", buf, want)
	}
}

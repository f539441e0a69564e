package workload

import "encoding/binary"

// SeqSize is the size of the sequence-number bodies of the remote
// workloads: every message that crosses between nodes carries its
// number, so the receiver checks that none is lost, repeated or out of
// order.
const SeqSize = 8

// PutSeq writes n into the first [SeqSize] bytes of b.
func PutSeq(b []byte, n uint64) { binary.LittleEndian.PutUint64(b, n) }

// Seq reads the number written by [PutSeq]; ok is false if b is not
// [SeqSize] bytes long.
func Seq(b []byte) (n uint64, ok bool) {
	if len(b) != SeqSize {
		return 0, false
	}
	return binary.LittleEndian.Uint64(b), true
}

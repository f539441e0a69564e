package globalq

import "testing"

// The benchmarks come in pairs with a buffered channel, the structure a Go
// programmer would otherwise reach for, so one run compares them side by
// side. The queue is warmed up first so that no run measures growth.

const benchBatch = 64

func warmQueue(q *Queue[int]) {
	xs := make([]*int, 1024)
	for i := range xs {
		xs[i] = new(int)
	}
	q.PushBatch(xs)
	q.PopInto(xs)
}

func BenchmarkPushPop(b *testing.B) {
	var q Queue[int]
	warmQueue(&q)
	x := new(int)
	for b.Loop() {
		q.Push(x)
		q.Pop()
	}
}

func BenchmarkPushPopParallel(b *testing.B) {
	var q Queue[int]
	warmQueue(&q)
	b.RunParallel(func(pb *testing.PB) {
		x := new(int)
		for pb.Next() {
			q.Push(x)
			q.Pop()
		}
	})
}

// BenchmarkPushBatchPopInto reports the cost per item of moving batches of
// benchBatch items through the queue.
func BenchmarkPushBatchPopInto(b *testing.B) {
	var q Queue[int]
	warmQueue(&q)
	xs := make([]*int, benchBatch)
	for i := range xs {
		xs[i] = new(int)
	}
	dst := make([]*int, benchBatch)
	b.ResetTimer()
	for i := 0; i < b.N; i += benchBatch {
		q.PushBatch(xs)
		q.PopInto(dst)
	}
}

func BenchmarkChanSendRecv(b *testing.B) {
	ch := make(chan *int, 1024)
	x := new(int)
	for b.Loop() {
		ch <- x
		<-ch
	}
}

func BenchmarkChanSendRecvParallel(b *testing.B) {
	ch := make(chan *int, 1024)
	b.RunParallel(func(pb *testing.PB) {
		x := new(int)
		for pb.Next() {
			ch <- x
			<-ch
		}
	})
}

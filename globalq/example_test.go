package globalq_test

import (
	"fmt"

	"github.com/procsched/scheduler/globalq"
)

type task struct{ name string }

func Example() {
	var q globalq.Queue[task] // the zero value is an empty queue

	q.Push(&task{"submit A"})
	q.PushBatch([]*task{{"submit B"}, {"submit C"}, {"submit D"}})
	fmt.Println("queued:", q.Len())

	// A worker that finds work takes one item, then a batch for its deque.
	first := q.Pop()
	fmt.Println("run now:", first.name)

	batch := make([]*task, 2)
	n := q.PopInto(batch)
	for _, t := range batch[:n] {
		fmt.Println("to the deque:", t.name)
	}
	fmt.Println("left:", q.Len(), "empty:", q.Empty())

	q.Pop()
	fmt.Println("empty:", q.Empty(), "pop:", q.Pop())
	// Output:
	// queued: 4
	// run now: submit A
	// to the deque: submit B
	// to the deque: submit C
	// left: 1 empty: false
	// empty: true pop: <nil>
}

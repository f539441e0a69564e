package deque_test

import (
	"fmt"

	"github.com/procsched/scheduler/deque"
)

func Example() {
	owner := deque.New[string](2)
	for _, s := range []string{"a", "b", "c", "d"} {
		owner.PushBottom(&s)
	}
	// The owner works LIFO, thieves take the oldest items.
	fmt.Println("owner pops:", *owner.PopBottom())
	fmt.Println("thief steals:", *owner.Steal())

	thief := deque.New[string](2)
	n := owner.StealHalfInto(thief)
	fmt.Println("stole half:", n, "item(s), first", *thief.PopBottom())
	fmt.Println("left:", owner.Len())
	// Output:
	// owner pops: d
	// thief steals: a
	// stole half: 1 item(s), first b
	// left: 1
}

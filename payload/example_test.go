package payload_test

import (
	"errors"
	"fmt"

	"github.com/procsched/scheduler/payload"
)

// An in-process value passes by reference: the reader gets the same pointer.
func ExampleOf() {
	type order struct{ ID int }
	o := &order{ID: 7}

	p := payload.Of(o)
	got, err := payload.As[*order](p)
	fmt.Println(p.Format(), got == o, got.ID, err)
	// Output: go true 7 <nil>
}

func ExampleAs() {
	n, err := payload.As[int](payload.Of(42))
	fmt.Println(n, err)

	// No conversions are guessed for Go values.
	_, err = payload.As[string](payload.Of(42))
	fmt.Println(errors.Is(err, payload.ErrTypeMismatch))

	// JSON is unmarshalled into the requested type.
	m, err := payload.As[map[string]int](payload.RawJSON([]byte(`{"a":1}`)))
	fmt.Println(m, err)
	// Output:
	// 42 <nil>
	// true
	// map[a:1] <nil>
}

func ExampleJSON() {
	p, err := payload.JSON(struct {
		Name string `json:"name"`
	}{"ada"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p)
	// Output: json:{"name":"ada"}
}

func ExamplePayload_Decode() {
	var s string
	err := payload.Bytes([]byte("raw")).Decode(&s)
	fmt.Printf("%q %v\n", s, err)

	var n int
	err = payload.Payload{}.Decode(&n)
	fmt.Println(errors.Is(err, payload.ErrNoValue))
	// Output:
	// "raw" <nil>
	// true
}

// Encode and FromWire carry a payload across a process boundary; Go values
// travel as JSON.
func ExamplePayload_Encode() {
	type point struct{ X, Y int }
	format, wire, err := payload.Of(point{1, 2}).Encode()
	fmt.Println(format, string(wire), err)

	back, err := payload.FromWire(format, wire)
	if err != nil {
		fmt.Println(err)
		return
	}
	pt, err := payload.As[point](back)
	fmt.Println(pt, err)
	// Output:
	// json {"X":1,"Y":2} <nil>
	// {1 2} <nil>
}

func ExamplePayloads_Decode() {
	input := payload.Values("resize", 640, 480)

	var (
		op            string
		width, height int
	)
	if err := input.Decode(&op, &width, &height); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(op, width, height)

	err := input.Decode(&op, &width)
	fmt.Println(err)
	// Output:
	// resize 640 480
	// payload: wrong number of targets: 3 payloads, 2 targets
}

func ExamplePayloads_At() {
	input := payload.Values("only one")
	fmt.Println(input.At(0), input.At(1).IsZero())
	// Output: go:string(only one) true
}

package relay_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

func ExamplePID() {
	pid := relay.PID{Node: 0, ID: 42}
	fmt.Println(pid, pid.IsZero(), relay.PID{}.IsZero())

	// PIDs are comparable, so they key maps directly, also in JSON.
	// json.Marshal escapes the brackets as it does all of <, > and &;
	// an Encoder can be told not to.
	seen := map[relay.PID]int{pid: 1}
	b, _ := json.Marshal(seen)
	fmt.Println(string(b))
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(seen)
	// Output:
	// <0.42> false true
	// {"\u003c0.42\u003e":1}
	// {"<0.42>":1}
}

func ExampleParse() {
	pid, err := relay.Parse("<1.42>")
	fmt.Println(pid.Node, pid.ID, err)

	_, err = relay.Parse("<1.042>")
	fmt.Println(errors.Is(err, relay.ErrInvalidPID))
	fmt.Println(err)
	// Output:
	// 1 42 <nil>
	// true
	// relay: invalid PID "<1.042>": id has a leading zero
}

func ExampleMessage() {
	msg := relay.Message{
		From: relay.MustParse("<0.1>"),
		To:   relay.MustParse("<0.2>"),
		Data: payload.Of("resize"),
	}
	fmt.Println(msg)
	// Output: <0.1> -> <0.2> go:string(resize)
}

package schedhttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/procsched/scheduler"
	"github.com/procsched/scheduler/schedhttp"
)

func ExampleHandler() {
	s, err := scheduler.New(scheduler.WithWorkers(2))
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())

	mux := http.NewServeMux()
	mux.Handle("/debug/scheduler", schedhttp.Handler(s))
	// A service would also publish the figures at /debug/vars:
	//	expvar.Publish("scheduler", schedhttp.Var(s))

	req := httptest.NewRequest(http.MethodGet, "/debug/scheduler?format=json", nil)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	var st scheduler.Stats
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		panic(err)
	}
	fmt.Println(rec.Code, rec.Header().Get("Content-Type"))
	fmt.Println("workers:", st.Workers, "live:", st.Processes.Live)
	// Output:
	// 200 application/json
	// workers: 2 live: 0
}

func ExampleVar() {
	s, err := scheduler.New(scheduler.WithWorkers(3))
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())

	// A service publishes it once: expvar.Publish("scheduler", schedhttp.Var(s)).
	v := schedhttp.Var(s)
	var st scheduler.Stats
	if err := json.Unmarshal([]byte(v.String()), &st); err != nil {
		panic(err)
	}
	fmt.Println("workers:", st.Workers)
	// Output:
	// workers: 3
}

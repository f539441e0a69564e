package schedhttp

import (
	"bytes"
	"reflect"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler"
)

// Tests of the debug page's template, rendered from a Stats made up for
// the purpose rather than taken from a running scheduler.

// setFigures gives every integer in v, a struct, a value of its own,
// counting up from *next, and returns the name of each figure by its
// value.
func setFigures(v reflect.Value, path string, next *int64, names map[int64]string) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			setFigures(v.Field(i), path+"."+v.Type().Field(i).Name, next, names)
		}
	case reflect.Slice:
		for i := range v.Len() {
			setFigures(v.Index(i), path+"["+strconv.Itoa(i)+"]", next, names)
		}
	case reflect.Int, reflect.Int64:
		v.SetInt(*next)
		names[*next] = path
		*next++
	case reflect.Uint64:
		v.SetUint(uint64(*next))
		names[*next] = path
		*next++
	default:
		panic("setFigures: a Stats field of kind " + v.Kind().String() + " at " + path)
	}
}

// TestPageShowsEveryFigure: the page renders the Stats, as Handler's doc
// says, so every figure of it is on the page. Each figure gets a value
// that no other has and that nothing else on the page shows, so a figure
// the template leaves out, or shows in another's place, is found by its
// value.
func TestPageShowsEveryFigure(t *testing.T) {
	st := scheduler.Stats{WorkerQueues: make([]int, 3)}
	names := map[int64]string{}
	next := int64(10001)
	setFigures(reflect.ValueOf(&st).Elem(), "Stats", &next, names)
	require.Greater(t, len(names), 40, "figures set")

	var buf bytes.Buffer
	require.NoError(t, debugTemplate.Execute(&buf, &debugPage{Stats: st, Max: maxListed}))
	page := buf.String()
	var wrong []string
	for v := int64(10001); v < next; v++ {
		shown := regexp.MustCompile(`[^0-9]` + strconv.FormatInt(v, 10) + `[^0-9]`)
		if n := len(shown.FindAllString(page, -1)); n != 1 {
			wrong = append(wrong, names[v]+" shown "+strconv.Itoa(n)+" times")
		}
	}
	require.Empty(t, wrong, "every figure shown once on the page")
}

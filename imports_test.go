package scheduler_test

import (
	"go/build"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const modulePath = "github.com/procsched/scheduler"

// TestLinksNoHTTP: the package links no HTTP code and registers no
// handlers, as its doc says (schedhttp is a package of its own for that),
// and depends on nothing outside this module but the standard library, as
// the README says. It follows the imports of the package's non-test files,
// as the build of a program would, through this module's packages and the
// standard library's: net/http, or expvar (which registers a handler on
// the default mux when linked), anywhere in them fails it, and so does an
// import from another module.
func TestLinksNoHTTP(t *testing.T) {
	banned := []string{"net/http", "expvar"}
	type item struct{ path, srcDir string }
	seen := map[string]bool{modulePath: true}
	// from[p] is the package that imported p first, to show the path.
	from := map[string]string{}
	var outside []string
	queue := []item{{modulePath, "."}}
	for len(queue) > 0 {
		it := queue[0]
		queue = queue[1:]
		pkg, err := build.Import(it.path, it.srcDir, 0)
		require.NoError(t, err, "import %s", it.path)
		if !pkg.Goroot && pkg.ImportPath != modulePath && !strings.HasPrefix(pkg.ImportPath, modulePath+"/") {
			outside = append(outside, it.path+" (imported by "+from[it.path]+")")
			continue
		}
		for _, imp := range pkg.Imports {
			if imp == "C" || imp == "unsafe" || seen[imp] {
				continue
			}
			seen[imp] = true
			from[imp] = it.path
			queue = append(queue, item{imp, pkg.Dir})
		}
	}
	for _, b := range banned {
		if seen[b] {
			chain := []string{b}
			for p := from[b]; p != ""; p = from[p] {
				chain = append(chain, p)
			}
			slices.Reverse(chain)
			t.Errorf("the package links %s: %s", b, strings.Join(chain, " -> "))
		}
	}
	require.Empty(t, outside, "packages from outside the module and the standard library")
	require.True(t, seen["log/slog"], "the walk did not follow the imports (log/slog, which WithLogger uses, not seen)")
}

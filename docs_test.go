package scheduler_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDesignNamesEveryFile: the table of docs/design.md that says where
// each concept of the root package lives names every source file of the
// package (the package doc, doc.go, aside).
func TestDesignNamesEveryFile(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("docs", "design.md"))
	require.NoError(t, err)
	text := string(doc)
	start := strings.Index(text, "\n## Where things are\n")
	require.NotEqual(t, -1, start, "docs/design.md has no section \"Where things are\"")
	section := text[start+1:]
	if end := strings.Index(section[3:], "\n## "); end != -1 {
		section = section[:end+3]
	}
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "doc.go" {
			continue
		}
		require.Contains(t, section, "`"+f+"`", "docs/design.md, \"Where things are\", does not name %s", f)
	}
}

package scheduler_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	scheduler "github.com/procsched/scheduler"
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

// docSection returns the section of doc that begins with the heading
// line head, up to the next heading of its level or above.
func docSection(t *testing.T, doc, head string) string {
	t.Helper()
	text, err := os.ReadFile(filepath.FromSlash(doc))
	require.NoError(t, err)
	lines := strings.Split(string(text), "\n")
	level := strings.IndexByte(head, ' ')
	for i, l := range lines {
		if l != head {
			continue
		}
		end := len(lines)
		for j := i + 1; j < len(lines); j++ {
			if n := len(lines[j]) - len(strings.TrimLeft(lines[j], "#")); n > 0 && n <= level && strings.HasPrefix(lines[j][n:], " ") {
				end = j
				break
			}
		}
		return strings.Join(lines[i:end], "\n")
	}
	require.Failf(t, "no such heading", "%s has no heading %q", doc, head)
	return ""
}

// TestDesignTransitionsNameTheStates: the table of transitions in
// docs/design.md, "The life of a process", names the states by the
// names State.String gives them, and every state has a row: the design
// speaks of the states a user sees in ProcessInfo.
func TestDesignTransitionsNameTheStates(t *testing.T) {
	section := docSection(t, "docs/design.md", "## The life of a process")
	names := map[string]bool{}
	for st := scheduler.StateReady; st <= scheduler.StateEnded; st++ {
		names[st.String()] = false
	}
	word := regexp.MustCompile(`\b[A-Z][a-z]+\b`)
	rows := 0
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, " | ")
		if !strings.HasPrefix(line, "| ") || len(cells) < 3 || !strings.Contains(cells[0], "→") {
			continue
		}
		rows++
		for _, w := range word.FindAllString(strings.TrimPrefix(cells[0], "| "), -1) {
			_, ok := names[w]
			require.True(t, ok, "docs/design.md: the transition %q names %q, which is no State", cells[0], w)
			names[w] = true
		}
	}
	require.NotZero(t, rows, "docs/design.md: no table of transitions in \"The life of a process\"")
	for name, seen := range names {
		require.True(t, seen, "docs/design.md: no transition names the state %s", name)
	}
}

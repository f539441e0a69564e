package scheduler_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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

// TestDocsQuoteTheConstants: the sizes, bounds, intervals and defaults
// that the design documents quote are the code's. Each row is a phrase of
// a document (spacing aside) and the constant whose value it states: a
// change of either, without the other, fails here.
func TestDocsQuoteTheConstants(t *testing.T) {
	rows := []struct {
		doc, phrase string
		name        string // in scheduler.DocConstants, or an exported one below
		value       int64  // what the phrase says
	}{
		{"docs/dispatch.md", "IDs below `FirstUserCommand` (16)", "FirstUserCommand", 16},
		{"docs/dispatch.md", "one above 65536", "maxCommand", 65536},
		{"docs/design.md", "and at most 1024 (`WithWorkers`)", "maxWorkers", 1024},
		{"docs/design.md", "chunks of 4,096 entries", "chunkSize", 4096},
		{"docs/design.md", "within 16,384 of the list's top", "freeDirtyMax", 16384},
		{"docs/design.md", "at most 256 ended processes per worker", "slotCacheMax", 256},
		{"docs/design.md", "64 per stripe of the IDs cached", "slotBatch", 64},
		{"docs/design.md", "each refilled from the shared list 64 IDs at a time", "slotBatch", 64},
		{"docs/design.md", "one of 16 caches of their own", "counterStripes", 16},
		{"docs/design.md", "go to one of 16 stripes of atomics", "counterStripes", 16},
		{"docs/design.md", "finds 1,024 or more yields its processor once every 64 starts", "yieldBacklog", 1024},
		{"docs/design.md", "finds 1,024 or more yields its processor once every 64 starts", "yieldEvery", 64},
		{"docs/design.md", "takes up to 128 processes from the head of the global queue", "helpBatch*helpRounds", 128},
		{"docs/design.md", "every 61st tick, one process from the global queue", "globalCheckInterval", 61},
		{"docs/design.md", "every 244th tick the oldest process of its own deque", "ownQueueInterval", 244},
		{"docs/design.md", "unless it has taken from it three times in a row", "maxNextRuns", 3},
		{"docs/design.md", "(default cap 128)", "DefaultGlobalBatch", 128},
		{"docs/design.md", "at most the **step budget** (`WithStepBudget`, default 16)", "DefaultStepBudget", 16},
		{"docs/process-model.md", "its step budget (`WithStepBudget`, 16 steps by default)", "DefaultStepBudget", 16},
		{"docs/design.md", "(at most 64 such runs, then the parent steps)", "maxDirectDefers", 64},
		{"docs/design.md", "for each of the 64 newest positions of its deque", "queuedTags", 64},
		{"docs/design.md", "Parents put aside nest, the latest on top, sixteen at most", "maxDeferred", 16},
		{"docs/design.md", "each one steps at most 256 of the worker's turns after its claim", "maxDeferTicks", 256},
		{"docs/design.md", "a worker that has run 1,024 scheduling ticks", "yieldTicks", 1024},
		{"docs/design.md", "when it publishes its counters (every 64 ticks)", "flushTicks", 64},
		{"docs/design.md", "published to atomics every 64 rounds", "flushTicks", 64},
		{"docs/design.md", "mailbox buffer of at most 64 events", "keptInbox", 64},
		{"docs/design.md", "Past 31 the set moves to two maps", "pendingSmallMax", 31},
		{"docs/design.md", "in the same aligned run of 32 as its own", "ctxGens", 32},
		{"docs/design.md", "24 bytes from a slab of sixteen", "valuesCtxSlab", 16},
		{"docs/design.md", "a key's low six bits place it within a block of 64 consecutive slots", "homeBlockBits", 6},
		{"docs/design.md", "before the earliest deadline, at most 32", "timerMaxTicks", 32},
		{"docs/design.md", "only once its timers are 100 µs overdue", "timerStealAfter", int64(100 * time.Microsecond)},
		{"docs/design.md", "Firing takes up to 64 due entries of a shard", "timerBatch", 64},
		{"docs/design.md", "buffer holds more than 256 entries", "timerShrinkMin", 256},
		{"docs/design.md", "has stayed below a quarter of it for a second", "timerShrinkAfter", int64(time.Second)},
	}
	exported := map[string]int64{
		"FirstUserCommand":   int64(scheduler.FirstUserCommand),
		"DefaultGlobalBatch": scheduler.DefaultGlobalBatch,
		"DefaultStepBudget":  scheduler.DefaultStepBudget,
	}
	text := map[string]string{}
	for _, r := range rows {
		if _, ok := text[r.doc]; !ok {
			b, err := os.ReadFile(filepath.FromSlash(r.doc))
			require.NoError(t, err)
			text[r.doc] = strings.Join(strings.Fields(string(b)), " ")
		}
		assert.Contains(t, text[r.doc], strings.Join(strings.Fields(r.phrase), " "), "%s no longer says this", r.doc)
		got, ok := scheduler.DocConstants[r.name]
		if !ok {
			got, ok = exported[r.name]
		}
		require.True(t, ok, "no constant %s", r.name)
		assert.Equal(t, r.value, got, "%s says %q, but %s is %d", r.doc, r.phrase, r.name, got)
	}
}

// TestDesignDefinesItsTerms: the words for the scheduler's own parts
// that design.md, dispatch.md and process-model.md use are defined in
// design.md's Terms, so that a reader of any of them finds what each
// means; a term dropped from there while a document still uses it fails
// here.
func TestDesignDefinesItsTerms(t *testing.T) {
	terms := docSection(t, "docs/design.md", "## Terms")
	var all string
	for _, doc := range []string{"docs/design.md", "docs/dispatch.md", "docs/process-model.md"} {
		b, err := os.ReadFile(filepath.FromSlash(doc))
		require.NoError(t, err)
		all += strings.ToLower(strings.Join(strings.Fields(string(b)), " ")) + "\n"
	}
	for _, term := range []string{
		"record", "slot", "generation", "mailbox", "pending set",
		"sequence number", "completion", "run", "step budget", "tick",
		"next slot", "later slot", "held queue", "claim", "put aside",
		"shard", "watcher", "stopper", "watchdog",
	} {
		if !strings.Contains(all, " "+term+" ") {
			continue
		}
		assert.Contains(t, terms, "**"+term+"**", "docs/design.md, Terms, does not define %q", term)
	}
}

// TestDocsCiteTestsThatExist: every test or benchmark that design.md,
// dispatch.md and process-model.md name, as the evidence of what they
// say, is a function of a test file of the repository, and every source
// file they name exists: a renamed or removed one fails here.
func TestDocsCiteTestsThatExist(t *testing.T) {
	var funcs strings.Builder
	files := map[string]bool{}
	require.NoError(t, filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && strings.HasPrefix(d.Name(), "_") {
			return filepath.SkipDir // the snippets' build directories
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		files[d.Name()] = true
		if strings.HasSuffix(path, "_test.go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			funcs.Write(b)
		}
		return nil
	}))
	cited := regexp.MustCompile("`((?:Test|Benchmark)[A-Z][A-Za-z0-9_]*)`")
	file := regexp.MustCompile("`([a-z0-9_]+\\.go)`")
	for _, doc := range []string{"docs/design.md", "docs/dispatch.md", "docs/process-model.md"} {
		b, err := os.ReadFile(filepath.FromSlash(doc))
		require.NoError(t, err)
		for _, m := range cited.FindAllStringSubmatch(string(b), -1) {
			assert.Contains(t, funcs.String(), "func "+m[1]+"(", "%s names %s, which no test file declares", doc, m[1])
		}
		for _, m := range file.FindAllStringSubmatch(string(b), -1) {
			assert.True(t, files[m[1]], "%s names %s, which is no file of the repository", doc, m[1])
		}
	}
}

package remote

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/doc"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// remoteDoc is the user's page on this module, in the repository's docs.
var remoteDoc = filepath.Join("..", "docs", "remote.md")

// A Go snippet of docs/remote.md or of a doc comment of this package.
type goSnippet struct {
	where string // the file and line it starts at
	code  []string
}

// markdownSnippets returns the ```go blocks of a Markdown file.
func markdownSnippets(t *testing.T, path string) []goSnippet {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var all []goSnippet
	var cur *goSnippet
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```go":
			cur = &goSnippet{where: fmt.Sprintf("%s:%d", path, n)}
		case cur != nil && strings.TrimSpace(line) == "```":
			all = append(all, *cur)
			cur = nil
		case cur != nil:
			cur.code = append(cur.code, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if cur != nil {
		t.Fatalf("%s: a ```go block is not closed", path)
	}
	return all
}

// commentSnippets returns the code blocks of the package documentation
// and of the doc comments of its exported names: all Go, but the table
// of subjects.
func commentSnippets(t *testing.T) []goSnippet {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var parsed []*ast.File
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, f)
	}
	pkg, err := doc.NewFromFiles(fset, parsed, "github.com/procsched/scheduler/remote")
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{"the package documentation": pkg.Doc}
	for _, c := range append(pkg.Consts, pkg.Vars...) {
		docs[strings.Join(c.Names, ", ")] = c.Doc
	}
	for _, f := range pkg.Funcs {
		docs[f.Name] = f.Doc
	}
	for _, ty := range pkg.Types {
		docs[ty.Name] = ty.Doc
		for _, f := range append(ty.Funcs, ty.Methods...) {
			docs[ty.Name+"."+f.Name] = f.Doc
		}
	}
	var all []goSnippet
	for name, text := range docs {
		for _, b := range pkg.Parser().Parse(text).Content {
			code, ok := b.(*comment.Code)
			if !ok || strings.HasPrefix(code.Text, "procsched.") {
				continue
			}
			all = append(all, goSnippet{
				where: "the doc comment of " + name,
				code:  strings.Split(strings.TrimSuffix(code.Text, "\n"), "\n"),
			})
		}
	}
	return all
}

// snippetProgram is the program a snippet is compiled in: its lines are
// the body of a function whose parameters are the names the documents
// use without declaring them, and the imports are kept used.
const snippetProgram = `package main

import (
	"context"

	"github.com/nats-io/nats.go"

	scheduler "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
	"github.com/procsched/scheduler/remote"
)

var (
	_ = nats.Connect
	_ = scheduler.New
	_ = remote.New
)

func snippet(ctx context.Context, url string, node *remote.Node, out *scheduler.StepOutput, tag uint64, pid relay.PID, in payload.Payloads) {
%s
}

func main() {}
`

// unusedVariable is the compiler's complaint about a variable a snippet
// declares and, being an excerpt, does not read again; it is no fault of
// the snippet.
var unusedVariable = regexp.MustCompile(`^(vet: )?\S+\.go:\d+:\d+: declared and not used: \w+$`)

// TestDocSnippetsCompile: the Go snippets of docs/remote.md and of this
// package's doc comments build against the module's API, so a snippet
// that no longer matches it fails here rather than in a reader's
// editor. Each is compiled as a function body ("..." lines left out)
// whose parameters are the names the snippets take as given: ctx, url,
// node, out, tag, pid and in.
func TestDocSnippetsCompile(t *testing.T) {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		gocmd = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	md := markdownSnippets(t, remoteDoc)
	if len(md) < 2 {
		t.Fatalf("%s has %d Go snippets, want its two at least: the reader did not find them", remoteDoc, len(md))
	}
	comments := commentSnippets(t)
	if len(comments) < 3 {
		t.Fatalf("the package's comments have %d Go snippets, want three at least: the reader did not find them", len(comments))
	}
	for _, sn := range append(md, comments...) {
		var body []string
		for _, l := range sn.code {
			if strings.TrimSpace(l) != "..." {
				body = append(body, l)
			}
		}
		dir, err := os.MkdirTemp(".", "_snippet")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		src := fmt.Sprintf(snippetProgram, strings.Join(body, "\n"))
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(gocmd, "vet", "./"+filepath.Base(dir)).CombinedOutput()
		if err == nil {
			continue
		}
		var faults []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			l = strings.TrimSpace(l)
			if l == "" || strings.HasPrefix(l, "#") || unusedVariable.MatchString(l) {
				continue
			}
			faults = append(faults, l)
		}
		if len(faults) > 0 {
			t.Errorf("%s: the snippet does not build or vet:\n%s\nin:\n%s", sn.where, strings.Join(faults, "\n"), src)
		}
	}
}

// TestDocsQuoteTheConstants: the sizes, bounds, intervals and defaults
// that docs/remote.md and the package documentation quote are the
// code's. Each row is a phrase of a document (spacing aside) and the
// value of the code it states: a change of either, without the other,
// fails here.
func TestDocsQuoteTheConstants(t *testing.T) {
	const (
		kib = 1 << 10
		mib = 1 << 20
	)
	year := 365.25 * 24 * float64(time.Hour)
	rows := []struct {
		doc, phrase string
		got, want   int64
	}{
		{remoteDoc, `a subject token: 1 to 128 letters`, maxClusterLen, 128},
		{remoteDoc, `unique in the cluster; 1 to 128 bytes of UTF-8`, maxNameLen, 128},
		{remoteDoc, `confirm the subscriptions until its context ends (with no deadline, 10 seconds at most)`, int64(flushTimeout), int64(10 * time.Second)},
		{remoteDoc, `waits for the server to confirm it (with no deadline, 10 seconds at most)`, int64(flushTimeout), int64(10 * time.Second)},
		{remoteDoc, `at most half a window (512 KiB by default)`, DefaultWindow / 2, 512 * kib},
		{remoteDoc, `its error's text then shortened to 1 KiB`, alwaysText, kib},
		{remoteDoc, `The spawn command's ID defaults to 512`, int64(DefaultSpawnCommand), 512},
		{remoteDoc, "Defaults: `Heartbeat` 1 s, `FailureTimeout` 5 s or three heartbeats", int64(DefaultHeartbeat), int64(time.Second)},
		{remoteDoc, "Defaults: `Heartbeat` 1 s, `FailureTimeout` 5 s or three heartbeats", int64(DefaultFailureTimeout), int64(5 * time.Second)},
		{remoteDoc, `with at most 1,024 down runs remembered per node`, maxTombstones, 1024},
		{remoteDoc, `the wire version, 2 in this release`, wireVersion, 2},
		{remoteDoc, `(a 22-byte batch header`, headerLen, 22},
		{remoteDoc, `a 22-byte control header`, ctlHeaderLen, 22},
		{remoteDoc, "| `Window` | 1 MiB (at least 4 KiB) |", DefaultWindow, mib},
		{remoteDoc, "| `Window` | 1 MiB (at least 4 KiB) |", minWindow, 4 * kib},
		{remoteDoc, "| `MaxBuffered` | 4 MiB |", DefaultMaxBuffered, 4 * mib},
		{remoteDoc, "| `Heartbeat` | 1 s (at least 1 ms,", int64(DefaultHeartbeat), int64(time.Second)},
		{remoteDoc, "| `Heartbeat` | 1 s (at least 1 ms,", int64(MinHeartbeat), int64(time.Millisecond)},
		{remoteDoc, "at most a third of the longest `time.Duration`, about 97 years)", int64(math.Round(float64(maxHeartbeat) / year)), 97},
		{remoteDoc, "| `FailureTimeout` | 5 s, or three heartbeats if longer |", int64(DefaultFailureTimeout), int64(5 * time.Second)},
		{remoteDoc, `A NATS server buffers up to 64 MiB for a client by default`, server.MAX_PENDING_SIZE, 64 * mib},
		{remoteDoc, `and a client up to 64 MiB per subscription`, nats.DefaultSubPendingBytesLimit, 64 * mib},
		{remoteDoc, `plus two emptied batches kept for reuse`, maxSpare, 2},
		{"doc.go", `a node remembers at most 1,024 down runs`, maxTombstones, 1024},
		{"doc.go", `A batch is a 22-byte header`, headerLen, 22},
		{"doc.go", `A control message is a 22-byte header`, ctlHeaderLen, 22},
		{"doc.go", `Both kinds start with the wire version, 2`, wireVersion, 2},
		{"doc.go", `in a 256-entry cache`, idSlots, 256},
		{"doc.go", `with at most 1 KiB of error text`, alwaysText, kib},
		{"config.go", `(default [DefaultWindow]; at least 4 KiB)`, minWindow, 4 * kib},
		{"config.go", `with at most 1 KiB of error text`, alwaysText, kib},
		{"membership.go", `a node remembers the last 1,024 it declared down`, maxTombstones, 1024},
		{remoteDoc, `a node remembers the last 1,024 it declared down`, maxTombstones, 1024},
	}
	text := map[string]string{}
	for _, r := range rows {
		if _, ok := text[r.doc]; !ok {
			b, err := os.ReadFile(r.doc)
			if err != nil {
				t.Fatal(err)
			}
			s := string(b)
			if strings.HasSuffix(r.doc, ".go") {
				s = commentText(t, r.doc, b)
			}
			text[r.doc] = strings.Join(strings.Fields(s), " ")
		}
		if !strings.Contains(text[r.doc], strings.Join(strings.Fields(r.phrase), " ")) {
			t.Errorf("%s no longer says %q", r.doc, r.phrase)
		}
		if r.got != r.want {
			t.Errorf("%s says %q, but the code's value is %d, not %d", r.doc, r.phrase, r.got, r.want)
		}
	}
}

// commentText returns the comments of a Go file, their markers left out,
// so that a phrase is found across a comment's lines.
func commentText(t *testing.T, name string, src []byte) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	ast.Inspect(f, func(n ast.Node) bool {
		if g, ok := n.(*ast.CommentGroup); ok {
			b.WriteString(g.Text())
			b.WriteString("\n")
		}
		return true
	})
	return b.String()
}

// TestDocDefinesItsTerms: the words of its own that docs/remote.md uses
// are defined in its Terms section (the scheduler's are in design.md's),
// so that a reader finds what each means; a term dropped from there
// while the page still uses it fails here.
func TestDocDefinesItsTerms(t *testing.T) {
	b, err := os.ReadFile(remoteDoc)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	start := strings.Index(page, "\n## Terms\n")
	if start < 0 {
		t.Fatalf("%s has no Terms section", remoteDoc)
	}
	terms := page[start+1:]
	if end := strings.Index(terms, "\n## "); end >= 0 {
		terms = terms[:end]
	}
	all := strings.ToLower(strings.Join(strings.Fields(page), " "))
	for _, term := range []string{
		"node", "peer", "number", "incarnation", "run", "frame", "batch",
		"sequence number", "link", "window", "credit", "grant",
		"sync marker", "gap", "hello", "heartbeat", "goodbye", "probe",
		"declared down", "comes back", "refused at once", "kind", "watcher",
	} {
		if !strings.Contains(all, " "+term+" ") {
			continue
		}
		if !strings.Contains(terms, "**"+term+"**") {
			t.Errorf("%s uses %q, which its Terms section does not define", remoteDoc, term)
		}
	}
}

// TestDocCountersNameEveryField: the Counters table of docs/remote.md
// names every field of Stats, of its Peers and of its Dropped (a
// Reasons' fields are its reasons, which the table leaves to the
// field docs), so that a counter added to Stats is added to the page.
func TestDocCountersNameEveryField(t *testing.T) {
	b, err := os.ReadFile(remoteDoc)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	start := strings.Index(page, "\n## Counters\n")
	if start < 0 {
		t.Fatalf("%s has no Counters section", remoteDoc)
	}
	table := page[start+1:]
	if end := strings.Index(table, "\n## "); end >= 0 {
		table = table[:end]
	}
	fields := func(v any, prefix string) []string {
		var names []string
		ty := reflect.TypeOf(v)
		for i := range ty.NumField() {
			names = append(names, prefix+ty.Field(i).Name)
		}
		return names
	}
	var named [][]string // each a field's names, one of which the table must have
	for _, name := range fields(Stats{}, "") {
		if name != "Peers" && name != "Dropped" {
			named = append(named, []string{"`" + name + "`"})
		}
	}
	for _, name := range fields(PeerStats{}, "") {
		named = append(named, []string{"`Peers." + name + "`", "`" + name + "`"})
	}
	for _, name := range fields(Drops{}, "") {
		named = append(named, []string{"`Dropped." + name + "`", "`" + name + "`"})
	}
	for _, names := range named {
		found := false
		for _, name := range names {
			found = found || strings.Contains(table, name)
		}
		if !found {
			t.Errorf("the Counters table of %s does not name %s", remoteDoc, names[0])
		}
	}
}

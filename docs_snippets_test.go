package scheduler_test

import (
	"bufio"
	"go/scanner"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A Go snippet of the README or of docs/*.md, the fenced ```go block.
type docSnippet struct {
	doc  string // the Markdown file
	line int    // the line of its opening fence
	from string // the file it is an excerpt of, from the marker before it
	code []string
}

// excerptMarker, on the line before a snippet's fence, names the file the
// snippet is taken from, relative to the repository's root.
var excerptMarker = regexp.MustCompile(`^<!-- excerpt of (\S+) -->$`)

// excerptRequired lists the documents a new user reads first, whose every
// Go snippet must be a whole program or a marked excerpt. In the other
// documents a snippet may also be a sketch, checked only if it is marked.
var excerptRequired = map[string]bool{
	"README.md":             true,
	"docs/dispatch.md":      true,
	"docs/patterns.md":      true,
	"docs/process-model.md": true,
	"docs/testing.md":       true,
}

// docSnippets returns the Go snippets of the README and of docs/*.md.
func docSnippets(t *testing.T) []docSnippet {
	t.Helper()
	docs, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	docs = append([]string{"README.md"}, docs...)
	var all []docSnippet
	for _, doc := range docs {
		f, err := os.Open(doc)
		require.NoError(t, err)
		sc := bufio.NewScanner(f)
		var cur *docSnippet
		prev := ""
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			switch {
			case cur == nil && strings.TrimSpace(line) == "```go":
				cur = &docSnippet{doc: doc, line: n}
				if m := excerptMarker.FindStringSubmatch(strings.TrimSpace(prev)); m != nil {
					cur.from = m[1]
				}
			case cur != nil && strings.TrimSpace(line) == "```":
				all = append(all, *cur)
				cur = nil
			case cur != nil:
				cur.code = append(cur.code, line)
			}
			prev = line
		}
		require.NoError(t, sc.Err())
		require.NoError(t, f.Close())
		require.Nil(t, cur, "%s: a ```go block is not closed", doc)
	}
	require.NotEmpty(t, all, "no Go snippet found in the docs")
	return all
}

// codeTokens returns a line of Go as its tokens, comments left out,
// joined by single spaces, so that lines that differ only in spacing or
// comments compare equal. A line with no token gives "".
func codeTokens(line string) string {
	var s scanner.Scanner
	fset := token.NewFileSet()
	src := []byte(line)
	s.Init(fset.AddFile("", -1, len(src)), src, func(token.Position, string) {}, 0)
	var toks []string
	for {
		_, tok, lit := s.Scan()
		if tok == token.EOF {
			break
		}
		if tok == token.SEMICOLON && lit == "\n" {
			continue // inserted at the end of the line, not written
		}
		if lit == "" {
			lit = tok.String()
		}
		toks = append(toks, lit)
	}
	return strings.Join(toks, " ")
}

// TestDocSnippets keeps the Go snippets of the README and of docs/*.md in
// step with the code. A snippet that is a whole program (it starts with
// "package main") must build and pass go vet. Any other snippet of the
// documents in excerptRequired, and any snippet so marked elsewhere, must
// be an excerpt of a file of the repository that the line before its
// fence names (<!-- excerpt of PATH -->; of a Markdown file, of its Go
// snippets, such as a whole program checked here too): each of its lines that has code (a
// "..." line stands for what is left out) must be a line of that file, in
// the same order, spacing and comments aside; the file itself is compiled
// and tested with the rest. So a snippet that no longer matches the API
// fails here, not in a reader's editor.
func TestDocSnippets(t *testing.T) {
	for _, sn := range docSnippets(t) {
		name := sn.doc + ":" + strconv.Itoa(sn.line)
		if len(sn.code) > 0 && strings.HasPrefix(strings.TrimSpace(sn.code[0]), "package main") {
			t.Run(name, func(t *testing.T) { checkProgram(t, sn) })
			continue
		}
		if sn.from == "" && !excerptRequired[sn.doc] {
			continue // a sketch in a design document, not checked
		}
		if sn.from == "" {
			t.Errorf("%s: a Go snippet that is not a whole program needs <!-- excerpt of PATH --> on the line before its fence, naming the file it is taken from", name)
			continue
		}
		src, err := os.ReadFile(filepath.FromSlash(sn.from))
		if err != nil {
			t.Errorf("%s: the excerpt's file: %v", name, err)
			continue
		}
		lines := strings.Split(string(src), "\n")
		if strings.HasSuffix(sn.from, ".md") {
			lines = goBlockLines(lines) // a whole program there, built above
		}
		var file []string
		for _, l := range lines {
			if c := codeTokens(l); c != "" {
				file = append(file, c)
			}
		}
		at := 0
		for i, l := range sn.code {
			want := codeTokens(l)
			if want == "" || want == "..." {
				continue
			}
			found := false
			for ; at < len(file); at++ {
				if file[at] == want {
					found = true
					at++
					break
				}
			}
			if !found {
				t.Errorf("%s:%d: %q is not a line of %s (after the snippet's lines before it)", sn.doc, sn.line+1+i, strings.TrimSpace(l), sn.from)
				break
			}
		}
	}
}

// checkProgram builds and vets a whole program in a directory of the
// module that go's ./... patterns leave out (its name starts with "_").
func checkProgram(t *testing.T, sn docSnippet) {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		gocmd = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	dir, err := os.MkdirTemp(".", "_snippet")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(strings.Join(sn.code, "\n")+"\n"), 0o644))
	out, err := exec.Command(gocmd, "vet", "./"+filepath.Base(dir)).CombinedOutput()
	require.NoError(t, err, "%s:%d: the program does not build or vet:\n%s", sn.doc, sn.line, out)
}

// goBlockLines returns the lines of the ```go blocks of a Markdown file.
func goBlockLines(md []string) []string {
	var out []string
	in := false
	for _, l := range md {
		switch {
		case !in && strings.TrimSpace(l) == "```go":
			in = true
		case in && strings.TrimSpace(l) == "```":
			in = false
		case in:
			out = append(out, l)
		}
	}
	return out
}

package bridge_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	_ "github.com/procsched/scheduler" // fills the variables in its init
	"github.com/procsched/scheduler/internal/bridge"
)

const bridgePath = "github.com/procsched/scheduler/internal/bridge"

// TestFilledByScheduler: once the scheduler package is linked in, every
// function variable of the bridge is set, as the package promises the test
// kit. The variables are read from bridge.go, so that one added there and
// not filled in the scheduler's init fails here too.
func TestFilledByScheduler(t *testing.T) {
	filled := map[string]bool{
		"NewOutput":    bridge.NewOutput != nil,
		"ResetOutput":  bridge.ResetOutput != nil,
		"ReadOutput":   bridge.ReadOutput != nil,
		"Unpack":       bridge.Unpack != nil,
		"WithSelf":     bridge.WithSelf != nil,
		"CheckHandler": bridge.CheckHandler != nil,
	}
	f, err := parser.ParseFile(token.NewFileSet(), "bridge.go", nil, 0)
	require.NoError(t, err)
	var vars []string
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.VAR {
			continue
		}
		for _, spec := range gen.Specs {
			for _, name := range spec.(*ast.ValueSpec).Names {
				vars = append(vars, name.Name)
			}
		}
	}
	require.NotEmpty(t, vars, "bridge.go declares the function variables")
	for _, name := range vars {
		set, known := filled[name]
		require.True(t, known, "bridge.%s is not checked by this test: add it", name)
		assert.True(t, set, "bridge.%s is nil once the scheduler package is linked in", name)
	}
}

// TestImportedOnlyByTheSchedulerAndTheTestKit: no package of the module
// but the scheduler, which fills the bridge, and the test kit, which calls
// it, imports the bridge, as its package doc requires. Test files count:
// the bridge's own tests are the only exception.
func TestImportedOnlyByTheSchedulerAndTheTestKit(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	var importers []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == root {
				return nil
			}
			name := d.Name()
			if name == "testdata" || name[0] == '.' || name[0] == '_' {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // another module, which cannot import an internal package of this one
			}
			return nil
		}
		if filepath.Ext(path) != ".go" {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == bridgePath {
				dir, err := filepath.Rel(root, filepath.Dir(path))
				if err != nil {
					return err
				}
				if dir != filepath.Join("internal", "bridge") && !slices.Contains(importers, dir) {
					importers = append(importers, dir)
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	slices.Sort(importers)
	assert.Equal(t, []string{".", "schedtest"}, importers, "the packages that import the bridge")
}

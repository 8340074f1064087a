package grpcerr_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/fabro-sh/fabro-go/platform/grpcerr"
)

// A reason: UPPER_SNAKE_CASE, one word (DENIED) included.
var upperSnake = regexp.MustCompile(`^[A-Z][A-Z0-9]+(_[A-Z0-9]+)*$`)

// TestReasonsDocumented keeps docs/ERRORS.md and the code in step: every
// reason a Domain's New, Newf or Status is given (a literal, or a constant
// of the repository) and every ErrorInfo{Reason: ...} literal is
// documented, and every reason the document names is a string the code
// holds (or a gRPC code's name, which CodeReason makes a reason).
func TestReasonsDocumented(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "ERRORS.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("`([A-Z][A-Z0-9_]+)`").FindAllStringSubmatch(string(doc), -1) {
		if upperSnake.MatchString(m[1]) {
			documented[m[1]] = true
		}
	}

	used := map[string]string{}   // reason given to a Domain -> where
	literals := map[string]bool{} // every UPPER_SNAKE string of the code
	consts := map[string]string{} // constant name -> value (names are unique enough here)
	var calls []*ast.CallExpr
	var callPos []string
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == "gen" || n == ".tmp" || n == "bin" || (strings.HasPrefix(n, ".") && path != root) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				if s, err := strconv.Unquote(n.Value); err == nil && n.Kind == token.STRING && upperSnake.MatchString(s) {
					literals[s] = true
				}
			case *ast.SelectorExpr:
				// The gateway's PROVIDER_<kind>, made from the error kind.
				if k, ok := strings.CutPrefix(n.Sel.Name, "ErrorKind_ERROR_KIND_"); ok {
					literals[k], literals["PROVIDER_"+k] = true, true
				}
			case *ast.ValueSpec:
				for i, name := range n.Names {
					if i < len(n.Values) {
						if lit, ok := n.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							s, _ := strconv.Unquote(lit.Value)
							consts[name.Name] = s
						}
					}
				}
			case *ast.KeyValueExpr:
				if k, ok := n.Key.(*ast.Ident); ok && k.Name == "Reason" {
					if lit, ok := n.Value.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						if s, _ := strconv.Unquote(lit.Value); upperSnake.MatchString(s) {
							used[s] = fset.Position(lit.Pos()).String()
						}
					}
				}
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok || len(n.Args) < 2 || !slices.Contains([]string{"New", "Newf", "Status"}, sel.Sel.Name) {
					return true
				}
				if c, ok := n.Args[0].(*ast.SelectorExpr); ok {
					if x, ok := c.X.(*ast.Ident); ok && x.Name == "codes" {
						calls = append(calls, n)
						callPos = append(callPos, fset.Position(n.Pos()).String())
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range calls {
		var reason string
		switch a := c.Args[1].(type) {
		case *ast.BasicLit:
			reason, _ = strconv.Unquote(a.Value)
		case *ast.Ident:
			reason = consts[a.Name]
		case *ast.SelectorExpr:
			reason = consts[a.Sel.Name]
		}
		if upperSnake.MatchString(reason) {
			used[reason] = callPos[i]
		}
	}
	if len(used) < 50 {
		t.Fatalf("found %d reasons in the code: the scan is broken", len(used))
	}
	codeNames := map[string]bool{}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		codeNames[grpcerr.CodeReason(c)] = true
	}
	for r, where := range used {
		if !documented[r] {
			t.Errorf("reason %s (%s) is not in docs/ERRORS.md", r, where)
		}
	}
	for r := range documented {
		if !literals[r] && !codeNames[r] {
			if _, ok := used[r]; !ok {
				t.Errorf("docs/ERRORS.md names %s, which no code returns", r)
			}
		}
	}
}

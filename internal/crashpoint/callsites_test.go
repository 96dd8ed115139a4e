package crashpoint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// declaredPoints are the Point constants of this package, by identifier.
func declaredPoints(t *testing.T) map[string]Point {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "crashpoint.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Point{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			if id, ok := v.Type.(*ast.Ident); !ok || id.Name != "Point" {
				continue
			}
			for i, n := range v.Names {
				lit := v.Values[i].(*ast.BasicLit)
				byName[n.Name] = Point(strings.Trim(lit.Value, `"`))
			}
		}
	}
	return byName
}

// TestListsMatchCallSites reads every non-test Go file of the module: each
// crashpoint.Hit call must name its point by a constant (or pass on a
// Point parameter), never spell it; every constant must be passed by some
// call site (crashpoint.Hit, or the claim reconciler's hit); and Points
// and ClaimPoints, which the crash harnesses iterate over, hold every
// point of their door and only declared ones. This is what keeps the
// lists in step with the code.
func TestListsMatchCallSites(t *testing.T) {
	declared := declaredPoints(t)
	used := map[string]bool{}
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if isHit(call) {
				if len(call.Args) != 1 {
					t.Errorf("%s: crashpoint.Hit with %d arguments", path, len(call.Args))
					return true
				}
				// A constant (crashpoint.X), or a Point parameter handed
				// on (the reconciler's hit); never a spelled name.
				switch a := call.Args[0].(type) {
				case *ast.SelectorExpr, *ast.Ident:
				default:
					t.Errorf("%s: crashpoint.Hit(%T): name the point by its constant", path, a)
				}
			}
			for _, a := range call.Args {
				if sel, ok := a.(*ast.SelectorExpr); ok {
					if x, ok := sel.X.(*ast.Ident); ok && x.Name == "crashpoint" {
						used[sel.Sel.Name] = true
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
	for name, p := range declared {
		if !used[name] {
			t.Errorf("crash point %s (%s) is declared but no call site passes it", name, p)
		}
		if op, what, ok := strings.Cut(string(p), "/"); !ok || op == "" || what == "" || strings.Contains(what, "/") {
			t.Errorf("crash point %s is %q, want <operation>/<what>", name, p)
		}
	}
	known := map[Point]bool{}
	for _, p := range declared {
		known[p] = true
	}
	for list, points := range map[string][]Point{"Points": Points, "ClaimPoints": ClaimPoints, "UpstreamPoints": UpstreamPoints} {
		seen := map[Point]bool{}
		for _, p := range points {
			if !known[p] {
				t.Errorf("%s holds %q, which is no declared constant", list, p)
			}
			if seen[p] {
				t.Errorf("%s holds %q twice", list, p)
			}
			seen[p] = true
		}
	}
	// Each declared point is in its door's list.
	for _, p := range declared {
		switch {
		case strings.Contains(string(p), "/upstream-"):
			if !slices.Contains(UpstreamPoints, p) {
				t.Errorf("UpstreamPoints lacks %q", p)
			}
		case strings.HasPrefix(string(p), "claim/"):
			if !slices.Contains(ClaimPoints, p) {
				t.Errorf("ClaimPoints lacks %q", p)
			}
		case !slices.Contains(Points, p):
			t.Errorf("Points lacks %q", p)
		}
	}
}

func isHit(call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Hit" {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	return ok && x.Name == "crashpoint"
}

package recipe

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/gobn/gobn/opdef"
)

// Pieces are the files an op of a new kind is written in by hand, in the
// order CONTRIBUTING.md lists them, with what each holds and why no
// generator writes it (TestContributingListsThePieces); {kind} stands for
// the kind's name in snake case (opdef.Kind.SnakeCase). Everything else is
// generated from opdef, or reads opdef or the op table.
var Pieces = []string{"opdef/opdef.go", "kernels/{kind}.go", "kernels/{kind}_test.go", "internal/reference/{kind}.go",
	"kernels/cuda/{kind}.go", "kernels/cuda/batchnorm.cu", "python/gobn/_kinds/{kind}.py", "opdef/testdata/ops.json"}

// Path returns the file of piece for kind.
func Path(piece string, kind opdef.Kind) string {
	return strings.ReplaceAll(piece, "{kind}", kind.SnakeCase())
}

// Missing returns what kind lacks of each piece under root, a line a piece
// that starts with the piece's file; none when the kind is complete.
func Missing(root string, kind opdef.Kind) []string {
	var out []string
	for _, piece := range Pieces {
		if why := lacks(root, piece, kind); why != "" {
			out = append(out, Path(piece, kind)+": "+why)
		}
	}
	return out
}

// lacks returns what kind lacks of piece under root, "" when nothing.
func lacks(root, piece string, kind opdef.Kind) string {
	path := Path(piece, kind)
	switch piece {
	case "opdef/opdef.go":
		return lacksOp(kind)
	case "kernels/{kind}.go":
		return lacksKernel(root, CPU, kind)
	case "kernels/{kind}_test.go":
		return lacksTest(root, path)
	case "internal/reference/{kind}.go":
		return lacksReference(root, path, kind)
	case "kernels/cuda/{kind}.go":
		return lacksKernel(root, GPU, kind)
	case "kernels/cuda/batchnorm.cu":
		return lacksDeviceCode(root, path, kind)
	case "opdef/testdata/ops.json":
		return lacksRow(root, path, kind)
	}
	if _, err := os.Stat(filepath.Join(root, path)); err != nil { // the kind's Python module
		return "no such file"
	}
	return ""
}

func lacksOp(kind opdef.Kind) string {
	if slices.Contains(opdef.Kinds(), kind) {
		return ""
	}
	return "no op of kind " + string(kind) + " in All"
}

func lacksKernel(root string, dev Device, kind opdef.Kind) string {
	_, err := ReadKernel(root, dev, kind)
	if err == nil {
		return ""
	}
	return strings.TrimPrefix(err.Error(), dev.File(kind)+": ")
}

// parse returns the Go file at path under root, or nil.
func parse(root, path string) *ast.File {
	file, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, path), nil, parser.SkipObjectResolution)
	if err != nil {
		return nil
	}
	return file
}

func lacksTest(root, path string) string {
	file := parse(root, path)
	if file == nil {
		return "no such file"
	}
	for _, d := range file.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && (strings.HasPrefix(fn.Name.Name, "Test") || strings.HasPrefix(fn.Name.Name, "Fuzz")) {
			return ""
		}
	}
	return "no test"
}

func lacksReference(root, path string, kind opdef.Kind) string {
	file := parse(root, path)
	if file == nil {
		return "no such file"
	}
	for _, args := range calls(file, "register") {
		if lit, ok := args[0].(*ast.BasicLit); ok && lit.Value == strconv.Quote(string(kind)) {
			return ""
		}
	}
	return fmt.Sprintf("no register(%q, Kind{...})", kind)
}

// calls returns the args of each call in file of a function called name
// (or a method, or a function of another package, of that name).
func calls(file *ast.File, name string) [][]ast.Expr {
	var out [][]ast.Expr
	ast.Inspect(file, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		switch fn := call.Fun.(type) {
		case *ast.Ident:
			ok = fn.Name == name
		case *ast.SelectorExpr:
			ok = fn.Sel.Name == name
		default:
			ok = false
		}
		if ok {
			out = append(out, call.Args)
		}
		return true
	})
	return out
}

// deviceFunction is the name of a device function a kernel's call makes:
// what precedes its template arguments or its arguments.
var deviceFunction = regexp.MustCompile(`^([A-Za-z_{}][A-Za-z0-9_{}]*)[<(]`)

// lacksDeviceCode reports the device functions the kind's kernels call
// (the calls its launch file gives cudaspec.LayoutKernels and
// FinalizeKernel) that batchnorm.cu does not define.
func lacksDeviceCode(root, path string, kind opdef.Kind) string {
	launch := GPU.File(kind)
	file := parse(root, launch)
	if file == nil {
		return "the device functions of its kernels (" + launch + " adds none yet)"
	}
	src, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		return "no such file"
	}
	var undefined []string
	for _, args := range append(calls(file, "LayoutKernels"), calls(file, "FinalizeKernel")...) {
		if len(args) < 2 {
			continue
		}
		lit, ok := args[1].(*ast.BasicLit)
		if !ok {
			continue
		}
		call, _ := strconv.Unquote(lit.Value)
		m := deviceFunction.FindStringSubmatch(call)
		if m == nil {
			continue
		}
		for _, layout := range []string{"cl", "cf"} {
			name := strings.ReplaceAll(m[1], "{L}", layout)
			def := regexp.MustCompile(`__device__[^;{]*\b` + regexp.QuoteMeta(name) + `\(`)
			if !def.Match(src) && !slices.Contains(undefined, name) {
				undefined = append(undefined, name)
			}
		}
	}
	if len(undefined) > 0 {
		slices.Sort(undefined)
		return "no device function " + strings.Join(undefined, ", ") + ", which " + launch + "'s kernels call"
	}
	return ""
}

func lacksRow(root, path string, kind opdef.Kind) string {
	data, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		return "no such file"
	}
	var table struct {
		Ops []struct {
			Kind string `json:"kind"`
		} `json:"ops"`
	}
	if err := json.Unmarshal(data, &table); err != nil {
		return err.Error()
	}
	for _, row := range table.Ops {
		if row.Kind == string(kind) {
			return ""
		}
	}
	return "no row of kind " + string(kind)
}

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

// Piece is a file an op of a new kind is written in by hand.
type Piece struct {
	// File is its path under the repository; {kind} stands for the kind's
	// name in snake case (opdef.Kind.SnakeCase).
	File string
	// What says what it holds of the kind; Why, why no generator writes it.
	What, Why string
	// lacks returns what kind lacks of it, whose file is path under root,
	// "" when nothing.
	lacks func(root, path string, kind opdef.Kind) string
}

// Path returns p's file for kind.
func (p Piece) Path(kind opdef.Kind) string {
	return strings.ReplaceAll(p.File, "{kind}", kind.SnakeCase())
}

// Pieces are the files an op of a new kind needs by hand, in the order
// CONTRIBUTING.md lists them (TestContributingListsThePieces). Everything
// else is generated from opdef, or reads opdef or the op table.
var Pieces = []Piece{
	{File: "opdef/opdef.go", What: "the op in All, and its Kind constant",
		Why: "the op's facts are what every generator reads", lacks: lacksOp},
	{File: "kernels/{kind}.go", What: "its Go kernel: its args and func <Kind>[T Element](a <its args>)",
		Why: "the math", lacks: lacksKernel(CPU)},
	{File: "kernels/{kind}_test.go", What: "its kernel's tests against its float64 reference",
		Why: "the edge cases and paths of its own math", lacks: lacksTest},
	{File: "internal/reference/{kind}.go", What: "its float64 reference, and what the GPU check needs of the kind (register)",
		Why: "the formula, written apart from the kernel that it checks", lacks: lacksReference},
	{File: "kernels/cuda/{kind}.go", What: "its CUDA launch: its args, func <Kind>(a <its args>, pl Placement) error, its plan and the kernels it adds",
		Why: "the launch shapes of its passes", lacks: lacksKernel(GPU)},
	{File: "kernels/cuda/batchnorm.cu", What: "the device functions its kernels call, beside the passes they share",
		Why: "the math on the GPU", lacks: lacksDeviceCode},
	{File: "python/gobn/_kinds/{kind}.py", What: "its gradient, pfor converter, stock plumbing, XLA stand-ins, test modes and sample builder",
		Why: "its math in TensorFlow ops and its cases (python_tests/test_kinds.py checks it)", lacks: lacksFile},
	{File: "opdef/testdata/ops.json", What: "the row of each of its ops",
		Why: "what the tests expect, written apart from opdef", lacks: lacksRow},
}

// Missing returns what kind lacks of each piece under root, a line a piece
// that starts with the piece's file; none when the kind is complete.
func Missing(root string, kind opdef.Kind) []string {
	var out []string
	for _, p := range Pieces {
		if why := p.lacks(root, p.Path(kind), kind); why != "" {
			out = append(out, p.Path(kind)+": "+why)
		}
	}
	return out
}

func lacksOp(_, _ string, kind opdef.Kind) string {
	if slices.Contains(opdef.Kinds(), kind) {
		return ""
	}
	return "no op of kind " + string(kind) + " in All"
}

func lacksKernel(dev Device) func(string, string, opdef.Kind) string {
	return func(root, path string, kind opdef.Kind) string {
		_, err := ReadKernel(root, dev, kind)
		if err == nil {
			return ""
		}
		return strings.TrimPrefix(err.Error(), path+": ")
	}
}

func lacksFile(root, path string, _ opdef.Kind) string {
	if _, err := os.Stat(filepath.Join(root, path)); err != nil {
		return "no such file"
	}
	return ""
}

// parse returns the Go file at path under root, or nil.
func parse(root, path string) *ast.File {
	file, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, path), nil, parser.SkipObjectResolution)
	if err != nil {
		return nil
	}
	return file
}

func lacksTest(root, path string, _ opdef.Kind) string {
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

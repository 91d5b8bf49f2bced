// Package recipe is CONTRIBUTING.md's recipe for an op of a new kind, as
// code: the files a kind of op needs (Pieces), what each must hold, and the
// check that names, by file, what a kind lacks (Missing). Its tests hold
// CONTRIBUTING.md to it. It also reads a kind's kernels as the generators
// see them (ReadKernel): the function named after the kind in packages
// kernels and kernels/cuda, and the fields of the args it takes.
package recipe

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gobn/gobn/opdef"
)

// Kernel is a kind's kernel on one device as its package declares it: the
// function named after the kind (kernels.FusedBatchNormGrad,
// cuda.FusedBatchNormGrad) and the fields of the args it takes.
type Kernel struct {
	Entry  string   // the function, e.g. kernels.FusedBatchNormGrad
	Args   string   // its args' type, e.g. kernels.FusedGradArgs[T]
	Fields []string // the args' fields, in order
	Types  []string // each field's type as its package writes it ([]T, Ptr, float32)
}

// A Device is a package of kernels.
type Device struct {
	Pkg, Dir string // the package's name, its folder under the repository
	generic  bool   // its entry point takes T as a type parameter (package kernels)
	call     string // how the entry point is declared, for the error that says it is missing
}

// The devices: the Go kernels and the CUDA kernels' launch.
var (
	CPU = Device{Pkg: "kernels", Dir: "kernels", generic: true,
		call: "func %s[T Element](a <its args>): the kind's Go kernel"}
	GPU = Device{Pkg: "cuda", Dir: "kernels/cuda",
		call: "func %s(a <its args>, pl Placement) error: the kind's CUDA kernel's launch"}
)

// File returns the file of kind's kernel on dev: its name in snake case.
func (dev Device) File(kind opdef.Kind) string { return dev.Dir + "/" + kind.SnakeCase() + ".go" }

// ReadKernel reads kind's kernel from the sources of dev's package under
// root. An error names the file the kind's kernel belongs in.
func ReadKernel(root string, dev Device, kind opdef.Kind) (Kernel, error) {
	decls, err := packageDecls(filepath.Join(root, dev.Dir))
	if err != nil {
		return Kernel{}, err
	}
	missing := fmt.Errorf("%s: no "+dev.call+" (CONTRIBUTING.md, \"Adding an op\")", dev.File(kind), string(kind))
	var fn *ast.FuncDecl
	for _, d := range decls {
		if f, ok := d.(*ast.FuncDecl); ok && f.Recv == nil && f.Name.Name == string(kind) {
			fn = f
		}
	}
	if fn == nil || len(fn.Type.Params.List) == 0 || (fn.Type.TypeParams != nil) != dev.generic {
		return Kernel{}, missing
	}
	argType := fn.Type.Params.List[0].Type
	name := argType
	if index, ok := argType.(*ast.IndexExpr); ok {
		name = index.X
	}
	ident, ok := name.(*ast.Ident)
	if !ok {
		return Kernel{}, missing
	}
	api := Kernel{Entry: dev.Pkg + "." + string(kind), Args: dev.Pkg + "." + types.ExprString(argType)}
	for _, d := range decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.TYPE {
			continue
		}
		for _, spec := range g.Specs {
			ts := spec.(*ast.TypeSpec)
			st, ok := ts.Type.(*ast.StructType)
			if ts.Name.Name != ident.Name || !ok {
				continue
			}
			for _, f := range st.Fields.List {
				for _, n := range f.Names {
					api.Fields = append(api.Fields, n.Name)
					api.Types = append(api.Types, types.ExprString(f.Type))
				}
			}
			return api, nil
		}
	}
	return Kernel{}, fmt.Errorf("%s: the args %s of %s are no struct of package %s", dev.Dir, ident.Name, api.Entry, dev.Pkg)
}

// packageDecls returns the declarations of the package in dir, but its
// tests', whatever their build constraints.
func packageDecls(dir string) ([]ast.Decl, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var decls []ast.Decl
	fset := token.NewFileSet()
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		decls = append(decls, file.Decls...)
	}
	return decls, nil
}

// FieldType returns the type the args give field, and whether they have it.
func (k Kernel) FieldType(field string) (string, bool) {
	i := slices.Index(k.Fields, field)
	if i < 0 {
		return "", false
	}
	return k.Types[i], true
}

// AttrGoTypes are the Go types of the attrs' values, by kind, as the
// kernels' args hold them.
var AttrGoTypes = map[opdef.AttrKind]string{opdef.FloatAttr: "float32", opdef.BoolAttr: "bool",
	opdef.StringAttr: "string", opdef.IntAttr: "int64", opdef.TypeAttr: "opdef.DType"}

// TakenByCaller reports whether the kernels' caller takes attr itself, so
// that their args have no field of it: a type attr (T is the kernels'
// instantiation), or data_format (the layout of their Dims).
func TakenByCaller(attr opdef.Attr) bool {
	return attr.Kind == opdef.TypeAttr || attr.Name == "data_format"
}

// Field is an arg's or attr's name as the field of the kernels' args that
// holds it, exported: y_backprop is YBackprop; a name of two letters or one
// is a letter a word (dx, d of x, is DX; t is T).
func Field(name string) string {
	if len(name) <= 2 {
		return strings.ToUpper(name)
	}
	parts := strings.Split(name, "_")
	for i, p := range parts {
		parts[i] = strings.ToUpper(p[:1]) + p[1:]
	}
	return strings.Join(parts, "")
}

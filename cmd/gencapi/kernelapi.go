package main

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

// kernelAPI is a kind's kernel on one device as its package declares it:
// the function named after the kind (kernels.FusedBatchNormGrad,
// cuda.FusedBatchNormGrad) and the fields of the args it takes.
type kernelAPI struct {
	entry  string   // the function, e.g. kernels.FusedBatchNormGrad
	args   string   // its args' type, e.g. kernels.FusedGradArgs[T]
	fields []string // the args' fields, in order
	types  []string // each field's type as its package writes it ([]T, Ptr, float32)
}

// A device is a package of kernels the generated code calls.
type device struct {
	pkg, dir string // the package's name, its folder under the repository
	generic  bool   // its entry point takes T as a type parameter (package kernels)
	call     string // how the entry point is declared, for the error that says it is missing
}

var (
	cpuDevice = device{pkg: "kernels", dir: "kernels", generic: true,
		call: "func %s[T Element](a <its args>): the kind's Go kernel"}
	gpuDevice = device{pkg: "cuda", dir: "kernels/cuda",
		call: "func %s(a <its args>, pl Placement) error: the kind's CUDA kernel's launch"}
)

// readKernelAPI reads kind's kernel from the sources of dev's package
// under root. An error names the file the kind's kernel belongs in.
func readKernelAPI(root string, dev device, kind opdef.Kind) (kernelAPI, error) {
	decls, err := packageDecls(filepath.Join(root, dev.dir))
	if err != nil {
		return kernelAPI{}, err
	}
	missing := fmt.Errorf("%s/%s.go: no "+dev.call+" (CONTRIBUTING.md, \"Adding an op\")",
		dev.dir, kind.SnakeCase(), string(kind))
	var fn *ast.FuncDecl
	for _, d := range decls {
		if f, ok := d.(*ast.FuncDecl); ok && f.Recv == nil && f.Name.Name == string(kind) {
			fn = f
		}
	}
	if fn == nil || len(fn.Type.Params.List) == 0 || (fn.Type.TypeParams != nil) != dev.generic {
		return kernelAPI{}, missing
	}
	argType := fn.Type.Params.List[0].Type
	name := argType
	if index, ok := argType.(*ast.IndexExpr); ok {
		name = index.X
	}
	ident, ok := name.(*ast.Ident)
	if !ok {
		return kernelAPI{}, missing
	}
	api := kernelAPI{entry: dev.pkg + "." + string(kind), args: dev.pkg + "." + types.ExprString(argType)}
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
					api.fields = append(api.fields, n.Name)
					api.types = append(api.types, types.ExprString(f.Type))
				}
			}
			return api, nil
		}
	}
	return kernelAPI{}, fmt.Errorf("%s: the args %s of %s are no struct of package %s", dev.dir, ident.Name, api.entry, dev.pkg)
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

// fieldType returns the type the args give field, and whether they have it.
func (api kernelAPI) fieldType(field string) (string, bool) {
	i := slices.Index(api.fields, field)
	if i < 0 {
		return "", false
	}
	return api.types[i], true
}

// attrGoTypes are the Go types of the attrs' values, by kind, as the
// kernels' args and the generated attrs hold them.
var attrGoTypes = map[opdef.AttrKind]string{opdef.FloatAttr: "float32", opdef.BoolAttr: "bool",
	opdef.StringAttr: "string", opdef.IntAttr: "int64", opdef.TypeAttr: "opdef.DType"}

// takenByCapi reports whether capi takes attr itself, so that the kernels'
// args have no field of it: a type attr (T is the kernels' instantiation),
// or data_format (the layout of their Dims).
func takenByCapi(attr opdef.Attr) bool {
	return attr.Kind == opdef.TypeAttr || attr.Name == "data_format"
}

package main

import (
	"bytes"
	"fmt"
	"go/format"
	"slices"

	"github.com/gobn/gobn/internal/genfile"
	"github.com/gobn/gobn/internal/recipe"
	"github.com/gobn/gobn/opdef"
)

// GenerateAttrs returns the Go source of capi/attrs_gen.go: the attrs of a
// kernel, one field for each attr any op has (named as the kernels' args
// name it, kernelField), the method that reads those of a kernel's op from
// TensorFlow's construction or an XLA call's backend_config, each by its
// kind, and the method that says which outputs a call has (a list,
// opdef.Arg.Number, where its attr asks for it). It fails on two ops that
// give one attr name two kinds.
func GenerateAttrs(ops []opdef.Op) ([]byte, error) {
	var all []opdef.Attr
	lists := map[string]string{} // an attr that counts a list output → the output
	for _, op := range ops {
		for _, a := range op.Attrs {
			i := slices.IndexFunc(all, func(b opdef.Attr) bool { return b.Name == a.Name })
			if i < 0 {
				all = append(all, a)
			} else if all[i].Kind != a.Kind {
				return nil, fmt.Errorf("gencapi: %s: the attr %s is of another kind than another op's", op.Name, a.Name)
			}
		}
		for _, out := range op.Outputs {
			if out.Number != "" {
				lists[out.Number] = out.Name
			}
		}
	}
	imports := []string{"github.com/gobn/gobn/opdef"}
	if len(lists) > 0 {
		imports = append([]string{"fmt"}, imports...)
	}
	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	b.WriteString(genfile.GoFile{Generator: "gencapi", Source: "opdef", Package: "main", Imports: imports}.Prologue())
	p("\n// attrs are a kernel's attrs: one field for each attr an op of opdef has,\n")
	p("// of its kind's Go type; a kernel sets those its op declares (read).\ntype attrs struct {\n")
	for _, a := range all {
		p("\t%s %s // %s\n", recipe.Field(a.Name), recipe.AttrGoTypes[a.Kind], a.Name)
	}
	p("}\n\n")
	p("// read sets the attrs op declares from src, each by its kind. An attr\n")
	p("// it does not know (this file is stale) is an error, not dropped.\n")
	p("func (a *attrs) read(op opdef.Op, src attrSource) error {\n\tfor _, attr := range op.Attrs {\n")
	p("\t\tvar err error\n\t\tswitch attr.Name {\n")
	readers := map[opdef.AttrKind]string{opdef.TypeAttr: "dtype", opdef.FloatAttr: "float", opdef.BoolAttr: "bool",
		opdef.StringAttr: "string", opdef.IntAttr: "int"}
	for _, a := range all {
		field := recipe.Field(a.Name)
		p("\t\tcase %q:\n", a.Name)
		if out, ok := lists[a.Name]; ok {
			p("\t\t\tif a.%s, err = src.%s(attr.Name); err == nil && (a.%s < 0 || a.%s > 1) {\n",
				field, readers[a.Kind], field, field)
			p("\t\t\t\terr = &opdef.ArgumentError{Msg: fmt.Sprintf(%q, a.%s)}\n\t\t\t}\n",
				a.Name+" must be 0 or 1 (gobn's kernels write "+out+" once or not at all), got %d", field)
			continue
		}
		p("\t\t\ta.%s, err = src.%s(attr.Name)\n", field, readers[a.Kind])
	}
	p("\t\tdefault:\n\t\t\terr = internalError(\"capi: \" + op.Name + \" has the attr \" + attr.Name + ")
	p("\", which attrs_gen.go does not read: run go generate ./capi\")\n\t\t}\n")
	p("\t\tif err != nil {\n\t\t\treturn err\n\t\t}\n\t}\n\treturn nil\n}\n\n")
	if len(lists) == 0 {
		p("// has reports whether a call with attrs a has output out: every output,\n")
		p("// since no op of opdef has a list (opdef.Arg.Number).\n")
		p("func (a *attrs) has(opdef.Arg) bool { return true }\n")
		return format.Source(b.Bytes())
	}
	p("// has reports whether a call with attrs a has output out: a list\n")
	p("// (opdef.Arg.Number) where its attr is 1, any other always.\n")
	p("func (a *attrs) has(out opdef.Arg) bool {\n\tswitch out.Number {\n")
	for _, a := range all {
		if _, ok := lists[a.Name]; ok {
			p("\tcase %q:\n\t\treturn a.%s > 0\n", a.Name, recipe.Field(a.Name))
		}
	}
	p("\t}\n\treturn true\n}\n")
	return format.Source(b.Bytes())
}

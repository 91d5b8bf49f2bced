package main

import (
	"fmt"
	"go/format"
	"slices"

	"github.com/gobn/gobn/internal/genfile"
	"github.com/gobn/gobn/internal/recipe"
	"github.com/gobn/gobn/opdef"
)

// GenerateAttrs returns the Go source of capi/attrs_gen.go: the attrs of a
// kernel, one field for each attr any op has, of its kind's Go type, tagged
// with the attr's name (kernel.go's read sets the fields so tagged, by the
// attr's kind), and the method that says which outputs a call has (a list,
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
	var b genfile.Buffer
	p := b.P
	b.WriteString(genfile.GoFile{Generator: "gencapi", Source: "opdef", Package: "main",
		Imports: []string{"github.com/gobn/gobn/opdef"}}.Prologue())
	p("\n// attrs are a kernel's attrs: one field for each attr an op of opdef has,\n")
	p("// of its kind's Go type, tagged with its name; a kernel sets those its op\n")
	p("// declares (read).\ntype attrs struct {\n")
	for _, a := range all {
		p("\t%s %s `attr:%q`\n", recipe.Field(a.Name), recipe.AttrGoTypes[a.Kind], a.Name)
	}
	p("}\n\n")
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

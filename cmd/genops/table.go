package main

import (
	"fmt"
	"go/format"

	"github.com/gobn/gobn/internal/genfile"
	"github.com/gobn/gobn/opdef"
)

// GenerateTable returns the gofmt-ed Go source of ops' test table of the
// wrappers: each op's wrapper beside the bindings' stock wrapper (nil for an
// op stock TensorFlow lacks), with their option functions by attr name. The
// tests check every wrapper it names against opdef and the stock signature.
func GenerateTable(ops []opdef.Op) ([]byte, error) {
	var b genfile.Buffer
	p := b.P
	b.WriteString(genfile.GoFile{Generator: "genops", Source: "opdef", Package: "ops_test",
		Imports: []string{"github.com/galeone/tensorflow/tensorflow/go/op", "github.com/gobn/gobn/ops"}}.Prologue())
	p("// wrappers lists ops_gen.go's wrappers by the op they add.\n")
	p("var wrappers = map[string]wrapper{\n")
	for _, o := range ops {
		_, _, optional, err := wrapperAttrs(o)
		if err != nil {
			return nil, err
		}
		name := goName(o)
		stock := func(fn string) string {
			if !hasStockWrapper(o) {
				return "nil"
			}
			return "op." + fn
		}
		p("%q: {ops.%s, %s, ", o.Name, name, stock(name))
		if len(optional) == 0 {
			p("nil},\n")
			continue
		}
		p("map[string][2]any{\n")
		for _, at := range optional {
			fn := name + camel(at.name)
			p("%q: {ops.%s, %s},\n", at.name, fn, stock(fn))
		}
		p("}},\n")
	}
	p("}\n")
	src, err := format.Source(b.Bytes())
	if err != nil {
		return nil, fmt.Errorf("formatting the generated table: %v", err)
	}
	return src, nil
}

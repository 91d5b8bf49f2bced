// Command genops writes ops/ops_gen.go: one Go wrapper per gobn op, generated
// from opdef, and ops/wrappers_gen_test.go, the table by which ops' tests
// reach each wrapper (Go cannot list a package's functions), with the signature of the stock op's wrapper in the TensorFlow
// Go bindings' op package (the same parameters, results and optional-attr
// functions), so that moving a tfgo program to gobn is an import change.
//
// The rules are those of the bindings' genop: inputs in order; type attrs
// that an input's type names are inferred and omitted; attrs without a
// default become parameters after the inputs; attrs with a default become
// <Op><Attr> option functions of type <Op>Attr. The attrs are opdef's
// structured data, not their spec strings.
//
// Usage (from ops/, through go generate):
//
//	go run ../cmd/genops
package main

import (
	"bytes"
	"fmt"
	"go/format"
	"slices"
	"strconv"
	"strings"

	"github.com/gobn/gobn/internal/genfile"
	"github.com/gobn/gobn/opdef"
)

func main() {
	genfile.Main("genops", func(string) (map[string][]byte, error) {
		wrappers, err := Generate(opdef.All)
		if err != nil {
			return nil, err
		}
		table, err := GenerateTable(opdef.All)
		return map[string][]byte{"ops_gen.go": wrappers, "wrappers_gen_test.go": table}, err
	})
}

// attr is an op attr as the wrappers see it.
type attr struct {
	name     string // TensorFlow's name, e.g. "data_format"
	goType   string // float32, bool, string, tf.DataType
	allowed  string // the allowed values as the spec lists them, if any
	def      string // the default as a Go literal; "" when there is none
	inferred bool   // a type attr some input's type names
}

// wrapperAttr reads an opdef attr as the wrappers see it.
func wrapperAttr(op opdef.Op, a opdef.Attr) (attr, error) {
	at := attr{name: a.Name}
	at.allowed = a.Allowed()
	switch a.Kind {
	case opdef.TypeAttr:
		at.goType = "tf.DataType"
		if at.allowed == "" {
			at.allowed = a.TypeClass
		}
		for _, in := range op.Inputs {
			at.inferred = at.inferred || in.Type == a.Name
		}
	case opdef.FloatAttr:
		at.goType = "float32"
	case opdef.BoolAttr:
		at.goType = "bool"
	case opdef.StringAttr:
		at.goType = "string"
	case opdef.IntAttr:
		at.goType = "int64"
	default:
		return attr{}, fmt.Errorf("%s: attr %s has kind %d, which genops does not handle", op.Name, a.Name, a.Kind)
	}
	switch d := a.Default.(type) {
	case nil:
	case string:
		at.def = strconv.Quote(d)
	default:
		at.def = a.DefaultString()
	}
	return at, nil
}

// Generate returns the gofmt-ed Go source of the wrappers for ops.
func Generate(ops []opdef.Op) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(genfile.GoFile{Generator: "genops", Source: "opdef", Package: "ops",
		Imports: []string{"tf github.com/galeone/tensorflow/tensorflow/go", "github.com/galeone/tensorflow/tensorflow/go/op"}}.Prologue())
	for _, o := range ops {
		if err := generateOp(&b, o); err != nil {
			return nil, err
		}
	}
	src, err := format.Source(b.Bytes())
	if err != nil {
		return nil, fmt.Errorf("formatting the generated source: %v", err)
	}
	return src, nil
}

// goName is the name of o's wrapper: its stock twin's, or for an op stock
// TensorFlow does not have, or has only internally (the bindings wrap no op
// whose name starts with an underscore), its own without the namespace.
func goName(o opdef.Op) string {
	if !hasStockWrapper(o) {
		return o.BaseName()
	}
	return o.Stock
}

// hasStockWrapper reports whether the bindings' op package wraps o's stock
// twin.
func hasStockWrapper(o opdef.Op) bool { return o.Stock != "" && !strings.HasPrefix(o.Stock, "_") }

// wrapperAttrs reads o's attrs as its wrapper sees them: all of them, those
// that are parameters (required) and those that are options (optional).
func wrapperAttrs(o opdef.Op) (attrs, required, optional []attr, err error) {
	attrs = make([]attr, len(o.Attrs))
	for i, a := range o.Attrs {
		at, err := wrapperAttr(o, a)
		if err != nil {
			return nil, nil, nil, err
		}
		attrs[i] = at
		switch {
		case at.inferred:
		case at.def == "":
			required = append(required, at)
		default:
			optional = append(optional, at)
		}
	}
	return attrs, required, optional, nil
}

func generateOp(b *bytes.Buffer, o opdef.Op) error {
	p := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	goName := goName(o)
	attrs, required, optional, err := wrapperAttrs(o)
	if err != nil {
		return err
	}

	if len(optional) > 0 {
		p("\n// %sAttr is an optional argument to %s.\n", goName, goName)
		p("type %sAttr func(optionalAttr)\n", goName)
		for _, at := range optional {
			fn := goName + camel(at.name)
			p("\n// %s sets the optional %s attribute to value", fn, at.name)
			if at.goType == "string" && at.allowed != "" {
				p(", one of %s", at.allowed)
			}
			p(";\n// if not specified, it defaults to %s.\n", at.def)
			p("func %s(value %s) %sAttr { return %sAttr(setAttr(%q, value)) }\n",
				fn, at.goType, goName, goName, at.name)
		}
	}

	p("\n// %s adds a %s operation to the graph:\n", goName, o.Name)
	if o.Stock != "" {
		p("// gobn's kernel with the inputs, outputs and attrs of the stock\n")
		p("// %s. Load must have loaded libgobn.so first.\n//\n", o.Stock)
	} else {
		p("// gobn's kernel; stock TensorFlow has no such op.\n")
		p("// Load must have loaded libgobn.so first.\n//\n")
	}
	p("// Inputs: %s.\n", argList(o.Inputs))
	for _, at := range attrs {
		if at.inferred {
			p("// %s is inferred from the inputs (%s); CPU kernels exist for %s.\n",
				at.name, at.allowed, kernelTypes(o, at.name))
		}
	}
	for _, at := range required {
		p("// %s is the %s attribute (%s).\n", at.name, at.name, at.goType)
	}
	returns := make([]string, len(o.Outputs))
	for i, out := range o.Outputs {
		switch {
		case out.Shape.Empty:
			returns[i] = fmt.Sprintf("%s (%s, an empty placeholder of shape [0])", out.Name, out.Type)
		case out.Shape.Scalar:
			returns[i] = fmt.Sprintf("%s (%s, a scalar)", out.Name, out.Type)
		default:
			returns[i] = fmt.Sprintf("%s (%s, shaped like %s)", out.Name, out.Type, o.Inputs[out.Shape.Like].Name)
		}
	}
	p("//\n%s", comment("Returns "+strings.Join(returns, ", ")+"."))

	params := []string{"scope *op.Scope"}
	inputs := make([]string, len(o.Inputs))
	for i, in := range o.Inputs {
		params = append(params, in.Name+" tf.Output")
		inputs[i] = in.Name
	}
	for _, at := range required {
		params = append(params, at.name+" "+at.goType)
	}
	if len(optional) > 0 {
		params = append(params, "optional ..."+goName+"Attr")
	}
	results := make([]string, len(o.Outputs))
	outputs := make([]string, len(o.Outputs))
	var lists []opdef.Arg
	for i, out := range o.Outputs {
		results[i] = out.Name + " tf.Output"
		outputs[i] = fmt.Sprintf("operation.Output(%d)", i)
		if out.Number != "" { // opdef holds a list to the last outputs
			results[i], outputs[i] = out.Name+" []tf.Output", out.Name
			lists = append(lists, out)
		}
	}
	p("func %s(%s) (%s) {\n", goName, strings.Join(params, ", "), strings.Join(results, ", "))
	requiredAttrs := make([]string, len(required))
	for i, at := range required {
		requiredAttrs[i] = fmt.Sprintf("%q: %s", at.name, at.name)
	}
	optionalArg := "noOptions"
	if len(optional) > 0 {
		optionalArg = "optional"
	}
	p("\toperation := addOperation(scope, %q, []tf.Input{%s},\n\t\toptionalAttr{%s}, %s)\n",
		o.Name, strings.Join(inputs, ", "), strings.Join(requiredAttrs, ", "), optionalArg)
	p("\tif operation == nil {\n\t\treturn\n\t}\n")
	for i, out := range lists { // as many as its number attr says, after the single outputs
		p("\tn%d, err := operation.OutputListSize(%q)\n\tif err != nil {\n", i, out.Name)
		p("\t\tscope.UpdateErr(%q, err)\n\t\treturn\n\t}\n", o.Name)
		p("\tfor i := range n%d {\n\t\t%s = append(%s, operation.Output(%d+i))\n\t}\n",
			i, out.Name, out.Name, len(o.Outputs)-len(lists))
	}
	p("\treturn %s\n}\n", strings.Join(outputs, ", "))
	return nil
}

// comment wraps text into // lines of at most 80 columns.
func comment(text string) string {
	var b strings.Builder
	line := "//"
	for _, word := range strings.Fields(text) {
		if len(line)+1+len(word) > 80 && line != "//" {
			b.WriteString(line + "\n")
			line = "//"
		}
		line += " " + word
	}
	b.WriteString(line + "\n")
	return b.String()
}

// camel turns an attr name into the suffix of its option function, as the
// bindings do: "data_format" → "DataFormat".
func camel(name string) string {
	var s strings.Builder
	for _, part := range strings.Split(name, "_") {
		if part != "" {
			s.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return s.String()
}

func argList(args []opdef.Arg) string {
	specs := make([]string, len(args))
	for i, a := range args {
		specs[i] = a.Spec()
	}
	return strings.Join(specs, ", ")
}

// kernelTypes lists the dtypes op's CPU kernels bind to the type attr name.
func kernelTypes(op opdef.Op, name string) string {
	var types []string
	for _, k := range op.Kernels {
		if d, ok := k[name]; ok && !slices.Contains(types, d.String()) {
			types = append(types, d.String())
		}
	}
	return strings.Join(types, ", ")
}

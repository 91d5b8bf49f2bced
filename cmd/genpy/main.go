// Command genpy writes the Python package's generated modules: the facts
// about gobn's ops that the package and its tests need, from opdef
// (_opdefs_gen.py), and the tolerance table, from internal/tolerance
// (_tolerance_gen.py), so that no Python file writes them by hand.
//
// Usage (through go generate, make generate):
//
//	go run ./cmd/genpy -dir python/gobn
package main

//go:generate go run . -dir ../../python/gobn

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/gobn/gobn/internal/genfile"
	"github.com/gobn/gobn/internal/tolerance"
	"github.com/gobn/gobn/opdef"
)

// Files maps each generated file's name to its contents.
func Files() map[string][]byte {
	return map[string][]byte{
		"_opdefs_gen.py":    Generate(opdef.All),
		"_tolerance_gen.py": GenerateTolerances(tolerance.ByDType),
	}
}

func main() {
	genfile.Main("genpy", func(string) (map[string][]byte, error) { return Files(), nil })
}

// pythonDTypes are NumPy's (and tf.DType.name's) names of the dtypes
// TensorFlow's specs call float, half, bfloat16 and double.
var pythonDTypes = map[string]string{"float": "float32", "half": "float16", "bfloat16": "bfloat16", "double": "float64"}

// GenerateTolerances returns the Python module of the tolerance table.
func GenerateTolerances(table map[string]tolerance.Bound) []byte {
	var b genfile.Buffer
	p := b.P
	b.WriteString(genfile.Header("#", "genpy", "internal/tolerance"))
	p("\"\"\"(rtol, atol) per dtype name: docs/design.md's tolerances (gobn._testing uses them).\"\"\"\n\n")
	p("TOLERANCES = {\n")
	for _, spec := range []string{"float", "half", "bfloat16", "double"} {
		t := table[spec]
		p("    %q: (%s, %s),\n", pythonDTypes[spec], pyFloat(t.Rtol), pyFloat(t.Atol))
	}
	p("}\n")
	return b.Bytes()
}

func pyFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// Generate returns the Python module for ops.
func Generate(ops []opdef.Op) []byte {
	var b genfile.Buffer
	p := b.P
	b.WriteString(genfile.Header("#", "genpy", "opdef"))
	p(`"""The ops libgobn.so registers, in registration order (gobn._opdef.Op)."""

from gobn._opdef import Op

OPS = (
`)
	for _, op := range ops {
		formats := []string{opdef.NHWC} // the global-norm op: t is NHWC
		if a, ok := op.Attr("data_format"); ok {
			formats = a.Values
		}
		p("    Op(%q, %q, stock=%s, gradient_of=%s, kind=%q,\n",
			op.Name, WrapperName(op.Name), optional(op.Stock), optional(op.GradientOf), string(op.Kind))
		p("       inputs=%s,\n", tuple(names(op.Inputs, func(a opdef.Arg) string { return a.Name })))
		p("       outputs=%s,\n", tuple(names(op.Outputs, func(a opdef.Arg) string { return a.Name })))
		p("       attrs=%s,\n", tuple(names(op.Attrs, func(a opdef.Attr) string { return a.Name })))
		var lists []string
		for _, a := range op.Outputs {
			if a.Number != "" {
				lists = append(lists, fmt.Sprintf("(%q, %q)", a.Name, a.Number))
			}
		}
		p("       lists=(%s),\n", strings.Join(lists, ", ")+trailingComma(len(lists)))
		p("       data_formats=%s,\n", tuple(formats))
		p("       dtypes=%s, gpu_dtypes=%s,\n", tuple(typesOf(op.Kernels)), tuple(typesOf(op.GPUKernels)))
		p("       output_types=%s, host_memory=%s,\n",
			tuple(names(op.Outputs, func(a opdef.Arg) string { return argType(op, a) })), tuple(op.HostMemory))
		xlaIn := make([]string, 0, len(op.Inputs))
		for _, i := range op.XLAInputs() {
			a := op.Inputs[i]
			ranks := make([]string, len(a.Ranks))
			for j, r := range a.Ranks {
				ranks[j] = strconv.Itoa(r)
			}
			xlaIn = append(xlaIn, fmt.Sprintf("(%q, %q, (%s))", a.Name, argType(op, a), strings.Join(ranks, ", ")+trailingComma(len(ranks))))
		}
		p("       xla_inputs=(%s),\n", strings.Join(xlaIn, ", ")+trailingComma(len(xlaIn)))
		xlaOut := make([]string, 0, len(op.Outputs))
		for _, i := range op.XLAOutputs() {
			a := op.Outputs[i]
			xlaOut = append(xlaOut, fmt.Sprintf("(%q, %q)", a.Name, op.Inputs[a.Shape.Like].Name))
		}
		p("       xla_outputs=(%s),\n", strings.Join(xlaOut, ", ")+trailingComma(len(xlaOut)))
		var xlaAttrs []string
		for _, a := range op.Attrs {
			if kind, ok := attrKinds[a.Kind]; ok {
				xlaAttrs = append(xlaAttrs, fmt.Sprintf("(%q, %q)", a.Name, kind))
			}
		}
		p("       xla_attrs=(%s)),\n", strings.Join(xlaAttrs, ", ")+trailingComma(len(xlaAttrs)))
	}
	p(")\n\n")
	p("# Registered names, in order.\nOP_NAMES = tuple(op.name for op in OPS)\n\n")
	p("# The ops of a stock twin, by the stock name.\nBY_STOCK_NAME = {op.stock: op for op in OPS if op.stock}\n\n")
	p("# The ops by registered name.\nBY_NAME = {op.name: op for op in OPS}\n\n")
	p("# The ops of each kernel family.\nBY_KIND = {kind: tuple(op for op in OPS if op.kind == kind) for kind in dict.fromkeys(op.kind for op in OPS)}\n\n")
	p("# The data formats whose channel axis is 1 (else the last).\nCHANNELS_FIRST = %s\n", tuple(opdef.ChannelsFirstFormats))
	return b.Bytes()
}

// WrapperName is the name TensorFlow gives an op's Python wrapper
// (python_op_gen's lower-case op name): the namespace separator '>' becomes
// '_', and an '_' goes before an upper-case letter, except the first or one
// after '>', that follows or precedes a lower-case letter.
func WrapperName(op string) string {
	var b strings.Builder
	r := []rune(op)
	for i, c := range r {
		if c == '>' {
			b.WriteByte('_')
			continue
		}
		if unicode.IsUpper(c) && i > 0 && r[i-1] != '>' {
			if unicode.IsLower(r[i-1]) || i+1 < len(r) && unicode.IsLower(r[i+1]) {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

// attrKinds names the kinds of the attrs an XLA custom call carries (all
// but the type attrs, which its buffers' types give).
var attrKinds = map[opdef.AttrKind]string{opdef.FloatAttr: "float", opdef.BoolAttr: "bool", opdef.StringAttr: "string",
	opdef.IntAttr: "int"}

// argType returns a's type as the Python package resolves it: "T", or the
// fixed type an attr other than T is bound to (U: float), or a's own.
func argType(op opdef.Op, a opdef.Arg) string {
	if a.Type == "T" {
		return a.Type
	}
	if len(op.Kernels) > 0 {
		if d, ok := op.Kernels[0][a.Type]; ok {
			return d.String()
		}
	}
	return a.Type
}

// optional renders s as a Python string, or None when it is "".
func optional(s string) string {
	if s == "" {
		return "None"
	}
	return fmt.Sprintf("%q", s)
}

// trailingComma returns the comma a Python tuple of n == 1 items needs.
func trailingComma(n int) string {
	if n == 1 {
		return ","
	}
	return ""
}

// typesOf lists the dtypes bindings bind T to, in order.
func typesOf(bindings []opdef.TypeBinding) []string {
	return names(bindings, func(b opdef.TypeBinding) string { return b["T"].String() })
}

// names lists the names of xs, in order.
func names[X any](xs []X, name func(X) string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = name(x)
	}
	return out
}

// tuple renders strs as a Python tuple of strings.
func tuple(strs []string) string {
	quoted := make([]string, len(strs))
	for i, s := range strs {
		quoted[i] = fmt.Sprintf("%q", s)
	}
	if len(quoted) == 1 {
		return "(" + quoted[0] + ",)"
	}
	return "(" + strings.Join(quoted, ", ") + ")"
}

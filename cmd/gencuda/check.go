package main

import (
	"fmt"
	"go/format"
	"strings"

	"github.com/gobn/gobn/internal/genfile"
	"github.com/gobn/gobn/internal/recipe"
	"github.com/gobn/gobn/opdef"
)

// checkTensor is a tensor a kind's kernels take, as the GPU check makes it.
type checkTensor struct {
	name       string
	output     bool
	activation bool     // shaped as the activation, else per channel
	ofT        bool     // of T, else float32
	count      bool     // an element count: a host value, not a tensor
	forward    []string // an output's inputs it may take over
	list       string   // an output's number attr (opdef.Arg.Number)
}

// checkKind is a kind's kernels as the GPU check calls them.
type checkKind struct {
	kind     opdef.Kind
	tensors  []checkTensor
	attrs    []opdef.Attr // the attrs the kernels take, in the fields of their names
	cpu, gpu recipe.Kernel
}

// GenerateCheck returns the Go source of kernels/cuda/kinds_gen_test.go:
// for each kind of ops, the tensors its kernels take (from opdef: each
// field of its kernels' args that holds an arg of its ops) and its Go and
// CUDA kernels called on a GPU check call's tensors and attrs, by name,
// so that the check (check_test.go) runs every kind with no code of its
// own. root is the repository, whose kernels' packages it reads.
func GenerateCheck(ops []opdef.Op, root string) ([]byte, error) {
	kinds := opdef.KindsOf(ops)
	checks := make([]checkKind, len(kinds))
	for i, kind := range kinds {
		var err error
		if checks[i], err = newCheckKind(kind, ops, root); err != nil {
			return nil, err
		}
	}
	var b genfile.Buffer
	p := b.P
	b.WriteString(genfile.GoFile{Generator: "gencuda", Source: "opdef and the kinds' kernels", Package: "cuda_test",
		Imports: []string{"github.com/gobn/gobn/kernels", "github.com/gobn/gobn/kernels/cuda"}}.Prologue())
	b.WriteString(`
// kinds are the kinds' kernels as the GPU check calls them, in opdef's
// order: the tensors each takes, by name, and its Go kernel (by T: float32,
// half, bfloat16) and CUDA kernel on a call's tensors and attrs. A kind
// is a line, and each of its kernels' calls: the kinds differ in their
// fields alone.
var kinds = []kindCall{
`)
	for _, k := range checks {
		tensors := make([]string, len(k.tensors))
		for i, t := range k.tensors {
			fields := []string{fmt.Sprintf("name: %q", t.name)}
			for _, flag := range []struct {
				on   bool
				name string
			}{{t.output, "output"}, {t.activation, "activation"}, {t.ofT, "ofT"}, {t.count, "count"}} {
				if flag.on {
					fields = append(fields, flag.name+": true")
				}
			}
			if len(t.forward) > 0 {
				fields = append(fields, fmt.Sprintf("forward: []string{%s}", quoted(t.forward)))
			}
			if t.list != "" {
				fields = append(fields, fmt.Sprintf("list: %q", t.list))
			}
			tensors[i] = "{" + strings.Join(fields, ", ") + "}"
		}
		p("\t{name: %q, tensors: []kindTensor{%s}, cpu: [3]func(*hostMemory, *call){cpu%s[float32], cpu%s[kernels.Half], cpu%s[kernels.BFloat16]}, gpu: gpu%s},\n",
			k.kind, strings.Join(tensors, ", "), k.kind, k.kind, k.kind, k.kind)
	}
	p("}\n")
	for _, k := range checks {
		k.write(p)
	}
	return format.Source(b.Bytes())
}

// GenerateKernelTable returns the Go source of kernels/kinds_gen_test.go:
// each kind's Go kernel instantiated for each element type, by the name of
// its dtype, which the golden test (golden_test.go) calls with its args
// filled by name.
func GenerateKernelTable(ops []opdef.Op) ([]byte, error) {
	var b genfile.Buffer
	p := b.P
	b.WriteString(genfile.GoFile{Generator: "gencuda", Source: "opdef", Package: "kernels_test",
		Imports: []string{"github.com/gobn/gobn/kernels"}}.Prologue())
	b.WriteString(`
// kindKernels are the kinds' Go kernels, by kind and by
// the dtype of T: func(<its args>[T]) values, which the golden test calls
// by reflection with their args' fields filled by name.
var kindKernels = map[string]map[string]any{
`)
	for _, kind := range opdef.KindsOf(ops) {
		var byType []string
		for _, t := range []struct{ dtype, goType string }{
			{"float", "float32"}, {"double", "float64"}, {"half", "kernels.Half"}, {"bfloat16", "kernels.BFloat16"},
		} {
			byType = append(byType, fmt.Sprintf("%q: kernels.%s[%s]", t.dtype, kind, t.goType))
		}
		p("\t%q: {%s},\n", kind, strings.Join(byType, ", "))
	}
	p("}\n")
	return format.Source(b.Bytes())
}

func newCheckKind(kind opdef.Kind, ops []opdef.Op, root string) (checkKind, error) {
	k := checkKind{kind: kind}
	var err error
	if k.cpu, err = recipe.ReadKernel(root, recipe.CPU, kind); err != nil {
		return k, err
	}
	if k.gpu, err = recipe.ReadKernel(root, recipe.GPU, kind); err != nil {
		return k, err
	}
	var of []opdef.Op
	for _, op := range ops {
		if op.Kind == kind {
			of = append(of, op)
		}
	}
	argOf := func(field string) (opdef.Op, opdef.Arg, bool, bool) {
		for _, op := range of {
			for _, list := range []struct {
				args   []opdef.Arg
				output bool
			}{{op.Inputs, false}, {op.Outputs, true}} {
				for _, a := range list.args {
					if recipe.Field(a.Name) == field {
						return op, a, list.output, true
					}
				}
			}
		}
		return opdef.Op{}, opdef.Arg{}, false, false
	}
	for i, field := range k.cpu.Fields {
		op, a, output, ok := argOf(field)
		if !ok {
			if attr, ok := attrOf(of, field); ok {
				k.attrs = append(k.attrs, attr)
			}
			continue // the dims
		}
		t := checkTensor{name: a.Name, output: output, ofT: k.cpu.Types[i] == "[]T", count: a.Count, forward: a.Forward,
			list: a.Number}
		if output {
			t.activation = !a.Shape.Empty && !a.Shape.Scalar && len(op.Inputs[a.Shape.Like].Ranks) > 0 &&
				op.Inputs[a.Shape.Like].Ranks[0] >= 4
		} else {
			t.activation = len(a.Ranks) > 0 && a.Ranks[0] >= 4
		}
		if !t.count && k.cpu.Types[i] != "[]T" && k.cpu.Types[i] != "[]float32" {
			return k, fmt.Errorf("%s: %s's field %s is %s: the GPU check takes []T, []float32 or a count",
				recipe.CPU.File(kind), k.cpu.Args, field, k.cpu.Types[i])
		}
		k.tensors = append(k.tensors, t)
	}
	return k, nil
}

// attrOf returns the attr of ops whose field is field, and whether there is
// one.
func attrOf(ops []opdef.Op, field string) (opdef.Attr, bool) {
	for _, op := range ops {
		for _, a := range op.Attrs {
			if recipe.Field(a.Name) == field {
				return a, true
			}
		}
	}
	return opdef.Attr{}, false
}

func (k checkKind) write(p func(string, ...any)) {
	var cpu, gpu []string
	for _, field := range k.cpu.Fields {
		if v, ok := k.value(field, false); ok {
			cpu = append(cpu, field+": "+v)
		}
	}
	for _, field := range k.gpu.Fields {
		if v, ok := k.value(field, true); ok {
			gpu = append(gpu, field+": "+v)
		}
	}
	p("\n// cpu%s runs the %s kind's Go kernel on c's tensors in m.\n", k.kind, k.kind)
	p("func cpu%s[T kernels.Element](m *hostMemory, c *call) {\n\t%s(%s{%s})\n}\n",
		k.kind, k.cpu.Entry, k.cpu.Args, strings.Join(cpu, ", "))
	p("\n// gpu%s is the %s kind's CUDA kernel on c's tensors.\n", k.kind, k.kind)
	p("func gpu%s(c *call) gpuOp {\n\treturn bind(%s{%s}, %s)\n}\n",
		k.kind, k.gpu.Args, strings.Join(gpu, ", "), k.gpu.Entry)
}

// value returns the Go expression of field of the kernels' args in a
// call, on the GPU (a device address) or the CPU (a view of host memory).
func (k checkKind) value(field string, onGPU bool) (string, bool) {
	switch field {
	case "Dims":
		return "c.dims", true
	case "DType":
		return "c.dt", onGPU
	}
	for _, t := range k.tensors {
		if recipe.Field(t.name) != field {
			continue
		}
		switch {
		case t.count:
			return "c.count", true
		case onGPU:
			return fmt.Sprintf("c.ptr(%q)", t.name), true
		case t.ofT:
			return fmt.Sprintf("tensorOf[T](m, c, %q)", t.name), true
		}
		return fmt.Sprintf("tensorOf[float32](m, c, %q)", t.name), true
	}
	for _, a := range k.attrs {
		if recipe.Field(a.Name) == field {
			return fmt.Sprintf("c.attrs[%q].(%s)", a.Name, recipe.AttrGoTypes[a.Kind]), true
		}
	}
	return "", false
}

func quoted(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

package main

import (
	"fmt"
	"go/format"
	"slices"
	"strings"

	"github.com/gobn/gobn/internal/genfile"
	"github.com/gobn/gobn/internal/recipe"
	"github.com/gobn/gobn/opdef"
)

// GenerateFamilies returns the Go source of capi/families_gen.go: for each
// kind of op (an op family, opdef.Kind), the typed binders that call its
// kernels, so that nothing in capi names a kind's inputs, outputs or attrs
// by hand:
//
//   - <family>In and <family>Out, the inputs and the outputs the kernels
//     write, one field each, named after the op's args;
//   - k.bind<Family>(in): the inputs' dtypes confirmed, bound by name, and
//     opdef's rules applied (opdef.Op.Check), giving the geometry;
//   - k.allocate<Family>(in, allocate): every output allocated with the
//     dtype and shape opdef gives it (ShapeRule, Forward), a list output
//     (opdef.Arg.Number) where its attr asks for it;
//   - cpuArgs<Family>[T](k, d, in, out) and gpuArgs<Family>(k, t, d, in,
//     out): the args of the kind's kernels, of the types their entry points
//     take (readKernelAPI: kernels.<Kind> and cuda.<Kind>, found in the
//     packages' sources under root), with the dims, each tensor in the field
//     of its arg's name and each attr in the field of its name
//     (kernelField): views of T on the CPU, device addresses on the GPU;
//   - k.run<Family>(g, in, out, dev): T's instantiation on k's device,
//     cuda.<Kind> with its CUDA type or kernels.<Kind> with its Go type, for
//     each dtype opdef binds the family's kernels to;
//   - k.<family>(in, allocate, dev), the family's method: bind, check an
//     input count (opdef.Arg.Count), allocate, set an output count, run;
//
// and compute, which hands a call to its op's family. It fails on a family
// whose ops disagree where one field must serve them all (an arg's name at
// a position, its dtype, an output's shape rule or forwarding, a count, an
// attr), and on kernels whose args leave out an output or an attr, or name
// one the ops do not have: the error names the file of the missing piece.
func GenerateFamilies(ops []opdef.Op, root string) ([]byte, error) {
	var b genfile.Buffer
	p := b.P
	b.WriteString(genfile.GoFile{Generator: "gencapi", Source: "opdef", Package: "main",
		Imports: []string{"github.com/gobn/gobn/kernels", "github.com/gobn/gobn/kernels/cuda", "github.com/gobn/gobn/opdef"}}.Prologue() + "\n")
	maxInputs := 0
	for _, op := range ops {
		maxInputs = max(maxInputs, len(op.Inputs))
	}
	p("// maxInputs is the most inputs an op has.\nconst maxInputs = %d\n\n", maxInputs)
	p("// compute validates the inputs of one call of k's op with stock's rules,\n")
	p("// allocates its outputs and runs it on k's device, through the op's family's\n")
	p("// method. dev is the call as a GPU kernel needs it; a CPU kernel takes none\n")
	p("// (nil).\n")
	p("func (k *kernel) compute(in []tensor, allocate allocator, dev gpuCall) error {\n\tswitch k.op.Kind {\n")
	var families []family
	for _, kind := range opdef.KindsOf(ops) {
		f, err := newFamily(kind, ops, root)
		if err != nil {
			return nil, err
		}
		families = append(families, f)
		p("\tcase opdef.%s:\n\t\treturn k.%s(in, allocate, dev)\n", kind, f.name)
	}
	p("\t}\n\treturn internalError(\"capi: no family for \" + k.op.Name)\n}\n")
	for _, f := range families {
		f.write(p)
	}
	return format.Source(b.Bytes())
}

// family is one kind's ops as the generated code sees them.
type family struct {
	kind     opdef.Kind
	name     string // its method, e.g. fusedBatchNormGrad
	ops      []opdef.Op
	inputs   []slot
	outputs  []slot
	cpuTypes []opdef.DType // the dtypes of T its CPU kernels bind, in order
	gpuTypes []opdef.DType
	cpu, gpu recipe.Kernel
}

// slot is an input or output position of a family: the arg there in each
// op that has one (nil where an op has fewer).
type slot struct {
	args []*opdef.Arg
}

func (s slot) first() opdef.Arg {
	for _, a := range s.args {
		if a != nil {
			return *a
		}
	}
	return opdef.Arg{}
}

// everywhere reports whether every op of the family has the slot.
func (s slot) everywhere() bool { return !slices.Contains(s.args, nil) }

// placeholder reports whether the slot is an output of shape [0] in every
// op: allocated, not bound.
func (s slot) placeholder() bool {
	for _, a := range s.args {
		if a != nil && !a.Shape.Empty {
			return false
		}
	}
	return true
}

func newFamily(kind opdef.Kind, all []opdef.Op, root string) (family, error) {
	f := family{kind: kind, name: lowerFirst(string(kind))}
	var err error
	if f.cpu, err = recipe.ReadKernel(root, recipe.CPU, kind); err != nil {
		return f, err
	}
	if f.gpu, err = recipe.ReadKernel(root, recipe.GPU, kind); err != nil {
		return f, err
	}
	for _, op := range all {
		if op.Kind == kind {
			f.ops = append(f.ops, op)
		}
	}
	f.inputs, f.outputs = slots(f.ops, func(op opdef.Op) []opdef.Arg { return op.Inputs }),
		slots(f.ops, func(op opdef.Op) []opdef.Arg { return op.Outputs })
	for _, list := range [][]slot{f.inputs, f.outputs} {
		for i, s := range list {
			if s.placeholder() {
				continue
			}
			for _, a := range s.args {
				if a != nil && (a.Shape.Empty || a.Name != s.first().Name) {
					return f, fmt.Errorf("gencapi: %s ops disagree on arg %d: %s and %s", kind, i, s.first().Name, a.Name)
				}
			}
		}
	}
	for _, s := range f.outputs {
		for _, a := range s.args {
			if a != nil && (a.Shape != s.first().Shape || !slices.Equal(a.Forward, s.first().Forward)) {
				return f, fmt.Errorf("gencapi: %s ops disagree on the shape of %s", kind, a.Name)
			}
		}
	}
	for _, s := range append(append([]slot(nil), f.inputs...), f.outputs...) {
		if _, err := f.dtype(s); err != nil {
			return f, err
		}
		for j, a := range s.args {
			if a != nil && a.Count && (a.Type != "int64" || !a.Shape.Scalar && !slices.Equal(a.Ranks, []int{0}) ||
				!slices.Contains(f.ops[j].HostMemory, a.Name)) {
				return f, fmt.Errorf("gencapi: %s: the count %s must be an int64 scalar in host memory", f.ops[j].Name, a.Name)
			}
			if a != nil && (a.Count != s.first().Count || a.Count && !s.everywhere()) {
				return f, fmt.Errorf("gencapi: %s ops disagree on whether %s is a count", kind, a.Name)
			}
		}
	}
	for i, s := range f.outputs {
		if a := s.first(); a.Number != "" && i+1 < len(f.outputs) {
			return f, fmt.Errorf("gencapi: %s: the list %s must be the last output", kind, a.Name)
		}
	}
	for _, s := range f.kernelArgs() {
		if _, err := f.cpuValue(s); err != nil {
			return f, err
		}
	}
	if err := f.checkFields(); err != nil {
		return f, err
	}
	for _, op := range f.ops {
		f.cpuTypes = appendTypes(f.cpuTypes, op.Kernels)
		f.gpuTypes = appendTypes(f.gpuTypes, op.GPUKernels)
	}
	return f, nil
}

// slots lines up the args of ops by position.
func slots(ops []opdef.Op, args func(opdef.Op) []opdef.Arg) []slot {
	var out []slot
	for j, op := range ops {
		for i := range args(op) {
			if i == len(out) {
				out = append(out, slot{args: make([]*opdef.Arg, len(ops))})
			}
			out[i].args[j] = &args(op)[i]
		}
	}
	return out
}

func appendTypes(types []opdef.DType, bindings []opdef.TypeBinding) []opdef.DType {
	for _, b := range bindings {
		if !slices.Contains(types, b["T"]) {
			types = append(types, b["T"])
		}
	}
	return types
}

// dtype returns the Go expression of the slot's dtype in a call: the one
// dtype every op allows there, or k.attrs.T where every op types it T.
func (f family) dtype(s slot) (string, error) {
	var only []opdef.DType
	allT, single := true, true
	for j, a := range s.args {
		if a == nil {
			continue
		}
		allT = allT && a.Type == "T"
		types := f.ops[j].ArgDTypes(*a)
		single = single && len(types) == 1 && (only == nil || only[0] == types[0])
		only = types
	}
	switch {
	case single:
		return "opdef." + goDTypes[only[0]], nil
	case allT:
		return "k.attrs.T", nil
	}
	return "", fmt.Errorf("gencapi: %s: %s has no one dtype in its family, nor T", f.kind, s.first().Name)
}

// goDTypes are opdef's names of the dtypes; elementTypes the Go types of
// package kernels' instantiations, cudaTypes package cuda's element types.
var (
	goDTypes = map[opdef.DType]string{opdef.Float: "Float", opdef.Double: "Double", opdef.Int64: "Int64",
		opdef.BFloat16: "BFloat16", opdef.Half: "Half"}
	elementTypes = map[opdef.DType]string{opdef.Float: "float32", opdef.Double: "float64",
		opdef.BFloat16: "kernels.BFloat16", opdef.Half: "kernels.Half"}
	cudaTypes = map[opdef.DType]string{opdef.Float: "cuda.Float32", opdef.BFloat16: "cuda.BFloat16", opdef.Half: "cuda.Float16"}
)

func (f family) write(p func(string, ...any)) {
	names := make([]string, len(f.ops))
	for j, op := range f.ops {
		names[j] = op.Name
	}
	in, out, exported := f.name+"In", f.name+"Out", upperFirst(f.name)
	must := func(s string, err error) string {
		if err != nil {
			panic(err) // newFamily has checked what dtype needs
		}
		return s
	}

	p("\n// %s validates one call of the %s family with the rules of opdef,\n", f.name, f.kind)
	p("// allocates its outputs and runs it on k's device.\n")
	p("func (k *kernel) %s(in []tensor, allocate allocator, dev gpuCall) error {\n", f.name)
	p("\tb, g, err := k.bind%s(in)\n\tif err != nil {\n\t\treturn err\n\t}\n", exported)
	for _, s := range f.inputs {
		if a := s.first(); a.Count {
			p("\tif err := opdef.CheckCount(view[int64](b.%s)[0], g); err != nil { // host memory on every device\n", fieldName(a.Name))
			p("\t\treturn err\n\t}\n")
		}
	}
	p("\tout, err := k.allocate%s(&b, allocate)\n\tif err != nil {\n\t\treturn err\n\t}\n", exported)
	for _, s := range f.outputs {
		if a := s.first(); a.Count {
			p("\tview[int64](out.%s)[0] = g.N * g.S // host memory on every device\n", fieldName(a.Name))
		}
	}
	p("\treturn k.run%s(g, &b, &out, dev)\n}\n", exported)

	p("\n// %s are the inputs of the %s family, by name: those of\n// %s.\n", in, f.kind, strings.Join(names, ", "))
	p("type %s struct {\n", in)
	for _, s := range f.inputs {
		a := s.first()
		p("\t%s tensor // %s: %s%s%s\n", fieldName(a.Name), a.Name, dtypeNote(must(f.dtype(s))), ranksNote(a.Ranks), f.onlyIn(s))
	}
	p("}\n\n")
	p("// %s are the outputs the %s family's kernels write, by name", out, f.kind)
	if slices.ContainsFunc(f.outputs, slot.placeholder) {
		p("\n// (its placeholders, of shape [0], are allocated and not bound)")
	}
	p(".\ntype %s struct {\n", out)
	for _, s := range f.outputs {
		if a := s.first(); !s.placeholder() {
			p("\t%s tensor // %s: %s, %s%s\n", fieldName(a.Name), a.Name, dtypeNote(must(f.dtype(s))), f.shapeNote(a), f.onlyIn(s))
		}
	}
	p("}\n\n")

	p("// bind%s confirms the dtypes of in, the inputs of k's op,\n", exported)
	p("// binds them by name and applies the op's rules, which give the geometry\n// of its activation.\n")
	p("func (k *kernel) bind%s(in []tensor) (b %s, g opdef.Geometry, err error) {\n", exported, in)
	dtypes := make([]string, len(f.inputs))
	for i, s := range f.inputs {
		dtypes[i] = must(f.dtype(s))
	}
	p("\twant := [...]opdef.DType{%s}\n", strings.Join(dtypes, ", "))
	p("\tif err = k.checkDTypes(in, want[:len(in)]); err != nil {\n\t\treturn b, g, err\n\t}\n")
	var bound []string
	for i, s := range f.inputs {
		if s.everywhere() {
			bound = append(bound, fmt.Sprintf("%s: in[%d]", fieldName(s.first().Name), i))
		}
	}
	p("\tb = %s{%s}\n", in, strings.Join(bound, ", "))
	for i, s := range f.inputs {
		if !s.everywhere() {
			p("\tif len(in) > %d {\n\t\tb.%s = in[%d]\n\t}\n", i, fieldName(s.first().Name), i)
		}
	}
	p("\tg, err = k.check(in)\n\treturn b, g, err\n}\n\n")

	p("// allocate%s allocates the outputs of k's op with the dtypes\n", exported)
	p("// and shapes opdef gives them, offering an output the inputs it may take\n// over.\n")
	p("func (k *kernel) allocate%s(in *%s, allocate allocator) (out %s, err error) {\n", exported, in, out)
	for i, s := range f.outputs {
		a := s.first()
		dst := "out." + fieldName(a.Name)
		if s.placeholder() {
			dst = "_"
		}
		call := fmt.Sprintf("%s, err = allocate(%d, %s, %s, %s)", dst, i, must(f.dtype(s)), dimsOf(a, f.inputs), f.reuse(a))
		if s.placeholder() {
			var placeholders []string
			for _, arg := range s.args {
				if arg != nil && !slices.Contains(placeholders, arg.Name) {
					placeholders = append(placeholders, arg.Name)
				}
			}
			p("\t// %s\n", strings.Join(placeholders, " or "))
		}
		switch {
		case a.Number != "":
			p("\tif k.attrs.%s > 0 { // a list of one\n\t\tif %s; err != nil {\n\t\t\treturn out, err\n\t\t}\n\t}\n",
				recipe.Field(a.Number), call)
		case s.everywhere():
			p("\tif %s; err != nil {\n\t\treturn out, err\n\t}\n", call)
		default:
			p("\tif len(k.op.Outputs) > %d {\n\t\tif %s; err != nil {\n\t\t\treturn out, err\n\t\t}\n\t}\n", i, call)
		}
	}
	p("\treturn out, nil\n}\n\n")

	p("// run%s runs the %s family's kernel on k's device with\n", exported, f.kind)
	p("// T's type: %s with its CUDA type, %s with its Go type.\n", f.gpu.Entry, f.cpu.Entry)
	p("func (k *kernel) run%s(g opdef.Geometry, in *%s, out *%s, dev gpuCall) error {\n", exported, in, out)
	p("\td := kernelDims(g)\n\tif k.onGPU {\n\t\tswitch k.attrs.T {\n")
	for _, t := range f.gpuTypes {
		p("\t\tcase opdef.%s:\n\t\t\treturn launch(gpuArgs%s(k, %s, d, in, out), %s, dev)\n", goDTypes[t], exported, cudaTypes[t], f.gpu.Entry)
	}
	p("\t\t}\n\t\treturn k.noKernel()\n\t}\n\tswitch k.attrs.T {\n")
	for _, t := range f.cpuTypes {
		p("\tcase opdef.%s:\n\t\t%s(cpuArgs%s[%s](k, d, in, out))\n", goDTypes[t], f.cpu.Entry, exported, elementTypes[t])
	}
	p("\tdefault:\n\t\treturn k.noKernel()\n\t}\n\treturn nil\n}\n\n")

	p("// cpuArgs%s returns the args of the %s family's Go kernel\n", exported, f.kind)
	p("// with T: the dims, and the tensors and attrs in the fields of their names.\n")
	p("func cpuArgs%s[T kernels.Element](k *kernel, d kernels.Dims, in *%s, out *%s) %s {\n", exported, in, out, f.cpu.Args)
	p("\treturn %s{\n\t\t%s,\n\t}\n}\n\n", f.cpu.Args, strings.Join(f.fieldValues(f.cpu, f.cpuValue), ",\n\t\t"))
	p("// gpuArgs%s returns the args of the %s family's CUDA kernel\n", exported, f.kind)
	p("// with T's type t: the dims, and the tensors and attrs in the fields of\n// their names.\n")
	p("func gpuArgs%s(k *kernel, t cuda.DType, d kernels.Dims, in *%s, out *%s) %s {\n", exported, in, out, f.gpu.Args)
	p("\treturn %s{\n\t\t%s,\n\t}\n}\n", f.gpu.Args, strings.Join(f.fieldValues(f.gpu, f.gpuValue), ",\n\t\t"))
}

// fieldValues returns the fields of api's args as a composite literal sets
// them, in the order the args declare them: the dims, T's type on the GPU,
// each tensor (value gives its expression) and each attr.
func (f family) fieldValues(api recipe.Kernel, value func(slot) (string, error)) []string {
	var out []string
	for _, field := range api.Fields {
		expr := ""
		switch field {
		case "Dims":
			expr = "d"
		case "DType":
			expr = "t"
		default:
			if s, ok := f.argOf(field); ok {
				expr, _ = value(s) // newFamily has checked what value needs
			} else {
				expr = "k.attrs." + field
			}
		}
		out = append(out, field+": "+expr)
	}
	return out
}

// argOf returns the kernel arg (kernelArgs) whose field is field.
func (f family) argOf(field string) (slot, bool) {
	for _, s := range f.kernelArgs() {
		if recipe.Field(s.first().Name) == field {
			return s, true
		}
	}
	return slot{}, false
}

// kernelAttrs returns the attrs the kind's kernels take, each in the field
// of its name: every attr of its ops but those capi takes itself
// (takenByCapi), in the order of its first op.
func (f family) kernelAttrs() []opdef.Attr {
	var out []opdef.Attr
	for _, op := range f.ops {
		for _, a := range op.Attrs {
			if !recipe.TakenByCaller(a) && !slices.ContainsFunc(out, func(b opdef.Attr) bool { return b.Name == a.Name }) {
				out = append(out, a)
			}
		}
	}
	return out
}

// checkFields confirms that the kernels' args hold what the generated code
// sets, and only that: a field for each arg the kernels take (kernelArgs)
// and each attr of every op (kernelAttrs), of its attr's Go type, besides
// the dims (and T's type on the GPU). An error names the field or the
// arg, and the file of the kind's kernel.
func (f family) checkFields() error {
	for _, side := range []struct {
		api recipe.Kernel
		dev recipe.Device
	}{{f.cpu, recipe.CPU}, {f.gpu, recipe.GPU}} {
		api, file := side.api, side.dev.File(f.kind)
		for _, field := range api.Fields {
			_, isArg := f.argOf(field)
			isAttr := slices.ContainsFunc(f.kernelAttrs(), func(a opdef.Attr) bool { return recipe.Field(a.Name) == field })
			if !isArg && !isAttr && field != "Dims" && !(field == "DType" && side.dev == recipe.GPU) {
				return fmt.Errorf("%s: %s has a field %s, which is no arg or attr of every %s op", file, api.Args, field, f.kind)
			}
		}
		for _, s := range f.kernelArgs() {
			if _, ok := api.FieldType(recipe.Field(s.first().Name)); !ok {
				return fmt.Errorf("%s: %s has no field %s for %s", file, api.Args, recipe.Field(s.first().Name), s.first().Name)
			}
		}
		for _, a := range f.kernelAttrs() {
			for _, op := range f.ops {
				if _, ok := op.Attr(a.Name); !ok {
					return fmt.Errorf("gencapi: %s: the attr %s of some of its ops is not %s's", f.kind, a.Name, op.Name)
				}
			}
			typ, ok := api.FieldType(recipe.Field(a.Name))
			if want := recipe.AttrGoTypes[a.Kind]; !ok || typ != want {
				return fmt.Errorf("%s: %s has no field %s %s for the attr %s", file, api.Args, recipe.Field(a.Name), want, a.Name)
			}
		}
	}
	return nil
}

// kernelArgs are the slots the family's kernels take, in order: those
// every op of the family has (reserve_space_3, FusedBatchNormGradV3's
// alone, is not read), but a count output, which capi writes
// (opdef.Arg.Count).
func (f family) kernelArgs() []slot {
	var out []slot
	for _, s := range f.inputs {
		if s.everywhere() {
			out = append(out, s)
		}
	}
	for _, s := range f.outputs {
		if s.everywhere() && !s.placeholder() && !s.first().Count {
			out = append(out, s)
		}
	}
	return out
}

// cpuValue returns the Go expression of a kernel arg on the CPU: a view of
// its tensor as T or as its one dtype, or a count's value.
func (f family) cpuValue(s slot) (string, error) {
	a := s.first()
	if a.Count {
		return fmt.Sprintf("view[int64](%s)[0]", f.ref(a)), nil
	}
	expr, err := f.dtype(s)
	if err != nil || expr == "k.attrs.T" {
		return fmt.Sprintf("view[T](%s)", f.ref(a)), err
	}
	for d, name := range goDTypes {
		if expr == "opdef."+name && elementTypes[d] != "" {
			return fmt.Sprintf("view[%s](%s)", elementTypes[d], f.ref(a)), nil
		}
	}
	return "", fmt.Errorf("gencapi: %s: the kernels take no %s (%s)", f.kind, dtypeNote(expr), a.Name)
}

// gpuValue returns the Go expression of a kernel arg on the GPU: its
// tensor's device address, or a count's value (in host memory).
func (f family) gpuValue(s slot) (string, error) {
	if a := s.first(); !a.Count {
		return fmt.Sprintf("ptr(%s)", f.ref(a)), nil
	}
	return f.cpuValue(s)
}

// ref returns the Go expression of arg a's tensor in the generated
// functions: in.<field> or out.<field>.
func (f family) ref(a opdef.Arg) string {
	for _, s := range f.inputs {
		if s.first().Name == a.Name {
			return "in." + fieldName(a.Name)
		}
	}
	return "out." + fieldName(a.Name)
}

// dtypeNote is a dtype expression as a comment says it: T, or the dtype.
func dtypeNote(expr string) string {
	if expr == "k.attrs.T" {
		return "T"
	}
	for d, name := range goDTypes {
		if expr == "opdef."+name {
			return d.String()
		}
	}
	return expr
}

// onlyIn notes the ops that have the slot, where not every op does.
func (f family) onlyIn(s slot) string {
	if s.everywhere() {
		return ""
	}
	var names []string
	for j, a := range s.args {
		if a != nil {
			names = append(names, f.ops[j].Name)
		}
	}
	return "; " + strings.Join(names, ", ") + " only"
}

func ranksNote(ranks []int) string {
	switch {
	case len(ranks) == 0:
		return ""
	case slices.Equal(ranks, []int{0}):
		return ", a scalar"
	}
	parts := make([]string, len(ranks))
	for i, r := range ranks {
		parts[i] = fmt.Sprint(r)
	}
	return ", rank " + strings.Join(parts, " or ")
}

func (f family) shapeNote(a opdef.Arg) string {
	switch {
	case a.Shape.Scalar:
		return "a scalar"
	case a.Shape.Empty:
		return "shape [0]"
	}
	return f.inputs[a.Shape.Like].first().Name + "'s shape"
}

// dimsOf returns the Go expression of an output's dims (ShapeRule).
func dimsOf(a opdef.Arg, inputs []slot) string {
	switch {
	case a.Shape.Scalar:
		return "scalarDims"
	case a.Shape.Empty:
		return "emptyVectorDims"
	}
	return "in." + fieldName(inputs[a.Shape.Like].first().Name) + ".dims"
}

// reuse returns the Go expression of the inputs an output may take over
// (Forward), as an inputSet.
func (f family) reuse(a opdef.Arg) string {
	if len(a.Forward) == 0 {
		return "0"
	}
	var bits []string
	for _, name := range a.Forward {
		for i, s := range f.inputs {
			if s.first().Name == name {
				bits = append(bits, fmt.Sprintf("1<<%d", i))
			}
		}
	}
	return strings.Join(bits, " | ")
}

// fieldName is an arg's name as a Go field: y_backprop is yBackprop,
// reserve_space_1 reserveSpace1.
func fieldName(arg string) string {
	parts := strings.Split(arg, "_")
	for i := 1; i < len(parts); i++ {
		parts[i] = upperFirst(parts[i])
	}
	return strings.Join(parts, "")
}

func lowerFirst(s string) string { return strings.ToLower(s[:1]) + s[1:] }
func upperFirst(s string) string { return strings.ToUpper(s[:1]) + s[1:] }

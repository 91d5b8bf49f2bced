package opdef

import (
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// Op is the specification of one gobn op: exactly the signature of the stock
// TensorFlow op it mirrors, under the Gobn> namespace.
type Op struct {
	// Name is the registered name, e.g. "Gobn>FusedBatchNormGradV3".
	Name string
	// Stock is the name of the stock TensorFlow op with the same signature,
	// or "" for an op stock TensorFlow does not have (BatchNormGradReduce,
	// BatchNormGradApply). It may be an op internal to TensorFlow, whose
	// name starts with an underscore and which tf.raw_ops does not offer
	// (TensorFlow's grappler puts those in graphs).
	Stock string
	// GradientOf is the stock forward op whose gradient TensorFlow builds
	// on Stock (tensorflow/python/ops/nn_grad.py), e.g. "FusedBatchNormV3"
	// for FusedBatchNormGradV3; "" where Stock is, or where TensorFlow
	// builds Stock by rewriting a graph rather than as a gradient.
	GradientOf string
	// Kind says which kernel family computes the op.
	Kind Kind
	// Inputs, Outputs and Attrs are the op's arguments and attributes, in
	// stock order; their Spec methods render REGISTER_OP spec strings.
	Inputs  []Arg
	Outputs []Arg
	Attrs   []Attr
	// Activation names the input the kernels see as N × C × S (x, or t):
	// the other inputs of its ranks must have its shape, and the
	// per-channel inputs (rank 1) are sized as its channels (Check).
	Activation string
	// Kernels lists the dtype bindings for which CPU kernels are registered.
	Kernels []TypeBinding
	// GPUKernels lists the dtype bindings for which GPU kernels are
	// registered: those of stock TensorFlow's GPU kernels for the op.
	GPUKernels []TypeBinding
	// HostMemory names the inputs and outputs that a GPU kernel keeps in
	// host memory.
	HostMemory []string
}

// Kind names the math an op performs: a family of ops that one kernel of
// each device computes. Its name, in snake case (SnakeCase), names the
// files that hold it in each language (CONTRIBUTING.md, "Adding an op").
type Kind string

// The kinds of gobn's ops.
const (
	// FusedBatchNormGrad is the family of FusedBatchNormGrad, V2 and V3.
	FusedBatchNormGrad Kind = "FusedBatchNormGrad"
	// GlobalNormalizationGrad is BatchNormWithGlobalNormalizationGrad.
	GlobalNormalizationGrad Kind = "GlobalNormalizationGrad"
	// GradReduce is BatchNormGradReduce, the first half of the training
	// gradient for batch norm synchronized across replicas: the per-channel
	// sums Σdy and Σdy·(x−μ) of one replica, and its element count R.
	GradReduce Kind = "GradReduce"
	// GradApply is BatchNormGradApply, the second half: x_backprop of one
	// replica from the sums all-reduced over every replica.
	GradApply Kind = "GradApply"
	// FusedBatchNormGradEx is FusedBatchNormGradEx: FusedBatchNormGradV3's
	// gradient of dy masked by the derivative of the activation that
	// followed the batch norm (Identity, Relu, Relu6), given its output y,
	// and that masked gradient itself for a side input added before the
	// activation.
	FusedBatchNormGradEx Kind = "FusedBatchNormGradEx"
)

// SnakeCase returns the kind's name in snake case, e.g.
// fused_batch_norm_grad: the name of its files.
func (k Kind) SnakeCase() string {
	var b strings.Builder
	for i, r := range k {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Arg is one input or output.
type Arg struct {
	Name string
	// Type is the type expression: an attr name ("T") or a fixed type ("float").
	Type string
	// Ranks lists the ranks an input may have, in increasing order (empty:
	// any; [0]: a scalar; [1]: a per-channel vector). Only inputs use it.
	Ranks []int
	// Detail is what stock's rank message says after an input's name, e.g.
	// "saved mean": "reserve_space_1 (saved mean) must be 1-dimensional".
	Detail string
	// Shape says how an output's static shape follows from the inputs.
	Shape ShapeRule
	// Forward names the inputs whose buffer an output may take over when
	// nothing else references it (TensorFlow's forwarding): gobn's kernels
	// read each element of those before they write that element of it.
	Forward []string
	// Number, on the op's last output, names the int attr that says how
	// many tensors the output is (TensorFlow's "name: number * type"):
	// gobn's ops take it as 0 or 1, so that the output is there when the
	// attr asks for it and absent otherwise.
	Number string
	// Count marks the int64 scalar, in host memory on every device
	// (HostMemory), that counts the elements per channel: an output's value
	// is the call's R = N·S; an input's is the count over every replica,
	// which CheckCount holds to at least this replica's R. capi sets and
	// checks them, not the kernels.
	Count bool
}

// Spec returns the spec string TensorFlow's op builder takes, "name: type",
// or "name: number * type" for a list.
func (a Arg) Spec() string {
	if a.Number != "" {
		return a.Name + ": " + a.Number + " * " + a.Type
	}
	return a.Name + ": " + a.Type
}

// ShapeRule describes an output's static shape.
type ShapeRule struct {
	// Empty outputs have shape [0] (the placeholder reserve spaces).
	Empty bool
	// Like is the index of the input whose shape the output takes, when Empty
	// and Scalar are false.
	Like int
	// Scalar outputs have shape [] (the element count of BatchNormGradReduce).
	Scalar bool
}

// Attr is one attribute: its kind, the values it may take and its default.
// Spec renders it as TensorFlow's op builder takes it.
type Attr struct {
	Name string
	Kind AttrKind
	// Types lists the dtypes a TypeAttr may take, in spec order; empty where
	// TypeClass names them.
	Types []DType
	// TypeClass is a class of dtypes TensorFlow names ("numbertype") for a
	// TypeAttr without Types.
	TypeClass string
	// Values lists the strings a StringAttr may take; empty: any.
	Values []string
	// Accepts lists the strings gobn's kernels take of a StringAttr whose
	// spec takes any, as stock's does: Op.CheckAttr refuses another, as
	// stock's kernels do when they are made.
	Accepts []string
	// Min is the least value an IntAttr may take, where it has one.
	Min *int64
	// Default is the attr's default, a float32, int64, bool or string as
	// Kind says; nil for an attr without one.
	Default any
}

// AttrKind is the type of an attr's value.
type AttrKind int

// The kinds of attr an op may have.
const (
	TypeAttr   AttrKind = iota // a dtype
	FloatAttr                  // a float32
	BoolAttr                   // a bool
	StringAttr                 // a string
	IntAttr                    // an int64
)

// Spec returns the attr as a REGISTER_OP spec string, e.g.
// "T: {half, bfloat16, float}", "epsilon: float = 0.0001",
// "data_format: {'NHWC', 'NCHW'} = 'NHWC'" or "num_side_inputs: int >= 0 = 0".
func (a Attr) Spec() string {
	typ := map[AttrKind]string{TypeAttr: a.TypeClass, FloatAttr: "float", BoolAttr: "bool", StringAttr: "string",
		IntAttr: "int"}[a.Kind]
	if allowed := a.Allowed(); allowed != "" {
		typ = "{" + allowed + "}"
	}
	if a.Min != nil {
		typ += " >= " + strconv.FormatInt(*a.Min, 10)
	}
	if a.Default == nil {
		return a.Name + ": " + typ
	}
	return a.Name + ": " + typ + " = " + a.DefaultString()
}

// Allowed returns the values a type or string attr is restricted to, as a
// spec lists them between braces ("half, bfloat16, float", "'NHWC', 'NCHW'"),
// or "" when it is not restricted to a list.
func (a Attr) Allowed() string {
	switch {
	case a.Kind == TypeAttr && len(a.Types) > 0:
		names := make([]string, len(a.Types))
		for i, t := range a.Types {
			names[i] = t.String()
		}
		return strings.Join(names, ", ")
	case a.Kind == StringAttr && len(a.Values) > 0:
		return strings.Join(quoted(a.Values), ", ")
	}
	return ""
}

// DefaultString returns the default as a spec writes it: 0.0001, 0, true,
// 'NHWC' ("" without a default).
func (a Attr) DefaultString() string {
	switch d := a.Default.(type) {
	case float32:
		return strconv.FormatFloat(float64(d), 'g', -1, 32)
	case int64:
		return strconv.FormatInt(d, 10)
	case bool:
		return strconv.FormatBool(d)
	case string:
		return quoted([]string{d})[0]
	}
	return ""
}

func quoted(values []string) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = "'" + v + "'"
	}
	return out
}

// TypeBinding is one assignment of dtypes to the op's type attrs, e.g.
// {"T": Half, "U": Float}.
type TypeBinding map[string]DType

// DType is a TensorFlow dtype, numbered as TF_DataType.
type DType int

// The dtypes gobn's kernels handle, with TensorFlow's enum values.
const (
	Float    DType = 1
	Double   DType = 2
	Int64    DType = 9
	BFloat16 DType = 14
	Half     DType = 19
)

// String returns the dtype's name as TensorFlow's type expressions spell it.
func (d DType) String() string {
	switch d {
	case Float:
		return "float"
	case Double:
		return "double"
	case Int64:
		return "int64"
	case BFloat16:
		return "bfloat16"
	case Half:
		return "half"
	}
	return "unknown"
}

// Size returns the number of bytes of one element of d.
func (d DType) Size() int {
	switch d {
	case Float:
		return 4
	case Double, Int64:
		return 8
	case BFloat16, Half:
		return 2
	}
	return 0
}

// Data formats of the fused ops.
const (
	NHWC  = "NHWC"
	NCHW  = "NCHW"
	NDHWC = "NDHWC"
	NCDHW = "NCDHW"
)

// ChannelsFirstFormats are the data formats whose channel axis is 1; the
// others keep channels last.
var ChannelsFirstFormats = []string{NCHW, NCDHW}

var activation = []int{4, 5}
var vector = []int{1}

var scalar = []int{0}

// dyOrX: x_backprop may take over y_backprop's or x's buffer.
var dyOrX = []string{"y_backprop", "x"}

// activationsAnd returns the inputs y_backprop and x, the activations of
// the fused and the synchronized gradients (their Activation is x), then
// more.
func activationsAnd(more ...Arg) []Arg {
	return append([]Arg{
		{Name: "y_backprop", Type: "T", Ranks: activation},
		{Name: "x", Type: "T", Ranks: activation},
	}, more...)
}

func fusedInputs(scaleType, reserveType string, withReserve3 bool) []Arg {
	in := activationsAnd(
		Arg{Name: "scale", Type: scaleType, Ranks: vector},
		Arg{Name: "reserve_space_1", Type: reserveType, Ranks: vector, Detail: "saved mean"},
		Arg{Name: "reserve_space_2", Type: reserveType, Ranks: vector, Detail: "saved variance"},
	)
	if withReserve3 {
		in = append(in, Arg{Name: "reserve_space_3", Type: reserveType})
	}
	return in
}

func fusedOutputs(reserveType string, placeholders ...string) []Arg {
	out := []Arg{
		{Name: "x_backprop", Type: "T", Shape: ShapeRule{Like: 1}, Forward: dyOrX},
		{Name: "scale_backprop", Type: reserveType, Shape: ShapeRule{Like: 2}},
		{Name: "offset_backprop", Type: reserveType, Shape: ShapeRule{Like: 2}},
	}
	for _, name := range placeholders {
		out = append(out, Arg{Name: name, Type: reserveType, Shape: ShapeRule{Empty: true}})
	}
	return out
}

var (
	formats4D  = []string{NHWC, NCHW}
	allFormats = []string{NHWC, NCHW, NDHWC, NCDHW}
	epsilon    = Attr{Name: "epsilon", Kind: FloatAttr, Default: float32(0.0001)}
	isTraining = Attr{Name: "is_training", Kind: BoolAttr, Default: true}
)

func dataFormat(formats []string) Attr {
	return Attr{Name: "data_format", Kind: StringAttr, Values: formats, Default: NHWC}
}

func fusedAttrs(typeAttrs []Attr, formats []string) []Attr {
	return append(append([]Attr(nil), typeAttrs...), epsilon, dataFormat(formats), isTraining)
}

var mixedPrecision = []Attr{
	{Name: "T", Kind: TypeAttr, Types: []DType{Half, BFloat16, Float}},
	{Name: "U", Kind: TypeAttr, Types: []DType{Float}},
}

var mixedKernels = []TypeBinding{
	{"T": Float, "U": Float},
	{"T": Half, "U": Float},
	{"T": BFloat16, "U": Float},
}

// ActivationModes are the activations whose gradient FusedBatchNormGradEx
// fuses, as its activation_mode names them: stock's Identity and Relu, and
// Relu6.
var ActivationModes = []string{"Identity", "Relu", "Relu6"}

// All lists every op gobn registers, in a fixed order. Index i of All is the
// op's number in the generated C tables.
var All = []Op{
	{
		Name:       "Gobn>FusedBatchNormGrad",
		Stock:      "FusedBatchNormGrad",
		GradientOf: "FusedBatchNorm",
		Kind:       FusedBatchNormGrad,
		Activation: "x",
		Inputs:     fusedInputs("T", "T", false),
		Outputs:    fusedOutputs("T", "reserve_space_3", "reserve_space_4"),
		Attrs:      fusedAttrs([]Attr{{Name: "T", Kind: TypeAttr, Types: []DType{Float}}}, formats4D),
		Kernels:    []TypeBinding{{"T": Float}},
		GPUKernels: []TypeBinding{{"T": Float}},
	},
	{
		Name:       "Gobn>FusedBatchNormGradV2",
		Stock:      "FusedBatchNormGradV2",
		GradientOf: "FusedBatchNormV2",
		Kind:       FusedBatchNormGrad,
		Activation: "x",
		Inputs:     fusedInputs("float", "U", false),
		Outputs:    fusedOutputs("U", "reserve_space_3", "reserve_space_4"),
		Attrs:      fusedAttrs(mixedPrecision, formats4D),
		Kernels:    mixedKernels,
		GPUKernels: mixedKernels,
	},
	{
		Name:       "Gobn>FusedBatchNormGradV3",
		Stock:      "FusedBatchNormGradV3",
		GradientOf: "FusedBatchNormV3",
		Kind:       FusedBatchNormGrad,
		Activation: "x",
		Inputs:     fusedInputs("float", "U", true),
		Outputs:    fusedOutputs("U", "reserve_space_4", "reserve_space_5"),
		Attrs:      fusedAttrs(mixedPrecision, allFormats),
		Kernels:    mixedKernels,
		GPUKernels: mixedKernels,
	},
	{
		Name:       "Gobn>BatchNormWithGlobalNormalizationGrad",
		Stock:      "BatchNormWithGlobalNormalizationGrad",
		GradientOf: "BatchNormWithGlobalNormalization",
		Kind:       GlobalNormalizationGrad,
		Inputs: []Arg{
			{Name: "t", Type: "T", Ranks: []int{4}, Detail: "input"},
			{Name: "m", Type: "T", Ranks: vector, Detail: "mean"},
			{Name: "v", Type: "T", Ranks: vector, Detail: "variance"},
			{Name: "gamma", Type: "T", Ranks: vector},
			{Name: "backprop", Type: "T", Ranks: []int{4}},
		},
		Activation: "t",
		Outputs: []Arg{
			{Name: "dx", Type: "T", Shape: ShapeRule{Like: 0}, Forward: []string{"t", "backprop"}},
			{Name: "dm", Type: "T", Shape: ShapeRule{Like: 1}},
			{Name: "dv", Type: "T", Shape: ShapeRule{Like: 2}},
			{Name: "db", Type: "T", Shape: ShapeRule{Like: 1}},
			{Name: "dg", Type: "T", Shape: ShapeRule{Like: 3}},
		},
		Attrs: []Attr{
			{Name: "T", Kind: TypeAttr, TypeClass: "numbertype"},
			{Name: "variance_epsilon", Kind: FloatAttr},
			{Name: "scale_after_normalization", Kind: BoolAttr},
		},
		Kernels:    []TypeBinding{{"T": Half}, {"T": Float}, {"T": Double}},
		GPUKernels: []TypeBinding{{"T": Half}, {"T": Float}},
	},
	// The two halves of the training gradient of synchronized (cross-replica)
	// batch norm, which stock TensorFlow has no fused kernel for: each replica
	// runs BatchNormGradReduce, the sums and counts are all-reduced, and each
	// replica runs BatchNormGradApply with the global sums. mean and variance
	// are the global batch statistics (variance biased).
	{
		Name:       "Gobn>BatchNormGradReduce",
		Kind:       GradReduce,
		Activation: "x",
		Inputs:     activationsAnd(Arg{Name: "mean", Type: "U", Ranks: vector}),
		Outputs: []Arg{
			{Name: "sum_dy", Type: "U", Shape: ShapeRule{Like: 2}},
			{Name: "sum_dy_xmu", Type: "U", Shape: ShapeRule{Like: 2}},
			{Name: "count", Type: "int64", Shape: ShapeRule{Scalar: true}, Count: true},
		},
		Attrs:      append(append([]Attr(nil), mixedPrecision...), dataFormat(allFormats)),
		Kernels:    mixedKernels,
		GPUKernels: mixedKernels,
		HostMemory: []string{"count"},
	},
	{
		Name:       "Gobn>BatchNormGradApply",
		Kind:       GradApply,
		Activation: "x",
		Inputs: activationsAnd(
			Arg{Name: "scale", Type: "U", Ranks: vector},
			Arg{Name: "mean", Type: "U", Ranks: vector},
			Arg{Name: "variance", Type: "U", Ranks: vector},
			Arg{Name: "sum_dy", Type: "U", Ranks: vector},
			Arg{Name: "sum_dy_xmu", Type: "U", Ranks: vector},
			Arg{Name: "count", Type: "int64", Ranks: scalar, Count: true},
		),
		Outputs: []Arg{
			{Name: "x_backprop", Type: "T", Shape: ShapeRule{Like: 1}, Forward: dyOrX},
		},
		Attrs:      append(append([]Attr(nil), mixedPrecision...), epsilon, dataFormat(allFormats)),
		Kernels:    mixedKernels,
		GPUKernels: mixedKernels,
		HostMemory: []string{"count"},
	},
	// FusedBatchNormGradV3 of the activation's gradient: stock's is internal
	// to TensorFlow, grappler's fusion on a GPU (in half, NHWC, training).
	// offset and reserve_space_3 are what cuDNN takes; gobn's kernels read
	// neither. y is the activation's output, which its derivative is read
	// from as ReluGrad reads it.
	{
		Name:       "Gobn>FusedBatchNormGradEx",
		Stock:      "_FusedBatchNormGradEx",
		Kind:       FusedBatchNormGradEx,
		Activation: "x",
		Inputs: append(fusedInputs("float", "U", true),
			Arg{Name: "offset", Type: "float", Ranks: vector},
			Arg{Name: "y", Type: "T", Ranks: activation}),
		Outputs: append(fusedOutputs("U", "reserve_space_4", "reserve_space_5"),
			Arg{Name: "side_input_backprop", Type: "T", Shape: ShapeRule{Like: 1}, Number: "num_side_inputs"}),
		Attrs: []Attr{mixedPrecision[0], mixedPrecision[1], epsilon,
			{Name: "num_side_inputs", Kind: IntAttr, Min: new(int64(0)), Default: int64(0)},
			{Name: "activation_mode", Kind: StringAttr, Default: "Identity", Accepts: ActivationModes},
			dataFormat(allFormats), isTraining},
		Kernels:    mixedKernels,
		GPUKernels: mixedKernels,
	},
}

// Named returns the op of All registered as name, and whether there is one.
func Named(name string) (Op, bool) {
	for _, op := range All {
		if op.Name == name {
			return op, true
		}
	}
	return Op{}, false
}

// HasKernel reports whether the op has a kernel, on the GPU or the CPU, that
// binds T to dtype.
func (op Op) HasKernel(dtype DType, onGPU bool) bool {
	bindings := op.Kernels
	if onGPU {
		bindings = op.GPUKernels
	}
	for _, b := range bindings {
		if b["T"] == dtype {
			return true
		}
	}
	return false
}

// Attr returns the op's attr called name, and whether it has one.
func (op Op) Attr(name string) (Attr, bool) {
	for _, a := range op.Attrs {
		if a.Name == name {
			return a, true
		}
	}
	return Attr{}, false
}

// XLAInputs returns the indices of the inputs an XLA custom call of the op
// takes, in order: all but those the op's GPU kernels keep in host memory
// (HostMemory), which XLA would hand a handler in device memory on a GPU.
func (op Op) XLAInputs() []int { return op.xlaArgs(op.Inputs, func(Arg) bool { return true }) }

// XLAOutputs returns the indices of the outputs an XLA custom call of the op
// returns, in order: all but the placeholders (ShapeRule.Empty) and those in
// host memory. Each takes the shape of an input the call takes (ShapeRule.Like).
func (op Op) XLAOutputs() []int {
	return op.xlaArgs(op.Outputs, func(a Arg) bool { return !a.Shape.Empty })
}

func (op Op) xlaArgs(args []Arg, keep func(Arg) bool) []int {
	var out []int
	for i, a := range args {
		if keep(a) && !op.InHostMemory(a.Name) {
			out = append(out, i)
		}
	}
	return out
}

// InHostMemory reports whether the op's GPU kernels keep the input or
// output called name in host memory.
func (op Op) InHostMemory(name string) bool {
	for _, n := range op.HostMemory {
		if n == name {
			return true
		}
	}
	return false
}

// BaseName returns the op's name without the Gobn> namespace, e.g.
// "FusedBatchNormGradV3" or "BatchNormGradReduce": the stock name for the ops
// that have a stock twin.
func (op Op) BaseName() string { return strings.TrimPrefix(op.Name, "Gobn>") }

// Kinds returns the kinds of the ops in All, each once, in the order of
// their first op.
func Kinds() []Kind { return KindsOf(All) }

// KindsOf returns the kinds of ops, each once, in the order of their first
// op.
func KindsOf(ops []Op) []Kind {
	var kinds []Kind
	for _, op := range ops {
		if !slices.Contains(kinds, op.Kind) {
			kinds = append(kinds, op.Kind)
		}
	}
	return kinds
}

// ArgDTypes returns the dtypes the input or output a may have: the one its
// fixed type names ("float", "int64"), or those its type attr allows (nil
// for an attr restricted by a TypeClass only).
func (op Op) ArgDTypes(a Arg) []DType {
	for _, d := range []DType{Float, Double, Int64, BFloat16, Half} {
		if d.String() == a.Type {
			return []DType{d}
		}
	}
	if attr, ok := op.Attr(a.Type); ok {
		return attr.Types
	}
	return nil
}

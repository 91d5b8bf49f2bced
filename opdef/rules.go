package opdef

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ArgumentError reports input that breaks an op's rules. The capi layer turns
// it into TensorFlow's InvalidArgument.
type ArgumentError struct {
	Msg string
}

func (e *ArgumentError) Error() string { return e.Msg }

func invalid(format string, args ...any) error {
	return &ArgumentError{Msg: fmt.Sprintf(format, args...)}
}

// ShapeString formats dims as TensorFlow does: "[2,3,4]".
func ShapeString(dims []int64) string {
	parts := make([]string, len(dims))
	for i, d := range dims {
		parts[i] = strconv.FormatInt(d, 10)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// ChannelsLast reports whether data_format puts the channel axis last (NHWC,
// NDHWC) rather than at axis 1 (NCHW, NCDHW). It returns an error for a format
// that is not one of the four.
func ChannelsLast(dataFormat string) (bool, error) {
	if !slices.Contains(allFormats, dataFormat) {
		return false, invalid("data_format must be one of %s, got %q", strings.Join(allFormats, ", "), dataFormat)
	}
	return !slices.Contains(ChannelsFirstFormats, dataFormat), nil
}

// Geometry is an activation tensor seen as N × C × S: S is the product of its
// spatial dimensions, so R = N·S elements belong to each channel. (For an
// empty tensor whose spatial dimensions multiply past 2^63-1, S is 0.)
type Geometry struct {
	N, C, S      int64
	ChannelsLast bool
}

// Elements returns N·C·S.
func (g Geometry) Elements() int64 { return g.N * g.C * g.S }

// geometry splits the rank-4 or rank-5 shape of the tensor called name
// around its channel axis. It returns an error, naming the tensor, when a
// dimension is negative or the element count overflows int64.
func geometry(name string, shape []int64, channelsLast bool) (Geometry, error) {
	for _, d := range shape {
		if d < 0 {
			return Geometry{}, invalid("%s dimensions must be non-negative, got shape %s", name, ShapeString(shape))
		}
	}
	g := Geometry{N: shape[0], S: 1, ChannelsLast: channelsLast}
	spatial := shape[2:]
	g.C = shape[1]
	if channelsLast {
		g.C = shape[len(shape)-1]
		spatial = shape[1 : len(shape)-1]
	}
	// A tensor with a zero dimension has no elements, however large its other
	// dimensions: TensorFlow makes such tensors, e.g. [2,0,2^40,2^40].
	empty := false
	for _, d := range shape {
		empty = empty || d == 0
	}
	total := int64(1)
	for _, d := range shape { // N, C and the spatial dims, in any order
		if !empty && total > (1<<63-1)/d {
			return Geometry{}, invalid("%s has more than 2^63-1 elements: shape %s", name, ShapeString(shape))
		}
		total *= d
	}
	for _, d := range spatial {
		if d != 0 && g.S > (1<<63-1)/d {
			g.S = 0 // only an empty tensor gets here: N or C is 0, and so is N·C·S
			break
		}
		g.S *= d
	}
	return g, nil
}

// Check applies the op's rules, in stock TensorFlow's order, to the shapes
// of its inputs (shapes[i] is input i's; one for each of op.Inputs), and
// returns the geometry of its activation input (Op.Activation) under
// dataFormat. Every fact it checks is read from op:
//
//  1. data_format is one of the four, for an op with that attr (the others
//     keep channels last);
//  2. each input with Ranks has one of them, in input order;
//  3. each other input of the activation's ranks has its shape;
//  4. the activation's dims are non-negative and multiply to at most 2^63−1;
//  5. each per-channel input (rank 1) is sized C, in input order.
func (op Op) Check(dataFormat string, shapes [][]int64) (Geometry, error) {
	channelsLast := true
	if _, ok := op.Attr("data_format"); ok {
		var err error
		if channelsLast, err = ChannelsLast(dataFormat); err != nil {
			return Geometry{}, err
		}
	}
	for i, in := range op.Inputs {
		if len(in.Ranks) > 0 && !slices.Contains(in.Ranks, len(shapes[i])) {
			return Geometry{}, rankError(in, shapes[i])
		}
	}
	act := op.InputIndex(op.Activation)
	actArg := op.Inputs[act]
	for i, in := range op.Inputs {
		if i != act && slices.Equal(in.Ranks, actArg.Ranks) && !slices.Equal(shapes[act], shapes[i]) {
			return Geometry{}, invalid("%s and %s must have same shape, but %s has shape %s and %s has shape %s",
				actArg.Name, in.Name, actArg.Name, ShapeString(shapes[act]), in.Name, ShapeString(shapes[i]))
		}
	}
	g, err := geometry(actArg.Name, shapes[act], channelsLast)
	if err != nil {
		return Geometry{}, err
	}
	for i, in := range op.Inputs {
		if in.PerChannel() && shapes[i][0] != g.C {
			return Geometry{}, invalid("%s must have the same number of elements as the channels of %s, got %d and %d",
				in.Name, actArg.Name, shapes[i][0], g.C)
		}
	}
	return g, nil
}

// CheckAttr applies the op's rules to the value of its attr, which
// TensorFlow has checked against the attr's spec (but for a kernel of
// gobn's made for a stock op, whose spec is stock's, or an XLA call): an
// int attr that counts a list output (Arg.Number) is 0 or 1, as gobn's
// kernels write the list once or not at all; a string attr is one of those
// it Accepts, where it lists them.
func (op Op) CheckAttr(attr Attr, value any) error {
	switch v := value.(type) {
	case int64:
		if slices.ContainsFunc(op.Outputs, func(o Arg) bool { return o.Number == attr.Name }) && (v < 0 || v > 1) {
			return invalid("%s must be 0 or 1 (gobn's kernels write its list once or not at all), got %d", attr.Name, v)
		}
	case string:
		if len(attr.Accepts) > 0 && !slices.Contains(attr.Accepts, v) {
			return invalid("%s must be one of %s, got %q", attr.Name, strings.Join(attr.Accepts, ", "), v)
		}
	}
	return nil
}

// PerChannel reports whether the input is a per-channel vector: rank 1,
// sized as the activation's channels.
func (a Arg) PerChannel() bool { return slices.Equal(a.Ranks, vector) }

// rankError is stock's message for an input of a rank it does not allow,
// e.g. "reserve_space_1 (saved mean) must be 1-dimensional, got shape [3,1]",
// "y_backprop must be 4 or 5-dimensional", "count must be a scalar".
func rankError(in Arg, shape []int64) error {
	name := in.Name
	if in.Detail != "" {
		name += " (" + in.Detail + ")"
	}
	ranks := "a scalar"
	if !slices.Equal(in.Ranks, scalar) {
		parts := make([]string, len(in.Ranks))
		for i, r := range in.Ranks {
			parts[i] = strconv.Itoa(r)
		}
		ranks = strings.Join(parts, " or ") + "-dimensional"
	}
	return invalid("%s must be %s, got shape %s", name, ranks, ShapeString(shape))
}

// InputIndex returns the index of the op's input called name, or -1.
func (op Op) InputIndex(name string) int {
	for i, in := range op.Inputs {
		if in.Name == name {
			return i
		}
	}
	return -1
}

// firstOf returns the first op of kind in All: the one whose inputs the
// typed Check functions below describe.
func firstOf(kind Kind) Op {
	for _, op := range All {
		if op.Kind == kind {
			return op
		}
	}
	panic("opdef: no op of kind " + string(kind))
}

// FusedGradInputs are the shapes of the inputs of FusedBatchNormGrad, V2 and V3
// that the rules constrain.
type FusedGradInputs struct {
	YBackprop, X, Scale, ReserveSpace1, ReserveSpace2 []int64
}

// CheckFusedGrad is Check for the FusedBatchNormGrad family: y_backprop and
// x of rank 4 or 5; scale, reserve_space_1 and reserve_space_2 of rank 1; x
// and y_backprop of the same shape; scale, reserve_space_1 and
// reserve_space_2 sized C, the channel dimension of x under dataFormat. It
// returns x's geometry.
func CheckFusedGrad(dataFormat string, in FusedGradInputs) (Geometry, error) {
	return firstOf(FusedBatchNormGrad).Check(dataFormat,
		[][]int64{in.YBackprop, in.X, in.Scale, in.ReserveSpace1, in.ReserveSpace2})
}

// GlobalNormalizationGradInputs are the shapes of the inputs of
// BatchNormWithGlobalNormalizationGrad.
type GlobalNormalizationGradInputs struct {
	T, M, V, Gamma, Backprop []int64
}

// CheckGlobalNormalizationGrad is Check for
// BatchNormWithGlobalNormalizationGrad: t of rank 4; m, v and gamma of rank
// 1; backprop of rank 4. Stock stops there and reads out of bounds when the
// sizes disagree; gobn also requires t and backprop to have the same shape
// and m, v and gamma to be sized C, the last dimension of t.
func CheckGlobalNormalizationGrad(in GlobalNormalizationGradInputs) (Geometry, error) {
	return firstOf(GlobalNormalizationGrad).Check("", [][]int64{in.T, in.M, in.V, in.Gamma, in.Backprop})
}

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

// FusedGradInputs are the shapes of the inputs of FusedBatchNormGrad, V2 and V3
// that the rules constrain.
type FusedGradInputs struct {
	YBackprop, X, Scale, ReserveSpace1, ReserveSpace2 []int64
}

// CheckFusedGrad applies stock TensorFlow's rules, in stock order, to the
// inputs of a fused batch-norm gradient: y_backprop and x of rank 4 or 5;
// scale, reserve_space_1 and reserve_space_2 of rank 1; x and y_backprop of
// the same shape; scale, reserve_space_1 and reserve_space_2 sized C, the
// channel dimension of x under dataFormat. It returns x's geometry.
func CheckFusedGrad(dataFormat string, in FusedGradInputs) (Geometry, error) {
	return checkActivationGrad(dataFormat, in.YBackprop, in.X, []named{{"scale", "", in.Scale},
		{"reserve_space_1", " (saved mean)", in.ReserveSpace1}, {"reserve_space_2", " (saved variance)", in.ReserveSpace2}}, nil)
}

// checkActivationGrad applies the fused gradients' rules, in their order,
// which the synchronized ops share: data_format; y_backprop and x of rank 4
// or 5; the per-channel inputs of rank 1 (and scalar, when not nil, of rank
// 0); x and y_backprop of the same shape; the per-channel inputs sized C.
func checkActivationGrad(dataFormat string, yBackprop, x []int64, perChannel []named, scalar *named) (Geometry, error) {
	channelsLast, err := ChannelsLast(dataFormat)
	if err != nil {
		return Geometry{}, err
	}
	if err := checkActivations(yBackprop, x); err != nil {
		return Geometry{}, err
	}
	if err := checkVectors(perChannel); err != nil {
		return Geometry{}, err
	}
	if scalar != nil && len(scalar.shape) != 0 {
		return Geometry{}, invalid("%s must be a scalar, got shape %s", scalar.name, ShapeString(scalar.shape))
	}
	return checkSameShape(named{"x", "", x}, named{"y_backprop", "", yBackprop}, channelsLast, perChannel)
}

// GlobalNormalizationGradInputs are the shapes of the inputs of
// BatchNormWithGlobalNormalizationGrad.
type GlobalNormalizationGradInputs struct {
	T, M, V, Gamma, Backprop []int64
}

// CheckGlobalNormalizationGrad applies stock TensorFlow's rules, in stock
// order, to the inputs of BatchNormWithGlobalNormalizationGrad: t of rank 4;
// m, v and gamma of rank 1; backprop of rank 4. Stock stops there and reads
// out of bounds when the sizes disagree; gobn also requires t and backprop to
// have the same shape and m, v and gamma to be sized C, the last dimension of t.
func CheckGlobalNormalizationGrad(in GlobalNormalizationGradInputs) (Geometry, error) {
	if len(in.T) != 4 {
		return Geometry{}, invalid("t (input) must be 4-dimensional, got shape %s", ShapeString(in.T))
	}
	vectors := []named{{"m", " (mean)", in.M}, {"v", " (variance)", in.V}, {"gamma", "", in.Gamma}}
	if err := checkVectors(vectors); err != nil {
		return Geometry{}, err
	}
	if len(in.Backprop) != 4 {
		return Geometry{}, invalid("backprop must be 4-dimensional, got shape %s", ShapeString(in.Backprop))
	}
	return checkSameShape(named{"t", "", in.T}, named{"backprop", "", in.Backprop}, true, vectors)
}

// named is an input as the error messages name it, and its shape. detail
// follows the name in the rank messages of stock's, e.g. " (saved mean)".
type named struct {
	name, detail string
	shape        []int64
}

// checkActivations checks that y_backprop and x have rank 4 or 5.
func checkActivations(yBackprop, x []int64) error {
	for _, a := range []named{{"y_backprop", "", yBackprop}, {"x", "", x}} {
		if len(a.shape) != 4 && len(a.shape) != 5 {
			return invalid("%s must be 4 or 5-dimensional, got shape %s", a.name, ShapeString(a.shape))
		}
	}
	return nil
}

// checkVectors checks that each of vectors has rank 1.
func checkVectors(vectors []named) error {
	for _, a := range vectors {
		if len(a.shape) != 1 {
			return invalid("%s%s must be 1-dimensional, got shape %s", a.name, a.detail, ShapeString(a.shape))
		}
	}
	return nil
}

// checkSameShape checks that act and other have the same shape and that
// each of vectors (of rank 1) is sized as act's channels, and returns act's
// geometry.
func checkSameShape(act, other named, channelsLast bool, vectors []named) (Geometry, error) {
	if !slices.Equal(act.shape, other.shape) {
		return Geometry{}, invalid("%s and %s must have same shape, but %s has shape %s and %s has shape %s",
			act.name, other.name, act.name, ShapeString(act.shape), other.name, ShapeString(other.shape))
	}
	g, err := geometry(act.name, act.shape, channelsLast)
	if err != nil {
		return Geometry{}, err
	}
	for _, a := range vectors {
		if a.shape[0] != g.C {
			return Geometry{}, invalid("%s must have the same number of elements as the channels of %s, got %d and %d",
				a.name, act.name, a.shape[0], g.C)
		}
	}
	return g, nil
}

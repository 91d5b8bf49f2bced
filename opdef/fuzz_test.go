package opdef_test

import (
	"encoding/binary"
	"errors"
	"math"
	"math/big"
	"slices"
	"strings"
	"testing"

	"github.com/gobn/gobn/internal/fuzzbytes"
	"github.com/gobn/gobn/opdef"
)

// The fuzz targets of the validation layer. Each decodes shapes (ranks 0–6,
// dims from small values, values at the int32/int64 overflow edges, and raw
// int64s) and a data_format from the fuzzer's bytes, runs the rules, and
// checks them against an independent oracle written from the rules' doc
// comments: the rules never panic; an accepted input satisfies every rule and
// its geometry multiplies back to the element count; a rejected one is an
// *opdef.ArgumentError whose message starts with the name of the first tensor
// (in stock order) that breaks a rule.
//
// Run one with, e.g., go test -run='^$' -fuzz='^FuzzCheckFusedGrad$' ./opdef;
// make test runs each briefly, make fuzz for longer. The seed corpus is in
// testdata/fuzz/<FuzzName>/.

// edgeDims are dimensions around the overflow edges of int32 and int64
// products.
var edgeDims = []int64{
	0, 1, 2, 3, 4, 7, -1, -2, math.MinInt64, math.MaxInt64,
	1<<31 - 1, 1 << 31, 1 << 32, 1<<32 + 1, 1 << 40, 1<<40 + 1, 1 << 62, 1 << 63 / 3,
	3037000499, 3037000500, // ⌊√(2^63−1)⌋ and one more
	2097151, 2097152, // ⌊∛2^63⌋ and one more: 2^21, whose cube is 2^63
	65535, 65536, 46341,
}

// fuzzReader hands out the fuzzer's bytes; once they run out it returns zeros.
type fuzzReader struct{ *fuzzbytes.Reader }

// dim decodes one dimension: mostly small, sometimes an edge value or a raw
// int64.
func (r fuzzReader) dim() int64 {
	tag := r.Byte()
	switch {
	case tag < 0x80:
		return int64(tag % 9)
	case tag < 0xf0:
		return edgeDims[int(tag-0x80)%len(edgeDims)]
	}
	var raw [8]byte
	for i := range raw {
		raw[i] = r.Byte()
	}
	return int64(binary.LittleEndian.Uint64(raw[:]))
}

// shape decodes a rank in [0, 6] and that many dims.
func (r fuzzReader) shape() []int64 {
	dims := make([]int64, int(r.Byte()%7))
	for i := range dims {
		dims[i] = r.dim()
	}
	return dims
}

// pair decodes a shape and a second one: with mode bit 0 a copy of the
// first, else a shape of its own.
func (r fuzzReader) pair(mode byte) (first, second []int64) {
	first = r.shape()
	if mode&1 != 0 {
		return first, slices.Clone(first)
	}
	return first, r.shape()
}

var fuzzFormats = []string{opdef.NHWC, opdef.NCHW, opdef.NDHWC, opdef.NCDHW}

// exactElements returns the product of dims as an exact integer.
func exactElements(dims []int64) *big.Int {
	p := big.NewInt(1)
	for _, d := range dims {
		p.Mul(p, big.NewInt(d))
	}
	return p
}

var maxInt64 = big.NewInt(math.MaxInt64)

// violation is the first rule an input breaks: the tensor the message must
// start with, and a fragment it must contain ("" for none).
type violation struct{ tensor, fragment string }

func hasNegative(dims []int64) bool {
	for _, d := range dims {
		if d < 0 {
			return true
		}
	}
	return false
}

// activationViolation checks what geometry checks of a rank-4/5 tensor: no
// negative dimension and at most 2^63−1 elements (a tensor with a zero
// dimension has none, whatever its other dimensions).
func activationViolation(name string, dims []int64) *violation {
	if hasNegative(dims) || exactElements(dims).Cmp(maxInt64) > 0 {
		return &violation{name, opdef.ShapeString(dims)}
	}
	return nil
}

// fusedOracle returns the first rule in stock order that in breaks under
// format, or nil.
func fusedOracle(format string, in opdef.FusedGradInputs) *violation {
	channelsLast := format == opdef.NHWC || format == opdef.NDHWC
	if !channelsLast && format != opdef.NCHW && format != opdef.NCDHW {
		return &violation{"data_format", ""}
	}
	for _, a := range []dimsOf{{"y_backprop", in.YBackprop}, {"x", in.X}} {
		if len(a.dims) != 4 && len(a.dims) != 5 {
			return &violation{a.name, opdef.ShapeString(a.dims)}
		}
	}
	vectors := []dimsOf{{"scale", in.Scale}, {"reserve_space_1", in.ReserveSpace1}, {"reserve_space_2", in.ReserveSpace2}}
	if v := notVector(vectors); v != nil {
		return v
	}
	if !slices.Equal(in.X, in.YBackprop) {
		return &violation{"x and y_backprop", opdef.ShapeString(in.YBackprop)}
	}
	if v := activationViolation("x", in.X); v != nil {
		return v
	}
	for _, a := range vectors {
		if a.dims[0] != fuzzChannels(in.X, channelsLast) {
			return &violation{a.name, "channels"}
		}
	}
	return nil
}

func fuzzChannels(x []int64, channelsLast bool) int64 {
	if channelsLast {
		return x[len(x)-1]
	}
	return x[1]
}

// checkRejection checks that err reports v.
func checkRejection(t *testing.T, err error, v *violation) {
	t.Helper()
	var argErr *opdef.ArgumentError
	if !errors.As(err, &argErr) {
		t.Fatalf("error %q is %T, want *opdef.ArgumentError", err, err)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, v.tensor+" ") && !strings.HasPrefix(msg, v.tensor+":") {
		t.Fatalf("message %q does not start with the tensor name %q", msg, v.tensor)
	}
	if v.tensor == "x" && strings.HasPrefix(msg, "x and ") || v.tensor == "t" && strings.HasPrefix(msg, "t and ") {
		t.Fatalf("message %q is about the pair, want %q alone", msg, v.tensor)
	}
	if !strings.Contains(msg, v.fragment) {
		t.Fatalf("message %q does not contain %q", msg, v.fragment)
	}
}

// checkGeometry checks an accepted activation's geometry against its dims:
// N, C and S as the layout says, S exact whenever the product of the spatial
// dims fits in int64, and N·C·S equal to the exact element count.
func checkGeometry(t *testing.T, g opdef.Geometry, x []int64, channelsLast bool) {
	t.Helper()
	spatial := x[2:]
	if channelsLast {
		spatial = x[1 : len(x)-1]
	}
	if g.N != x[0] || g.C != fuzzChannels(x, channelsLast) || g.ChannelsLast != channelsLast {
		t.Fatalf("geometry %+v of %s (channels last %v)", g, opdef.ShapeString(x), channelsLast)
	}
	if s := exactElements(spatial); s.IsInt64() && g.S != s.Int64() {
		t.Fatalf("geometry %+v of %s: S = %d, want %d", g, opdef.ShapeString(x), g.S, s.Int64())
	}
	elements := exactElements(x)
	if !elements.IsInt64() || g.Elements() != elements.Int64() {
		t.Fatalf("geometry %+v of %s: N·C·S = %d, want %s", g, opdef.ShapeString(x), g.Elements(), elements)
	}
	if g.Elements() > 0 && (g.N < 0 || g.C <= 0 || g.S <= 0) {
		t.Fatalf("geometry %+v of a non-empty tensor", g)
	}
}

// fuzzSeeds are hand-made starting points; testdata/fuzz holds more.
func fuzzSeeds(f *testing.F) {
	f.Add("NHWC", []byte{0x03, 4, 2, 5, 6, 3, 1, 3, 1, 3, 1, 3})
	f.Add("NCHW", []byte{0x03, 4, 2, 3, 5, 6, 1, 3, 1, 3, 1, 3})
	f.Add("NDHWC", []byte{0x03, 5, 2, 4, 5, 6, 3})
	f.Add("", []byte{0x0b, 4, 0, 0x80 + 11, 0x80 + 11, 3}) // [0, 2^31, 2^31, 3]
	f.Add("", []byte{0x07, 4, 2, 0, 0x80 + 14, 0x80 + 14}) // NCHW [2, 0, 2^40, 2^40]
	f.Add("", []byte{0x03, 4, 0x80 + 20, 0x80 + 20, 0x80 + 20, 2})
	f.Add("NHWC", []byte{0x00, 4, 2, 5, 6, 3, 4, 2, 5, 7, 3, 1, 3, 1, 3, 1, 3})
	f.Add("HWCN", []byte{0x13, 4, 1, 1, 1, 1})
	f.Add("NCDHW", []byte{0x13, 5, 2, 3, 4, 5, 6, 1, 3, 1, 3, 1, 3})
	f.Add("", []byte{0x03, 4, 0xf0, 0, 0, 0, 0, 0, 0, 0, 0x80, 1, 1, 1})
}

// decodeFused decodes the inputs of a fused gradient. The mode byte chooses
// the data_format (bits 2–4: one of the four, or from 4 up the fuzzer's
// string) and steers towards valid inputs: bit 0 gives y_backprop x's shape,
// bit 1 sizes the vectors as x's channels (bit 5: as its last dimension,
// whatever the format).
func decodeFused(format string, data []byte) (string, opdef.FusedGradInputs) {
	r := fuzzReader{fuzzbytes.New(data)}
	mode := r.Byte()
	if sel := int(mode>>2) & 7; sel < len(fuzzFormats) {
		format = fuzzFormats[sel]
	}
	var in opdef.FusedGradInputs
	in.X, in.YBackprop = r.pair(mode)
	in.Scale, in.ReserveSpace1, in.ReserveSpace2 = r.shape(), r.shape(), r.shape()
	if mode&2 != 0 && len(in.X) >= 2 {
		c := fuzzChannels(in.X, format == opdef.NHWC || format == opdef.NDHWC || mode&0x20 != 0)
		in.Scale, in.ReserveSpace1, in.ReserveSpace2 = []int64{c}, []int64{c}, []int64{c}
	}
	return format, in
}

func FuzzCheckFusedGrad(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, format string, data []byte) {
		format, in := decodeFused(format, data)
		g, err := opdef.CheckFusedGrad(format, in)
		want := fusedOracle(format, in)
		if want != nil {
			if err == nil {
				t.Fatalf("%q %+v accepted (geometry %+v), want a rejection naming %s", format, in, g, want.tensor)
			}
			checkRejection(t, err, want)
			if g != (opdef.Geometry{}) {
				t.Fatalf("geometry %+v returned with an error", g)
			}
			return
		}
		if err != nil {
			t.Fatalf("%q %+v rejected: %v", format, in, err)
		}
		checkGeometry(t, g, in.X, format == opdef.NHWC || format == opdef.NDHWC)
	})
}

// dimsOf is an input of an oracle: its name and shape.
type dimsOf struct {
	name string
	dims []int64
}

// notVector returns the first of inputs that is not 1-dimensional, as a
// violation, or nil.
func notVector(inputs []dimsOf) *violation {
	for _, a := range inputs {
		if len(a.dims) != 1 {
			return &violation{a.name, opdef.ShapeString(a.dims)}
		}
	}
	return nil
}

// globalOracle returns the first rule in stock order that in breaks, or nil.
func globalOracle(in opdef.GlobalNormalizationGradInputs) *violation {
	if len(in.T) != 4 {
		return &violation{"t", opdef.ShapeString(in.T)}
	}
	vectors := []dimsOf{{"m", in.M}, {"v", in.V}, {"gamma", in.Gamma}}
	if v := notVector(vectors); v != nil {
		return v
	}
	if len(in.Backprop) != 4 {
		return &violation{"backprop", opdef.ShapeString(in.Backprop)}
	}
	if !slices.Equal(in.T, in.Backprop) {
		return &violation{"t and backprop", opdef.ShapeString(in.Backprop)}
	}
	if v := activationViolation("t", in.T); v != nil {
		return v
	}
	for _, a := range vectors {
		if a.dims[0] != in.T[3] {
			return &violation{a.name, "channels"}
		}
	}
	return nil
}

func FuzzCheckGlobalNormalizationGrad(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, _ string, data []byte) {
		r := fuzzReader{fuzzbytes.New(data)}
		mode := r.Byte()
		var in opdef.GlobalNormalizationGradInputs
		in.T, in.Backprop = r.pair(mode)
		in.M, in.V, in.Gamma = r.shape(), r.shape(), r.shape()
		if mode&2 != 0 && len(in.T) >= 1 {
			c := in.T[len(in.T)-1]
			in.M, in.V, in.Gamma = []int64{c}, []int64{c}, []int64{c}
		}
		g, err := opdef.CheckGlobalNormalizationGrad(in)
		want := globalOracle(in)
		if want != nil {
			if err == nil {
				t.Fatalf("%+v accepted (geometry %+v), want a rejection naming %s", in, g, want.tensor)
			}
			checkRejection(t, err, want)
			if g != (opdef.Geometry{}) {
				t.Fatalf("geometry %+v returned with an error", g)
			}
			return
		}
		if err != nil {
			t.Fatalf("%+v rejected: %v", in, err)
		}
		checkGeometry(t, g, in.T, true)
	})
}

// FuzzCheckStaticShapes fuzzes the graph-time rules of the op it names on
// partially known shapes, within their contract (each input's rank is
// unknown or one the op allows). They must never panic, and must be sound:
// when they reject, the run-time rules (Op.Check) reject every completion of
// the unknown ranks and dims, under every data_format the op takes. One
// completion, decoded from the same bytes, is checked.
func FuzzCheckStaticShapes(f *testing.F) {
	f.Add("Gobn>FusedBatchNormGrad", []byte{1, 4, 2, 5, 6, 3, 1, 4, 2, 5, 7, 3})
	f.Add("Gobn>BatchNormWithGlobalNormalizationGrad", []byte{1, 4, 2, 0xff, 6, 3, 1, 1, 4, 0, 1, 1, 3, 1, 4, 2, 5, 6, 3})
	f.Add("Gobn>FusedBatchNormGradV3", []byte{0, 0, 1, 4, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		op, ok := opdef.Named(name)
		if !ok {
			t.Skip("no op of that name")
		}
		r := fuzzReader{fuzzbytes.New(data)}
		partial := make([][]int64, len(op.Inputs))
		complete := make([][]int64, len(op.Inputs))
		for i, in := range op.Inputs {
			known := r.Byte()%4 != 0
			ranks := in.Ranks
			if len(ranks) == 0 {
				ranks = []int{int(r.Byte() % 3)}
			}
			rank := ranks[int(r.Byte())%len(ranks)]
			complete[i] = make([]int64, rank)
			for j := range complete[i] {
				complete[i][j] = r.dim() & math.MaxInt64 // TensorFlow's dims are never negative
			}
			if !known {
				continue // partial[i] nil: unknown rank
			}
			partial[i] = append([]int64(nil), complete[i]...)
			for j := range partial[i] {
				if r.Byte()%4 == 0 {
					partial[i][j] = -1
				}
			}
		}
		err := op.CheckStaticShapes(partial)
		if err == nil {
			return
		}
		var argErr *opdef.ArgumentError
		if !errors.As(err, &argErr) {
			t.Fatalf("error %q is %T, want *opdef.ArgumentError", err, err)
		}
		named := false
		for _, in := range op.Inputs {
			named = named || strings.HasPrefix(err.Error(), in.Name+" ")
		}
		if !named {
			t.Fatalf("message %q does not start with an input's name", err)
		}
		formats := []string{""} // an op without data_format keeps channels last
		if attr, ok := op.Attr("data_format"); ok {
			formats = attr.Values
		}
		for _, format := range formats {
			if _, full := op.Check(format, complete); full == nil {
				t.Fatalf("static rules reject %v (%v) but the run-time rules accept the completion %v under %q", partial, err, complete, format)
			}
		}
	})
}

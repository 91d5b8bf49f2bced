package ops_test

import (
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"

	tf "github.com/galeone/tensorflow/tensorflow/go"
	"github.com/galeone/tensorflow/tensorflow/go/core/framework/graph_go_proto"
	"github.com/galeone/tensorflow/tensorflow/go/core/framework/versions_go_proto"
	"github.com/galeone/tensorflow/tensorflow/go/op"
	tg "github.com/galeone/tfgo"
	"github.com/gobn/gobn/internal/reference"
	"github.com/gobn/gobn/internal/tolerance"
	"github.com/gobn/gobn/opdef"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

const epsilon = 1e-3

// opsOf returns opdef's ops of kind k: the parity tests build each op of a
// family, gobn's and its stock twin, from opdef alone (opSpec).
func opsOf(k opdef.Kind) []opdef.Op {
	var out []opdef.Op
	for _, o := range opdef.All {
		if o.Kind == k {
			out = append(out, o)
		}
	}
	return out
}

// argType resolves an arg's type expression ("T", "U", "float") under the
// dtype binding b.
func argType(expr string, b opdef.TypeBinding) tf.DataType {
	if d, ok := b[expr]; ok {
		return tf.DataType(d)
	}
	fixed := map[string]tf.DataType{"float": tf.Float, "int64": tf.Int64}
	if d, ok := fixed[expr]; ok {
		return d
	}
	panic("argType: no dtype for " + expr)
}

// opSpec is gobn's op o, or with stock its stock twin: the inputs taken
// from in by arg name, the attrs as given (type attrs are inferred from the
// inputs).
func opSpec(t *testing.T, o opdef.Op, stock bool, in map[string]tf.Output, attrs map[string]any) tf.OpSpec {
	t.Helper()
	typ := o.Name
	if stock {
		typ = o.Stock
	}
	inputs := make([]tf.Input, len(o.Inputs))
	for i, arg := range o.Inputs {
		v, ok := in[arg.Name]
		require.True(t, ok, "%s: no input %s", typ, arg.Name)
		inputs[i] = v
	}
	return tf.OpSpec{Type: typ, Input: inputs, Attrs: attrs}
}

// addOp adds spec's op to s and returns its outputs.
func addOp(t *testing.T, s *op.Scope, spec tf.OpSpec) []tf.Output {
	t.Helper()
	operation := s.AddOperation(spec)
	require.NoError(t, s.Err(), "adding %s", spec.Type)
	outs := make([]tf.Output, operation.NumOutputs())
	for i := range outs {
		outs[i] = operation.Output(i)
	}
	return outs
}

// shapeFor lays out the logical channels-last shape (N, spatial..., C) in format.
func shapeFor(format string) (shape []int64, g reference.Shape) {
	switch format {
	case "NHWC":
		return []int64{2, 5, 3, 7}, reference.Shape{C: 7, S: 15, ChannelsLast: true}
	case "NCHW":
		return []int64{2, 7, 5, 3}, reference.Shape{C: 7, S: 15}
	case "NDHWC":
		return []int64{2, 3, 2, 4, 5}, reference.Shape{C: 5, S: 24, ChannelsLast: true}
	default: // NCDHW
		return []int64{2, 5, 3, 2, 4}, reference.Shape{C: 5, S: 24}
	}
}

// TestFusedBatchNormGradMatchesStock runs each fused op, dtype, data format
// and mode beside stock in one tfgo graph and compares every output: dtype,
// static and run-time shape, and values within the dtype's tolerance. In
// training the reserve spaces come from stock FusedBatchNormV3 in the same
// graph. Where stock has no answer (inference with a channels-first format,
// which stock's CPU kernel rejects) gobn is compared with a float64 reference;
// elsewhere gobn must also be at least as accurate as stock against it.
func TestFusedBatchNormGradMatchesStock(t *testing.T) {
	for _, o := range opsOf(opdef.FusedBatchNormGrad) {
		dataFormat, _ := o.Attr("data_format")
		for _, b := range o.Kernels {
			for _, format := range dataFormat.Values {
				for _, training := range []bool{true, false} {
					name := fmt.Sprintf("%s/%s/%s/%s", o.Stock, dtypeName[tf.DataType(b["T"])], format, mode(training))
					t.Run(name, func(t *testing.T) { testFused(t, o, b, format, training, name) })
				}
			}
		}
	}
}

func testFused(t *testing.T, o opdef.Op, b opdef.TypeBinding, format string, training bool, name string) {
	dtype := tf.DataType(b["T"])
	root := tg.NewRoot()
	in, shape, g := fusedInputs(t, root, o, b, format, training, name)

	stockHasAnswer := training || g.ChannelsLast
	attrs := map[string]any{"epsilon": float32(epsilon), "data_format": format, "is_training": training}
	gobn := addOp(t, root.SubScope("gobn"), opSpec(t, o, false, in, attrs))
	var stock []tf.Output
	if stockHasAnswer {
		stock = addOp(t, root.SubScope("stock"), opSpec(t, o, true, in, attrs))
	}

	// Every output's dtype and static shape, against stock's and the rules.
	wantShapes := [][]int64{shape, {int64(g.C)}, {int64(g.C)}, {0}, {0}}
	require.Len(t, gobn, len(wantShapes))
	for i, out := range gobn {
		require.Equal(t, argType(o.Outputs[i].Type, b), out.DataType(), "output %d dtype", i)
		static, err := out.Shape().ToSlice()
		require.NoError(t, err, "output %d: static shape of unknown rank", i)
		require.Equal(t, wantShapes[i], static, "output %d static shape", i)
		if stockHasAnswer {
			require.Equal(t, stock[i].DataType(), out.DataType(), "output %d dtype vs stock", i)
			require.Equal(t, stock[i].Shape().String(), out.Shape().String(), "output %d static shape vs stock", i)
		}
	}

	inputs := []tf.Output{in["y_backprop"], in["x"], in["scale"], in["reserve_space_1"], in["reserve_space_2"]}
	fetched := run(t, root, append(append(inputs, gobn...), stock...))
	dy, x, scale, mean, variance := fetched[0].data, fetched[1].data, fetched[2].data, fetched[3].data, fetched[4].data
	got := fetched[5:10]
	for i, out := range got {
		require.Equal(t, wantShapes[i], out.shape, "output %d shape", i)
	}
	f := reference.FusedGrad(g, dy, x, scale, mean, variance, float64(float32(epsilon)), training)
	ref := [3][]float64{f.XBackprop, f.ScaleBackprop, f.OffsetBackprop}
	names := []string{"x_backprop", "scale_backprop", "offset_backprop"}
	for i := range 3 {
		if stockHasAnswer {
			want := fetched[10+i]
			require.Equal(t, want.shape, got[i].shape, "%s shape vs stock", names[i])
			requireClose(t, got[i].data, want.data, dtype, names[i]+" vs stock")
			requireAsAccurate(t, got[i].data, want.data, ref[i], dtype, names[i]+" vs float64 reference")
		} else {
			requireClose(t, got[i].data, ref[i], dtype, names[i]+" vs float64 reference (stock rejects inference in "+format+")")
		}
	}
	if stockHasAnswer {
		for i := 3; i < 5; i++ {
			require.Equal(t, fetched[10+i].shape, got[i].shape, "placeholder %d shape vs stock", i)
		}
	}
}

// fusedInputs adds to root the inputs of the fused op o for dtype binding
// b, data format and mode, drawn from a generator seeded with name: by arg
// name, in training the reserve spaces from stock FusedBatchNormV3 on x. It
// returns them, x's shape, and that shape as the reference sees it.
func fusedInputs(t *testing.T, root *op.Scope, o opdef.Op, b opdef.TypeBinding, format string, training bool,
	name string) (map[string]tf.Output, []int64, reference.Shape) {
	dtype := tf.DataType(b["T"])
	shape, g := shapeFor(format)
	g.N = int(shape[0])
	rng, xData, dyData, _ := activations(name, 1, g, 1)
	scaleData := uniform(rng, g.C, 0.5, 1.5)
	for c := range scaleData {
		if rng.IntN(2) == 0 {
			scaleData[c] = -scaleData[c]
		}
	}

	in := map[string]tf.Output{
		"x":          tg.Cast(root, constant(t, root, xData, shape), dtype),
		"y_backprop": tg.Cast(root, constant(t, root, dyData, shape), dtype),
		"scale":      tg.Cast(root, constant(t, root, scaleData, []int64{int64(g.C)}), tf.Float),
	}
	empty := tg.Const(root, []float32{})
	if training {
		offset := tg.Cast(root, constant(t, root, uniform(rng, g.C, -1, 1), []int64{int64(g.C)}), tf.Float)
		_, _, _, in["reserve_space_1"], in["reserve_space_2"], in["reserve_space_3"] = op.FusedBatchNormV3(root.SubScope("forward"),
			in["x"], in["scale"], offset, empty, empty,
			op.FusedBatchNormV3Epsilon(epsilon), op.FusedBatchNormV3DataFormat(format), op.FusedBatchNormV3IsTraining(true))
	} else {
		in["reserve_space_1"] = tg.Cast(root, constant(t, root, uniform(rng, g.C, -0.5, 0.5), []int64{int64(g.C)}), tf.Float)
		in["reserve_space_2"] = tg.Cast(root, constant(t, root, uniform(rng, g.C, 0.5, 2), []int64{int64(g.C)}), tf.Float)
		in["reserve_space_3"] = empty
	}
	for _, arg := range o.Inputs {
		switch _, ok := in[arg.Name]; {
		case ok:
		case arg.PerChannel(): // an op's own (FusedBatchNormGradEx's offset)
			in[arg.Name] = constant(t, root, uniform(rng, g.C, -1, 1), []int64{int64(g.C)})
		default: // its own of x's shape (FusedBatchNormGradEx's y), across 0
			in[arg.Name] = constant(t, root, uniform(rng, g.Len(), -1.5, 7.5), shape)
		}
		if want := argType(arg.Type, b); in[arg.Name].DataType() != want { // FusedBatchNormGrad takes T everywhere
			in[arg.Name] = tg.Cast(root, in[arg.Name], want)
		}
	}

	return in, shape, g
}

// TestBatchNormWithGlobalNormalizationGradMatchesStock compares gobn's op with
// stock's in one tfgo graph for each dtype. Stock's op is deprecated at
// GraphDef version 9 and refuses to run in a newer graph, so the graph is
// given producer version 8 by importing a GraphDef that declares it (the
// import keeps the lower of the two versions). Stock sums in T, so in half it
// is inaccurate: there both are compared with a float64 reference, and gobn
// must be at least as accurate as stock.
func TestBatchNormWithGlobalNormalizationGradMatchesStock(t *testing.T) {
	for _, b := range globalNormalizationOp.Kernels {
		dtype := tf.DataType(b["T"])
		for _, scaleAfter := range []bool{true, false} {
			name := fmt.Sprintf("%s/scale_after_normalization=%t", dtypeName[dtype], scaleAfter)
			t.Run(name, func(t *testing.T) {
				root := producerScope(t, 8)
				in, geo := globalNormalizationInputs(t, root, dtype, name)
				gobn := addOp(t, root.SubScope("gobn"), globalNormalizationGrad(t, false, in, scaleAfter))
				stock := addOp(t, root.SubScope("stock"), globalNormalizationGrad(t, true, in, scaleAfter))
				require.Len(t, gobn, len(stock))
				for i := range gobn {
					require.Equal(t, stock[i].DataType(), gobn[i].DataType(), "output %d dtype", i)
					require.Equal(t, stock[i].Shape().String(), gobn[i].Shape().String(), "output %d static shape", i)
				}
				fetched := run(t, root, append(append(in[:], gobn...), stock...))
				ref := globalNormalizationReference(geo, fetched, scaleAfter)
				for i, name := range []string{"dx", "dm", "dv", "db", "dg"} {
					got, want := fetched[5+i], fetched[10+i]
					require.Equal(t, want.shape, got.shape, "%s shape", name)
					if dtype == tf.Half {
						requireClose(t, got.data, ref[i], dtype, name+" vs float64 reference")
						t.Logf("%s: max |err| vs float64 reference: gobn %.3g, stock %.3g",
							name, maxAbsDiff(got.data, ref[i]), maxAbsDiff(want.data, ref[i]))
					} else {
						requireClose(t, got.data, want.data, dtype, name+" vs stock")
					}
					requireAsAccurate(t, got.data, want.data, ref[i], dtype, name+" vs float64 reference")
				}
			})
		}
	}
}

// TestGlobalNormalizationGradRunsInTodaysGraphs checks the one difference in
// kind from stock: gobn's op runs in a graph of the current GraphDef version,
// where stock's is refused.
func TestGlobalNormalizationGradRunsInTodaysGraphs(t *testing.T) {
	root := tg.NewRoot()
	in, geo := globalNormalizationInputs(t, root, tf.Float, "current")
	gobn := addOp(t, root.SubScope("gobn"), globalNormalizationGrad(t, false, in, true))
	fetched := run(t, root, append(in[:], gobn...))
	ref := globalNormalizationReference(geo, fetched, true)
	for i := range 5 {
		requireClose(t, fetched[5+i].data, ref[i], tf.Float, fmt.Sprintf("output %d vs float64 reference", i))
	}

	root = tg.NewRoot()
	in, _ = globalNormalizationInputs(t, root, tf.Float, "current")
	stock := root.SubScope("stock")
	stock.AddOperation(globalNormalizationGrad(t, true, in, true))
	require.ErrorContains(t, stock.Err(), "GraphDef version",
		"stock BatchNormWithGlobalNormalizationGrad was accepted at the current GraphDef version")
}

// producerScope is the root scope of a new graph of GraphDef producer
// version: a GraphDef that declares it, imported (the import keeps the lower
// of the two versions).
func producerScope(t *testing.T, version int32) *op.Scope {
	g := tf.NewGraph()
	def, err := proto.Marshal(&graph_go_proto.GraphDef{Versions: &versions_go_proto.VersionDef{Producer: version}})
	require.NoError(t, err)
	require.NoError(t, g.Import(def, ""))
	return op.NewScopeWithGraph(g)
}

func globalNormalizationInputs(t *testing.T, root *op.Scope, dtype tf.DataType, name string) ([5]tf.Output, reference.Shape) {
	shape := []int64{2, 4, 3, 6}
	g := reference.Shape{N: 2, C: 6, S: 12, ChannelsLast: true}
	rng, x, dy, mean := activations(name, 2, g, 0.5)
	C := []int64{int64(g.C)}
	return [5]tf.Output{
		tg.Cast(root, constant(t, root, x, shape), dtype),
		tg.Cast(root, constant(t, root, mean, C), dtype),
		tg.Cast(root, constant(t, root, uniform(rng, g.C, 0.5, 2), C), dtype),
		tg.Cast(root, constant(t, root, uniform(rng, g.C, 0.5, 1.5), C), dtype),
		tg.Cast(root, constant(t, root, dy, shape), dtype),
	}, g
}

// globalNormalizationReference is the float64 reference of the op on the
// fetched inputs t, m, v, gamma and backprop: dx, dm, dv, db, dg.
func globalNormalizationReference(g reference.Shape, in []fetchedTensor, scaleAfter bool) [5][]float64 {
	r := reference.GlobalNormalizationGrad(g, in[0].data, in[1].data, in[2].data, in[3].data, in[4].data, float64(float32(epsilon)), scaleAfter)
	return [5][]float64{r.DX, r.DM, r.DV, r.DB, r.DG}
}

// globalNormalizationOp is BatchNormWithGlobalNormalizationGrad's opdef.
var globalNormalizationOp = opsOf(opdef.GlobalNormalizationGrad)[0]

// globalNormalizationGrad is gobn's op, or with stock stock's, on the
// inputs t, m, v, gamma and backprop.
func globalNormalizationGrad(t *testing.T, stock bool, in [5]tf.Output, scaleAfter bool) tf.OpSpec {
	byName := map[string]tf.Output{}
	for i, arg := range globalNormalizationOp.Inputs {
		byName[arg.Name] = in[i]
	}
	return opSpec(t, globalNormalizationOp, stock, byName,
		map[string]any{"variance_epsilon": float32(epsilon), "scale_after_normalization": scaleAfter})
}

// ---------------------------------------------------------------------------
// Graph helpers

// dtypeName names the dtypes as internal/tolerance keys its bounds.
var dtypeName = map[tf.DataType]string{tf.Float: "float", tf.Half: "half", tf.Bfloat16: "bfloat16", tf.Double: "double"}

// requireClose fails t unless got matches want within dtype's tolerance
// (reference.Close).
func requireClose(t *testing.T, got, want []float64, dtype tf.DataType, what string) {
	t.Helper()
	if !reference.Close(t, what+" ("+dtypeName[dtype]+" tolerance)", got, want, tolerance.ByDType[dtypeName[dtype]], 0) {
		t.FailNow()
	}
}

// requireAsAccurate fails t unless got is, element-wise, no further from
// the float64 reference than stock is, plus one tolerance of slack
// (reference.AsAccurate).
func requireAsAccurate(t *testing.T, got, stock, ref []float64, dtype tf.DataType, what string) {
	t.Helper()
	if !reference.AsAccurate(t, what+": gobn against stock", got, stock, ref, tolerance.ByDType[dtypeName[dtype]]) {
		t.FailNow()
	}
}

// maxAbsDiff returns max |a − b| (+Inf where a NaN or an infinity differs).
func maxAbsDiff(a, b []float64) float64 {
	return reference.Compare(a, b, tolerance.Bound{}, 0).MaxErr
}

func mode(training bool) string {
	if training {
		return "training"
	}
	return "inference"
}

func uniform(rng *rand.Rand, n int, lo, hi float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = lo + (hi-lo)*rng.Float64()
	}
	return v
}

// activations seeds a generator with name and stream and draws from it an
// activation x and its gradient dy of g's elements: x normal with deviation
// 1.5 about a per-channel mean drawn from [-spread, spread), dy standard
// normal. It returns the generator, for the rest of the inputs, and the means.
func activations(name string, stream uint64, g reference.Shape, spread float64) (rng *rand.Rand, x, dy, means []float64) {
	rng = rand.New(rand.NewPCG(uint64(crc32.ChecksumIEEE([]byte(name))), stream))
	means = uniform(rng, g.C, -spread, spread)
	x, dy = make([]float64, g.Len()), make([]float64, g.Len())
	for i := range x {
		x[i] = rng.NormFloat64()*1.5 + means[g.Channel(i)]
		dy[i] = rng.NormFloat64()
	}
	return rng, x, dy, means
}

// constant adds a float64 constant of the given shape.
func constant(t *testing.T, root *op.Scope, data []float64, shape []int64) tf.Output {
	tensor, err := tf.NewTensor(data)
	require.NoError(t, err)
	require.NoError(t, tensor.Reshape(shape))
	return tg.Const(root, tensor)
}

// fetchedTensor is a fetched tensor: its shape, and its values as float64.
type fetchedTensor struct {
	shape []int64
	data  []float64
}

// run casts each output to double, runs the graph with tfgo and returns the
// values.
func run(t *testing.T, root *op.Scope, outputs []tf.Output) []fetchedTensor {
	fetches := doubles(root, outputs)
	var results []*tf.Tensor
	require.NotPanics(t, func() { results = tg.Exec(root, fetches, nil, nil) }, "running the graph")
	return fetchedTensors(t, results)
}

// doubles adds a cast of each output to double (exact for every dtype here).
func doubles(root *op.Scope, outputs []tf.Output) []tf.Output {
	s := root.SubScope("fetch")
	casts := make([]tf.Output, len(outputs))
	for i, o := range outputs {
		casts[i] = tg.Cast(s, o, tf.Double)
	}
	return casts
}

// fetchedTensors returns the values of tensors of dtype double.
func fetchedTensors(t *testing.T, results []*tf.Tensor) []fetchedTensor {
	out := make([]fetchedTensor, len(results))
	for i, r := range results {
		shape := append([]int64{}, r.Shape()...)
		n := int64(1)
		for _, d := range shape {
			n *= d
		}
		require.NoError(t, r.Reshape([]int64{n}))
		out[i] = fetchedTensor{shape: shape, data: r.Value().([]float64)}
	}
	return out
}

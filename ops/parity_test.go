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
	"github.com/gobn/gobn/ops"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

const epsilon = 1e-3

// fusedOp is one op of the FusedBatchNormGrad family, as the stock and the
// gobn wrappers build it.
type fusedOp struct {
	name    string
	dtypes  []tf.DataType
	formats []string
	// build adds the op to s: gobn's when gobn, else stock's.
	build func(s *op.Scope, gobn bool, in fusedInputs, format string, training bool) [5]tf.Output
}

type fusedInputs struct {
	yBackprop, x, scale, reserveSpace1, reserveSpace2, reserveSpace3 tf.Output
}

var fusedOps = []fusedOp{
	{
		name:    "FusedBatchNormGrad",
		dtypes:  []tf.DataType{tf.Float},
		formats: []string{"NHWC", "NCHW"},
		build: func(s *op.Scope, gobn bool, in fusedInputs, format string, training bool) [5]tf.Output {
			var o [5]tf.Output
			if gobn {
				o[0], o[1], o[2], o[3], o[4] = ops.FusedBatchNormGrad(s, in.yBackprop, in.x, in.scale, in.reserveSpace1, in.reserveSpace2,
					ops.FusedBatchNormGradEpsilon(epsilon), ops.FusedBatchNormGradDataFormat(format), ops.FusedBatchNormGradIsTraining(training))
			} else {
				o[0], o[1], o[2], o[3], o[4] = op.FusedBatchNormGrad(s, in.yBackprop, in.x, in.scale, in.reserveSpace1, in.reserveSpace2,
					op.FusedBatchNormGradEpsilon(epsilon), op.FusedBatchNormGradDataFormat(format), op.FusedBatchNormGradIsTraining(training))
			}
			return o
		},
	},
	{
		name:    "FusedBatchNormGradV2",
		dtypes:  []tf.DataType{tf.Float, tf.Half, tf.Bfloat16},
		formats: []string{"NHWC", "NCHW"},
		build: func(s *op.Scope, gobn bool, in fusedInputs, format string, training bool) [5]tf.Output {
			var o [5]tf.Output
			if gobn {
				o[0], o[1], o[2], o[3], o[4] = ops.FusedBatchNormGradV2(s, in.yBackprop, in.x, in.scale, in.reserveSpace1, in.reserveSpace2,
					ops.FusedBatchNormGradV2Epsilon(epsilon), ops.FusedBatchNormGradV2DataFormat(format), ops.FusedBatchNormGradV2IsTraining(training))
			} else {
				o[0], o[1], o[2], o[3], o[4] = op.FusedBatchNormGradV2(s, in.yBackprop, in.x, in.scale, in.reserveSpace1, in.reserveSpace2,
					op.FusedBatchNormGradV2Epsilon(epsilon), op.FusedBatchNormGradV2DataFormat(format), op.FusedBatchNormGradV2IsTraining(training))
			}
			return o
		},
	},
	{
		name:    "FusedBatchNormGradV3",
		dtypes:  []tf.DataType{tf.Float, tf.Half, tf.Bfloat16},
		formats: []string{"NHWC", "NCHW", "NDHWC", "NCDHW"},
		build: func(s *op.Scope, gobn bool, in fusedInputs, format string, training bool) [5]tf.Output {
			var o [5]tf.Output
			if gobn {
				o[0], o[1], o[2], o[3], o[4] = ops.FusedBatchNormGradV3(s, in.yBackprop, in.x, in.scale, in.reserveSpace1, in.reserveSpace2, in.reserveSpace3,
					ops.FusedBatchNormGradV3Epsilon(epsilon), ops.FusedBatchNormGradV3DataFormat(format), ops.FusedBatchNormGradV3IsTraining(training))
			} else {
				o[0], o[1], o[2], o[3], o[4] = op.FusedBatchNormGradV3(s, in.yBackprop, in.x, in.scale, in.reserveSpace1, in.reserveSpace2, in.reserveSpace3,
					op.FusedBatchNormGradV3Epsilon(epsilon), op.FusedBatchNormGradV3DataFormat(format), op.FusedBatchNormGradV3IsTraining(training))
			}
			return o
		},
	},
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
	for _, fop := range fusedOps {
		for _, dtype := range fop.dtypes {
			for _, format := range fop.formats {
				for _, training := range []bool{true, false} {
					name := fmt.Sprintf("%s/%s/%s/%s", fop.name, dtypeName[dtype], format, mode(training))
					t.Run(name, func(t *testing.T) { testFused(t, fop, dtype, format, training, name) })
				}
			}
		}
	}
}

func testFused(t *testing.T, fop fusedOp, dtype tf.DataType, format string, training bool, name string) {
	shape, g := shapeFor(format)
	g.N = int(shape[0])
	rng := rand.New(rand.NewPCG(uint64(crc32.ChecksumIEEE([]byte(name))), 1))
	n := g.Len()
	shift := uniform(rng, g.C, -1, 1)
	xData, dyData := make([]float64, n), make([]float64, n)
	for i := range n {
		xData[i] = rng.NormFloat64()*1.5 + shift[g.Channel(i)]
		dyData[i] = rng.NormFloat64()
	}
	scaleData := uniform(rng, g.C, 0.5, 1.5)
	for c := range scaleData {
		if rng.IntN(2) == 0 {
			scaleData[c] = -scaleData[c]
		}
	}

	root := tg.NewRoot()
	in := fusedInputs{
		x:         tg.Cast(root, constant(t, root, xData, shape), dtype),
		yBackprop: tg.Cast(root, constant(t, root, dyData, shape), dtype),
		scale:     tg.Cast(root, constant(t, root, scaleData, []int64{int64(g.C)}), tf.Float),
	}
	empty := tg.Const(root, []float32{})
	if training {
		offset := tg.Cast(root, constant(t, root, uniform(rng, g.C, -1, 1), []int64{int64(g.C)}), tf.Float)
		_, _, _, in.reserveSpace1, in.reserveSpace2, in.reserveSpace3 = op.FusedBatchNormV3(root.SubScope("forward"),
			in.x, in.scale, offset, empty, empty,
			op.FusedBatchNormV3Epsilon(epsilon), op.FusedBatchNormV3DataFormat(format), op.FusedBatchNormV3IsTraining(true))
	} else {
		in.reserveSpace1 = tg.Cast(root, constant(t, root, uniform(rng, g.C, -0.5, 0.5), []int64{int64(g.C)}), tf.Float)
		in.reserveSpace2 = tg.Cast(root, constant(t, root, uniform(rng, g.C, 0.5, 2), []int64{int64(g.C)}), tf.Float)
		in.reserveSpace3 = empty
	}
	if fop.name == "FusedBatchNormGrad" { // T everywhere
		in.scale = tg.Cast(root, in.scale, dtype)
		in.reserveSpace1 = tg.Cast(root, in.reserveSpace1, dtype)
		in.reserveSpace2 = tg.Cast(root, in.reserveSpace2, dtype)
	}

	stockHasAnswer := training || g.ChannelsLast
	gobn := fop.build(root.SubScope("gobn"), true, in, format, training)
	var stock [5]tf.Output
	if stockHasAnswer {
		stock = fop.build(root.SubScope("stock"), false, in, format, training)
	}

	// Every output's dtype and static shape, against stock's and the rules.
	sideType := tf.Float
	if fop.name == "FusedBatchNormGrad" {
		sideType = dtype
	}
	wantShapes := [][]int64{shape, {int64(g.C)}, {int64(g.C)}, {0}, {0}}
	for i, out := range gobn {
		want := sideType
		if i == 0 {
			want = dtype
		}
		require.Equal(t, want, out.DataType(), "output %d dtype", i)
		static, err := out.Shape().ToSlice()
		require.NoError(t, err, "output %d: static shape of unknown rank", i)
		require.Equal(t, wantShapes[i], static, "output %d static shape", i)
		if stockHasAnswer {
			require.Equal(t, stock[i].DataType(), out.DataType(), "output %d dtype vs stock", i)
			require.Equal(t, stock[i].Shape().String(), out.Shape().String(), "output %d static shape vs stock", i)
		}
	}

	inputs := []tf.Output{in.yBackprop, in.x, in.scale, in.reserveSpace1, in.reserveSpace2}
	fetched := run(t, root, append(append(append([]tf.Output{}, inputs...), gobn[:]...), stockOrNone(stock, stockHasAnswer)...))
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

// TestBatchNormWithGlobalNormalizationGradMatchesStock compares gobn's op with
// stock's in one tfgo graph for each dtype. Stock's op is deprecated at
// GraphDef version 9 and refuses to run in a newer graph, so the graph is
// given producer version 8 by importing a GraphDef that declares it (the
// import keeps the lower of the two versions). Stock sums in T, so in half it
// is inaccurate: there both are compared with a float64 reference, and gobn
// must be at least as accurate as stock.
func TestBatchNormWithGlobalNormalizationGradMatchesStock(t *testing.T) {
	for _, dtype := range []tf.DataType{tf.Float, tf.Half, tf.Double} {
		for _, scaleAfter := range []bool{true, false} {
			name := fmt.Sprintf("%s/scale_after_normalization=%t", dtypeName[dtype], scaleAfter)
			t.Run(name, func(t *testing.T) {
				g := tf.NewGraph()
				def, err := proto.Marshal(&graph_go_proto.GraphDef{Versions: &versions_go_proto.VersionDef{Producer: 8}})
				require.NoError(t, err)
				require.NoError(t, g.Import(def, ""))
				root := op.NewScopeWithGraph(g)
				in, geo := globalNormalizationInputs(t, root, dtype, name)
				gobn := addGlobalNormalizationGrad(root.SubScope("gobn"), true, in, scaleAfter)
				stock := addGlobalNormalizationGrad(root.SubScope("stock"), false, in, scaleAfter)
				for i := range gobn {
					require.Equal(t, stock[i].DataType(), gobn[i].DataType(), "output %d dtype", i)
					require.Equal(t, stock[i].Shape().String(), gobn[i].Shape().String(), "output %d static shape", i)
				}
				fetched := run(t, root, append(append(in[:], gobn[:]...), stock[:]...))
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
	gobn := addGlobalNormalizationGrad(root.SubScope("gobn"), true, in, true)
	fetched := run(t, root, append(in[:], gobn[:]...))
	ref := globalNormalizationReference(geo, fetched, true)
	for i := range 5 {
		requireClose(t, fetched[5+i].data, ref[i], tf.Float, fmt.Sprintf("output %d vs float64 reference", i))
	}

	root = tg.NewRoot()
	in, _ = globalNormalizationInputs(t, root, tf.Float, "current")
	stock := addGlobalNormalizationGrad(root.SubScope("stock"), false, in, true)
	var refusal any
	func() {
		defer func() { refusal = recover() }()
		tg.Exec(root, stock[:1], nil, nil)
	}()
	require.NotNil(t, refusal, "stock BatchNormWithGlobalNormalizationGrad ran at the current GraphDef version")
	require.Contains(t, fmt.Sprint(refusal), "GraphDef version")
}

func globalNormalizationInputs(t *testing.T, root *op.Scope, dtype tf.DataType, name string) ([5]tf.Output, reference.Shape) {
	shape := []int64{2, 4, 3, 6}
	g := reference.Shape{N: 2, C: 6, S: 12, ChannelsLast: true}
	rng := rand.New(rand.NewPCG(uint64(crc32.ChecksumIEEE([]byte(name))), 2))
	n := g.Len()
	mean := uniform(rng, g.C, -0.5, 0.5)
	x, dy := make([]float64, n), make([]float64, n)
	for i := range n {
		x[i] = rng.NormFloat64()*1.5 + mean[g.Channel(i)]
		dy[i] = rng.NormFloat64()
	}
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

func addGlobalNormalizationGrad(s *op.Scope, gobn bool, in [5]tf.Output, scaleAfter bool) [5]tf.Output {
	var o [5]tf.Output
	if gobn {
		o[0], o[1], o[2], o[3], o[4] = ops.BatchNormWithGlobalNormalizationGrad(s, in[0], in[1], in[2], in[3], in[4], epsilon, scaleAfter)
	} else {
		o[0], o[1], o[2], o[3], o[4] = op.BatchNormWithGlobalNormalizationGrad(s, in[0], in[1], in[2], in[3], in[4], epsilon, scaleAfter)
	}
	return o
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

// constant adds a float64 constant of the given shape.
func constant(t *testing.T, root *op.Scope, data []float64, shape []int64) tf.Output {
	tensor, err := tf.NewTensor(data)
	require.NoError(t, err)
	require.NoError(t, tensor.Reshape(shape))
	return tg.Const(root, tensor)
}

func stockOrNone(stock [5]tf.Output, present bool) []tf.Output {
	if !present {
		return nil
	}
	return stock[:]
}

// fetchedTensor is a fetched tensor: its shape, and its values as float64.
type fetchedTensor struct {
	shape []int64
	data  []float64
}

// run casts each output to double (exact for every dtype here), runs the
// graph with tfgo and returns the values.
func run(t *testing.T, root *op.Scope, outputs []tf.Output) []fetchedTensor {
	s := root.SubScope("fetch")
	fetches := make([]tf.Output, len(outputs))
	for i, o := range outputs {
		fetches[i] = tg.Cast(s, o, tf.Double)
	}
	var results []*tf.Tensor
	require.NotPanics(t, func() { results = tg.Exec(root, fetches, nil, nil) }, "running the graph")
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

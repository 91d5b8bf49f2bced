package ops_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	tf "github.com/galeone/tensorflow/tensorflow/go"
	"github.com/galeone/tensorflow/tensorflow/go/core/framework/graph_go_proto"
	"github.com/galeone/tensorflow/tensorflow/go/op"
	tg "github.com/galeone/tfgo"
	"github.com/gobn/gobn/opdef"
	"github.com/gobn/gobn/ops"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The tests of Rewrite write GraphDefs field by field, as TensorFlow's
// protos number them (graph.proto, function.proto, node_def.proto,
// attr_value.proto), in orders a marshaller of the messages would not keep
// (attrs unsorted, unknown fields), so that a rewrite that decoded and
// encoded them again would change bytes the tests require unchanged.

// stockTwins is the stock op → Gobn> twin table of opdef/testdata/ops.json,
// written by hand apart from opdef.
func stockTwins(t testing.TB) map[string]string {
	twins := map[string]string{}
	for _, o := range tableOps(t) {
		if o.Stock != nil {
			twins[*o.Stock] = o.Name
		}
	}
	require.NotEmpty(t, twins, "the table's stock twins")
	return twins
}

// tableOps returns the rows of opdef/testdata/ops.json: each op's name,
// stock twin and the dtypes stock has kernels of by device.
func tableOps(t testing.TB) []tableOp {
	data, err := os.ReadFile(filepath.Join("..", "opdef", "testdata", "ops.json"))
	require.NoError(t, err)
	var table struct{ Ops []tableOp }
	require.NoError(t, json.Unmarshal(data, &table))
	return table.Ops
}

type tableOp struct {
	Name         string
	Stock        *string
	StockKernels map[string][]string `json:"stock_kernels"`
}

func field(num protowire.Number, value []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), value)
}

func stringField(num protowire.Number, s string) []byte { return field(num, []byte(s)) }

func varintField(num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
}

func fixed32Field(num protowire.Number, v uint32) []byte {
	return protowire.AppendFixed32(protowire.AppendTag(nil, num, protowire.Fixed32Type), v)
}

func message(fields ...[]byte) []byte { return bytes.Join(fields, nil) }

// attr is an entry of a NodeDef's attr map (field 5): key 1, AttrValue 2.
func attr(key string, value []byte) []byte {
	return field(5, message(stringField(1, key), field(2, value)))
}

// nodeDef is a NodeDef named name of op op, with inputs, a device, attrs
// of a batch-norm gradient (one of them a string that names a stock op) in
// no sorted order, and an unknown field.
func nodeDef(name, op string) []byte {
	return message(
		stringField(1, name), stringField(2, op), stringField(3, "x"), stringField(3, "dy:1"),
		stringField(4, "/device:CPU:0"),
		attr("is_training", varintField(5, 1)),               // AttrValue.b
		attr("T", varintField(6, 1)),                         // AttrValue.type: DT_FLOAT
		attr("epsilon", fixed32Field(4, 0x3a83126f)),         // AttrValue.f: 0.001
		attr("note", stringField(2, "FusedBatchNormGradV3")), // AttrValue.s
		varintField(1000, 7),
	)
}

// functionDef is a FunctionDef named name (its signature, an OpDef) with
// the given nodes, an attr and a ret entry.
func functionDef(name string, nodes ...[]byte) []byte {
	fields := [][]byte{field(1, stringField(1, name))}
	for _, n := range nodes {
		fields = append(fields, field(3, n))
	}
	fields = append(fields, field(4, message(stringField(1, "y"), stringField(2, "grad:x_backprop:0"))),
		field(5, message(stringField(1, "_noinline"), field(2, varintField(5, 1)))))
	return message(fields...)
}

// graphDef is a GraphDef of the given nodes, its library holding the given
// functions and a GradientDef, its versions, and an unknown field.
func graphDef(nodes [][]byte, functions ...[]byte) []byte {
	var fields [][]byte
	for _, n := range nodes {
		fields = append(fields, field(1, n))
	}
	library := [][]byte{}
	for _, f := range functions {
		library = append(library, field(1, f))
	}
	library = append(library, field(2, message(stringField(1, "f"), stringField(2, "f_grad"))))
	fields = append(fields, field(2, message(library...)), field(4, varintField(1, 1808)), varintField(1000, 1))
	return message(fields...)
}

// TestRewriteRetypesEachStockGradient rewrites, for each stock op that gobn
// has a twin for, a graph with the op's node beside others, and a function
// with it in the graph's library: the stock nodes become the twin's, and
// every other byte is the same.
func TestRewriteRetypesEachStockGradient(t *testing.T) {
	for stock, twin := range stockTwins(t) {
		t.Run(stock, func(t *testing.T) {
			graph := func(op string) []byte {
				return graphDef([][]byte{nodeDef("forward", "FusedBatchNormV3"), nodeDef("grad", op), nodeDef("sum", "Sum")},
					functionDef("f", nodeDef("grad", op), nodeDef("id", "Identity")),
					functionDef("g", nodeDef("id", "Identity")))
			}
			out, err := ops.Rewrite(graph(stock))
			require.NoError(t, err)
			require.Equal(t, graph(twin), out)
		})
	}
}

// TestRewriteRetypesEveryStockGradientOfAGraph rewrites a graph holding
// every stock gradient op, some of them twice, in the graph and in
// functions.
func TestRewriteRetypesEveryStockGradientOfAGraph(t *testing.T) {
	var in, want [][]byte
	for stock, twin := range stockTwins(t) {
		for _, name := range []string{"a", "b"} {
			in, want = append(in, nodeDef(name+stock, stock)), append(want, nodeDef(name+stock, twin))
		}
	}
	out, err := ops.Rewrite(graphDef(in, functionDef("f", in...)))
	require.NoError(t, err)
	require.Equal(t, graphDef(want, functionDef("f", want...)), out)
}

// TestRewriteLeavesOtherGraphsAlone: a graph without a stock gradient
// node comes back byte for byte, whatever else names a stock op.
func TestRewriteLeavesOtherGraphsAlone(t *testing.T) {
	nodes := [][]byte{
		nodeDef("a", "MyCustomOp"),
		nodeDef("b", "FusedBatchNormGradV4"),
		nodeDef("c", "Gobn>FusedBatchNormGradV3"),
		nodeDef("d", "Gobn>BatchNormGradReduce"),
		nodeDef("e", "fusedbatchnormgradv3"),
		nodeDef("f", "FusedBatchNormGradV3 "),
		nodeDef("g", "FusedBatchNormV3"),
		nodeDef("FusedBatchNormGradV3", "Identity"), // a node's name
		nodeDef("h", ""),
	}
	for name, in := range map[string][]byte{
		"nodes":     graphDef(nodes),
		"functions": graphDef(nodes[:2], functionDef("f", nodes...), functionDef("FusedBatchNormGradV3")),
		// NodeDef.op as a varint: an unknown field to a protobuf reader, not an op.
		"op as a varint": graphDef([][]byte{message(stringField(1, "a"), varintField(2, 3))}),
		"versions only":  message(field(4, varintField(1, 1808))),
	} {
		t.Run(name, func(t *testing.T) {
			out, err := ops.Rewrite(in)
			require.NoError(t, err)
			require.Equal(t, in, out)
		})
	}
}

func TestRewriteOfEmptyIsEmpty(t *testing.T) {
	for _, in := range [][]byte{nil, {}} {
		out, err := ops.Rewrite(in)
		require.NoError(t, err)
		require.Empty(t, out)
	}
}

// corruptGraphDefs are byte strings that are not serialized GraphDefs.
var corruptGraphDefs = map[string][]byte{
	"text":                    []byte("not a graph"),
	"truncated":               graphDef([][]byte{nodeDef("grad", "FusedBatchNormGradV3")})[:20],
	"length past the end":     protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.BytesType), 100),
	"field number 0":          {0x02, 0x00},
	"end group without start": protowire.AppendTag(nil, 1, protowire.EndGroupType),
	"node not a NodeDef":      field(1, []byte{0xff, 0xff, 0xff}),
	"op not UTF-8":            graphDef([][]byte{nodeDef("grad", "FusedBatchNormGradV3\xff")}),
	"attr not an AttrValue":   field(1, message(stringField(2, "FusedBatchNormGradV3"), field(5, []byte{0x0a, 0x05}))),
	"function node corrupt": graphDef(nil, message(field(1, stringField(1, "f")),
		field(3, message(stringField(2, "FusedBatchNormGradV3"), []byte{0x1a, 0x09})))),
}

func TestRewriteRejectsCorruptInput(t *testing.T) {
	for name, in := range corruptGraphDefs {
		t.Run(name, func(t *testing.T) {
			var out []byte
			var err error
			require.NotPanics(t, func() { out, err = ops.Rewrite(in) })
			require.ErrorContains(t, err, "not a serialized GraphDef")
			require.Nil(t, out)
		})
	}
}

// FuzzRewrite: on any bytes, Rewrite fails exactly when protobuf cannot
// read them as a GraphDef; otherwise what it returns reads as the same
// GraphDef with every stock gradient node retyped to its twin, and
// rewriting that again changes nothing.
func FuzzRewrite(f *testing.F) {
	twins := stockTwins(f)
	for stock := range twins {
		f.Add(graphDef([][]byte{nodeDef("grad", stock), nodeDef("id", "Identity")}, functionDef("f", nodeDef("grad", stock))))
	}
	for _, in := range corruptGraphDefs {
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := ops.Rewrite(in)
		var want graph_go_proto.GraphDef
		if proto.Unmarshal(in, &want) != nil {
			require.Error(t, err)
			return
		}
		require.NoError(t, err)
		for _, n := range want.Node {
			if twin, ok := twins[n.Op]; ok {
				n.Op = twin
			}
		}
		for _, fn := range want.GetLibrary().GetFunction() {
			for _, n := range fn.NodeDef {
				if twin, ok := twins[n.Op]; ok {
					n.Op = twin
				}
			}
		}
		var got graph_go_proto.GraphDef
		require.NoError(t, proto.Unmarshal(out, &got))
		require.True(t, proto.Equal(&want, &got), "Rewrite changed more than the stock ops")
		again, err := ops.Rewrite(out)
		require.NoError(t, err)
		require.Equal(t, out, again)
	})
}

// TestRewrittenGraphsRunOnGobn builds each stock gradient op into a graph,
// on the parity tests' inputs (float32, training, NHWC), writes it out,
// rewrites it and imports it into a graph of its own: there the twin
// stands in the stock op's node, computes stock's outputs within float32's
// tolerance, and runs gobn's kernel once a run, which running stock's graph
// does not. Where stock has no CPU kernel of the op (the table's
// stock_kernels; its graph then runs nothing), the node computes what the
// twin built on the same inputs in a graph of its own does, bit for bit.
func TestRewrittenGraphsRunOnGobn(t *testing.T) {
	stockOnCPU := map[string]bool{}
	for _, o := range tableOps(t) {
		stockOnCPU[o.Name] = len(o.StockKernels["CPU"]) > 0
	}
	for _, o := range opdef.All {
		if o.Stock == "" {
			continue
		}
		t.Run(o.Stock, func(t *testing.T) {
			var root, twin *op.Scope
			var spec tf.OpSpec
			if o.Kind == opdef.GlobalNormalizationGrad {
				root = producerScope(t, 8) // stock's op is refused at later versions
				in, _ := globalNormalizationInputs(t, root, tf.Float, o.Stock)
				spec = globalNormalizationGrad(t, true, in, true)
			} else {
				root = tg.NewRoot()
				i := slices.IndexFunc(o.Kernels, func(b opdef.TypeBinding) bool { return b["T"] == opdef.Float })
				in, _, _ := fusedInputs(t, root, o, o.Kernels[i], "NHWC", true, o.Stock)
				attrs := map[string]any{"epsilon": float32(epsilon), "is_training": true}
				spec = opSpec(t, o, true, in, attrs)
				if !stockOnCPU[o.Name] {
					twin = tg.NewRoot()
					same, _, _ := fusedInputs(t, twin, o, o.Kernels[i], "NHWC", true, o.Stock)
					doubles(twin, addOp(t, twin.SubScope("stock"), opSpec(t, o, false, same, attrs)))
				}
			}
			stock := addOp(t, root.SubScope("stock"), spec)
			fetches := doubles(root, stock)
			graph, err := root.Finalize()
			require.NoError(t, err)
			var def bytes.Buffer
			_, err = graph.WriteTo(&def)
			require.NoError(t, err)
			rewritten, err := ops.Rewrite(def.Bytes())
			require.NoError(t, err)
			onGobn := tf.NewGraph()
			require.NoError(t, onGobn.Import(rewritten, ""))

			name := stock[0].Op.Name()
			require.Equal(t, o.Stock, graph.Operation(name).Type())
			require.Equal(t, o.Name, onGobn.Operation(name).Type())
			require.Equal(t, len(graph.Operations()), len(onGobn.Operations()))

			var want []fetchedTensor
			if twin != nil {
				twinGraph, err := twin.Finalize() // its fetches named as stock's graph's
				require.NoError(t, err)
				want = runGraph(t, twinGraph, fetches)
			}
			calls := callsOf(t, o.Name)
			if twin == nil {
				want = runGraph(t, graph, fetches)
				require.Equal(t, calls, callsOf(t, o.Name), "gobn's kernel ran in stock's graph")
			}
			got := runGraph(t, onGobn, fetches)
			require.Equal(t, calls+1, callsOf(t, o.Name), "gobn's kernel did not run once in the rewritten graph")
			if twin != nil {
				require.Equal(t, want, got, "the retyped node against the twin")
				return
			}
			for i := range want {
				require.Equal(t, want[i].shape, got[i].shape, "output %d shape", i)
				requireClose(t, got[i].data, want[i].data, tf.Float, fmt.Sprintf("output %d vs stock", i))
			}
		})
	}
}

// runGraph runs g and returns the values of its outputs of the names of
// outputs (those of another graph, which g imported), each of dtype double.
func runGraph(t *testing.T, g *tf.Graph, outputs []tf.Output) []fetchedTensor {
	fetches := make([]tf.Output, len(outputs))
	for i, o := range outputs {
		operation := g.Operation(o.Op.Name())
		require.NotNil(t, operation, "no operation %s", o.Op.Name())
		fetches[i] = operation.Output(o.Index)
	}
	session, err := tf.NewSession(g, nil)
	require.NoError(t, err)
	defer session.Close()
	results, err := session.Run(nil, fetches, nil)
	require.NoError(t, err)
	return fetchedTensors(t, results)
}

// callsOf returns the calls of the kernels of the op registered as name on
// every device, from KernelCalls.
func callsOf(t *testing.T, name string) int64 {
	calls, err := ops.KernelCalls()
	require.NoError(t, err)
	var n int64
	for _, c := range calls[name] {
		n += c
	}
	return n
}

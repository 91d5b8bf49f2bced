package ops

import (
	"fmt"

	"github.com/galeone/tensorflow/tensorflow/go/core/framework/graph_go_proto"
	"github.com/gobn/gobn/opdef"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// twins maps each stock op that gobn has a twin for to the twin's name:
// "FusedBatchNormGradV3" to "Gobn>FusedBatchNormGradV3", and so on.
var twins = func() map[string]string {
	m := map[string]string{}
	for _, o := range opdef.All {
		if o.Stock != "" {
			m[o.Stock] = o.Name
		}
	}
	return m
}()

// Rewrite returns graphDef, a serialized tensorflow.GraphDef (what
// tf.Graph.WriteTo writes, or a graph's .pb file), with every node of a
// stock op that gobn has a twin for retyped to its twin: FusedBatchNormGrad,
// FusedBatchNormGradV2, FusedBatchNormGradV3 and
// BatchNormWithGlobalNormalizationGrad become Gobn>FusedBatchNormGrad,
// Gobn>FusedBatchNormGradV2, Gobn>FusedBatchNormGradV3 and
// Gobn>BatchNormWithGlobalNormalizationGrad, in the graph and in the
// functions of its library. A twin has exactly its stock op's inputs,
// outputs and attrs, so the new type is the whole change: imported
// (tf.Graph.Import) after Load, the graph computes what it did, its
// batch-norm gradients on gobn's kernels. This is how a graph whose
// gradients tf.Graph.AddGradients built (on stock's ops) trains on gobn.
//
// Only the op fields of those nodes change, and the lengths of the messages
// that hold them: every other byte is graphDef's own, so that every other
// node, and every attr and constant, reads exactly as it did; a graph
// without such nodes comes back as graphDef itself. An empty graphDef is
// the empty graph. Bytes that are not a serialized GraphDef are an error.
func Rewrite(graphDef []byte) ([]byte, error) {
	// proto.Unmarshal checks every level of the message, as TensorFlow reads
	// it; the rewrite works on the wire, because marshalling the message again
	// would reorder fields that TensorFlow writes in its own order (attr maps).
	if err := proto.Unmarshal(graphDef, &graph_go_proto.GraphDef{}); err != nil {
		return nil, fmt.Errorf("gobn: Rewrite: not a serialized GraphDef: %w", err)
	}
	out, _, err := rewriteMessage(graphDef, graphDefField)
	if err != nil {
		return nil, fmt.Errorf("gobn: Rewrite: not a serialized GraphDef: %w", err)
	}
	return out, nil
}

// A fieldRewriter returns the value a length-delimited field of number num
// takes in place of value, and whether that differs.
type fieldRewriter func(num protowire.Number, value []byte) ([]byte, bool, error)

// The fields that lead to a node's op, by number, from TensorFlow's
// graph.proto, function.proto and node_def.proto.
const (
	graphDefNode       protowire.Number = 1 // GraphDef.node, a NodeDef
	graphDefLibrary    protowire.Number = 2 // GraphDef.library, a FunctionDefLibrary
	libraryFunction    protowire.Number = 1 // FunctionDefLibrary.function, a FunctionDef
	functionDefNodeDef protowire.Number = 3 // FunctionDef.node_def, a NodeDef
	nodeDefOp          protowire.Number = 2 // NodeDef.op, a string
)

func graphDefField(num protowire.Number, value []byte) ([]byte, bool, error) {
	switch num {
	case graphDefNode:
		return rewriteMessage(value, nodeDefField)
	case graphDefLibrary:
		return rewriteMessage(value, libraryField)
	}
	return value, false, nil
}

func libraryField(num protowire.Number, value []byte) ([]byte, bool, error) {
	if num == libraryFunction {
		return rewriteMessage(value, functionField)
	}
	return value, false, nil
}

func functionField(num protowire.Number, value []byte) ([]byte, bool, error) {
	if num == functionDefNodeDef {
		return rewriteMessage(value, nodeDefField)
	}
	return value, false, nil
}

func nodeDefField(num protowire.Number, value []byte) ([]byte, bool, error) {
	if num == nodeDefOp {
		if twin, ok := twins[string(value)]; ok {
			return []byte(twin), true, nil
		}
	}
	return value, false, nil
}

// rewriteMessage returns msg, a serialized message, with the value of each
// length-delimited field replaced by what rewrite makes of it. Each field
// that keeps its value is copied as it is; a new value gets the field's own
// tag and a new length. When no field changes, msg itself comes back, with
// false.
func rewriteMessage(msg []byte, rewrite fieldRewriter) ([]byte, bool, error) {
	var out []byte // nil until a field changes
	for pos := 0; pos < len(msg); {
		num, typ, tagLen := protowire.ConsumeTag(msg[pos:])
		if tagLen < 0 {
			return nil, false, fmt.Errorf("at byte %d: %w", pos, protowire.ParseError(tagLen))
		}
		valueLen := protowire.ConsumeFieldValue(num, typ, msg[pos+tagLen:])
		if valueLen < 0 {
			return nil, false, fmt.Errorf("field %d at byte %d: %w", num, pos, protowire.ParseError(valueLen))
		}
		end := pos + tagLen + valueLen
		if typ == protowire.BytesType {
			value, _ := protowire.ConsumeBytes(msg[pos+tagLen : end])
			rewritten, changed, err := rewrite(num, value)
			if err != nil {
				return nil, false, err
			}
			if changed {
				if out == nil {
					out = append(make([]byte, 0, len(msg)+len(rewritten)), msg[:pos]...)
				}
				out = protowire.AppendBytes(append(out, msg[pos:pos+tagLen]...), rewritten)
				pos = end
				continue
			}
		}
		if out != nil {
			out = append(out, msg[pos:end]...)
		}
		pos = end
	}
	if out == nil {
		return msg, false, nil
	}
	return out, true, nil
}

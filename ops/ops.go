// Package ops runs batch-norm gradients on gobn in TensorFlow graphs built
// from Go, for programs that use github.com/galeone/tfgo and the TensorFlow
// Go bindings (github.com/galeone/tensorflow/tensorflow/go). Load loads
// gobn's library into the process's TensorFlow first.
//
// Rewrite retypes the stock batch-norm gradients of a serialized GraphDef,
// such as those tf.Graph.AddGradients builds for training, to gobn's twins:
// the graph, imported, trains on gobn. KernelCalls counts the calls of
// gobn's kernels.
//
// The wrappers add gobn's ops to a graph, each with the signature of the
// stock op's wrapper in the bindings' op package, so moving to gobn is an
// import change:
//
//	dx, dscale, doffset, _, _ := op.FusedBatchNormGradV3(scope, dy, x, scale, rs1, rs2, rs3,
//		op.FusedBatchNormGradV3IsTraining(true))
//
// becomes
//
//	dx, dscale, doffset, _, _ := ops.FusedBatchNormGradV3(scope, dy, x, scale, rs1, rs2, rs3,
//		ops.FusedBatchNormGradV3IsTraining(true))
//
// They add the Gobn> ops (Gobn>FusedBatchNormGradV3, ...) and are generated
// from opdef (ops_gen.go, `go generate ./ops`).
//
// Building needs the cgo flags of the TensorFlow the library was built
// against, and Load("") the library's path: `eval "$(make -s -C <gobn
// checkout> env)"` sets both (docs/tfgo.md).
package ops

//go:generate go run ../cmd/genops

import (
	"fmt"
	"os"
	"sync"

	tf "github.com/galeone/tensorflow/tensorflow/go"
	"github.com/galeone/tensorflow/tensorflow/go/op"
)

// optionalAttr holds the optional attrs of one op, as in the bindings.
type optionalAttr map[string]interface{}

// noOptions stands for the options of an op that has none.
var noOptions []func(optionalAttr)

// setAttr returns the option that sets attr name to value.
func setAttr(name string, value any) func(optionalAttr) {
	return func(m optionalAttr) { m[name] = value }
}

// addOperation adds an operation of type typ to scope's graph, with the
// required attrs and the options applied over them, or returns nil when
// scope already holds an error.
func addOperation[A ~func(optionalAttr)](scope *op.Scope, typ string, inputs []tf.Input,
	attrs optionalAttr, options []A) *tf.Operation {
	if scope.Err() != nil {
		return nil
	}
	for _, set := range options {
		set(attrs)
	}
	return scope.AddOperation(tf.OpSpec{Type: typ, Input: inputs, Attrs: attrs})
}

// LibraryEnv is the environment variable that names libgobn.so for Load(""):
// `eval "$(make -s -C <gobn checkout> env)"` sets it to the checkout's
// build/libgobn.so.
const LibraryEnv = "GOBN_LIBRARY"

var (
	loadMu   sync.Mutex
	loadedAt string // the path the library was loaded from; "" until then
)

// Load loads gobn's op library (libgobn.so, built by `make` as
// build/libgobn.so) into the process's TensorFlow, registering the Gobn> ops
// and their kernels. Call it before building or importing a
// graph that uses them. An empty path loads the file $GOBN_LIBRARY names.
//
// The library is loaded once: after a successful call, later calls return
// nil without loading anything, whatever path they name. A failed call may be
// retried.
func Load(path string) error {
	loadMu.Lock()
	defer loadMu.Unlock()
	if loadedAt != "" {
		return nil
	}
	origin := ""
	if path == "" {
		path = os.Getenv(LibraryEnv)
		if path == "" {
			return fmt.Errorf("gobn: Load(\"\") loads the library $%s names, and %s is not set: "+
				"eval \"$(make -s -C <gobn checkout> env)\" sets it, or pass libgobn.so's path", LibraryEnv, LibraryEnv)
		}
		origin = " ($" + LibraryEnv + ")"
	}
	if _, err := tf.LoadLibrary(path); err != nil {
		return fmt.Errorf("gobn: loading %s%s: %w", path, origin, err)
	}
	loadedAt = path
	return nil
}

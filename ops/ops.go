// Package ops builds gobn's ops into TensorFlow graphs from Go, for programs
// that use github.com/galeone/tfgo and the TensorFlow Go bindings
// (github.com/galeone/tensorflow/tensorflow/go).
//
// Each wrapper has the signature of the stock op's wrapper in the bindings'
// op package, so moving to gobn is an import change:
//
//	dx, dscale, doffset, _, _ := op.FusedBatchNormGradV3(scope, dy, x, scale, rs1, rs2, rs3,
//		op.FusedBatchNormGradV3IsTraining(true))
//
// becomes
//
//	dx, dscale, doffset, _, _ := ops.FusedBatchNormGradV3(scope, dy, x, scale, rs1, rs2, rs3,
//		ops.FusedBatchNormGradV3IsTraining(true))
//
// after ops.Load("build/libgobn.so"). The wrappers add the Gobn> ops
// (Gobn>FusedBatchNormGradV3, ...) and are generated from opdef
// (ops_gen.go, `go generate ./ops`).
//
// Building needs cgo flags for the TensorFlow the plugin was built against:
// `eval "$(make -s env)"` in the gobn repository prints them.
package ops

//go:generate go run ../cmd/genops

import (
	"fmt"
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

var (
	loadMu   sync.Mutex
	loadedAt string // the path the library was loaded from; "" until then
)

// Load loads gobn's op library (libgobn.so, built by `make` as
// build/libgobn.so) into the process's TensorFlow, registering the Gobn> ops
// and their CPU kernels. Call it before building a graph that uses them.
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
	if _, err := tf.LoadLibrary(path); err != nil {
		return fmt.Errorf("gobn: loading %s: %w", path, err)
	}
	loadedAt = path
	return nil
}

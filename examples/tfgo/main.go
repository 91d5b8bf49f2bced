// Command tfgo builds a TensorFlow graph with tfgo in which gobn's
// FusedBatchNormGradV3 and the stock op take the same inputs, runs it, and
// prints how far apart their outputs are. It exits non-zero if they differ by
// more than float32's tolerance.
//
// From the repository root, after `make`:
//
//	eval "$(make -s env)"
//	go run ./examples/tfgo
package main

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"

	tf "github.com/galeone/tensorflow/tensorflow/go"
	"github.com/galeone/tensorflow/tensorflow/go/op"
	tg "github.com/galeone/tfgo"
	"github.com/gobn/gobn/ops"
)

// float32's tolerance in gobn's docs/design.md: an element passes when
// |got − want| ≤ atol·max|want| + rtol·|want|.
const rtol, atol = 1e-4, 1e-5

func main() {
	library := flag.String("library", "", "path of libgobn.so (default $GOBN_LIBRARY, which `make -s env` sets)")
	flag.Parse()
	if err := ops.Load(*library); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := compare(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func compare() error {
	const N, H, W, C = 8, 14, 14, 32
	rng := rand.New(rand.NewPCG(1, 2))
	x, dy := make([]float32, N*H*W*C), make([]float32, N*H*W*C)
	for i := range x {
		x[i], dy[i] = float32(rng.NormFloat64()*2+1), float32(rng.NormFloat64())
	}
	scale, offset := make([]float32, C), make([]float32, C)
	for c := range scale {
		scale[c], offset[c] = float32(0.5+rng.Float64()), float32(rng.NormFloat64())
	}

	root := tg.NewRoot()
	xT := tg.Const(root, reshape(x, N, H, W, C))
	dyT := tg.Const(root, reshape(dy, N, H, W, C))
	scaleT, offsetT := tg.Const(root, scale), tg.Const(root, offset)
	empty := tg.Const(root, []float32{})

	// The forward pass (stock) saves the batch mean and variance the gradient needs.
	_, _, _, mean, variance, reserve3 := op.FusedBatchNormV3(root.SubScope("forward"), xT, scaleT, offsetT, empty, empty,
		op.FusedBatchNormV3IsTraining(true))

	// The same call with the stock op and with gobn's: only the package differs.
	stockDx, stockDscale, stockDoffset, _, _ := op.FusedBatchNormGradV3(root.SubScope("stock"),
		dyT, xT, scaleT, mean, variance, reserve3,
		op.FusedBatchNormGradV3Epsilon(0.001), op.FusedBatchNormGradV3DataFormat("NHWC"), op.FusedBatchNormGradV3IsTraining(true))
	gobnDx, gobnDscale, gobnDoffset, _, _ := ops.FusedBatchNormGradV3(root.SubScope("gobn"),
		dyT, xT, scaleT, mean, variance, reserve3,
		ops.FusedBatchNormGradV3Epsilon(0.001), ops.FusedBatchNormGradV3DataFormat("NHWC"), ops.FusedBatchNormGradV3IsTraining(true))

	results := tg.Exec(root, []tf.Output{gobnDx, gobnDscale, gobnDoffset, stockDx, stockDscale, stockDoffset}, nil, nil)

	fmt.Printf("FusedBatchNormGradV3, float32 NHWC %dx%dx%dx%d, training: gobn against stock TensorFlow\n", N, H, W, C)
	ok := true
	for i, name := range []string{"x_backprop", "scale_backprop", "offset_backprop"} {
		got, want := flatten(results[i]), flatten(results[3+i])
		maxErr, maxWant := 0.0, 0.0
		for j := range want {
			maxWant = math.Max(maxWant, math.Abs(float64(want[j])))
		}
		pass := true
		for j := range got {
			err := math.Abs(float64(got[j]) - float64(want[j]))
			maxErr = math.Max(maxErr, err)
			pass = pass && err <= atol*maxWant+rtol*math.Abs(float64(want[j]))
		}
		ok = ok && pass
		fmt.Printf("  %-16s max |gobn - stock| %.3g (max |stock| %.3g) %s\n", name, maxErr, maxWant, verdict(pass))
	}
	if !ok {
		return fmt.Errorf("gobn and stock differ beyond float32 tolerance")
	}
	return nil
}

func reshape(data []float32, dims ...int64) *tf.Tensor {
	t, err := tf.NewTensor(data)
	if err == nil {
		err = t.Reshape(dims)
	}
	if err != nil {
		panic(err)
	}
	return t
}

func flatten(t *tf.Tensor) []float32 {
	n := int64(1)
	for _, d := range t.Shape() {
		n *= d
	}
	if err := t.Reshape([]int64{n}); err != nil {
		panic(err)
	}
	return t.Value().([]float32)
}

func verdict(pass bool) string {
	if pass {
		return "ok"
	}
	return "FAIL"
}

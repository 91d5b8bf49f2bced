// Command tfgo-train trains a small network in Go on gobn: a 3×3
// convolution, batch normalization in training mode (FusedBatchNormV3), ReLU,
// global average pooling and a dense layer, on made-up data, with plain SGD
// built in the graph. The gradients come from tf.Graph.AddGradients
// (through op.Gradients), whose gradient of FusedBatchNormV3 is stock's
// FusedBatchNormGradV3; ops.Rewrite retypes that node to gobn's
// Gobn>FusedBatchNormGradV3 in a copy of the graph. Both graphs train from the
// same start; it prints each step's loss on each and gobn's kernel calls,
// and exits non-zero when the losses differ beyond float32's tolerance or
// gobn's kernel did not run once a step.
//
// In a module of its own, after the steps of gobn's docs/tfgo.md; in the
// gobn repository, after `make`:
//
//	eval "$(make -s env)"
//	go run ./examples/tfgo-train
package main

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"

	tf "github.com/galeone/tensorflow/tensorflow/go"
	"github.com/galeone/tensorflow/tensorflow/go/op"
	"github.com/gobn/gobn/ops"
)

// float32's tolerance in gobn's docs/design.md, for one value:
// |gobn − stock| ≤ atol + rtol·|stock|.
const rtol, atol = 1e-4, 1e-5

// The shapes: a batch of N images of H×W pixels with C channels, F filters.
const N, H, W, C, F = 16, 8, 8, 3, 8

// The batch-norm gradient ops of the graphs: stock's, which AddGradients
// builds, and gobn's twin, which Rewrite puts in its place.
const stockGradient, gobnGradient = "FusedBatchNormGradV3", "Gobn>FusedBatchNormGradV3"

func main() {
	steps := flag.Int("steps", 5, "training steps")
	flag.Parse()
	if err := ops.Load(""); err != nil { // the library $GOBN_LIBRARY names
		fail(err)
	}
	stock, gobn, err := train(*steps)
	if err != nil {
		fail(err)
	}
	fmt.Printf("conv 3x3 + FusedBatchNormV3 (training) + ReLU, batch %d, %dx%dx%d: loss by step, plain SGD\n", N, H, W, C)
	fmt.Printf("%4s  %-12s  %-12s\n", "step", "stock", "gobn")
	ok := true
	for i := range stock.losses {
		s, g := float64(stock.losses[i]), float64(gobn.losses[i])
		close := math.Abs(g-s) <= atol+rtol*math.Abs(s)
		ok = ok && close
		fmt.Printf("%4d  %-12.9g  %-12.9g  %s\n", i+1, s, g, verdict(close))
	}
	fmt.Printf("stock's graph: gradient nodes %v, gobn's kernel calls %v\n", stock.gradients, stock.calls)
	fmt.Printf("gobn's graph:  gradient nodes %v, gobn's kernel calls %v\n", gobn.gradients, gobn.calls)
	if !ok {
		fail(fmt.Errorf("the losses on gobn and stock differ beyond float32's tolerance"))
	}
	if n := total(gobn.calls[gobnGradient]); n != int64(*steps) {
		fail(fmt.Errorf("%s ran %d times in %d steps", gobnGradient, n, *steps))
	}
}

// run is how one graph trained: its loss at each step, its batch-norm
// gradient nodes by type (stockGradient, gobnGradient), and the calls of
// gobn's kernels while it trained.
type run struct {
	losses    []float32
	gradients map[string]int
	calls     map[string]map[string]int64
}

// train builds the training graph and a copy of it rewritten for gobn, and
// trains each, from the same start, for steps steps.
func train(steps int) (stock, gobn run, err error) {
	stockGraph, names, err := trainingGraph()
	if err != nil {
		return run{}, run{}, err
	}
	// The graph as a GraphDef, rewritten, is imported into a graph of its
	// own, where its operations keep their names.
	var def bytes.Buffer
	if _, err := stockGraph.WriteTo(&def); err != nil {
		return run{}, run{}, err
	}
	rewritten, err := ops.Rewrite(def.Bytes())
	if err != nil {
		return run{}, run{}, err
	}
	gobnGraph := tf.NewGraph()
	if err := gobnGraph.Import(rewritten, ""); err != nil {
		return run{}, run{}, err
	}
	if stock, err = fit(stockGraph, names, steps); err != nil {
		return run{}, run{}, err
	}
	gobn, err = fit(gobnGraph, names, steps)
	return stock, gobn, err
}

// names are the names of a training graph's operations that fit runs:
// init sets the variables to their initial values, loss is the loss
// (output 0), step updates the variables.
type names struct{ init, loss, step string }

// trainingGraph builds the network, its loss, its gradients and an SGD step
// on made-up data, the same on every call.
func trainingGraph() (*tf.Graph, names, error) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := op.NewScope()

	// The data: images, and for each a target that the network can learn,
	// the mean of its first channel.
	images, targets := make([]float32, N*H*W*C), make([]float32, N)
	for i := range images {
		images[i] = float32(rng.NormFloat64())
		if i%C == 0 {
			targets[i/(H*W*C)] += images[i] / (H * W)
		}
	}
	x := op.Const(s.SubScope("images"), tensor(images, N, H, W, C))
	y := op.Const(s.SubScope("targets"), tensor(targets, N, 1))

	// The variables: a handle each, the value the network reads, and the
	// operation that sets the initial value.
	type variable struct {
		handle, value tf.Output
		init          *tf.Operation
	}
	newVariable := func(name string, initial *tf.Tensor) variable {
		vs := s.SubScope(name)
		handle := op.VarHandleOp(vs, tf.Float, tf.MakeShape(initial.Shape()...), op.VarHandleOpSharedName(name))
		return variable{handle, op.ReadVariableOp(vs, handle, tf.Float),
			op.AssignVariableOp(vs, handle, op.Const(vs.SubScope("initial"), initial))}
	}
	variables := []variable{
		newVariable("filter", tensor(normal(rng, 3*3*C*F, math.Sqrt(2.0/(3*3*C))), 3, 3, C, F)),
		newVariable("scale", tensor(fill(F, 1), F)),
		newVariable("offset", tensor(fill(F, 0), F)),
		newVariable("dense", tensor(normal(rng, F, math.Sqrt(1.0/F)), F, 1)),
	}
	filter, scale, offset, dense := variables[0].value, variables[1].value, variables[2].value, variables[3].value

	// The network, and its loss: the mean squared error.
	conv := op.Conv2D(s, x, filter, []int64{1, 1, 1, 1}, "SAME")
	empty := op.Const(s.SubScope("empty"), []float32{})
	normalized, _, _, _, _, _ := op.FusedBatchNormV3(s, conv, scale, offset, empty, empty,
		op.FusedBatchNormV3Epsilon(0.001), op.FusedBatchNormV3IsTraining(true))
	pooled := op.Mean(s, op.Relu(s, normalized), op.Const(s.SubScope("spatial"), []int32{1, 2}))
	prediction := op.MatMul(s, pooled, dense)
	loss := op.Mean(s.SubScope("loss"), op.Square(s, op.Sub(s, prediction, y)), op.Const(s.SubScope("all"), []int32{0, 1}))

	// The gradients, stock's FusedBatchNormGradV3 among them, and one SGD
	// step.
	values := make([]tf.Output, len(variables))
	for i, v := range variables {
		values[i] = v.value
	}
	grads := op.Gradients(s.SubScope("gradients"), []tf.Output{loss}, values)
	learningRate := op.Const(s.SubScope("learning_rate"), float32(0.1))
	var updates, inits []*tf.Operation
	for i, v := range variables {
		updates = append(updates, op.ResourceApplyGradientDescent(s.SubScope("sgd"), v.handle, learningRate, grads[i]))
		inits = append(inits, v.init)
	}
	step := op.NoOp(s.SubScope("step").WithControlDependencies(updates...))
	init := op.NoOp(s.SubScope("init").WithControlDependencies(inits...))
	g, err := s.Finalize()
	if err != nil {
		return nil, names{}, err
	}
	return g, names{init: init.Name(), loss: loss.Op.Name(), step: step.Name()}, nil
}

// fit initializes the variables of g, a training graph, and runs steps
// steps of SGD in a session of its own. Each step's loss is taken before
// the step's update.
func fit(g *tf.Graph, n names, steps int) (run, error) {
	init, loss, step := g.Operation(n.init), g.Operation(n.loss), g.Operation(n.step)
	if init == nil || loss == nil || step == nil {
		return run{}, fmt.Errorf("the graph has no operation %q, %q or %q", n.init, n.loss, n.step)
	}
	r := run{losses: make([]float32, steps), gradients: map[string]int{}}
	for _, o := range g.Operations() {
		if o.Type() == stockGradient || o.Type() == gobnGradient {
			r.gradients[o.Type()]++
		}
	}
	session, err := tf.NewSession(g, nil)
	if err != nil {
		return run{}, err
	}
	defer session.Close()
	if _, err := session.Run(nil, nil, []*tf.Operation{init}); err != nil {
		return run{}, err
	}
	before, err := ops.KernelCalls()
	if err != nil {
		return run{}, err
	}
	for i := range r.losses {
		out, err := session.Run(nil, []tf.Output{loss.Output(0)}, []*tf.Operation{step})
		if err != nil {
			return run{}, err
		}
		r.losses[i] = out[0].Value().(float32)
	}
	after, err := ops.KernelCalls()
	if err != nil {
		return run{}, err
	}
	r.calls = difference(after, before)
	return r, nil
}

// difference returns the kernel calls in after that are not in before.
func difference(after, before map[string]map[string]int64) map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	for name, devices := range after {
		for device, n := range devices {
			if d := n - before[name][device]; d != 0 {
				if out[name] == nil {
					out[name] = map[string]int64{}
				}
				out[name][device] = d
			}
		}
	}
	return out
}

// total returns the calls of one op on every device.
func total(devices map[string]int64) int64 {
	var n int64
	for _, calls := range devices {
		n += calls
	}
	return n
}

func tensor(data []float32, dims ...int64) *tf.Tensor {
	t, err := tf.NewTensor(data)
	if err == nil {
		err = t.Reshape(dims)
	}
	if err != nil {
		panic(err)
	}
	return t
}

func normal(rng *rand.Rand, n int, deviation float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * deviation)
	}
	return v
}

func fill(n int, value float32) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = value
	}
	return v
}

func verdict(ok bool) string {
	if ok {
		return "ok"
	}
	return "FAIL"
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

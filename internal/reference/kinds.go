package reference

import (
	"fmt"
	"slices"
)

// Kind is what the Go tests know of a kind of op (opdef.Kind) beyond
// opdef: the ways its ops are called, how a call's inputs are drawn, how
// its GPU kernels take them, and its float64 reference, channel by
// channel. Its file registers it under the kind's name (Kinds); the GPU
// check (kernels/cuda) runs every registered kind's kernels on both
// devices against it.
type Kind struct {
	// Modes are the ways its ops are called.
	Modes []Mode
	// Draws says how each input of its ops is drawn, by name, but the
	// activation x (opdef.Op.Activation) and the first other input of its
	// ranks (y_backprop, backprop), which are the caller's, and an
	// element count (opdef.Arg.Count), which Count gives.
	Draws map[string]Draw
	// Count gives an element count input of a call of R elements a channel
	// in mode: R times the replicas the sums are over, say.
	Count func(mode Mode, R int64) int64
	// OnGPU returns the inputs its GPU kernels take where they differ from
	// its CPU kernels', by name, from in (stock's GPU kernels' training
	// gradient takes 1/sqrt(σ²+ε) where the CPU's takes σ²); nil: none.
	OnGPU func(mode Mode, in Inputs) map[string][]float64
	// Want returns the reference of a call of mode on in.
	Want func(mode Mode, in Inputs) Channelwise
}

// Mode is a way a kind's ops are called: its name, the attrs that make it
// (all but the type attrs and data_format, which the call's tensors and
// layout give), and whether only the small groups of the GPU check run it
// (a second count, say) or the tensor over 2³¹ elements does too (a mode
// whose layout kernels no other kind's mode runs).
type Mode struct {
	Name      string
	Attrs     map[string]any
	SmallOnly bool
	Huge      bool
}

// Draw is how an input is drawn: normal·Scale + Shift, or uniform in
// [Shift, Shift+Scale), rounded to its dtype and never zero; Scale times
// √count where CountScaled (a sum over count elements).
type Draw struct {
	Uniform     bool
	Scale       float64
	Shift       float64
	CountScaled bool
}

// Inputs are a call's inputs as the reference reads them: the per-channel
// ones by name, R (the elements a channel of the call's activation has),
// the element count input (0 without one) and the mode's attrs.
type Inputs struct {
	Vectors  map[string][]float64
	R, Count int64
	Attrs    map[string]any
}

// Float returns the float attr called name, as float64.
func (in Inputs) Float(name string) float64 { return float64(in.Attrs[name].(float32)) }

// Bool returns the bool attr called name.
func (in Inputs) Bool(name string) bool { return in.Attrs[name].(bool) }

// Channelwise is a call's reference in the form a test evaluates over a
// tensor it cannot hold in float64 (the GPU check's over 2³¹ elements):
// each channel's sums over its elements, then the outputs from them.
type Channelwise struct {
	// Elements names the activation-shaped inputs Accumulate and the
	// activation outputs read, in the order an element holds them.
	Elements []string
	// Sums is how many sums a channel has.
	Sums int
	// Accumulate adds element e of channel c (the values of Elements at one
	// index) to the channel's sums.
	Accumulate func(c int, e []float64, sums []float64)
	// Outputs returns the outputs from each channel's sums.
	Outputs func(sums [][]float64) Outputs
}

// Outputs are a call's outputs: the per-channel ones, by name, and the
// activation-shaped ones by name as a function of an element (c, its
// channel; e, the values of Channelwise.Elements).
type Outputs struct {
	Vectors     map[string][]float64
	Activations map[string]func(c int, e []float64) float64
}

// checkEpsilon is the epsilon (and variance_epsilon) of the GPU check's
// calls: a float32, as the attrs are.
const checkEpsilon = float32(1e-3)

// Kinds are the registered kinds, by name.
var Kinds = map[string]Kind{}

// register adds kind k, named name; a kind's file calls it in a
// package-level var.
func register(name string, k Kind) bool {
	if _, ok := Kinds[name]; ok {
		panic(fmt.Sprintf("reference: kind %s registered twice", name))
	}
	Kinds[name] = k
	return true
}

// ModeNamed returns k's mode called name, and whether it has one.
func (k Kind) ModeNamed(name string) (Mode, bool) {
	i := slices.IndexFunc(k.Modes, func(m Mode) bool { return m.Name == name })
	if i < 0 {
		return Mode{}, false
	}
	return k.Modes[i], true
}

// sumsOf returns each channel's Σdy and Σdy·(x−μ) from sums laid out as
// the dy·x kinds accumulate them (dyXmu).
func sumsOf(sums [][]float64) Sums {
	s := NewSums(len(sums))
	for c, v := range sums {
		s.Dy[c], s.DyXmu[c] = v[0], v[1]
	}
	return s
}

// dyXmu returns the Channelwise sums Σdy and Σdy·(x−μ) of the elements
// (dy, x, in that order), with μ = mean[c], and the outputs outputs forms
// from them.
func dyXmu(dy, x string, mean []float64, outputs func(Sums) Outputs) Channelwise {
	return Channelwise{
		Elements: []string{dy, x},
		Sums:     2,
		Accumulate: func(c int, e []float64, s []float64) {
			s[0] += e[0]
			s[1] += e[0] * (e[1] - mean[c])
		},
		Outputs: func(sums [][]float64) Outputs { return outputs(sumsOf(sums)) },
	}
}

// activationOf returns a's element function over elements (dy, x).
func activationOf(a Activation) func(c int, e []float64) float64 {
	return func(c int, e []float64) float64 { return a.At(c, e[0], e[1]) }
}

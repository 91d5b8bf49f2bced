package cuda_test

// The GPU check's kinds of op (check_test.go): what it runs of each kind
// opdef has, from opdef (the devices, dtypes and layouts its ops take),
// kinds_gen_test.go (the tensors its kernels take and their calls) and
// internal/reference (its modes, how its inputs are drawn, its reference):
// nothing here names a kind.

import (
	"fmt"
	"hash/crc32"
	"math"
	"slices"
	"strings"

	"github.com/gobn/gobn/internal/reference"
	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/kernels/cuda"
	"github.com/gobn/gobn/opdef"
)

// kindCall is a kind's kernels as the check calls them (kinds_gen_test.go).
type kindCall struct {
	name    string
	tensors []kindTensor
	cpu     [3]func(*hostMemory, *call) // by cuda.DType
	gpu     func(*call) gpuOp
}

// kindTensor is a tensor a kind's kernels take.
type kindTensor struct {
	name       string
	output     bool
	activation bool     // shaped as the activation, else per channel
	ofT        bool     // of the activation's dtype, else float32
	count      bool     // an element count: a host value, not a tensor
	forward    []string // an output's inputs it may take over (in place)
	list       string   // an output's number attr: there where the mode sets it
}

// tensor returns k's tensor called name.
func (k *kindCall) tensor(name string) kindTensor {
	i := slices.IndexFunc(k.tensors, func(t kindTensor) bool { return t.name == name })
	if i < 0 {
		panic(fmt.Sprintf("%s takes no tensor %s", k.name, name))
	}
	return k.tensors[i]
}

// writesActivation reports whether k's kernels write an activation-shaped
// output, which may take over an input (the in-place variants).
func (k *kindCall) writesActivation() bool {
	return slices.ContainsFunc(k.tensors, func(t kindTensor) bool { return t.output && t.activation })
}

// op is a kind, in one of its modes.
type op struct {
	kind *kindCall
	ref  reference.Kind
	mode reference.Mode
	ops  []opdef.Op // the kind's ops in opdef
}

// opsOf returns the ops of kind in opdef.
func opsOf(kind string) []opdef.Op {
	var ops []opdef.Op
	for _, o := range opdef.All {
		if string(o.Kind) == kind {
			ops = append(ops, o)
		}
	}
	return ops
}

// opdefDTypes are opdef's dtypes of the element types.
var opdefDTypes = map[cuda.DType]opdef.DType{cuda.Float32: opdef.Float, cuda.Float16: opdef.Half, cuda.BFloat16: opdef.BFloat16}

// runsOn reports whether o's ops take g's tensors on a GPU: a dtype of
// their GPU kernels, and a layout their data_format takes (channels last
// without one) of a rank their activation takes.
func (o op) runsOn(g group) bool {
	for _, spec := range o.ops {
		formats := []string{opdef.NHWC}
		if a, ok := spec.Attr("data_format"); ok {
			formats = a.Values
		}
		ranks := spec.Inputs[spec.InputIndex(spec.Activation)].Ranks
		if spec.HasKernel(opdefDTypes[g.dt], true) && slices.Contains(formats, g.layout) && slices.Contains(ranks, len(g.layout)) {
			return true
		}
	}
	return false
}

// roles returns the names of the activation inputs the group's x and dy
// are: the ops' activation, and the first other input of its ranks.
func (o op) roles() (x, dy string) {
	spec := o.ops[0]
	x = spec.Activation
	ranks := spec.Inputs[spec.InputIndex(x)].Ranks
	for _, in := range spec.Inputs {
		if in.Name != x && slices.Equal(in.Ranks, ranks) {
			return x, in.Name
		}
	}
	panic(spec.Name + " has one activation input")
}

// opsOfGroup returns the ops a group runs: each kind, in each of its modes
// the group's tag runs (the tensor over 2³¹ elements those that call
// layout kernels no other mode calls; a second count only in the small
// groups), where its ops take the group's tensors; an in-place variant
// only where the kind writes an activation-shaped output.
func opsOfGroup(g group) []op {
	var ops []op
	for i := range kinds {
		k := &kinds[i]
		ref, ok := reference.Kinds[k.name]
		if !ok {
			panic("internal/reference registers no kind " + k.name)
		}
		o := op{kind: k, ref: ref, ops: opsOf(k.name)}
		if !o.runsOn(g) || strings.HasPrefix(g.variant, "inplace") && !k.writesActivation() {
			continue
		}
		for _, m := range ref.Modes {
			if g.tag == "huge" && !m.Huge || m.SmallOnly && g.tag != "small" && g.tag != "sanitize" {
				continue
			}
			o.mode = m
			ops = append(ops, o)
		}
	}
	return ops
}

// has reports whether a call in mode has output t: a list where the
// mode's attr asks for it, any other always.
func has(mode reference.Mode, t kindTensor) bool {
	return t.list == "" || mode.Attrs[t.list].(int64) > 0
}

// opCase is one op's tensors, by name, and its reference.
type opCase struct {
	name    string
	call    call
	tensors map[string]*tensor
	// inputs a target that is a GPU reads from another tensor (the kind's
	// reference.Kind.OnGPU), by name: the tensor it reads
	gpuInputs map[string]string
	outputs   []*tensor
	// the reference: its activation inputs, by Channelwise.Elements, and
	// the outputs from their sums
	elements []*tensor
	want     reference.Outputs
}

// newOpCase draws an op's inputs but the group's, makes its outputs and its
// reference.
func newOpCase(gd *groupData, o op, guardBytes int) *opCase {
	g, d := gd.g, gd.d
	name := fmt.Sprintf("%s/%s/%s", o.kind.name, o.mode.Name, g.id())
	seed := uint64(crc32.ChecksumIEEE([]byte(name)))
	C, n, R := int(d.C), d.Len(), d.PerChannel()
	off := 0
	if g.variant == "unaligned" {
		off = 1
	}
	xName, dyName := o.roles()
	// the group's x and dy, under the names the kind gives them
	x, dy := *gd.x, *gd.dy
	x.name, dy.name = xName, dyName
	oc := &opCase{name: name, tensors: map[string]*tensor{xName: &x, dyName: &dy}, gpuInputs: map[string]string{}}
	oc.call = call{kind: o.kind, mode: o.mode.Name, attrs: o.mode.Attrs, dims: d, dt: g.dt}
	in := reference.Inputs{Vectors: map[string][]float64{}, R: R, Attrs: o.mode.Attrs}
	if slices.ContainsFunc(o.kind.tensors, func(t kindTensor) bool { return t.count && !t.output }) {
		in.Count = o.ref.Count(o.mode, R)
		oc.call.count = in.Count
	}
	dtOf := func(t kindTensor) cuda.DType {
		if t.ofT {
			return g.dt
		}
		return cuda.Float32
	}
	lengthOf := func(t kindTensor) int {
		if t.activation {
			return n
		}
		return C
	}
	for _, t := range o.kind.tensors {
		if t.output || t.count || t.name == xName || t.name == dyName {
			continue
		}
		draw, ok := o.ref.Draws[t.name]
		if !ok {
			panic(fmt.Sprintf("internal/reference: %s draws no %s", o.kind.name, t.name))
		}
		ts := newTensor(t.name, dtOf(t), lengthOf(t), off, guardBytes)
		scale := draw.Scale
		if draw.CountScaled {
			scale *= math.Sqrt(float64(max(in.Count, 1)))
		}
		seed++
		ts.fill(seed, draw.Uniform, scale, draw.Shift)
		oc.tensors[t.name] = ts
		if !t.activation {
			in.Vectors[t.name] = ts.vector()
		}
	}
	if o.ref.OnGPU != nil {
		for name, values := range o.ref.OnGPU(o.mode, in) {
			ts := newTensor(name+"@gpu", cuda.Float32, len(values), off, guardBytes)
			e := ts.elems(ts.before)
			for c, v := range values {
				store(cuda.Float32, e, c, v)
			}
			oc.tensors[ts.name] = ts
			oc.gpuInputs[name] = ts.name
		}
	}
	for _, t := range o.kind.tensors {
		if !t.output || t.count || !has(o.mode, t) {
			continue
		}
		var ts *tensor
		switch {
		case g.variant == "inplace_x" && t.activation && slices.Contains(t.forward, xName):
			ts = clone(&x, t.name)
			oc.tensors[xName] = ts
		case g.variant == "inplace_dy" && t.activation && slices.Contains(t.forward, dyName):
			ts = clone(&dy, t.name)
			oc.tensors[dyName] = ts
		default:
			o := 0
			if g.variant == "unaligned" || g.variant == "unaligned_dx" && t.activation {
				o = 1
			}
			ts = newTensor(t.name, dtOf(t), lengthOf(t), o, guardBytes)
			ts.poison()
		}
		ts.output, ts.activation, ts.tol = true, t.activation, dtOf(t).String()
		oc.tensors[t.name] = ts
		oc.outputs = append(oc.outputs, ts)
	}
	want := o.ref.Want(o.mode, in)
	for _, name := range want.Elements {
		ts := oc.tensors[name]
		switch name { // the group's own, not an in-place output that took its place
		case xName:
			ts = &x
		case dyName:
			ts = &dy
		}
		oc.elements = append(oc.elements, ts)
	}
	oc.want = want.Outputs(channelSums(d, oc.elements, want))
	return oc
}

// elementsOf returns the elements of ts, as their images before the call.
func elementsOf(ts []*tensor) [][]byte {
	out := make([][]byte, len(ts))
	for i, t := range ts {
		out[i] = t.elems(t.before)
	}
	return out
}

// channelSums returns each channel's sums of w (reference.Channelwise) over
// the elements of the tensors of its Elements, added a block at a time,
// the blocks' in order.
func channelSums(d kernels.Dims, elements []*tensor, w reference.Channelwise) [][]float64 {
	C := int(d.C)
	total := make([][]float64, C)
	for c := range total {
		total[c] = make([]float64, w.Sums)
	}
	if w.Sums == 0 {
		return total
	}
	images := elementsOf(elements)
	for _, part := range parallel(d.Len(), func(lo, hi int) [][]float64 {
		sums := make([][]float64, C)
		for c := range sums {
			sums[c] = make([]float64, w.Sums)
		}
		blocks := make([][]float32, len(images))
		for j, img := range images {
			blocks[j] = blockOf(elements[j].dt, img, lo, hi)
		}
		e := make([]float64, len(images))
		k := cursorAt(d, lo)
		for i := range hi - lo {
			for j := range blocks {
				e[j] = float64(blocks[j][i])
			}
			w.Accumulate(k.c, e, sums[k.c])
			k.next()
		}
		return sums
	}) {
		for c := range total {
			for s := range total[c] {
				total[c][s] += part[c][s]
			}
		}
	}
	return total
}

// tensorOf returns the elements of the tensor called name in host memory m,
// as E (kinds_gen_test.go's Go kernels' args); nil for a list the call
// does not ask for.
func tensorOf[E any](m *hostMemory, c *call, name string) []E {
	t := c.kind.tensor(name)
	if t.list != "" && c.attrs[t.list].(int64) == 0 {
		return nil
	}
	n := int(c.dims.C)
	if t.activation {
		n = c.dims.Len()
	}
	return slice[E](m, c, name, n)
}

// ptr returns the device address of the tensor called name
// (kinds_gen_test.go's CUDA kernels' args).
func (c *call) ptr(name string) cuda.Ptr { return cuda.Ptr(c.addr[name]) }

// gpuOp is a call as the cuda package runs it: the workspace it needs, and
// the call on a placement.
type gpuOp struct {
	workspaceBytes int64
	run            func(cuda.Placement) error
}

// bind pairs args with the function of package cuda that runs them
// (kinds_gen_test.go's CUDA kernels).
func bind[A interface{ WorkspaceBytes() int64 }](a A, run func(A, cuda.Placement) error) gpuOp {
	return gpuOp{a.WorkspaceBytes(), func(pl cuda.Placement) error { return run(a, pl) }}
}

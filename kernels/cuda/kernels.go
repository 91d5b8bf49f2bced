package cuda

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gobn/gobn/internal/cudaspec"
)

// The kernels of the fatbin: the shared passes' (below) and each kind's,
// which its file adds beside its launch (addKernels). batchnorm.cu defines
// each (kernels_gen.cuh lists them: cmd/gencuda writes it from Kernels).

// The shared passes: reduce and sweep (reduce_cl, reduce_cf with kSums or
// kSweep) and apply, for every element type, vector width and layout.
var _ = addKernels(slices.Concat(
	cudaspec.LayoutKernels(cudaspec.Reduce, "reduce_{L}<{T}, float, {V}, kSums, {U}>(p)", cudaspec.Layouts, cudaspec.Elems...),
	cudaspec.LayoutKernels(cudaspec.Sweep, "reduce_{L}<{T}, float, {V}, kSweep, {U}>(p)", cudaspec.Layouts, cudaspec.Elems...),
	cudaspec.LayoutKernels(cudaspec.Apply, "apply_{L}<{T}, {V}, {U}>(p)", cudaspec.Layouts, cudaspec.Elems...),
)...)

// added are the kernels the package's files add as it initializes.
var added []cudaspec.Kernel

// addKernels adds ks to the table; a file calls it in a package-level var,
// so that every file's are there before Kernels is first read.
func addKernels(ks ...cudaspec.Kernel) bool {
	added = append(added, ks...)
	return true
}

// Kernels returns every kernel of the fatbin, by name (their kernelID is
// their index): cmd/gencuda writes the C side from it.
func Kernels() []cudaspec.Kernel { return table() }

var table = sync.OnceValue(func() []cudaspec.Kernel {
	ks := slices.Clone(added)
	slices.SortFunc(ks, func(a, b cudaspec.Kernel) int { return strings.Compare(a.Name(), b.Name()) })
	return ks
})

// constants are the values the launch layer shares with the kernels, by
// their name in C (kernels_gen.cuh defines each), which the files add as
// the package initializes (sharedConstant).
var constants = map[string]int32{}

// sharedConstant adds a constant the kernels read by name, and returns
// its value.
func sharedConstant(name string, value int32) int32 {
	constants[name] = value
	return value
}

// Constants returns the values the launch layer shares with the kernels,
// by their name in C: cmd/gencuda writes them for batchnorm.cu.
func Constants() map[string]int32 { return maps.Clone(constants) }

// kernelID numbers the kernels: a kernel's index in Kernels.
type kernelID int

// kernelNames is the kernels' names, by kernelID.
var kernelNames = sync.OnceValue(func() []string {
	names := make([]string, len(table()))
	for i, k := range table() {
		names[i] = k.Name()
	}
	return names
})

var kernelIDs = sync.OnceValue(func() map[cudaspec.Key]kernelID {
	m := make(map[cudaspec.Key]kernelID, len(table()))
	for i, k := range table() {
		m[k.Key] = kernelID(i)
	}
	return m
})

// kernelFor returns the kernel of key. It panics for one the table does not
// hold: a plan bug, which the tests rule out.
func kernelFor(key cudaspec.Key) kernelID {
	id, ok := kernelIDs()[key]
	if !ok {
		panic("cuda: no kernel " + key.Name())
	}
	return id
}

// outputs returns the per-channel outputs of finalize kernel k in the slots
// of Params.Out its outputs name (cudaspec.Kernel.Outputs), from the call's
// tensors by name. It panics on an output the call does not give, or one
// the kernel does not write: a plan bug, which the tests rule out.
func outputs(k kernelID, named map[string]Ptr) (out [5]Ptr) {
	fillSlots(out[:], k, "output", table()[k].Outputs, named)
	return out
}

// tensors returns a kind's own tensors of kernel k in the slots of
// Params.Tensors its Tensors name (cudaspec.Kernel.Tensors), from the
// call's tensors by name; it panics as outputs does.
func tensors(k kernelID, named map[string]Ptr) (t [4]Ptr) {
	fillSlots(t[:], k, "tensor", table()[k].Tensors, named)
	return t
}

// fillSlots puts each of named in the slot of slots its name has in names,
// the kernel k's; a name it lacks, or one named lacks, panics.
func fillSlots(slots []Ptr, k kernelID, what string, names []string, named map[string]Ptr) {
	for name, p := range named {
		slot := slices.Index(names, name)
		if slot < 0 {
			panic(fmt.Sprintf("cuda: %s has no %s %s", kernelNames()[k], what, name))
		}
		slots[slot] = p
	}
	if len(named) != len(names) {
		panic(fmt.Sprintf("cuda: %s has the %ss %v, the call gives %d of them", kernelNames()[k], what, names, len(named)))
	}
}

// launches counts the launches of each kernel.
var launches = sync.OnceValue(func() []atomic.Uint64 { return make([]atomic.Uint64, len(table())) })

// Launches returns the kernel launches since the process started, by
// kernel name (kernels never launched are left out): how tests tell which
// path and vector width a call took.
func Launches() map[string]uint64 {
	m := make(map[string]uint64)
	for i := range launches() {
		if n := launches()[i].Load(); n > 0 {
			m[kernelNames()[i]] = n
		}
	}
	return m
}

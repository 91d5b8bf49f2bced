package cuda

import (
	"fmt"
	"sync/atomic"
)

// kernelID numbers the kernels of batchnorm.cu: the finalize kernels first,
// then the layout kernels in the order kernelNames lists them.
type kernelID int

const (
	kFinalizeTrain kernelID = iota
	kFinalizeInfer
	kFinalizeReduce
	kFinalizeApply
	kFinalizeGlobalF32
	kFinalizeGlobalF16
	numFinalize
)

// kernelNames lists every kernel batchnorm.cu defines, indexed by kernelID.
var kernelNames = func() []string {
	names := []string{
		"gobn_finalize_train", "gobn_finalize_infer", "gobn_finalize_reduce",
		"gobn_finalize_apply", "gobn_finalize_global_f32", "gobn_finalize_global_f16",
	}
	widths := map[DType][]int{Float32: {1, 2, 4}, Float16: {1, 2, 4, 8}, BFloat16: {1, 2, 4, 8}}
	for _, t := range []DType{Float32, Float16, BFloat16} {
		for _, v := range widths[t] {
			for _, job := range []string{"reduce", "sweep", "apply"} {
				for _, layout := range []string{"cl", "cf"} {
					names = append(names, fmt.Sprintf("gobn_%s_%s_%s_v%d", job, layout, typeName(t), v))
				}
			}
		}
	}
	for _, t := range []DType{Float32, Float16} {
		for _, v := range widths[t] {
			names = append(names, fmt.Sprintf("gobn_global_cl_%s_v%d", typeName(t), v))
		}
	}
	return names
}()

var kernelIDs = func() map[string]kernelID {
	m := make(map[string]kernelID, len(kernelNames))
	for i, n := range kernelNames {
		m[n] = kernelID(i)
	}
	return m
}()

// kernelByName returns the kernel's ID. It panics for a name batchnorm.cu
// does not define: a plan bug, which the tests rule out.
func kernelByName(name string) kernelID {
	id, ok := kernelIDs[name]
	if !ok {
		panic("cuda: no kernel " + name)
	}
	return id
}

// launches counts the launches of each kernel.
var launches = make([]atomic.Uint64, len(kernelNames))

// Launches returns the kernel launches since the process started, by
// kernel name (kernels never launched are left out): how tests tell which
// path and vector width a call took.
func Launches() map[string]uint64 {
	m := make(map[string]uint64)
	for i := range launches {
		if n := launches[i].Load(); n > 0 {
			m[kernelNames[i]] = n
		}
	}
	return m
}

package cuda

import (
	"sync/atomic"

	"github.com/gobn/gobn/internal/cudaspec"
)

// kernelID numbers the kernels: a kernel's index in cudaspec.Kernels, the
// table batchnorm.cu defines its kernels from (kernels_gen.cuh).
type kernelID int

// kernelNames is the kernels' names, by kernelID.
var kernelNames = func() []string {
	names := make([]string, len(cudaspec.Kernels))
	for i, k := range cudaspec.Kernels {
		names[i] = k.Name()
	}
	return names
}()

var kernelIDs = func() map[cudaspec.Key]kernelID {
	m := make(map[cudaspec.Key]kernelID, len(cudaspec.Kernels))
	for i, k := range cudaspec.Kernels {
		m[k.Key] = kernelID(i)
	}
	return m
}()

// kernelFor returns the kernel of key. It panics for one the table does not
// hold: a plan bug, which the tests rule out.
func kernelFor(key cudaspec.Key) kernelID {
	id, ok := kernelIDs[key]
	if !ok {
		panic("cuda: no kernel " + key.Name())
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

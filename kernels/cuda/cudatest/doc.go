// Package cudatest gives the CUDA kernels' tests what TensorFlow gives the
// kernels in the library: device memory, copies between it and the host,
// and streams, in the device's primary context. Like package cuda it opens
// the driver (libcuda.so.1) at run time and links no CUDA library. Without
// the cuda build tag, Open returns an error.
//
// Only tests import it: the check of the CUDA kernels against gobn's CPU
// kernels and a float64 reference (kernels/cuda's gpu_test.go), which
// make gpu-bundle builds into a test binary that runs on a GPU machine
// without Go.
package cudatest

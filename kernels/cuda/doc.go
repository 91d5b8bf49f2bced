// Package cuda runs gobn's batch-normalization gradients on NVIDIA GPUs.
//
// The kernels are CUDA C in batchnorm.cu (with elements.cuh), compiled by
// make into gobn.fatbin (tools/cuda_fatbin.py: NVRTC, SASS for every
// architecture TensorFlow's GPU build targets and PTX for the newest) and
// embedded in the package when it is built with the cuda tag. Without the
// tag every call returns an error saying so. The kernels are this
// package's table (Kernels: the shared passes', in kernels.go, and each
// kind's, added by its file), of the form internal/cudaspec gives them,
// with the struct they take (cudaspec.Params) and the launch constants; go
// generate writes the C side from them (params_gen.h, kernels_gen.cuh;
// cmd/gencuda).
//
// One file a kind of op (opdef.Kind), named after it: its args, its entry
// point named after the kind (FusedBatchNormGrad, GlobalNormalizationGrad,
// GradReduce, GradApply), its plan of launches and the kernels it adds
// beyond the shared passes; its device functions are batchnorm.cu's, beside
// the passes they share.
//
// Conventions:
//
//   - Tensors are device addresses (Ptr) with kernels.Dims, as package
//     kernels describes them: both layouts are read in place. Activation
//     tensors are of DType (float, half, bfloat16); per-channel tensors are
//     float32, but for BatchNormWithGlobalNormalizationGrad, whose tensors
//     are all of DType.
//   - The semantics are stock TensorFlow's GPU kernels': in training,
//     FusedGradArgs.ReserveSpace2 is the inverse standard deviation that
//     stock's GPU forward pass saves, not the variance.
//   - A call plans its launches in plain Go (plan.go: the vector width from
//     the addresses' alignment, block and grid shapes, the workspace), then
//     runs them (launch_cuda.go). Its workspace, of the args'
//     WorkspaceBytes, is the caller's: TensorFlow's allocator in capi, a
//     PyTorch tensor in the GPU check bundle.
//   - The driver (libcuda.so.1) is opened on the first call, not linked; a
//     call without a driver or device returns an error.
//   - Placement.Stream zero is TensorFlow's rule (synchronize the primary
//     context, run on gobn's own stream, wait); a stream is a library
//     caller's, on which a call only enqueues.
package cuda

//go:generate go run ../../cmd/gencuda

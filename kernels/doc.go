// Package kernels holds the math of gobn's batch-normalization gradients in
// pure Go: no cgo, no TensorFlow.
//
// Conventions:
//
//   - An activation tensor is described by Dims: N × C × S elements, S the
//     product of the spatial dimensions, and R = N·S elements per channel.
//     ChannelsLast (NHWC, NDHWC) stores element (n, s, c) at (n·S + s)·C + c;
//     ChannelsFirst (NCHW, NCDHW) stores element (n, c, s) at (n·C + c)·S + s.
//     Both layouts are read in place; nothing is transposed.
//   - Element types are float32, float64, Half and BFloat16. Half and BFloat16
//     are converted to float32 in blocks; every reduction accumulates in
//     float64, and only the activation-shaped output is rounded back to the
//     element type.
//   - Inputs are never written. Outputs are named as in TensorFlow
//     (XBackprop, ScaleBackprop, ...) and are fully overwritten. The
//     activation output may be one of the activation inputs itself (the same
//     slice, in place: each element of the inputs is read before that
//     element of the output is written); no other output overlaps an input.
//   - Sizes and indices are int64-safe: Go's int is 64 bits on every platform
//     gobn builds for.
//   - Kernels trust their arguments: the caller (capi) validates shapes. A
//     kernel panics if slice lengths disagree with Dims.
//
// Files, one concern each:
//
//   - plan.go: a call's plan, decided before it runs (planFor, a pure
//     function of the shape, the Machine and the Tuning): its form, the
//     chunks and blocks its sums are cut into (the arithmetic, the same on
//     every machine), and its workers, by-channel units and stores (the
//     machine's). machine.go, machine_linux.go, machine_other.go: the
//     Machine, read once: the cores the process may use (affinity, cgroup
//     quota) and the caches.
//   - One file a kind of op (opdef.Kind), named after it, with its args and
//     its entry point, named after it too, each computing the kind's ops:
//     fused_batch_norm_grad.go (FusedBatchNormGrad, which runs
//     TrainingGrad or InferenceGrad), global_normalization_grad.go
//     (GlobalNormalizationGrad), grad_reduce.go and grad_apply.go
//     (GradReduce and GradApply, the synchronized (cross-replica)
//     gradient's halves around an all-reduce), fused_batch_norm_grad_ex.go
//     (FusedBatchNormGradEx: FusedBatchNormGrad's passes of the gradient
//     masked by an activation's derivative, which they form where they
//     read dy, in the vector loops' registers or block by block, gradMask).
//     Each plans, then runs its plan's
//     passes; terms.go holds what they share (the lengths check,
//     1/sqrt(σ²+ε), the affine coefficients' storage).
//   - sumpass.go: the first pass, per-channel sums of dy and dy·(x−μ)
//     (reduce; sweep, which also writes the inference x_backprop in the
//     same pass).
//   - applypass.go: the second pass, x_backprop from the coefficients
//     (applyAll, applyJob); for an NHWC training gradient this is the pass
//     after the sums.
//   - bychannel.go: the channels-first training and inference gradients
//     by units of whole channels, sums and x_backprop together.
//   - parallel.go: running a plan's passes: the calling goroutine and its
//     helpers claim the chunks (parallel, parallelPasses), within what the
//     cores leave (reserveHelpers); threads_linux.go: the helpers' pinned
//     threads, which poll for the next call's task in a burst of calls.
//   - blocks.go: the block sizes plans choose from, and the walk over a
//     range block by block (forBlocks).
//   - convert.go: element conversions (widen, narrow, toFloat64,
//     fromFloat64).
//   - stream.go: where x_backprop is written with non-temporal stores.
//   - dims.go: Dims, Layout, Element and the channels-last period.
//   - loops.go: the portable per-block loops (channelSums, applyAffine) and
//     the affine coefficients they apply.
//   - simd_amd64.go, simd512_amd64.go, stream_amd64.s, f16c_amd64.s,
//     tile_amd64.s, bf16_amd64.s: the AVX2/AVX-512 forms of those loops
//     (GOEXPERIMENT=simd), among them the channels-last sums in float32
//     tiles, the bfloat16 rows converted in registers (rounded with
//     AVX512_BF16 where the CPU has it) and FusedBatchNormGradEx's mask
//     of a block with its bits (maskRows32, unmaskRows32; maskRowsBF16,
//     unmaskRowsBF16); mask_amd64.s the AVX-512 channels-last rows that
//     form dz in registers, planes_amd64.s the channels-first runs' loops,
//     plain and forming dz in registers, tiles_amd64.h the macros they
//     share; simd_other.go where they are absent. The AVX-512 forms of the loops that
//     simd_amd64.go writes in its lane constants are generated from them
//     (simd512_gen_amd64.go: go generate ./kernels, which runs
//     cmd/gensimd).
//   - xinuse_amd64.go, xinuse_amd64.s: the tests' probe that the vector
//     loops leave the upper register halves clear.
//   - float16.go: Half and BFloat16; scratch.go: pooled per-call memory.
package kernels

//go:generate go run ../cmd/gensimd

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
package kernels

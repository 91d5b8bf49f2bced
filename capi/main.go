// Command capi is gobn's TensorFlow plugin, built with -buildmode=c-shared as
// build/libgobn.so. Loading it (tf.load_op_library, tf.LoadLibrary in Go)
// registers the Gobn> ops and their CPU kernels through TensorFlow's C API,
// and, built with the cuda tag (make's default), their GPU kernels.
//
// Layout of the package, a file a job: register.c registers ops and kernels
// from the tables in registry_gen.c (generated from opdef) while the library
// loads, after library.c has made sure it is the process's only copy;
// callback.go holds TensorFlow's callbacks, the exported Go functions the C
// trampolines call; exports.go the exports for the Python package (kernel
// calls, split statistics, enable, XLA status); xla.c registers each op's
// XLA FFI handlers (xla.h: XLA's C API as gobn reads it, checked against
// XLA's header by xla_layout.c) and xla.go runs their calls. The other files that see C are call.go
// (a kernel run's pooled call: its inputs, the outputs and temp memory it
// allocates, the stream it runs on, and their release), attrs.go (a kernel's
// attrs at construction), shapes.go (shape inference), status.go (TF_Status
// and errors) and, with the cuda tag, cuda.go; stream.c finds TensorFlow's
// compute stream for a GPU kernel, and stream.go decides, in plain Go,
// whether a GPU call runs on it. In plain Go, what cmd/gencapi generates
// from opdef and the kinds' kernels: families_gen.go binds a call's inputs
// and outputs by name, validates them, allocates the outputs with the
// dtypes and shapes opdef gives them, and runs each op family (opdef.Kind)
// on the CPU (package kernels) and the GPU (package kernels/cuda), the
// attrs (attrs_gen.go) in the fields of their names, for TensorFlow's calls
// and XLA's alike (compute); kernel.go holds what the families share. No
// file of capi is a kind's own.
//
// Building it takes a C compiler. Build flags (include path of
// TensorFlow's headers, libtensorflow_framework) come from the environment
// (CGO_CFLAGS, CGO_LDFLAGS) as the Makefile sets them from tf.sysconfig.
package main

//go:generate go run ../cmd/gencapi

func main() {}

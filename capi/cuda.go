//go:build cuda

package main

// The cuda build tag registers GPU kernels (register.c) beside the CPU ones.

// #cgo CFLAGS: -DGOBN_CUDA
import "C"

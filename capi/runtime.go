package main

import (
	"os"
	"runtime"
)

// Go's scheduler inside TensorFlow. Every TensorFlow thread that calls a gobn
// kernel enters Go through a cgo callback; when the callback returns, that
// thread keeps its P (Go's token to run Go code) in the "in a system call"
// state until Go's monitor thread takes it back, which can take up to 10 ms
// when the process is otherwise idle. With GOMAXPROCS equal to the core count
// the Ps are then often all parked on TensorFlow threads, and the goroutines
// a kernel fans out wait for the calling thread to finish its own share, so
// the halves of a large gradient run one after the other instead of side by
// side. So, unless the user set GOMAXPROCS, gobn gives Go
// room for the calling threads besides one worker per core, and for the
// kernels' helper threads, which keep a P each while they sleep (they are
// used only while GOMAXPROCS leaves room for them, see kernels'
// threads_linux.go). The kernels still start at most one worker per core
// (kernels.Plan.Workers).
func init() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(2*runtime.NumCPU() + 4)
	}
}

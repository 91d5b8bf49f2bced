//go:build !linux || !(amd64 || arm64)

package kernels

import "sync/atomic"

// Elsewhere a call's helpers are goroutines (see threads_linux.go).

var helperThreadTasks, helperThreadWakes, helperThreadSpins atomic.Uint64

func onHelperThreads(n, wake int, fn func(int)) int { return 0 }

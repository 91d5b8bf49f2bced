//go:build !linux || !(amd64 || arm64)

package kernels

import "sync/atomic"

// Elsewhere a call's helpers are goroutines (see threads_linux.go).

var helperThreadTasks, helperThreadWakes, helperThreadSpins atomic.Uint64

func onHelperThreads(n, wake int, poll bool, fn func(i, slot int)) (handed, callerSlot int) {
	return 0, -1
}

// helpersPolling returns 0: goroutines do not poll.
func helpersPolling() int { return 0 }

// pinnedThreads returns 0: there are no pinned threads here.
func pinnedThreads() int { return 0 }

// helperThreadsUsable reports false: there are no pinned threads here.
func helperThreadsUsable() bool { return false }

//go:build linux

package kernels

import (
	"io/fs"
	"os"
	"runtime"
)

// probeMachine reads the machine from Linux: the CPUs of the process's
// affinity mask (runtime.NumCPU), bounded by its cgroup's CPU quota, and
// CPU 0's caches from sysfs.
func probeMachine() Machine {
	root := os.DirFS("/")
	m := readCaches(root, runtime.NumCPU())
	m.Cores = runtime.NumCPU()
	if self, err := fs.ReadFile(root, "proc/self/cgroup"); err == nil {
		if q := cgroupCPULimit(root, string(self)); q > 0 {
			m.Cores = min(m.Cores, q)
		}
	}
	return m
}

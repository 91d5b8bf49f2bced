package kernels

import (
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// The caches a plan assumes where the system does not say.
const (
	defaultL2 = 1 << 20
	defaultL3 = 32 << 20
)

// readCaches returns the L2 and last-level caches of CPU 0 as Linux's sysfs
// under root describes them (devices/system/cpu/cpu0/cache/index*: level,
// type, size, shared_cpu_list), and the CPUs that share the last level;
// the defaults, shared by cpus CPUs, for what it does not say.
func readCaches(root fs.FS, cpus int) Machine {
	m := Machine{L2: defaultL2, L3: defaultL3, L3Cores: max(1, cpus)}
	dir := "sys/devices/system/cpu/cpu0/cache"
	entries, err := fs.ReadDir(root, dir)
	if err != nil {
		return m
	}
	read := func(idx, name string) string {
		b, err := fs.ReadFile(root, path.Join(dir, idx, name))
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	found3 := false
	for _, e := range entries {
		idx := e.Name()
		if !strings.HasPrefix(idx, "index") || read(idx, "type") == "Instruction" {
			continue
		}
		size := parseCacheSize(read(idx, "size"))
		if size <= 0 {
			continue
		}
		switch read(idx, "level") {
		case "2":
			m.L2 = size
		case "3":
			m.L3, found3 = size, true
			if n := countCPUList(read(idx, "shared_cpu_list")); n > 0 {
				m.L3Cores = n
			}
		}
	}
	if !found3 { // the L2 is the last level
		m.L3, m.L3Cores = m.L2, 1
	}
	return m
}

// parseCacheSize reads sysfs's "48K", "2048K", "32M", or a byte count.
func parseCacheSize(s string) int {
	mult := 1
	switch {
	case strings.HasSuffix(s, "K"):
		mult, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, strings.TrimSuffix(s, "G")
	}
	v, err := strconv.Atoi(s)
	if err != nil || v <= 0 {
		return 0
	}
	return v * mult
}

// countCPUList counts the CPUs of a list such as "0-7,64-71", or returns 0
// where it cannot read it.
func countCPUList(s string) int {
	n := 0
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0
			}
		}
		n += b - a + 1
	}
	return n
}

// cgroupCPULimit returns the CPUs a cgroup CPU quota lets the process use
// at once, rounded up, or 0 where none limits it. self is
// /proc/self/cgroup; the quota is read under root's sys/fs/cgroup: cgroup
// v2's cpu.max ("max 100000", "150000 100000") of the process's group and
// of each group above it, or cgroup v1's cpu.cfs_quota_us over
// cpu.cfs_period_us of its cpu controller's group (-1: none). The
// tightest wins.
func cgroupCPULimit(root fs.FS, self string) int {
	limit := 0
	tighten := func(quota, period int64) {
		if quota > 0 && period > 0 {
			q := int((quota + period - 1) / period)
			if limit == 0 || q < limit {
				limit = q
			}
		}
	}
	readInts := func(name string) []int64 {
		b, err := fs.ReadFile(root, name)
		if err != nil {
			return nil
		}
		var out []int64
		for _, f := range strings.Fields(string(b)) {
			v, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				v = -1 // "max"
			}
			out = append(out, v)
		}
		return out
	}
	for _, line := range strings.Split(self, "\n") {
		fields := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(fields) != 3 {
			continue
		}
		group := strings.Trim(fields[2], "/")
		if fields[0] == "0" && fields[1] == "" { // cgroup v2: the group and those above it
			for g := group; ; g = path.Dir(g) {
				if v := readInts(path.Join("sys/fs/cgroup", g, "cpu.max")); len(v) == 2 {
					tighten(v[0], v[1])
				}
				if g == "." || g == "" {
					break
				}
			}
			continue
		}
		for _, controller := range strings.Split(fields[1], ",") {
			if controller != "cpu" {
				continue
			}
			for _, mount := range []string{"sys/fs/cgroup/cpu", "sys/fs/cgroup/cpu,cpuacct"} {
				// Inside a container the group's path is often the
				// mount's root.
				for _, g := range []string{path.Join(mount, group), mount} {
					q, p := readInts(path.Join(g, "cpu.cfs_quota_us")), readInts(path.Join(g, "cpu.cfs_period_us"))
					if len(q) == 1 && len(p) == 1 {
						tighten(q[0], p[0])
					}
				}
			}
		}
	}
	return limit
}

package cuda_test

import (
	"encoding/json"
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/internal/reference"
	"github.com/gobn/gobn/internal/tolerance"
	"github.com/gobn/gobn/kernels/cuda"
	"github.com/gobn/gobn/opdef"
)

// The check of check_test.go run on the CPU alone: gobn's CPU kernels on
// both sides must pass every small case (which tests the harness's
// reference, guards and roles against kernels that TensorFlow's own tests
// hold), and each fault a GPU kernel could make must fail the cases it
// touches, with the reason it should give.

// TestCheckPassesOnCPU runs every small group (every third under -short)
// with the CPU kernels as the target under test.
func TestCheckPassesOnCPU(t *testing.T) {
	groups := plan(planOptions{})
	if testing.Short() {
		var some []group
		for i, g := range groups {
			if i%3 == 0 {
				some = append(some, g)
			}
		}
		groups = some
	}
	under := cpuTarget()
	under.name = "under"
	rep := runCheck(checkOptions{groups: groups, guardBytes: defaultGuardBytes, log: t.Logf}, under, cpuTarget())
	logReport(t, rep, 20)
	require.True(t, rep.OK)
	// every kind of opdef in every mode ran, and every dtype, layout and variant
	seen := map[string]bool{}
	for _, r := range rep.Rows {
		seen[r.Kind+"/"+r.Mode] = true
		seen[r.DType] = true
		seen[r.Layout] = true
		seen[r.Variant] = true
	}
	want := []string{"float", "half", "bfloat16", "NHWC", "NCHW", "NDHWC", "NCDHW", "plain", "unaligned",
		"unaligned_dx", "inplace_x", "inplace_dy", "stream0"}
	require.Len(t, kinds, len(opdef.Kinds()))
	for _, kind := range opdef.Kinds() {
		for _, m := range reference.Kinds[string(kind)].Modes {
			want = append(want, string(kind)+"/"+m.Name)
		}
	}
	for _, k := range want {
		require.True(t, seen[k], "no case of %s ran", k)
	}
}

// faultyCPU returns a CPU target that runs the kernel, then inject.
func faultyCPU(inject func(m *hostMemory, c *call)) *target {
	m := newHostMemory()
	return &target{name: "gpu", mem: m, run: func(c *call) error {
		if err := runCPU(m, c); err != nil {
			return err
		}
		inject(m, c)
		return nil
	}}
}

// element returns the bytes of element i of role.
func element(m *hostMemory, c *call, role string, dt cuda.DType, i int) []byte {
	b, err := m.bytes(c.addr[role]+uintptr(i*size(dt)), size(dt))
	if err != nil {
		panic(err)
	}
	return b
}

func TestCheckCatchesFaults(t *testing.T) {
	groups := []group{
		{cuda.Float32, "NHWC", sh(2, []int64{5, 9}, 3), "plain", "small"},
		{cuda.Float16, "NCHW", sh(4, []int64{6, 6}, 64), "unaligned", "small"},
		{cuda.BFloat16, "NDHWC", sh(2, []int64{3, 4, 5}, 7), "plain", "small"},
	}
	last := func(c *call) int { return c.dims.Len() - 1 }
	faults := []struct {
		name   string
		inject func(m *hostMemory, c *call)
		want   string
	}{
		{"a wrong element", func(m *hostMemory, c *call) {
			e := element(m, c, "x_backprop", c.dt, last(c))
			store(c.dt, e, 0, load(c.dt, e, 0)+1)
		}, "x_backprop gpu: 1 elements out of tolerance (0 NaN)"},
		{"an element left unwritten", func(m *hostMemory, c *call) {
			store(c.dt, element(m, c, "x_backprop", c.dt, 0), 0, math.NaN())
		}, "x_backprop gpu: 1 elements out of tolerance (1 NaN)"},
		{"a write past the end", func(m *hostMemory, c *call) {
			store(c.dt, element(m, c, "x_backprop", c.dt, c.dims.Len()), 0, 0)
		}, "x_backprop gpu: guard elements overwritten"},
		{"a write before the start", func(m *hostMemory, c *call) {
			store(cuda.Float32, element(m, c, "scale_backprop", cuda.Float32, -1), 0, 0)
		}, "scale_backprop gpu: guard elements overwritten"},
		{"an input written", func(m *hostMemory, c *call) {
			e := element(m, c, "y_backprop", c.dt, 0)
			store(c.dt, e, 0, load(c.dt, e, 0)*2)
		}, "input y_backprop changed (gpu)"},
		{"a per-channel input written", func(m *hostMemory, c *call) {
			store(cuda.Float32, element(m, c, "scale", cuda.Float32, 0), 0, 3)
		}, "input scale changed (gpu)"},
		{"within tolerance, but worse than the CPU's", func(m *hostMemory, c *call) {
			// offset_backprop[0] moved by 0.6 of its bound
			out := make([]float64, c.dims.C)
			for i := range out {
				out[i] = load(cuda.Float32, element(m, c, "offset_backprop", cuda.Float32, i), 0)
			}
			e := element(m, c, "offset_backprop", cuda.Float32, 0)
			store(cuda.Float32, e, 0, out[0]+0.6*tolerance.ByDType["float"].At(reference.MaxAbs(out), out[0]))
		}, "offset_backprop gpu norm"},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			rep := runCheck(checkOptions{groups: groups, guardBytes: defaultGuardBytes, log: t.Logf,
				filter: regexp.MustCompile(`^FusedBatchNormGrad/training/`)}, faultyCPU(f.inject), cpuTarget())
			require.Len(t, rep.Rows, len(groups))
			require.False(t, rep.OK)
			_, err := json.Marshal(rep) // NaN and infinite errors too
			require.NoError(t, err)
			for _, r := range rep.Rows {
				require.False(t, r.OK, r.Case)
				require.Contains(t, strings.Join(r.Why, "; "), f.want, r.Case)
			}
		})
	}
}

// TestCheckCatchesDeviceFaults: the checks only a GPU target takes part in
// (its workspace, its launch counts, the inverse standard deviation it is
// given in place of the variance) fail the cases they should, with their
// reason, when a CPU target plays the GPU's part badly.
func TestCheckCatchesDeviceFaults(t *testing.T) {
	groups := []group{
		{cuda.Float32, "NHWC", sh(2, []int64{5, 9}, 3), "plain", "small"},
		{cuda.Float16, "NCHW", sh(4, []int64{6, 6}, 64), "unaligned", "small"},
	}
	faults := []struct {
		name  string
		bad   func(tg *target) // makes the target play its part badly
		fails func(r row) bool // which rows must fail
		want  string
	}{
		{"a write past the workspace", func(tg *target) {
			tg.workspaceBytes = func(*call) int64 { return 64 }
			run := tg.run
			tg.run = func(c *call) error {
				err := run(c)
				b, _ := tg.mem.(*hostMemory).bytes(c.workspace+64, 1)
				b[0] ^= 0xff
				return err
			}
		}, func(row) bool { return true }, "workspace: written past its 64 bytes"},
		{"no kernel launched", func(tg *target) {
			tg.launches = func() map[string]uint64 { return map[string]uint64{} }
		}, func(row) bool { return true }, "no kernel launched"},
		{"a vector kernel on unaligned pointers", func(tg *target) {
			var n uint64
			run := tg.run
			tg.run = func(c *call) error { n++; return run(c) }
			tg.launches = func() map[string]uint64 { return map[string]uint64{"gobn_sweep_cl_f16_v8": n} }
		}, func(r row) bool { return r.Variant == "unaligned" }, "unaligned pointers, yet vector kernels ran"},
		{"the variance where the inverse standard deviation belongs", func(tg *target) {
			tg.gpu = true // the CPU kernel then reads 1/sqrt(var+eps) as the variance
		}, func(row) bool { return true }, "x_backprop gpu:"},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			under := faultyCPU(func(*hostMemory, *call) {})
			f.bad(under)
			rep := runCheck(checkOptions{groups: groups, guardBytes: defaultGuardBytes, log: t.Logf,
				filter: regexp.MustCompile(`^FusedBatchNormGrad/training/`)}, under, cpuTarget())
			require.Len(t, rep.Rows, len(groups))
			require.False(t, rep.OK)
			for _, r := range rep.Rows {
				if !f.fails(r) {
					require.True(t, r.OK, "%s: %v", r.Case, r.Why)
					continue
				}
				require.False(t, r.OK, r.Case)
				require.Contains(t, strings.Join(r.Why, "; "), f.want, r.Case)
			}
		})
	}
}

// TestCheckWithNoCaseFails: a filter that matches nothing leaves a report
// that does not pass.
func TestCheckWithNoCaseFails(t *testing.T) {
	rep := runCheck(checkOptions{groups: plan(planOptions{})[:1], guardBytes: defaultGuardBytes, log: t.Logf,
		filter: regexp.MustCompile(`^no such case$`)}, cpuTarget(), cpuTarget())
	require.Zero(t, rep.Cases)
	require.False(t, rep.OK)
}

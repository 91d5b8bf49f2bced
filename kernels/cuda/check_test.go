package cuda_test

// The check of gobn's CUDA kernels, on the host side: running a case on two
// targets and comparing their outputs with the float64 reference (the cases
// are in check_cases_test.go, the tensors and targets in
// check_tensors_test.go, the comparison in check_compare_test.go, the
// reference itself in internal/reference). gpu_test.go (cuda tag) runs it
// with the GPU as one target and gobn's CPU kernels as the other;
// harness_test.go runs it on the CPU alone, where it must pass, and with
// faults injected, which it must catch.
//
// Every tensor of a call sits between guard elements holding a sentinel (none
// with -gpucheck.small: each its own exact-size allocation, so that
// compute-sanitizer's memcheck sees any access past one), every output is
// poisoned with NaN, and each target gets its own copy of every tensor. Per
// output, with want the float64 reference and M = max|want| over the output:
//
//	|got − want| ≤ Atol·M + Rtol·|want|     (internal/tolerance, by the output's dtype)
//
// norm is the largest |got − want| over that bound: ≤ 1 passes. A target's
// norm must also not be meaningfully worse than gobn's CPU kernel's: it
// fails when it is over worseFloor and over worseFactor times the CPU's.
//
// The GPU's training gradient takes the inverse standard deviation
// 1/sqrt(σ²+ε) as reserve_space_2 (what stock's GPU forward saves), the CPU
// kernel the variance: a case draws σ², gives the CPU σ² and the GPU
// float32(1/sqrt(float64(σ²)+ε)).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gobn/gobn/internal/tolerance"
	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/kernels/cuda"
)

const (
	worseFactor            = 2.0
	worseFloor             = 0.25
	sentinel               = -7.25 // exact in float32, half and bfloat16
	wsSentinel, wsPoison   = 0xA5, 0xFF
	defaultGuardBytes      = 256
	block                  = 1 << 20 // elements per block of the parallel passes
	collectGarbageAtLength = 1 << 26
)

// ---------------------------------------------------------------------------
// Running a case.

// row is one op's result.
type row struct {
	// the case: its name, and the parts of it
	Case    string `json:"case"`
	Kind    string `json:"kind"`
	Mode    string `json:"mode"`
	DType   string `json:"dtype"`
	Layout  string `json:"layout"`
	Shape   string `json:"shape"`
	Variant string `json:"variant"`
	Tag     string `json:"tag"`
	// the op's count (a kind that takes one) and workspace (the GPU's)
	Count          int64 `json:"count,omitempty"`
	WorkspaceBytes int64 `json:"workspace_bytes"`
	// the calls' wall times, and the kernels the GPU launched
	GPUms   float64  `json:"gpu_ms"`
	CPUms   float64  `json:"cpu_ms"`
	Kernels []string `json:"kernels"`
	// the comparison of each output, and the verdict
	Outputs map[string]outputResult `json:"outputs,omitempty"`
	OK      bool                    `json:"ok"`
	Why     []string                `json:"why"`
	fatal   bool
}

// groupData is a group's dy and x, made once.
type groupData struct {
	g     group
	d     kernels.Dims
	dy, x *tensor
}

func newGroupData(g group, guardBytes int) *groupData {
	d := g.dims()
	seed := uint64(crc32.ChecksumIEEE([]byte(g.id())))
	off := 0
	if g.variant == "unaligned" {
		off = 1
	}
	gd := &groupData{g: g, d: d, dy: newTensor("dy", g.dt, d.Len(), off, guardBytes), x: newTensor("x", g.dt, d.Len(), off, guardBytes)}
	gd.dy.fill(seed, false, 1, 0)
	gd.x.fill(seed+1, false, 1, 0.1)
	return gd
}

// clone returns a copy of t named name.
func clone(t *tensor, name string) *tensor {
	c := *t
	c.name, c.before = name, bytes.Clone(t.before)
	return &c
}

// placed is a target's copy of an op's tensors.
type placed struct {
	addr map[*tensor]uintptr // allocation bases
	// after the call: the outputs' and the workspace's images, and for
	// each input whether its guards and its elements are as written
	images                     map[*tensor][]byte
	inputGuardsOK, inputSameOK map[*tensor]bool
	ws                         *tensor
}

// place allocates and writes every tensor of oc in t's memory.
func place(t *target, oc *opCase) (*placed, error) {
	p := &placed{addr: map[*tensor]uintptr{}, images: map[*tensor][]byte{},
		inputGuardsOK: map[*tensor]bool{}, inputSameOK: map[*tensor]bool{}}
	for _, ts := range oc.tensors {
		if _, ok := p.addr[ts]; ok { // an in-place output, under two roles
			continue
		}
		a, err := t.mem.Alloc(len(ts.before))
		if err != nil {
			return p, err
		}
		p.addr[ts] = a
		if err := t.mem.Write(a, ts.before); err != nil {
			return p, err
		}
	}
	return p, nil
}

func (p *placed) free(t *target) {
	for _, a := range p.addr {
		_ = t.mem.Free(a)
	}
}

// callOn returns oc's call with t's addresses.
func callOn(t *target, oc *opCase, p *placed, g group) call {
	c := oc.call
	c.addr = map[string]uintptr{}
	for role, ts := range oc.tensors {
		c.addr[role] = p.addr[ts] + uintptr(ts.pre*size(ts.dt))
		if ts.n == 0 && g.variant == "plain" {
			c.addr[role] = 0
		}
	}
	if t.gpu {
		for name, from := range oc.gpuInputs {
			c.addr[name] = c.addr[from]
		}
	}
	c.stream = t.stream
	if g.variant == "stream0" {
		c.stream = 0
	}
	return c
}

// runOn places oc on t, runs it and reads every tensor back: the images,
// the kernels launched, the milliseconds, and an error of the run.
func runOn(t *target, oc *opCase, g group, guardBytes int) (p *placed, kernelsRun []string, ms float64, err error) {
	p, err = place(t, oc)
	if err != nil {
		return p, nil, 0, err
	}
	c := callOn(t, oc, p, g)
	if t.workspaceBytes != nil {
		if c.workspaceBytes = t.workspaceBytes(&c); c.workspaceBytes > 0 {
			ws := &tensor{name: "workspace", dt: cuda.Float32, workspace: true}
			n := int(c.workspaceBytes)
			ws.before = bytes.Repeat([]byte{wsPoison}, n+2*guardBytes)
			for i := range guardBytes {
				ws.before[i], ws.before[guardBytes+n+i] = wsSentinel, wsSentinel
			}
			a, err := t.mem.Alloc(len(ws.before))
			if err != nil {
				return p, nil, 0, err
			}
			p.addr[ws], p.ws = a, ws
			if err := t.mem.Write(a, ws.before); err != nil {
				return p, nil, 0, err
			}
			c.workspace = a + uintptr(guardBytes)
		}
	}
	var before map[string]uint64
	if t.launches != nil {
		before = t.launches()
	}
	start := time.Now()
	err = t.run(&c)
	ms = float64(time.Since(start).Microseconds()) / 1e3
	if t.launches != nil {
		for k, v := range t.launches() {
			if v != before[k] {
				kernelsRun = append(kernelsRun, k)
			}
		}
		sort.Strings(kernelsRun)
	}
	if err != nil {
		return p, kernelsRun, ms, err
	}
	host, _ := t.mem.(*hostMemory)
	for ts, a := range p.addr {
		if !ts.output && !ts.workspace { // compared where it lies, a chunk at a time
			e := ts.pre * size(ts.dt)
			n := ts.n * size(ts.dt)
			pre, err1 := equalAt(t.mem, a, ts.before[:e])
			post, err2 := equalAt(t.mem, a+uintptr(e+n), ts.before[e+n:])
			same, err3 := equalAt(t.mem, a+uintptr(e), ts.before[e:e+n])
			if err := errors.Join(err1, err2, err3); err != nil {
				return p, kernelsRun, ms, err
			}
			p.inputGuardsOK[ts], p.inputSameOK[ts] = pre && post, same
			continue
		}
		if host != nil { // the allocation itself: no copy
			img, err := host.bytes(a, len(ts.before))
			if err != nil {
				return p, kernelsRun, ms, err
			}
			p.images[ts] = img
			continue
		}
		img := make([]byte, len(ts.before))
		if err := t.mem.Read(img, a); err != nil {
			return p, kernelsRun, ms, err
		}
		p.images[ts] = img
	}
	return p, kernelsRun, ms, nil
}

// vectorWidth returns V of the kernel named kernel, 0 for a finalize kernel.
func vectorWidth(kernel string) int {
	for _, k := range cuda.Kernels() {
		if k.Name() == kernel {
			return k.V
		}
	}
	panic("no kernel " + kernel)
}

// runCase runs oc on the target under test and on the CPU, compares, and
// returns its row.
func runCase(gd *groupData, oc *opCase, under, cpu *target, guardBytes int) row {
	g, d := gd.g, gd.d
	r := row{Case: oc.name, Kind: oc.call.kind.name, Mode: oc.call.mode, DType: g.dt.String(), Layout: g.layout,
		Shape: g.shapeString(), Variant: g.variant, Tag: g.tag, Count: oc.call.count,
		Outputs: map[string]outputResult{}, Why: []string{}}
	pc, _, cpuMs, err := runOn(cpu, oc, g, guardBytes)
	defer pc.free(cpu)
	r.CPUms = cpuMs
	if err != nil {
		r.Why = append(r.Why, "cpu: "+err.Error())
		return r
	}
	pg, kernelsRun, gpuMs, err := runOn(under, oc, g, guardBytes)
	defer pg.free(under)
	r.GPUms, r.Kernels = gpuMs, kernelsRun
	if pg.ws != nil {
		r.WorkspaceBytes = int64(len(pg.ws.before) - 2*guardBytes)
	}
	if err != nil {
		r.Why = append(r.Why, under.name+": "+err.Error())
		r.fatal = under.broken != nil && under.broken()
		return r
	}
	if under.launches != nil {
		if d.Len() > 0 && len(kernelsRun) == 0 {
			r.Why = append(r.Why, "no kernel launched")
		}
		if g.variant == "unaligned" || (g.variant == "unaligned_dx" && oc.call.kind.writesActivation()) {
			var wide []string
			for _, k := range kernelsRun {
				if v := vectorWidth(k); v > 1 {
					wide = append(wide, k)
				}
			}
			if len(wide) > 0 {
				r.Why = append(r.Why, "unaligned pointers, yet vector kernels ran: "+strings.Join(wide, ", "))
			}
		}
	}
	for _, o := range oc.outputs {
		b := tolerance.ByDType[o.tol]
		gi, ci := o.elems(pg.images[o]), o.elems(pc.images[o])
		var res outputResult
		if o.activation {
			res = compareActivation(d, oc.elements, oc.want.Activations[o.name], g.dt, gi, ci, b)
		} else {
			res = compareVector(o.dt, oc.want.Vectors[o.name], gi, ci, b)
		}
		name := o.name
		r.Outputs[name] = res
		for _, why := range res.verdict() {
			r.Why = append(r.Why, name+" "+why)
		}
	}
	for _, side := range []struct {
		name string
		p    *placed
	}{{under.name, pg}, {cpu.name, pc}} {
		for ts, img := range side.p.images {
			switch {
			case ts.workspace:
				if !bytes.Equal(img[:guardBytes], ts.before[:guardBytes]) || !bytes.Equal(img[len(img)-guardBytes:], ts.before[len(img)-guardBytes:]) {
					r.Why = append(r.Why, fmt.Sprintf("workspace: written past its %d bytes", r.WorkspaceBytes))
				}
			case !ts.guardsOK(img):
				r.Why = append(r.Why, fmt.Sprintf("%s %s: guard elements overwritten", ts.name, side.name))
			}
		}
		for ts, ok := range side.p.inputGuardsOK {
			if !ok {
				r.Why = append(r.Why, fmt.Sprintf("%s %s: guard elements overwritten", ts.name, side.name))
			}
			if !side.p.inputSameOK[ts] {
				r.Why = append(r.Why, fmt.Sprintf("input %s changed (%s)", ts.name, side.name))
			}
		}
	}
	sort.Strings(r.Why)
	r.OK = len(r.Why) == 0
	return r
}

// checkOptions configures a run of the check.
type checkOptions struct {
	groups     []group
	guardBytes int
	filter     *regexp.Regexp
	deadline   time.Time // no resnet or huge group starts after it (zero: none)
	log        func(format string, args ...any)
}

// report is a run's result.
type report struct {
	OK, Fatal     bool
	FatalWhy      string
	Cases, Failed int
	SkippedGroups []string
	Launches      map[string]uint64 // by kernel, during the run
	LaunchCheck   map[string]any
	ElapsedS      float64
	Summary       []summaryRow
	Facts         map[string]any
	Rows          []row
}

// MarshalJSON writes the report as the bundle's check.json (what its
// summarize.py reads).
func (r *report) MarshalJSON() ([]byte, error) {
	tols := map[string]map[string]float64{}
	for dt, b := range tolerance.ByDType {
		tols[dt] = map[string]float64{"rtol": b.Rtol, "atol": b.Atol}
	}
	m := map[string]any{"ok": r.OK, "cases": r.Cases, "failed": r.Failed, "skipped_groups": r.SkippedGroups,
		"launches": r.Launches, "launch_check": r.LaunchCheck, "elapsed_s": r.ElapsedS, "summary": r.Summary,
		"tolerances": tols, "worse_rule": map[string]float64{"factor": worseFactor, "floor": worseFloor},
		"facts": r.Facts, "rows": r.Rows}
	if r.Fatal {
		m["fatal"] = r.FatalWhy
	}
	return json.Marshal(m)
}

// runCheck runs every op of every group on under and on the CPU.
func runCheck(o checkOptions, under, cpu *target) *report {
	start := time.Now()
	rep := &report{SkippedGroups: []string{}, Launches: map[string]uint64{}, LaunchCheck: map[string]any{"checked": false}}
	var first map[string]uint64
	if under.launches != nil {
		first = under.launches()
	}
groups:
	for _, g := range o.groups {
		if (g.tag == "resnet" || g.tag == "huge") && !o.deadline.IsZero() && time.Now().After(o.deadline) {
			rep.SkippedGroups = append(rep.SkippedGroups, g.id())
			continue
		}
		var ops []op
		for _, p := range opsOfGroup(g) {
			if o.filter == nil || o.filter.MatchString(fmt.Sprintf("%s/%s/%s", p.kind.name, p.mode.Name, g.id())) {
				ops = append(ops, p)
			}
		}
		if len(ops) == 0 {
			continue
		}
		t0 := time.Now()
		gd := newGroupData(g, o.guardBytes)
		for _, p := range ops {
			r := runCase(gd, newOpCase(gd, p, o.guardBytes), under, cpu, o.guardBytes)
			rep.Rows = append(rep.Rows, r)
			if r.fatal {
				rep.Fatal, rep.FatalWhy = true, fmt.Sprintf("%s: %s", r.Case, strings.Join(r.Why, "; "))
				o.log("FATAL: %s cannot run anything more: %s", under.name, rep.FatalWhy)
				break groups
			}
			if gd.d.Len() >= collectGarbageAtLength {
				runtime.GC()
			}
		}
		if el := time.Since(t0); g.tag == "huge" || g.tag == "resnet" || el > 5*time.Second {
			o.log("  %-40s %d ops, %.1f s", g.id(), len(ops), el.Seconds())
		}
	}
	if under.launches != nil {
		for k, v := range under.launches() {
			if d := v - first[k]; d > 0 {
				rep.Launches[k] = d
			}
		}
	}
	for _, r := range rep.Rows {
		if !r.OK {
			rep.Failed++
		}
	}
	rep.Cases = len(rep.Rows)
	rep.OK = rep.Failed == 0 && !rep.Fatal && rep.Cases > 0 // a run of no case passes nothing
	rep.ElapsedS = math.Round(time.Since(start).Seconds()*10) / 10
	rep.Summary = summarize(rep.Rows)
	return rep
}

// summaryRow is the worst of the rows of one kind, mode, dtype and layout.
type summaryRow struct {
	Kind     string  `json:"kind"`
	Mode     string  `json:"mode"`
	DType    string  `json:"dtype"`
	Layout   string  `json:"layout"`
	Cases    int     `json:"cases"`
	Failed   int     `json:"failed"`
	GPUNorm  float64 `json:"gpu_norm"`
	CPUNorm  float64 `json:"cpu_norm"`
	GPUvsCPU float64 `json:"gpu_vs_cpu"`
	GPUms    float64 `json:"gpu_ms"`
	CPUms    float64 `json:"cpu_ms"`
}

func (s summaryRow) MarshalJSON() ([]byte, error) {
	type plain summaryRow
	s.GPUNorm, s.CPUNorm, s.GPUvsCPU = finite(s.GPUNorm), finite(s.CPUNorm), finite(s.GPUvsCPU)
	return json.Marshal(plain(s))
}

func summarize(rows []row) []summaryRow {
	by := map[[4]string]*summaryRow{}
	var keys [][4]string
	for _, r := range rows {
		k := [4]string{r.Kind, r.Mode, r.DType, r.Layout}
		s := by[k]
		if s == nil {
			s = &summaryRow{Kind: r.Kind, Mode: r.Mode, DType: r.DType, Layout: r.Layout}
			by[k] = s
			keys = append(keys, k)
		}
		s.Cases++
		if !r.OK {
			s.Failed++
		}
		for _, o := range r.Outputs {
			s.GPUNorm, s.CPUNorm, s.GPUvsCPU = max(s.GPUNorm, o.GPU.Norm), max(s.CPUNorm, o.CPU.Norm), max(s.GPUvsCPU, o.GPUvsCPU.Norm)
		}
		s.GPUms += r.GPUms
		s.CPUms += r.CPUms
	}
	sort.Slice(keys, func(i, j int) bool { return strings.Join(keys[i][:], "/") < strings.Join(keys[j][:], "/") })
	out := make([]summaryRow, len(keys))
	for i, k := range keys {
		out[i] = *by[k]
	}
	return out
}

// logReport writes the summary table and the first failures.
func logReport(t testing.TB, rep *report, show int) {
	t.Logf("%-23s %-10s %-9s %-6s %6s %6s %9s %9s %9s", "kind", "mode", "dtype", "layout", "cases", "failed", "gpu_norm", "cpu_norm", "gpu~cpu")
	for _, s := range rep.Summary {
		t.Logf("%-23s %-10s %-9s %-6s %6d %6d %9.3g %9.3g %9.3g", s.Kind, s.Mode, s.DType, s.Layout, s.Cases, s.Failed, s.GPUNorm, s.CPUNorm, s.GPUvsCPU)
	}
	t.Logf("(norm: the largest |error| over its tolerance, <= 1 passes; the worst of the row's cases and outputs)")
	shown := 0
	for _, r := range rep.Rows {
		if !r.OK && shown < show {
			t.Errorf("%s: %s", r.Case, strings.Join(r.Why, "; "))
			shown++
		}
	}
	if rep.Failed > show {
		t.Errorf("... and %d more failed cases", rep.Failed-show)
	}
	if len(rep.SkippedGroups) > 0 {
		t.Logf("skipped for time: %d groups", len(rep.SkippedGroups))
	}
	t.Logf("%d cases, %d failed, %.1f s", rep.Cases, rep.Failed, rep.ElapsedS)
}

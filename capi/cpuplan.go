package main

import "C"

import (
	"fmt"
	"os"
	"runtime"

	"github.com/gobn/gobn/kernels"
)

// The CPU kernels' plan is tuned by a few measured constants
// (kernels.Tuning). For benchmarking they can be set without rebuilding the
// library: GOBN_CPU_PLAN, read when the library loads, and gobnCPUPlan,
// which bench/manycore.py calls through ctypes to sweep them in one
// process. Both take kernels.ParseTuning's spec, e.g.
// "per_worker=131072,wake=2" (docs/performance.md, "The plan").

// cpuPlanEnvError is what was wrong with GOBN_CPU_PLAN, if anything (the
// defaults then stay).
var cpuPlanEnvError string

func init() {
	spec := os.Getenv("GOBN_CPU_PLAN") // a literal: python_tests/test_guest.py scans for what gobn reads
	if spec == "" {
		return
	}
	t, err := kernels.ParseTuning(spec, kernels.CurrentTuning())
	if err != nil {
		cpuPlanEnvError = err.Error()
		fmt.Fprintf(os.Stderr, "GOBN_CPU_PLAN=%q ignored: %v\n", spec, err)
		return
	}
	kernels.SetTuning(t)
}

// cpuPlanReport is gobnCPUPlan's answer.
type cpuPlanReport struct {
	Tuning     string          `json:"tuning"`
	Default    string          `json:"default"`
	Machine    kernels.Machine `json:"machine"`
	EnvError   string          `json:"env_error,omitempty"`
	Error      string          `json:"error,omitempty"`
	GOMAXPROCS int             `json:"gomaxprocs"`
}

// gobnCPUPlan sets the fields of the CPU kernels' tuning that spec names
// (NULL or empty: none) and returns, as JSON, the tuning then in force and
// the default one (kernels.Tuning's spec), the machine the kernels plan for
// ({"Cores", "L2", "L3", "L3Cores"}), GOMAXPROCS, and what was wrong with
// spec ("error": the tuning is then unchanged) or with GOBN_CPU_PLAN
// ("env_error"). It is for benchmarking: every kernel call plans with the
// tuning of its start.
//
//export gobnCPUPlan
func gobnCPUPlan(spec *C.char) (s *C.char) {
	defer func() {
		if recover() != nil {
			s = nil
		}
	}()
	r := cpuPlanReport{EnvError: cpuPlanEnvError, Default: kernels.DefaultTuning().String()}
	if spec != nil {
		if t, err := kernels.ParseTuning(C.GoString(spec), kernels.CurrentTuning()); err != nil {
			r.Error = err.Error()
		} else {
			kernels.SetTuning(t)
		}
	}
	r.Tuning, r.Machine = kernels.CurrentTuning().String(), kernels.CurrentMachine()
	r.GOMAXPROCS = runtime.GOMAXPROCS(0)
	return jsonString(r)
}

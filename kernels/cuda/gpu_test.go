//go:build cuda

package cuda_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/kernels/cuda"
	"github.com/gobn/gobn/kernels/cuda/cudatest"
)

// The GPU check: every case of check_test.go's plan on the GPU against
// gobn's CPU kernels and the float64 reference. make gpu-bundle builds this
// package's tests into build/gpu/cuda.test, which the bundle's run.sh runs
// on a GPU machine without Go:
//
//	./cuda.test -test.v -gpucheck.require -gpucheck.json check.json
//	compute-sanitizer --tool memcheck ./cuda.test -test.run '^TestGPU$' -gpucheck.small -gpucheck.require
//
// Without a GPU, TestGPU skips, unless -gpucheck.require makes that a
// failure.
var (
	requireGPU = flag.Bool("gpucheck.require", false, "fail, not skip, when no GPU can be used")
	small      = flag.Bool("gpucheck.small", false, "a few small groups, every kernel, each tensor its own exact-size allocation (for compute-sanitizer)")
	noHuge     = flag.Bool("gpucheck.no-huge", false, "leave out the tensor over 2^31 elements")
	noResnet   = flag.Bool("gpucheck.no-resnet", false, "leave out ResNet-50's shapes")
	filter     = flag.String("gpucheck.filter", "", "run only the cases whose name (kind/mode/dtype/layout/shape/variant) matches this regular expression")
	jsonPath   = flag.String("gpucheck.json", "", "write the results here")
	maxSeconds = flag.Float64("gpucheck.max-seconds", 0, "start no ResNet-50 group, nor the tensor over 2^31 elements, after this many seconds (0: no limit)")
	show       = flag.Int("gpucheck.show", 40, "failures to print")
)

func TestGPU(t *testing.T) {
	dev, err := cudatest.Open(0)
	if err == nil {
		err = cuda.Available()
	}
	if err != nil {
		if *requireGPU {
			t.Fatalf("no GPU can be used: %v", err)
		}
		t.Skipf("no GPU can be used (-gpucheck.require makes this a failure): %v", err)
	}
	// gobn's callers, TensorFlow and PyTorch, call it with the device's
	// primary context current on the thread: so does this test
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	require.NoError(t, dev.MakeCurrent())
	stream, err := dev.NewStream()
	require.NoError(t, err)
	defer func() { require.NoError(t, dev.DestroyStream(stream)) }()
	gpu := &target{name: "gpu", mem: dev, gpu: true, stream: stream, launches: cuda.Launches,
		workspaceBytes: func(c *call) int64 { return c.kind.gpu(c).workspaceBytes },
		run: func(c *call) error {
			// checked as TensorFlow's stream is: a non-blocking stream of the primary context passes
			pl := cuda.Placement{Stream: cuda.Stream(c.stream), CheckStream: true, Workspace: cuda.Ptr(c.workspace), WorkspaceBytes: c.workspaceBytes}
			if err := c.kind.gpu(c).run(pl); err != nil {
				return err
			}
			return dev.Synchronize() // what the kernels left, an illegal address say, surfaces here
		},
		broken: func() bool { return dev.Synchronize() != nil },
	}
	o := checkOptions{groups: plan(planOptions{small: *small, huge: !*small && !*noHuge, resnet: !*small && !*noResnet}),
		guardBytes: defaultGuardBytes, log: t.Logf}
	if *small {
		o.guardBytes = 0
	}
	if *filter != "" {
		o.filter = regexp.MustCompile(*filter)
	}
	if *maxSeconds > 0 {
		o.deadline = time.Now().Add(time.Duration(*maxSeconds * float64(time.Second)))
	}
	t.Logf("TestGPU: %s (%.0f GiB, driver %d), %d groups", dev.Name,
		float64(dev.MemoryBytes)/(1<<30), dev.Driver, len(o.groups))
	rep := runCheck(o, gpu, cpuTarget())
	rep.Facts = map[string]any{"gpu": dev.Name, "memory_gib": float64(dev.MemoryBytes) / (1 << 30),
		"driver_cuda": dev.Driver, "go": runtime.Version(), "simd": kernels.SIMD(), "gomaxprocs": runtime.GOMAXPROCS(0),
		"argv": argv()}

	// Both the scalar and the vector kernels ran.
	if o.filter == nil && !rep.Fatal {
		var v1, wide uint64
		for k, n := range rep.Launches {
			switch v := vectorWidth(k); {
			case v == 1:
				v1 += n
			case v >= 4:
				wide += n
			}
		}
		ok := v1 > 0 && wide > 0
		rep.LaunchCheck = map[string]any{"checked": true, "v1": v1, "v4_v8": wide, "ok": ok}
		rep.OK = rep.OK && ok
		t.Logf("launches: %d kernels; _v1: %d, _v4/_v8: %d", len(rep.Launches), v1, wide)
		if !ok {
			t.Errorf("want launches of _v1 and of _v4/_v8 kernels")
		}
	}
	logReport(t, rep, *show)
	if *jsonPath != "" {
		b, err := json.MarshalIndent(rep, "", " ")
		if err == nil {
			err = os.WriteFile(*jsonPath, b, 0o644)
		}
		if err != nil {
			t.Errorf("writing %s: %v", *jsonPath, err)
		}
	}
	if rep.Fatal {
		t.Fatalf("the GPU failed, nothing after ran: %s", rep.FatalWhy)
	}
}

// argv returns the command line with file names for paths (the results
// name no machine's folders).
func argv() []string {
	out := make([]string, 0, len(os.Args)-1)
	for _, a := range os.Args[1:] {
		if name, value, ok := strings.Cut(a, "="); ok && strings.Contains(value, "/") {
			a = name + "=" + filepath.Base(value)
		} else if strings.Contains(a, "/") {
			a = filepath.Base(a)
		}
		out = append(out, a)
	}
	return out
}

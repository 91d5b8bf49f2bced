package kernels_test

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/gobn/gobn/kernels"
)

// TestMain runs the tests a second time with the AVX2 loops where the CPU
// would otherwise run the AVX-512 ones, so that both forms are tested on
// the machines that have AVX-512 (CPUs without it run the AVX2 forms). A
// fuzzing, benchmarking or profiling run runs once, with the default loops,
// and so does a run under the race detector: the races it looks for are in
// the split of a pass between goroutines, which is the same at both widths
// (make test runs both widths without it).
func TestMain(m *testing.M) {
	code := m.Run()
	once := raceEnabled
	for _, name := range []string{"test.fuzz", "test.bench", "test.cpuprofile", "test.memprofile"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" {
			once = true
		}
	}
	if code == 0 && kernels.AVX512Available() && !once {
		fmt.Println("kernels: the tests again, with the AVX2 loops")
		kernels.SelectAVX512(false)
		code = m.Run()
	}
	os.Exit(code)
}

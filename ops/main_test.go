package ops_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gobn/gobn/ops"
	"github.com/stretchr/testify/require"
)

// These tests put the stock op and the gobn op on the same inputs in one tfgo
// graph and compare every output. They need build/libgobn.so (`make`, or
// $GOBN_LIBRARY) and the cgo flags of `make -s env`; `make test` runs them.

// libraryPath is $GOBN_LIBRARY, else the repository's build/libgobn.so.
func libraryPath() string {
	if p := os.Getenv("GOBN_LIBRARY"); p != "" {
		return p
	}
	return filepath.Join("..", "build", "libgobn.so")
}

// TestMain makes stock TensorFlow use its Eigen CPU kernels, which the
// tolerances are set against, and loads gobn. TensorFlow reads
// TF_ENABLE_ONEDNN_OPTS when its library loads, before any Go code runs, so
// the test binary sets it and runs itself again.
func TestMain(m *testing.M) {
	if os.Getenv("TF_ENABLE_ONEDNN_OPTS") == "" {
		env := append(os.Environ(), "TF_ENABLE_ONEDNN_OPTS=0")
		if os.Getenv("TF_CPP_MIN_LOG_LEVEL") == "" {
			env = append(env, "TF_CPP_MIN_LOG_LEVEL=2")
		}
		exe, err := os.Executable()
		if err == nil {
			err = syscall.Exec(exe, os.Args, env)
		}
		fmt.Fprintln(os.Stderr, "ops tests: running again with TF_ENABLE_ONEDNN_OPTS=0:", err)
		os.Exit(1)
	}
	if os.Getenv(unloaded) != "" {
		os.Exit(m.Run())
	}
	path := libraryPath()
	if _, err := os.Stat(path); err != nil {
		fmt.Fprintf(os.Stderr, "ops tests: gobn library not found at %s: run `make` (or set GOBN_LIBRARY)\n", path)
		os.Exit(1)
	}
	if err := ops.Load(path); err != nil {
		fmt.Fprintln(os.Stderr, "ops tests:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func TestLoadIsSafeToCallAgain(t *testing.T) {
	require.NoError(t, ops.Load(libraryPath()))
	require.NoError(t, ops.Load(libraryPath()))
}

// unloaded, set in the environment, has TestMain load no library, for
// TestErrorsWithoutTheLibrary.
const unloaded = "GOBN_OPS_TEST_UNLOADED"

// TestErrorsWithoutTheLibrary runs itself again in a process that has not
// loaded gobn, without GOBN_LIBRARY: there KernelCalls says to call Load,
// and Load("") says that GOBN_LIBRARY is not set.
func TestErrorsWithoutTheLibrary(t *testing.T) {
	if os.Getenv(unloaded) == "" {
		exe, err := os.Executable()
		require.NoError(t, err)
		cmd := exec.Command(exe, "-test.run=^TestErrorsWithoutTheLibrary$", "-test.v")
		cmd.Env = []string{unloaded + "=1"}
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, ops.LibraryEnv+"=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "--- PASS: TestErrorsWithoutTheLibrary")
		return
	}
	_, err := ops.KernelCalls()
	require.ErrorContains(t, err, "no libgobn.so is loaded in this process (call Load first)")
	require.ErrorContains(t, ops.Load(""), "GOBN_LIBRARY is not set")
}

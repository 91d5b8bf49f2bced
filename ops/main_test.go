package ops_test

import (
	"fmt"
	"os"
	"path/filepath"
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

package ops_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"

	"github.com/galeone/tensorflow/tensorflow/go/op"
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

// TestWrappersHaveTheStockSignatures checks that moving to gobn is an import
// change: each wrapper takes and returns what the bindings' stock wrapper
// does, and has the same option functions with the same value types.
func TestWrappersHaveTheStockSignatures(t *testing.T) {
	for _, c := range []struct {
		name        string
		gobn, stock any
		options     map[string][2]any
	}{
		{"FusedBatchNormGrad", ops.FusedBatchNormGrad, op.FusedBatchNormGrad, map[string][2]any{
			"Epsilon":    {ops.FusedBatchNormGradEpsilon, op.FusedBatchNormGradEpsilon},
			"DataFormat": {ops.FusedBatchNormGradDataFormat, op.FusedBatchNormGradDataFormat},
			"IsTraining": {ops.FusedBatchNormGradIsTraining, op.FusedBatchNormGradIsTraining},
		}},
		{"FusedBatchNormGradV2", ops.FusedBatchNormGradV2, op.FusedBatchNormGradV2, map[string][2]any{
			"Epsilon":    {ops.FusedBatchNormGradV2Epsilon, op.FusedBatchNormGradV2Epsilon},
			"DataFormat": {ops.FusedBatchNormGradV2DataFormat, op.FusedBatchNormGradV2DataFormat},
			"IsTraining": {ops.FusedBatchNormGradV2IsTraining, op.FusedBatchNormGradV2IsTraining},
		}},
		{"FusedBatchNormGradV3", ops.FusedBatchNormGradV3, op.FusedBatchNormGradV3, map[string][2]any{
			"Epsilon":    {ops.FusedBatchNormGradV3Epsilon, op.FusedBatchNormGradV3Epsilon},
			"DataFormat": {ops.FusedBatchNormGradV3DataFormat, op.FusedBatchNormGradV3DataFormat},
			"IsTraining": {ops.FusedBatchNormGradV3IsTraining, op.FusedBatchNormGradV3IsTraining},
		}},
		{"BatchNormWithGlobalNormalizationGrad", ops.BatchNormWithGlobalNormalizationGrad, op.BatchNormWithGlobalNormalizationGrad, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			gobn, stock := reflect.TypeOf(c.gobn), reflect.TypeOf(c.stock)
			require.Equal(t, stock.NumIn(), gobn.NumIn())
			require.Equal(t, stock.IsVariadic(), gobn.IsVariadic())
			for i := range stock.NumIn() {
				if stock.IsVariadic() && i == stock.NumIn()-1 {
					// ...op.XAttr against ...ops.XAttr: both func(optionalAttr).
					require.Equal(t, stock.In(i).Elem().Kind(), gobn.In(i).Elem().Kind())
					require.Equal(t, stock.In(i).Elem().Name(), gobn.In(i).Elem().Name())
					continue
				}
				require.Equal(t, stock.In(i), gobn.In(i), "parameter %d", i)
			}
			require.Equal(t, stock.NumOut(), gobn.NumOut())
			for i := range stock.NumOut() {
				require.Equal(t, stock.Out(i), gobn.Out(i), "result %d", i)
			}
			for name, fns := range c.options {
				g, s := reflect.TypeOf(fns[0]), reflect.TypeOf(fns[1])
				require.Equal(t, s.In(0), g.In(0), "option %s", name)
			}
		})
	}
}

package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/gobn/gobn/ops"
	"github.com/stretchr/testify/require"
)

// TestMain loads $GOBN_LIBRARY, else the repository's build/libgobn.so.
func TestMain(m *testing.M) {
	if os.Getenv(ops.LibraryEnv) == "" {
		os.Setenv(ops.LibraryEnv, filepath.Join("..", "..", "build", "libgobn.so"))
	}
	if err := ops.Load(""); err != nil {
		fmt.Fprintln(os.Stderr, "tfgo-train tests:", err, "(run `make`)")
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// TestTrainsOnGobnAsOnStock trains the example's network on stock's graph
// and on the rewritten one: the rewrite puts gobn's gradient in place of
// stock's, gobn's kernel runs once a step there (and never on stock's
// graph), and each step's loss on gobn is stock's within float32's
// tolerance.
func TestTrainsOnGobnAsOnStock(t *testing.T) {
	const steps = 4
	stock, gobn, err := train(steps)
	require.NoError(t, err)

	require.Equal(t, map[string]int{stockGradient: 1}, stock.gradients)
	require.Equal(t, map[string]int{gobnGradient: 1}, gobn.gradients)
	require.Empty(t, stock.calls, "gobn's kernels ran while stock's graph trained")
	require.Len(t, gobn.calls, 1, "gobn's kernels that ran: %v", gobn.calls)
	require.Equal(t, int64(steps), total(gobn.calls[gobnGradient]), "calls of %s: %v", gobnGradient, gobn.calls)

	require.Len(t, stock.losses, steps)
	require.Len(t, gobn.losses, steps)
	for i := range steps {
		s, g := float64(stock.losses[i]), float64(gobn.losses[i])
		require.LessOrEqual(t, math.Abs(g-s), atol+rtol*math.Abs(s), "step %d: loss on gobn %g, on stock %g", i+1, g, s)
	}
	require.Less(t, stock.losses[steps-1], stock.losses[0], "the network did not learn: losses %v", stock.losses)
}

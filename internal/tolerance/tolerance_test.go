package tolerance_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gobn/gobn/internal/tolerance"
)

func TestBoundAt(t *testing.T) {
	// Atol·M + Rtol·|want|, with M = 10 and want = −5
	assert.InDelta(t, 0.1*10+0.01*5, tolerance.Bound{Rtol: 0.01, Atol: 0.1}.At(10, -5), 1e-15)
}

package reference_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gobn/gobn/internal/reference"
	"github.com/gobn/gobn/internal/tolerance"
)

func TestStat(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	b := tolerance.Bound{Rtol: 0.5, Atol: 0.25}
	const M = 4 // b allows 1 + ½·|want|
	for _, c := range []struct {
		name      string
		got, want float64
		ok        bool
		err, norm float64
	}{
		{"within", 3, 2, true, 1, 0.5},
		{"at the bound", -4, -2, true, 2, 1},
		{"over", 4.5, 2, false, 2.5, 1.25},
		{"NaN for NaN", nan, nan, true, 0, 0},
		{"NaN for a number", nan, 5, false, inf, inf},
		{"a number for NaN", 5, nan, false, inf, inf},
		{"the same infinity", -inf, -inf, true, 0, 0},
		{"the other infinity", -inf, inf, false, inf, inf},
		{"a number for an infinity", 1e300, inf, false, inf, inf},
		{"an infinity for a number", inf, 5, false, inf, inf},
	} {
		var s reference.Stat
		assert.Equal(t, c.ok, s.Add(c.got, c.want, M, b), c.name)
		assert.InDelta(t, c.err, s.MaxErr, 1e-12, c.name)
		assert.InDelta(t, c.norm, s.Norm, 1e-12, c.name)
		bad, isNaN := 0, 0
		if !c.ok {
			bad = 1
			if math.IsNaN(c.got) {
				isNaN = 1
			}
		}
		assert.Equal(t, reference.Stat{MaxErr: s.MaxErr, Norm: s.Norm, Bad: bad, NaN: isNaN}, s, c.name)
	}

	// a zero bound: only got = want matches
	var s reference.Stat
	assert.True(t, s.Add(3, 3, 0, tolerance.Bound{}))
	assert.Equal(t, reference.Stat{}, s)
	assert.False(t, s.Add(3.5, 3, 0, tolerance.Bound{}))
	assert.Equal(t, reference.Stat{MaxErr: 0.5, Norm: inf, Bad: 1}, s)

	s.Merge(reference.Stat{MaxErr: 2, Norm: 0.5, Bad: 2, NaN: 1})
	assert.Equal(t, reference.Stat{MaxErr: 2, Norm: inf, Bad: 3, NaN: 1}, s)
}

func TestCompare(t *testing.T) {
	want, got := []float64{1, -2, math.NaN()}, []float64{1.05, -2, math.NaN()}
	// M = max|want| = 2 over the finite wants: the bound is 0.02
	assert.Equal(t, 1, reference.Compare(got, want, tolerance.Bound{Atol: 0.01}, 0).Bad)
	// M = the magnitude of the terms, 10: the bound is 0.1
	assert.Zero(t, reference.Compare(got, want, tolerance.Bound{Atol: 0.01}, 10).Bad)
	assert.Equal(t, 2.0, reference.MaxAbs([]float64{1, -2, math.Inf(-1), math.NaN()}))
	assert.Zero(t, reference.MaxAbs(nil))
}

// recorder is a testing.TB that keeps what Errorf reports.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func TestClose(t *testing.T) {
	want := make([]float64, 30)
	got := make([]float64, 30)
	for i := range want {
		want[i] = float64(i)
		got[i] = float64(i)
	}
	b := tolerance.Bound{Atol: 1e-3} // M = 29: 0.029
	r := &recorder{}
	assert.True(t, reference.Close(r, "out", got, want, b, 0))
	assert.Empty(t, r.errors)

	for i := 3; i < 15; i++ { // twelve elements off
		got[i] += 0.05
	}
	got[20] = math.NaN()
	assert.False(t, reference.Close(r, "out", got, want, b, 0))
	if assert.Len(t, r.errors, 11, "the first ten elements, then a count") {
		assert.Contains(t, r.errors[0], "out[3] = 3.05, want 3")
		assert.Contains(t, r.errors[10], "out: 13 of 30 elements out of tolerance (1 NaN)")
	}

	r = &recorder{}
	assert.False(t, reference.Close(r, "out", got[:2], want, b, 0))
	assert.Equal(t, []string{"out: 2 elements, want 30"}, r.errors)
}

func TestAsAccurate(t *testing.T) {
	ref := []float64{1, -2, math.NaN()}
	other := []float64{1.5, -2, math.NaN()}
	b := tolerance.Bound{Atol: 0.125} // M = 2: 0.25 of slack
	r := &recorder{}
	assert.True(t, reference.AsAccurate(r, "out", []float64{0.25, -2.25, math.NaN()}, other, ref, b))
	assert.Empty(t, r.errors)
	assert.False(t, reference.AsAccurate(r, "out", []float64{1.875, -2.5, 0}, other, ref, b))
	assert.Len(t, r.errors, 3, "further than the other's 0.5, than the other's 0, and a number for a NaN")
}

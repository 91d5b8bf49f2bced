package reference

import (
	"math"
	"testing"

	"github.com/gobn/gobn/internal/tolerance"
)

// Stat is the comparison of an output's elements with what is wanted of
// them.
type Stat struct {
	// MaxErr is the largest |got − want|, +Inf where a NaN or an infinity
	// was not met.
	MaxErr float64
	// Norm is the largest |got − want| over its bound: at most 1 while
	// every element matches.
	Norm float64
	// Bad counts the elements that do not match, NaN those of them where
	// got is NaN.
	Bad, NaN int
}

// Add compares one element of an output whose largest finite |want| is M:
// got matches want when both are NaN, when both are the same infinity, and
// when want is finite and |got − want| ≤ b.At(M, want). It returns whether
// got matches.
func (s *Stat) Add(got, want, M float64, b tolerance.Bound) bool {
	if !isFinite(got) || !isFinite(want) {
		if got == want || math.IsNaN(got) && math.IsNaN(want) {
			return true
		}
		s.miss(got, math.Inf(1), math.Inf(1))
		return false
	}
	d, bound := math.Abs(got-want), b.At(M, want)
	if d <= bound {
		s.MaxErr = max(s.MaxErr, d)
		if d > s.Norm*bound {
			s.Norm = d / bound
		}
		return true
	}
	norm := math.Inf(1)
	if bound > 0 {
		norm = d / bound
	}
	s.miss(got, d, norm)
	return false
}

// matches reports whether got matches want (Stat.Add).
func matches(got, want, M float64, b tolerance.Bound) bool {
	var s Stat
	return s.Add(got, want, M, b)
}

func (s *Stat) miss(got, err, norm float64) {
	s.Bad++
	if math.IsNaN(got) {
		s.NaN++
	}
	s.MaxErr, s.Norm = max(s.MaxErr, err), max(s.Norm, norm)
}

// Merge adds o, the comparison of other elements of the same output.
func (s *Stat) Merge(o Stat) {
	s.MaxErr, s.Norm, s.Bad, s.NaN = max(s.MaxErr, o.MaxErr), max(s.Norm, o.Norm), s.Bad+o.Bad, s.NaN+o.NaN
}

// Compare compares got with want element by element (Stat.Add), with M the
// larger of want's largest finite |want| and magnitude: the size of the
// terms the output is a difference of (Activation.Magnitude), 0 if none.
func Compare(got, want []float64, b tolerance.Bound, magnitude float64) Stat {
	var s Stat
	M := max(MaxAbs(want), magnitude)
	for i := range want {
		s.Add(got[i], want[i], M, b)
	}
	return s
}

// shown is how many mismatched elements Close and AsAccurate name.
const shown = 10

// Close reports through t the elements of got that do not match want
// within b (Compare), the first ten by index, and returns whether every
// element matches.
func Close(t testing.TB, name string, got, want []float64, b tolerance.Bound, magnitude float64) bool {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d elements, want %d", name, len(got), len(want))
		return false
	}
	s := Compare(got, want, b, magnitude)
	if s.Bad == 0 {
		return true
	}
	M := max(MaxAbs(want), magnitude)
	for i, n := 0, 0; i < len(want) && n < shown; i++ {
		if !matches(got[i], want[i], M, b) {
			t.Errorf("%s[%d] = %v, want %v (|err| %.3g, bound %.3g)", name, i, got[i], want[i], math.Abs(got[i]-want[i]), b.At(M, want[i]))
			n++
		}
	}
	t.Errorf("%s: %d of %d elements out of tolerance (%d NaN), the largest |err| %.3g, %.3g times its bound",
		name, s.Bad, len(want), s.NaN, s.MaxErr, s.Norm)
	return false
}

// AsAccurate reports through t the elements where got is further from the
// reference ref than other is, by more than b allows,
//
//	|got − ref| > |other − ref| + b.At(max|ref|, ref)
//
// (where ref is NaN or infinite, got must match it as Stat.Add says), the
// first ten by index, and returns whether there are none.
func AsAccurate(t testing.TB, name string, got, other, ref []float64, b tolerance.Bound) bool {
	t.Helper()
	if len(got) != len(ref) || len(other) != len(ref) {
		t.Errorf("%s: %d and %d elements, want %d", name, len(got), len(other), len(ref))
		return false
	}
	M, bad := MaxAbs(ref), 0
	for i, r := range ref {
		var ok bool
		if isFinite(r) {
			ok = math.Abs(got[i]-r) <= math.Abs(other[i]-r)+b.At(M, r)
		} else {
			ok = matches(got[i], r, M, b)
		}
		if !ok {
			if bad < shown {
				t.Errorf("%s[%d] = %v, further from the reference %v than %v is", name, i, got[i], r, other[i])
			}
			bad++
		}
	}
	if bad > shown {
		t.Errorf("%s: %d of %d elements less accurate", name, bad, len(ref))
	}
	return bad == 0
}

// MaxAbs returns the largest finite |v|, 0 if none.
func MaxAbs(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		if isFinite(x) {
			m = max(m, math.Abs(x))
		}
	}
	return m
}

func isFinite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

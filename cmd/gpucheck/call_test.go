package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/kernels/cuda"
)

// TestCallJobs checks that each family's call lands its scalars and tensors,
// in the order the package doc lists them, in the kernels/cuda args.
func TestCallJobs(t *testing.T) {
	var tensors [maxTensors]cuda.Ptr
	for i := range tensors {
		tensors[i] = cuda.Ptr(i+1) << 20
	}
	T := func(i int) cuda.Ptr { return tensors[i] }
	d := kernels.Dims{N: 2, C: 3, S: 4, Layout: kernels.ChannelsFirst}
	base := call{dtype: 1, layout: 1, n: 2, c: 3, s: 4, flag: true, count: 99, epsilon: 0.25, tensors: tensors}
	for _, c := range []struct {
		family int
		want   any
	}{
		{familyFused, cuda.FusedGradArgs{Dims: d, DType: cuda.Float16, IsTraining: true, Epsilon: 0.25,
			YBackprop: T(0), X: T(1), Scale: T(2), ReserveSpace1: T(3), ReserveSpace2: T(4),
			XBackprop: T(5), ScaleBackprop: T(6), OffsetBackprop: T(7)}},
		{familyGlobal, cuda.GlobalNormalizationArgs{Dims: d, DType: cuda.Float16, ScaleAfterNormalization: true,
			VarianceEpsilon: 0.25, T: T(0), M: T(1), V: T(2), Gamma: T(3), Backprop: T(4),
			DX: T(5), DM: T(6), DV: T(7), DB: T(8), DG: T(9)}},
		{familyReduce, cuda.GradReduceArgs{Dims: d, DType: cuda.Float16,
			YBackprop: T(0), X: T(1), Mean: T(2), SumDy: T(3), SumDyXmu: T(4)}},
		{familyApply, cuda.GradApplyArgs{Dims: d, DType: cuda.Float16, Count: 99, Epsilon: 0.25,
			YBackprop: T(0), X: T(1), Scale: T(2), Mean: T(3), Variance: T(4), SumDy: T(5), SumDyXmu: T(6),
			XBackprop: T(7)}},
	} {
		base.family = c.family
		j, err := base.job()
		require.NoError(t, err)
		require.Equal(t, c.want, j.args)
	}

	base.family = 4
	_, err := base.job()
	require.ErrorContains(t, err, "family code 4")
	base.family, base.layout = familyFused, 2
	_, err = base.job()
	require.ErrorContains(t, err, "layout code 2")
}

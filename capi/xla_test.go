package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/opdef"
)

// TestXLALayoutChecked requires that the build compared xla.h with XLA's
// header: the pinned TensorFlow has it.
func TestXLALayoutChecked(t *testing.T) {
	require.True(t, xlaLayoutChecked(), "xla_layout.c found no xla/ffi/api/c_api.h of API 0.2 in TensorFlow's include path")
}

// TestPerChannel checks the count an XLA call of BatchNormGradApply takes:
// the elements per channel of x in each data format.
func TestPerChannel(t *testing.T) {
	for _, c := range []struct {
		dims   []int64
		format string
		want   int64
	}{
		{[]int64{2, 3, 4, 5}, opdef.NHWC, 24},
		{[]int64{2, 3, 4, 5}, opdef.NCHW, 40},
		{[]int64{2, 3, 4, 5, 6}, opdef.NDHWC, 120},
		{[]int64{2, 3, 4, 5, 6}, opdef.NCDHW, 240},
		{[]int64{0, 3, 4, 5}, opdef.NHWC, 0},
		{[]int64{2, 3, 4, 0}, opdef.NHWC, 24},
		{[]int64{2, 3, 4, 5}, "NWHC", 0},
	} {
		require.Equal(t, c.want, perChannel(c.dims, c.format), "%v %s", c.dims, c.format)
	}
}

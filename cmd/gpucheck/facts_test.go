package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gobn/gobn/kernels"
)

func TestMakeDims(t *testing.T) {
	d, err := makeDims(1, 2, 3, 4)
	require.NoError(t, err)
	require.Equal(t, kernels.Dims{N: 2, C: 3, S: 4, Layout: kernels.ChannelsFirst}, d)
	for _, bad := range [][4]int64{{2, 1, 1, 1}, {0, -1, 1, 1}, {0, 1 << 40, 1 << 40, 1 << 40}} {
		_, err := makeDims(int(bad[0]), bad[1], bad[2], bad[3])
		require.Error(t, err, "%v", bad)
	}
}

func TestFactsJSON(t *testing.T) {
	var info map[string]any
	require.NoError(t, json.Unmarshal([]byte(infoJSON()), &info))
	for _, k := range []string{"go", "cuda_tag", "simd", "gomaxprocs", "goarch"} {
		require.Contains(t, info, k)
	}
	s, err := launchesJSON()
	require.NoError(t, err)
	var launches map[string]uint64
	require.NoError(t, json.Unmarshal([]byte(s), &launches))
}

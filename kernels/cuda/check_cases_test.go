package cuda_test

// The GPU check's cases (check_test.go): the groups of tensors and the ops
// each runs.

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/kernels/cuda"
)

// ---------------------------------------------------------------------------
// Cases.

// shape is an activation tensor's N, spatial dimensions and C, in no layout.
type shape struct {
	N       int64
	spatial []int64
	C       int64
}

func sh(N int64, spatial []int64, C int64) shape { return shape{N, spatial, C} }

// group is the tensors dy and x that a group's ops share.
type group struct {
	dt      cuda.DType
	layout  string // NHWC, NCHW, NDHWC or NCDHW
	shape   shape
	variant string // plain, unaligned, unaligned_dx, inplace_x, inplace_dy, stream0
	tag     string // small, sanitize, huge, resnet
}

func channelsLast(layout string) bool { return layout == "NHWC" || layout == "NDHWC" }

func (g group) dims() kernels.Dims {
	S := int64(1)
	for _, s := range g.shape.spatial {
		S *= s
	}
	l := kernels.ChannelsFirst
	if channelsLast(g.layout) {
		l = kernels.ChannelsLast
	}
	return kernels.Dims{N: g.shape.N, C: g.shape.C, S: S, Layout: l}
}

// shapeString is the shape in the layout's order, 32x56x56x64.
func (g group) shapeString() string {
	s := g.shape
	dims := append([]int64{s.N}, s.spatial...)
	if channelsLast(g.layout) {
		dims = append(dims, s.C)
	} else {
		dims = append([]int64{s.N, s.C}, s.spatial...)
	}
	parts := make([]string, len(dims))
	for i, d := range dims {
		parts[i] = strconv.FormatInt(d, 10)
	}
	return strings.Join(parts, "x")
}

func (g group) id() string {
	return fmt.Sprintf("%s/%s/%s/%s", g.dt, g.layout, g.shapeString(), g.variant)
}

var (
	dtypes  = []cuda.DType{cuda.Float32, cuda.Float16, cuda.BFloat16}
	small4D = []shape{sh(4, []int64{5, 7}, 1), sh(2, []int64{5, 9}, 3), sh(3, []int64{4, 4}, 7),
		sh(2, []int64{3, 5}, 33), sh(2, []int64{7, 7}, 100), sh(1, []int64{1, 1}, 64), sh(16, []int64{1, 1}, 256),
		sh(0, []int64{4, 4}, 8), sh(5, []int64{9, 11}, 3), sh(8, []int64{14, 14}, 128), sh(4, []int64{6, 6}, 34),
		sh(2, []int64{64, 64}, 3), sh(64, []int64{1, 1}, 2), sh(5, []int64{15, 17}, 12)}
	small5D = []shape{sh(2, []int64{3, 4, 5}, 7), sh(1, []int64{2, 3, 3}, 64), sh(0, []int64{2, 2, 2}, 4),
		sh(3, []int64{1, 1, 1}, 33), sh(2, []int64{4, 6, 6}, 32)}
	variantShapes = []shape{sh(2, []int64{5, 9}, 3), sh(4, []int64{6, 6}, 64), sh(3, []int64{3, 3}, 100),
		sh(1, []int64{1, 1}, 8)}
	variants = []string{"unaligned", "unaligned_dx", "inplace_x", "inplace_dy", "stream0"}
	resnet   = []shape{sh(32, []int64{112, 112}, 64), sh(32, []int64{56, 56}, 64), sh(32, []int64{56, 56}, 256),
		sh(32, []int64{28, 28}, 512), sh(32, []int64{14, 14}, 1024), sh(32, []int64{7, 7}, 2048),
		sh(64, []int64{56, 56}, 128), sh(128, []int64{28, 28}, 128), sh(128, []int64{14, 14}, 256),
		sh(128, []int64{7, 7}, 512)}
	huge = sh(2, []int64{4097, 4096}, 64) // 2³¹ + 2¹⁹ elements
	// the sanitizers' shapes: vector widths 1 (C=7, S=15 or 9), 2 (C=34,
	// S=6), 4 (C=12, or float C=64, S=16), 8 (half C=64); several partial
	// sums (R=4096; S=4096); empty. C=12 with R=1275 gives a thread 15 rows,
	// so the unrolled loop runs as well as the tail, for every U (8 in the
	// 16-bit v4 channels-last kernels), as does 8×14×14×128 among the small shapes.
	sanitizeShapes = []shape{sh(2, []int64{3, 5}, 7), sh(2, []int64{4, 4}, 64), sh(2, []int64{3, 3}, 34),
		sh(5, []int64{15, 17}, 12), sh(0, []int64{2, 2}, 8), sh(16, []int64{16, 16}, 64), sh(2, []int64{64, 64}, 3)}
)

// planOptions chooses the groups.
type planOptions struct {
	small  bool // the sanitizers' few small groups, every kernel, instead of the rest
	huge   bool // the tensor over 2³¹ elements
	resnet bool // ResNet-50's shapes
}

// plan returns the groups in the order they run.
func plan(o planOptions) []group {
	var g []group
	add := func(dt cuda.DType, layout string, s shape, variant, tag string) {
		g = append(g, group{dt, layout, s, variant, tag})
	}
	if o.small {
		for _, s := range sanitizeShapes {
			for _, dt := range dtypes {
				for _, l := range []string{"NHWC", "NCHW"} {
					add(dt, l, s, "plain", "sanitize")
				}
			}
		}
		for _, dt := range dtypes {
			for _, l := range []string{"NHWC", "NCHW"} {
				add(dt, l, sh(2, []int64{4, 4}, 64), "unaligned", "sanitize")
			}
		}
		add(cuda.Float32, "NHWC", sh(2, []int64{4, 4}, 64), "inplace_x", "sanitize")
		add(cuda.Float16, "NCHW", sh(2, []int64{4, 4}, 64), "inplace_dy", "sanitize")
		add(cuda.BFloat16, "NHWC", sh(2, []int64{4, 4}, 64), "stream0", "sanitize")
		add(cuda.Float16, "NDHWC", sh(2, []int64{2, 3, 4}, 8), "plain", "sanitize")
		add(cuda.BFloat16, "NCDHW", sh(2, []int64{2, 3, 4}, 8), "plain", "sanitize")
		return g
	}
	for _, dt := range dtypes {
		for _, l := range []string{"NHWC", "NCHW"} {
			for _, s := range small4D {
				add(dt, l, s, "plain", "small")
			}
			for _, s := range variantShapes {
				for _, v := range variants {
					add(dt, l, s, v, "small")
				}
			}
		}
		for _, l := range []string{"NDHWC", "NCDHW"} {
			for _, s := range small5D {
				add(dt, l, s, "plain", "small")
			}
			for _, v := range []string{"unaligned", "inplace_x"} {
				add(dt, l, small5D[0], v, "small")
			}
		}
	}
	if o.resnet {
		for _, s := range resnet {
			for _, dt := range dtypes {
				for _, l := range []string{"NHWC", "NCHW"} {
					add(dt, l, s, "plain", "resnet")
				}
			}
		}
		add(cuda.Float32, "NHWC", resnet[1], "unaligned", "resnet")
		add(cuda.Float16, "NCHW", resnet[1], "unaligned_dx", "resnet")
		add(cuda.BFloat16, "NHWC", resnet[2], "inplace_dy", "resnet")
	}
	if o.huge { // last: the longest on the host
		add(cuda.Float16, "NHWC", huge, "plain", "huge")
	}
	return g
}

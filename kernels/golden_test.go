package kernels_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gobn/gobn/internal/reference"
	"github.com/gobn/gobn/internal/tolerance"
	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/opdef"
	"github.com/sbinet/npyio/npy"
	"github.com/sbinet/npyio/npz"
	"github.com/stretchr/testify/require"
)

// The golden set in testdata/golden holds stock TensorFlow's outputs for
// every op, dtype, data format and mode, written by `python -m tools.golden gen`
// (see tools/golden.py for the file format). These tests run the kernels on the
// saved inputs and compare with the saved outputs, so the kernels are checked
// against real stock output where TensorFlow is not installed. Regenerate
// with:
//
//	.venv/bin/python -m tools.golden gen kernels/testdata/golden
//
// Arrays of TensorFlow dtype float are float32 in the .npz, double float64,
// and half and bfloat16 their uint16 bit patterns, which are exactly
// kernels.Half and kernels.BFloat16. Where stock has no usable answer (the
// manifest's "reference": "float64") the saved outputs are an exact float64
// reference.
const goldenDir = "testdata/golden"

type goldenManifest struct {
	Format     int          `json:"format"`
	TensorFlow string       `json:"tensorflow"`
	Cases      []goldenCase `json:"cases"`
}

type goldenCase struct {
	Name                    string            `json:"name"`
	File                    string            `json:"file"`
	SHA256                  string            `json:"sha256"`
	Op                      string            `json:"op"`
	T                       string            `json:"T"`
	DataFormat              string            `json:"data_format"`
	IsTraining              bool              `json:"is_training"`
	Epsilon                 float32           `json:"epsilon"`
	VarianceEpsilon         float32           `json:"variance_epsilon"`
	ScaleAfterNormalization bool              `json:"scale_after_normalization"`
	Reference               string            `json:"reference"`
	Inputs                  []string          `json:"inputs"`
	Outputs                 []string          `json:"outputs"`
	Arrays                  map[string]string `json:"arrays"` // array name → TensorFlow dtype
}

func readGoldenManifest(t *testing.T) goldenManifest {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(goldenDir, "manifest.json"))
	require.NoError(t, err, "the golden set is committed: regenerate it with python -m tools.golden gen")
	var m goldenManifest
	require.NoError(t, json.Unmarshal(raw, &m))
	require.Equal(t, 1, m.Format, "manifest format")
	return m
}

// TestGoldenSetCoversEveryOpDtypeFormatAndMode guards the golden set against
// losing cases: every op gobn registers, with each of its kernel dtypes, each
// data format and both modes (or both scale_after_normalization values).
func TestGoldenSetCoversEveryOpDtypeFormatAndMode(t *testing.T) {
	have := map[string]bool{}
	for _, c := range readGoldenManifest(t).Cases {
		have[c.Name] = true
	}
	for _, op := range opdef.All {
		if op.Stock == "" {
			continue // no stock op to take golden files from (BatchNormGradReduce, BatchNormGradApply)
		}
		for _, binding := range op.Kernels {
			T := binding["T"].String()
			if op.Kind == opdef.GlobalNormalizationGrad {
				for _, scaleAfter := range []bool{true, false} {
					name := fmt.Sprintf("%s-%s-scale_after_normalization_%t", op.Stock, T, scaleAfter)
					require.True(t, have[name], "golden set lacks %s", name)
				}
				continue
			}
			formats := []string{opdef.NHWC, opdef.NCHW}
			if op.Stock == "FusedBatchNormGradV3" {
				formats = append(formats, opdef.NDHWC, opdef.NCDHW)
			}
			for _, format := range formats {
				for _, mode := range []string{"training", "inference"} {
					name := fmt.Sprintf("%s-%s-%s-%s", op.Stock, T, format, mode)
					require.True(t, have[name], "golden set lacks %s", name)
				}
			}
		}
	}
}

// TestKernelsMatchGoldenStockOutputs runs every golden case through the
// kernels and compares x_backprop, scale_backprop and offset_backprop (or dx,
// dm, dv, db and dg) with the saved outputs, within the dtype's tolerance.
func TestKernelsMatchGoldenStockOutputs(t *testing.T) {
	m := readGoldenManifest(t)
	t.Logf("golden set from TensorFlow %s: %d cases", m.TensorFlow, len(m.Cases))
	for _, c := range m.Cases {
		t.Run(c.Name, func(t *testing.T) {
			path := filepath.Join(goldenDir, c.File)
			raw, err := os.ReadFile(path)
			require.NoError(t, err)
			sum := sha256.Sum256(raw)
			require.Equal(t, c.SHA256, hex.EncodeToString(sum[:]), "%s is corrupted: SHA-256 differs from the manifest", c.File)
			r, err := npz.Open(path)
			require.NoError(t, err)
			defer r.Close()
			g := golden{t: t, r: r, c: c}
			switch {
			case c.Op == "BatchNormWithGlobalNormalizationGrad" && c.T == "float":
				checkGoldenGlobalNormalization[float32](g)
			case c.Op == "BatchNormWithGlobalNormalizationGrad" && c.T == "half":
				checkGoldenGlobalNormalization[kernels.Half](g)
			case c.Op == "BatchNormWithGlobalNormalizationGrad" && c.T == "double":
				checkGoldenGlobalNormalization[float64](g)
			case c.T == "float":
				checkGoldenFused[float32](g)
			case c.T == "half":
				checkGoldenFused[kernels.Half](g)
			case c.T == "bfloat16":
				checkGoldenFused[kernels.BFloat16](g)
			default:
				t.Fatalf("no kernel for %s with T=%s", c.Op, c.T)
			}
		})
	}
}

func checkGoldenFused[T kernels.Element](g golden) {
	c := g.c
	dyShape, dy := readGolden[T](g, "y_backprop")
	xShape, x := readGolden[T](g, "x")
	scaleShape, scale := readGolden[float32](g, "scale")
	mean1Shape, mean := readGolden[float32](g, "reserve_space_1")
	varShape, variance := readGolden[float32](g, "reserve_space_2")
	geo, err := opdef.CheckFusedGrad(c.DataFormat, opdef.FusedGradInputs{
		YBackprop: dyShape, X: xShape, Scale: scaleShape, ReserveSpace1: mean1Shape, ReserveSpace2: varShape,
	})
	require.NoError(g.t, err)
	layout := kernels.ChannelsFirst
	if geo.ChannelsLast {
		layout = kernels.ChannelsLast
	}
	args := kernels.FusedGradArgs[T]{
		Dims:      kernels.Dims{N: geo.N, C: geo.C, S: geo.S, Layout: layout},
		YBackprop: dy, X: x, Scale: scale, ReserveSpace1: mean, ReserveSpace2: variance,
		Epsilon:        c.Epsilon,
		XBackprop:      make([]T, len(x)),
		ScaleBackprop:  make([]float32, geo.C),
		OffsetBackprop: make([]float32, geo.C),
	}
	if c.IsTraining {
		kernels.TrainingGrad(args)
	} else {
		kernels.InferenceGrad(args)
	}
	g.compare("x_backprop", xShape, widenAll(args.XBackprop))
	g.compare("scale_backprop", []int64{geo.C}, widenAll(args.ScaleBackprop))
	g.compare("offset_backprop", []int64{geo.C}, widenAll(args.OffsetBackprop))
}

func checkGoldenGlobalNormalization[T kernels.Element](g golden) {
	tShape, x := readGolden[T](g, "t")
	mShape, m := readGolden[T](g, "m")
	vShape, v := readGolden[T](g, "v")
	gammaShape, gamma := readGolden[T](g, "gamma")
	backpropShape, dy := readGolden[T](g, "backprop")
	geo, err := opdef.CheckGlobalNormalizationGrad(opdef.GlobalNormalizationGradInputs{
		T: tShape, M: mShape, V: vShape, Gamma: gammaShape, Backprop: backpropShape,
	})
	require.NoError(g.t, err)
	C := geo.C
	args := kernels.GlobalNormalizationArgs[T]{
		Dims: kernels.Dims{N: geo.N, C: C, S: geo.S, Layout: kernels.ChannelsLast},
		T:    x, M: m, V: v, Gamma: gamma, Backprop: dy,
		VarianceEpsilon:         g.c.VarianceEpsilon,
		ScaleAfterNormalization: g.c.ScaleAfterNormalization,
		DX:                      make([]T, len(x)),
		DM:                      make([]T, C), DV: make([]T, C), DB: make([]T, C), DG: make([]T, C),
	}
	kernels.GlobalNormalizationGrad(args)
	g.compare("dx", tShape, widenAll(args.DX))
	g.compare("dm", []int64{C}, widenAll(args.DM))
	g.compare("dv", []int64{C}, widenAll(args.DV))
	g.compare("db", []int64{C}, widenAll(args.DB))
	g.compare("dg", []int64{C}, widenAll(args.DG))
}

// golden is one open golden case.
type golden struct {
	t *testing.T
	r *npz.Reader
	c goldenCase
}

// read reads the named array into dst (a pointer to a slice of the stored
// element type) and returns its shape.
func (g golden) read(name string, dst any) []int64 {
	g.t.Helper()
	rc, err := g.r.Open(name + ".npy")
	require.NoError(g.t, err, "array %s", name)
	defer rc.Close()
	nr, err := npy.NewReader(rc)
	require.NoError(g.t, err, "array %s", name)
	require.False(g.t, nr.Header.Descr.Fortran, "array %s is in Fortran order", name)
	require.NoError(g.t, nr.Read(dst), "array %s", name)
	shape := make([]int64, len(nr.Header.Descr.Shape))
	for i, d := range nr.Header.Descr.Shape {
		shape[i] = int64(d)
	}
	return shape
}

// readGolden reads the named array as element type E, decoding the stored form
// its manifest dtype says (float32, float64, or uint16 bits for half and
// bfloat16). It fails if the stored dtype is not E's.
func readGolden[E kernels.Element](g golden, name string) ([]int64, []E) {
	g.t.Helper()
	dtype := g.c.Arrays[name]
	var zero E
	want := map[string]any{"float": float32(0), "double": float64(0), "half": kernels.Half(0), "bfloat16": kernels.BFloat16(0)}[dtype]
	require.IsType(g.t, want, zero, "array %s is %s", name, dtype)
	var out []E
	var shape []int64
	switch p := any(&out).(type) {
	case *[]float32:
		shape = g.read(name, p)
	case *[]float64:
		shape = g.read(name, p)
	case *[]kernels.Half:
		var bits []uint16
		shape = g.read(name, &bits)
		*p = make([]kernels.Half, len(bits))
		for i, b := range bits {
			(*p)[i] = kernels.Half(b)
		}
	case *[]kernels.BFloat16:
		var bits []uint16
		shape = g.read(name, &bits)
		*p = make([]kernels.BFloat16, len(bits))
		for i, b := range bits {
			(*p)[i] = kernels.BFloat16(b)
		}
	}
	if out == nil {
		out = []E{}
	}
	return shape, out
}

// readFloat64 reads the named array, of any golden dtype, as float64.
func (g golden) readFloat64(name string) ([]int64, []float64) {
	switch g.c.Arrays[name] {
	case "float":
		shape, v := readGolden[float32](g, name)
		return shape, widenAll(v)
	case "double":
		return readGolden[float64](g, name)
	case "half":
		shape, v := readGolden[kernels.Half](g, name)
		return shape, widenAll(v)
	case "bfloat16":
		shape, v := readGolden[kernels.BFloat16](g, name)
		return shape, widenAll(v)
	}
	g.t.Fatalf("array %s has unknown dtype %q", name, g.c.Arrays[name])
	return nil, nil
}

// compare checks got against want_<name> within the case's dtype tolerance.
func (g golden) compare(name string, shape []int64, got []float64) {
	g.t.Helper()
	wantShape, want := g.readFloat64("want_" + name)
	require.True(g.t, slices.Equal(wantShape, shape), "%s: shape %v, want %v", name, shape, wantShape)
	if !reference.Close(g.t, fmt.Sprintf("%s vs %s (%s tolerance)", name, g.c.Reference, g.c.T), got, want, tolerance.ByDType[g.c.T], 0) {
		g.t.FailNow()
	}
}

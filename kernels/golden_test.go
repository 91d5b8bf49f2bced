package kernels_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/gobn/gobn/internal/recipe"
	"github.com/gobn/gobn/internal/reference"
	"github.com/gobn/gobn/internal/tolerance"
	"github.com/gobn/gobn/kernels"
	"github.com/gobn/gobn/opdef"
	"github.com/sbinet/npyio/npy"
	"github.com/sbinet/npyio/npz"
	"github.com/stretchr/testify/require"
)

// The golden set in testdata/golden holds stock TensorFlow's outputs for
// every op with a stock twin, dtype, data format and mode, written by
// `python -m tools.golden gen` (see tools/golden.py for the file format).
// These tests run the kernels on the saved inputs and compare with the saved
// outputs, so the kernels are checked against real stock output where
// TensorFlow is not installed. Nothing here names a kind: a case's kernel
// is its kind's in kinds_gen_test.go (cmd/gencuda), its args filled by
// name. Regenerate with (--new-only: only the cases it lacks, a new op's):
//
//	.venv/bin/python -m tools.golden gen [--new-only] kernels/testdata/golden
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
	Name       string            `json:"name"`
	File       string            `json:"file"`
	SHA256     string            `json:"sha256"`
	Op         string            `json:"op"` // the stock twin's name
	T          string            `json:"T"`
	DataFormat string            `json:"data_format"`
	Mode       string            `json:"mode"` // its kind's (internal/reference)
	Attrs      map[string]any    `json:"attrs"`
	Reference  string            `json:"reference"`
	Inputs     []string          `json:"inputs"`
	Outputs    []string          `json:"outputs"`
	Arrays     map[string]string `json:"arrays"` // array name → TensorFlow dtype
}

func readGoldenManifest(t *testing.T) goldenManifest {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(goldenDir, "manifest.json"))
	require.NoError(t, err, "the golden set is committed: regenerate it with python -m tools.golden gen")
	var m goldenManifest
	require.NoError(t, json.Unmarshal(raw, &m))
	require.Equal(t, 2, m.Format, "manifest format")
	return m
}

// TestGoldenSetCoversEveryOpDtypeFormatAndMode guards the golden set against
// losing cases: every op gobn registers with a stock twin, with each of its
// kernel dtypes, each data format and each mode of its kind.
func TestGoldenSetCoversEveryOpDtypeFormatAndMode(t *testing.T) {
	have := map[string]bool{}
	for _, c := range readGoldenManifest(t).Cases {
		have[c.Name] = true
	}
	for _, op := range opdef.All {
		if op.Stock == "" {
			continue // no stock op to take golden files from (BatchNormGradReduce, BatchNormGradApply)
		}
		kind, ok := reference.Kinds[string(op.Kind)]
		require.True(t, ok, "internal/reference registers no kind %s", op.Kind)
		formats := []string{opdef.NHWC}
		if a, ok := op.Attr("data_format"); ok {
			formats = a.Values
		}
		for _, binding := range op.Kernels {
			for _, format := range formats {
				for _, mode := range kind.Modes {
					name := fmt.Sprintf("%s-%s-%s-%s", op.Stock, binding["T"], format, mode.Name)
					require.True(t, have[name], "golden set lacks %s: regenerate it (python -m tools.golden gen --new-only %s)",
						name, goldenDir)
				}
			}
		}
	}
}

// TestKernelsMatchGoldenStockOutputs runs every golden case through its
// op's kind's Go kernel and compares each output it writes with the saved
// one, within the dtype's tolerance. The kernel's args are filled by name
// (recipe.Field): the dims, the saved inputs, the attrs of the case and an
// output for each output field; an output it has no field of must be one
// of opdef's empty placeholders.
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
			checkGolden(golden{t: t, r: r, c: c})
		})
	}
}

// checkGolden runs g's case through its kind's Go kernel and compares the
// outputs.
func checkGolden(g golden) {
	t, c := g.t, g.c
	i := slices.IndexFunc(opdef.All, func(op opdef.Op) bool { return op.Stock == c.Op })
	require.GreaterOrEqual(t, i, 0, "no op of opdef has the stock twin %s", c.Op)
	op := opdef.All[i]
	kernel, ok := kindKernels[string(op.Kind)][c.T]
	require.True(t, ok, "no Go kernel of %s for T=%s", op.Kind, c.T)
	fn := reflect.ValueOf(kernel)
	args := reflect.New(fn.Type().In(0)).Elem()

	inputs, shapes := map[string]reflect.Value{}, make([][]int64, len(op.Inputs))
	for j, in := range op.Inputs {
		if field, ok := args.Type().FieldByName(recipe.Field(in.Name)); ok {
			shapes[j], inputs[in.Name] = g.readAs(in.Name, field.Type)
		} else {
			shapes[j], _ = g.readFloat64(in.Name)
		}
	}
	geo, err := op.Check(c.DataFormat, shapes)
	require.NoError(t, err)
	layout := kernels.ChannelsFirst
	if geo.ChannelsLast {
		layout = kernels.ChannelsLast
	}
	outputs := map[string][]int64{}
	for j := range args.NumField() {
		field, v := args.Type().Field(j), args.Field(j)
		name, isAttr := argOf(op, field.Name)
		switch {
		case field.Name == "Dims":
			v.Set(reflect.ValueOf(kernels.Dims{N: geo.N, C: geo.C, S: geo.S, Layout: layout}))
		case isAttr:
			value, ok := c.Attrs[name]
			require.True(t, ok, "%s: no attr %s", c.Name, name)
			v.Set(reflect.ValueOf(value).Convert(field.Type))
		case inputs[name].IsValid():
			v.Set(inputs[name])
		case name != "" && field.Type.Kind() == reflect.Slice:
			out := op.Outputs[slices.IndexFunc(op.Outputs, func(a opdef.Arg) bool { return a.Name == name })]
			if n, ok := c.Attrs[out.Number].(float64); ok && n == 0 {
				continue // a list of none: no tensor (nil)
			}
			shape := shapes[out.Shape.Like]
			outputs[name] = shape
			v.Set(reflect.MakeSlice(field.Type, int(elementsOf(shape)), int(elementsOf(shape))))
		default:
			t.Fatalf("%s's args have a field %s of no arg or attr of %s", op.Kind, field.Name, op.Name)
		}
	}
	fn.Call([]reflect.Value{args})
	for _, name := range c.Outputs {
		field := args.FieldByName(recipe.Field(name))
		if !field.IsValid() {
			wantShape, _ := g.readFloat64("want_" + name)
			require.Zero(t, elementsOf(wantShape), "%s: %s's kernel writes no output %s", c.Name, op.Kind, name)
			continue
		}
		g.compare(name, outputs[name], widen(field.Interface()))
	}
}

// argOf returns the name of op's arg or attr whose field of a kernel's args
// is field, and whether it is an attr; "" where there is none. A type attr
// is the kernel's type parameter, no field.
func argOf(op opdef.Op, field string) (name string, isAttr bool) {
	for _, a := range op.Attrs {
		if a.Kind != opdef.TypeAttr && recipe.Field(a.Name) == field {
			return a.Name, true
		}
	}
	for _, list := range [][]opdef.Arg{op.Inputs, op.Outputs} {
		for _, a := range list {
			if recipe.Field(a.Name) == field {
				return a.Name, false
			}
		}
	}
	return "", false
}

func elementsOf(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

// widen returns a slice of a kernel's element type in float64.
func widen(s any) []float64 {
	switch s := s.(type) {
	case []float32:
		return widenAll(s)
	case []float64:
		return s
	case []kernels.Half:
		return widenAll(s)
	case []kernels.BFloat16:
		return widenAll(s)
	}
	panic(fmt.Sprintf("golden: a kernel output of %T", s))
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

// readAs reads the named array as a value of t, a slice of one of the
// kernels' element types.
func (g golden) readAs(name string, t reflect.Type) ([]int64, reflect.Value) {
	g.t.Helper()
	var shape []int64
	var v any
	switch t.Elem() {
	case reflect.TypeFor[float32]():
		shape, v = readGolden[float32](g, name)
	case reflect.TypeFor[float64]():
		shape, v = readGolden[float64](g, name)
	case reflect.TypeFor[kernels.Half]():
		shape, v = readGolden[kernels.Half](g, name)
	case reflect.TypeFor[kernels.BFloat16]():
		shape, v = readGolden[kernels.BFloat16](g, name)
	default:
		g.t.Fatalf("array %s: the kernel's field is %s", name, t)
	}
	return shape, reflect.ValueOf(v)
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

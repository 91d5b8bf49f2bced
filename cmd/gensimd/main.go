// Command gensimd writes kernels/simd512_gen_amd64.go: the AVX-512 forms of
// the AVX2 loops of kernels/simd_amd64.go that are written once, in the lane
// constants f32Lanes and f64Lanes.
//
// Each form is its AVX2 loop with every name in rename replaced and every
// vector type doubled in length (archsimd.Float32x8 becomes Float32x16,
// LoadUint16x8 LoadUint16x16, AsFloat32x8 AsFloat32x16). The vocabulary the
// loops call at the other width (widen8, quad512, the lane constants) and the
// AVX-512 loops that have no AVX2 twin are written by hand in
// kernels/simd512_amd64.go.
//
// Usage (from kernels/, through go generate):
//
//	go run ../cmd/gensimd
package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	"github.com/gobn/gobn/internal/genfile"
)

// loops are the AVX2 loops the generated file holds the AVX-512 forms of,
// in its order, each with the AVX-512 form's name (and, for a form that
// reads bfloat16 rows, the name of its loader and a note).
var loops = []struct {
	avx2, avx512 string
	load, note   string
}{
	{"load8", "load16", "", ""},
	{"store8", "store16", "", ""},
	{"load4d", "load8d", "", ""},
	{"store4d", "store8d", "", ""},
	{"mean8", "mean16", "", ""},
	{"fold8", "fold16", "", ""},
	{"sumsRow32", "sumsRow512", "", ""},
	{"sumsRow2x32", "sumsRow2x512", "", ""},
	{"sumsTile1x32", "sumsTile1x512", "", ""},
	{"sumsTile1x32", "sumsTile1BF16", "wideBF16", " over bfloat16 rows"},
	{"sumsPlanes32", "sumsPlanes512", "", ""},
	{"sumsPlaneLanes32", "sumsPlaneLanes512", "", ""},
	{"applyRow32", "applyRow512", "", ""},
	{"applyRow2x32", "applyRow2x512", "", ""},
	{"scaleRow32", "scaleRow512", "", ""},
	{"applyPlanes32", "applyPlanes512", "", ""},
	{"loadBF16x8", "loadBF16x16", "", ""},
	{"roundBF16x8", "roundBF16x16", "", ""},
	{"newBF16Rounding8", "newBF16Rounding16", "", ""},
	{"sumsPlaneLanesBF16", "sumsPlaneLanesBF16x16", "", ""},
	{"applyPlanesBF16", "applyPlanesBF16x16", "", ""},
	{"widenBFloat16", "widenBFloat16x16", "", ""},
	{"narrowBFloat16", "narrowBFloat16x16", "", ""},
	{"maskRows32", "maskRows512", "", ""},
	{"unmaskRows32", "unmaskRows512", "", ""},
}

// vocabulary are the names the loops call whose AVX-512 forms are written
// by hand.
var vocabulary = map[string]string{
	"f32Lanes": "f32Lanes512",
	"f64Lanes": "f64Lanes512",
	"widen4":   "widen8",
	"quad":     "quad512",
	// the stores of bfloat16 (AVX-512 has a narrowing one)
	"storeBF16x8": "storeBF16x16",
	// the tails: at this width, the AVX2 loops
	"runSumsTail": "runSumsTail512",
	// the masked vectors' and the broadcasts' vocabulary
	"laneNumbers":  "laneNumbers512",
	"broadcastAt8": "broadcastAt16",
	"loadMasked8":  "loadMasked16",
	"storeMasked8": "storeMasked16",
	// bfloat16's rounding constants
	"bf16Rounding8": "bf16Rounding16",
	"bf16Round8":    "bf16Round16",
	// FusedBatchNormGradEx's mask of a vector from its bits
	"maskFromBits8": "maskFromBits16",
}

// vectorType matches a name that holds an archsimd vector or mask type and
// its length.
var vectorType = regexp.MustCompile(`(Float32|Float64|Int8|Int16|Int32|Int64|Uint8|Uint16|Uint32|Uint64|Mask8|Mask16|Mask32|Mask64)x(\d+)`)

func main() {
	genfile.Main("gensimd", func(dir string) (map[string][]byte, error) {
		b, err := os.ReadFile(filepath.Join(dir, "simd_amd64.go"))
		if err == nil {
			b, err = Generate(b)
		}
		return map[string][]byte{"simd512_gen_amd64.go": b}, err
	})
}

// Generate returns the Go source of the AVX-512 forms of src's loops.
func Generate(src []byte) ([]byte, error) {
	rename := map[string]string{}
	for k, v := range vocabulary {
		rename[k] = v
	}
	for _, l := range loops {
		if l.load == "" {
			rename[l.avx2] = l.avx512
		}
	}
	var b bytes.Buffer
	b.WriteString(genfile.GoFile{Generator: "gensimd", Source: "simd_amd64.go", Build: "goexperiment.simd && amd64",
		Package: "kernels", Imports: []string{"simd/archsimd", "unsafe"}}.Prologue())
	for _, l := range loops {
		// A parse of its own for each form, which it renames in place.
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, "simd_amd64.go", src, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		fn := function(f, l.avx2)
		if fn == nil {
			return nil, fmt.Errorf("%s: no such function", l.avx2)
		}
		fn.Doc = nil
		names := rename
		if l.load != "" {
			names = map[string]string{l.avx2: l.avx512, "load8": l.load}
			for k, v := range rename {
				if _, ok := names[k]; !ok {
					names[k] = v
				}
			}
		}
		ast.Inspect(fn, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok {
				id.Name = widen(id.Name, names)
			}
			return true
		})
		fmt.Fprintf(&b, "\n// %s is %s on AVX-512 vectors%s.\n", l.avx512, l.avx2, l.note)
		if err := printer.Fprint(&b, fset, &printer.CommentedNode{Node: fn, Comments: f.Comments}); err != nil {
			return nil, err
		}
		b.WriteString("\n")
	}
	return format.Source(b.Bytes())
}

// function returns f's function name, or nil.
func function(f *ast.File, name string) *ast.FuncDecl {
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == name {
			return fn
		}
	}
	return nil
}

// widen returns name's AVX-512 form: renamed, or with its vector type
// doubled in length.
func widen(name string, rename map[string]string) string {
	if v, ok := rename[name]; ok {
		return v
	}
	return vectorType.ReplaceAllStringFunc(name, func(t string) string {
		m := vectorType.FindStringSubmatch(t)
		n, _ := strconv.Atoi(m[2])
		return m[1] + "x" + strconv.Itoa(2*n)
	})
}

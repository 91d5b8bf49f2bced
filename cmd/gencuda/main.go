// Command gencuda writes the C side of the contract between gobn's CUDA
// launch layer and its kernels, from internal/cudaspec and the table of
// kernels package cuda holds (cuda.Kernels: the shared passes' and each
// kind's, beside its launch):
//
//   - kernels/cuda/params_gen.h: gobn_params, laid out as cudaspec.Params
//     (with an assertion of each field's offset, which cgo's C compiler and
//     NVRTC both check), for driver.h and batchnorm.cu;
//   - kernels/cuda/kernels_gen.cuh: the launch constants, the slots of each
//     finalize job's outputs by name, and GOBN_KERNELS, the list
//     batchnorm.cu defines its kernels from, one a kernel of the table;
//   - kernels/cuda/kinds_gen_test.go: each kind's kernels as the GPU check
//     calls them, from opdef and the kinds' kernels (GenerateCheck);
//   - kernels/kinds_gen_test.go: each kind's Go kernel by element type, as
//     the golden test calls it (GenerateKernelTable).
//
// Usage (from kernels/cuda, through go generate):
//
//	go run ../../cmd/gencuda
package main

import (
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"unicode"

	"github.com/gobn/gobn/internal/cudaspec"
	"github.com/gobn/gobn/internal/genfile"
	"github.com/gobn/gobn/kernels/cuda"
	"github.com/gobn/gobn/opdef"
)

func main() {
	genfile.Main("gencuda", func(dir string) (map[string][]byte, error) { return Generate(filepath.Join(dir, "..", "..")) })
}

// Generate returns the files, by name, for the repository at root.
func Generate(root string) (map[string][]byte, error) {
	params, err := paramsHeader(reflect.TypeFor[cudaspec.Params]())
	if err != nil {
		return nil, err
	}
	kernels, err := kernelsHeader(cuda.Kernels())
	if err != nil {
		return nil, err
	}
	check, err := GenerateCheck(opdef.All, root)
	if err != nil {
		return nil, err
	}
	table, err := GenerateKernelTable(opdef.All)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{"params_gen.h": params, "kernels_gen.cuh": kernels, "kinds_gen_test.go": check,
		"../kinds_gen_test.go": table}, nil
}

var header = genfile.Header("//", "gencuda", "internal/cudaspec and kernels/cuda's table") + "\n"

// paramsHeader returns params_gen.h for the struct type t.
func paramsHeader(t reflect.Type) ([]byte, error) {
	var b genfile.Buffer
	p := b.P
	b.WriteString(header)
	p(`// gobn_params is the one argument of every gobn CUDA kernel, passed by
// value: cudaspec.Params, which says what each field holds. The Go launch
// layer (kernels/cuda) passes that struct's bytes as they are; the
// assertions below hold the two layouts alike. Device addresses are
// integers (CUdeviceptr).
#ifndef GOBN_KERNELS_CUDA_PARAMS_GEN_H_
#define GOBN_KERNELS_CUDA_PARAMS_GEN_H_

typedef unsigned long long gobn_ptr;

typedef struct {
`)
	var asserts []string
	for i := range t.NumField() {
		f := t.Field(i)
		name := snake(f.Name)
		decl, err := cDecl(f.Type, name)
		if err != nil {
			return nil, fmt.Errorf("cudaspec.Params.%s: %w", f.Name, err)
		}
		p("  %s;\n", decl)
		asserts = append(asserts, fmt.Sprintf("GOBN_PARAMS_OFFSET(%s) == %d", name, f.Offset))
	}
	p("} gobn_params;\n\n")
	p("#include \"layout_assert.h\"\n\n")
	p("GOBN_PARAMS_ASSERT(sizeof(gobn_params) == %d);\n", t.Size())
	for _, a := range asserts {
		p("GOBN_PARAMS_ASSERT(%s);\n", a)
	}
	p("\n#endif  // GOBN_KERNELS_CUDA_PARAMS_GEN_H_\n")
	return b.Bytes(), nil
}

var ptrType = reflect.TypeFor[cudaspec.Ptr]()

// cDecl returns the C declaration of a field of Go type t.
func cDecl(t reflect.Type, name string) (string, error) {
	switch {
	case t == ptrType:
		return "gobn_ptr " + name, nil
	case t.Kind() == reflect.Array && t.Elem() == ptrType:
		return fmt.Sprintf("gobn_ptr %s[%d]", name, t.Len()), nil
	case t.Kind() == reflect.Int64:
		return "long long " + name, nil
	case t.Kind() == reflect.Int32:
		return "int " + name, nil
	case t.Kind() == reflect.Float32:
		return "float " + name, nil
	}
	return "", fmt.Errorf("no C type for %s", t)
}

// snake returns a Go field name in C's style: SumDyXmu as sum_dy_xmu, DX as
// dx.
func snake(name string) string {
	r := []rune(name)
	var b strings.Builder
	for i, c := range r {
		if i > 0 && unicode.IsUpper(c) && (unicode.IsLower(r[i-1]) || i+1 < len(r) && unicode.IsLower(r[i+1])) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

// kernelsHeader returns kernels_gen.cuh for ks.
func kernelsHeader(ks []cudaspec.Kernel) ([]byte, error) {
	var slots strings.Builder
	for _, s := range []struct {
		namespace, field, what string
		of                     func(cudaspec.Kernel) []string
		slots                  int
	}{
		{"out", "out", "outputs", func(k cudaspec.Kernel) []string { return k.Outputs }, len(cudaspec.Params{}.Out)},
		{"tensor", "tensors", "tensors", func(k cudaspec.Kernel) []string { return k.Tensors }, len(cudaspec.Params{}.Tensors)},
	} {
		enums, err := slotEnums(ks, s.of, s.what, s.slots)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&slots, "// Each job's %s by name, in the slots of gobn_params.%s\n// (cudaspec.Kernel): p.%s[%s::<job>::<name>].\nnamespace %s {\n%s}  // namespace %s\n\n",
			s.what, s.field, s.field, s.namespace, s.namespace, enums, s.namespace)
	}
	var b genfile.Buffer
	p := b.P
	b.WriteString(header)
	p(`// What batchnorm.cu shares with gobn's Go launch layer: the launch shapes,
// the slots of the kernels' outputs and of a kind's own tensors, and the
// kernels. batchnorm.cu includes this file before its code and defines each
// kernel of GOBN_KERNELS after it.
#ifndef GOBN_KERNELS_CUDA_KERNELS_GEN_CUH_
#define GOBN_KERNELS_CUDA_KERNELS_GEN_CUH_

constexpr int kThreads = %d;  // cudaspec.Threads
constexpr int kLanes = %d;  // cudaspec.FinalizeLanes
constexpr int kSplitLanes = %d;  // cudaspec.FinalizeSplitLanes

// The values the launch layer shares with the kernels (cuda.Constants).
%s
%s`, cudaspec.Threads, cudaspec.FinalizeLanes, cudaspec.FinalizeSplitLanes, constantLines(cuda.Constants()),
		slots.String())
	p(`// GOBN_KERNELS(K) is K(name, call) for every kernel of the table: its name,
// and the call its body makes (V the vector width, U the rows a step:
// cudaspec.Rows).
#define GOBN_KERNELS(K) \
`)
	for i, k := range ks {
		if strings.Contains(k.Body(), "{") {
			return nil, fmt.Errorf("%s: %q has a placeholder the kernel has no value for", k.Name(), k.Call)
		}
		end := " \\"
		if i == len(ks)-1 {
			end = ""
		}
		p("  K(%s, (%s))%s\n", k.Name(), k.Body(), end)
	}
	p("\n#endif  // GOBN_KERNELS_CUDA_KERNELS_GEN_CUH_\n")
	return b.Bytes(), nil
}

// slotEnums returns the C enums of the slots each job's kernels name (of:
// Outputs or Tensors), one a job: the kernels of a job name the same, and
// no more than gobn_params has slots.
func slotEnums(ks []cudaspec.Kernel, of func(cudaspec.Kernel) []string, what string, slots int) (string, error) {
	var b strings.Builder
	done := map[cudaspec.Job][]string{}
	for _, k := range ks {
		names := of(k)
		if len(names) == 0 {
			continue
		}
		if seen, ok := done[k.Job]; ok {
			if !slices.Equal(seen, names) {
				return "", fmt.Errorf("%s: the kernels of job %s name their %s differently", k.Name(), k.Job, what)
			}
			continue
		}
		if len(names) > slots {
			return "", fmt.Errorf("%s: %d %s, gobn_params has %d slots", k.Name(), len(names), what, slots)
		}
		done[k.Job] = names
		fmt.Fprintf(&b, "namespace %s {\nenum { %s };\n}\n", k.Job, strings.Join(names, ", "))
	}
	return b.String(), nil
}

// constantLines returns the C definitions of the constants, by name.
func constantLines(constants map[string]int32) string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(constants)) {
		fmt.Fprintf(&b, "constexpr int %s = %d;\n", name, constants[name])
	}
	return b.String()
}

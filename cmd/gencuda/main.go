// Command gencuda writes the C side of the contract between gobn's CUDA
// launch layer and its kernels from internal/cudaspec:
//
//   - kernels/cuda/params_gen.h: gobn_params, laid out as cudaspec.Params
//     (with an assertion of each field's offset, which cgo's C compiler and
//     NVRTC both check), for driver.h and batchnorm.cu;
//   - kernels/cuda/kernels_gen.cuh: the launch constants and GOBN_KERNELS,
//     the list batchnorm.cu defines its kernels from, one a row of
//     cudaspec.Kernels.
//
// Usage (from kernels/cuda, through go generate):
//
//	go run ../../cmd/gencuda
package main

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"unicode"

	"github.com/gobn/gobn/internal/cudaspec"
	"github.com/gobn/gobn/internal/genfile"
)

func main() {
	genfile.Main("gencuda", func(string) (map[string][]byte, error) { return Generate() })
}

// Generate returns the files, by name.
func Generate() (map[string][]byte, error) {
	params, err := paramsHeader(reflect.TypeFor[cudaspec.Params]())
	if err != nil {
		return nil, err
	}
	kernels, err := kernelsHeader(cudaspec.Kernels)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{"params_gen.h": params, "kernels_gen.cuh": kernels}, nil
}

var header = genfile.Header("//", "gencuda", "internal/cudaspec") + "\n"

// paramsHeader returns params_gen.h for the struct type t.
func paramsHeader(t reflect.Type) ([]byte, error) {
	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
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
	p(`// NVRTC (__CUDACC_RTC__) has no __builtin_offsetof, nor an offsetof that
// is a constant; its front end's __INTADDR__ gives the offset as one.
#if defined(__CUDACC_RTC__)
#define GOBN_PARAMS_OFFSET(f) __INTADDR__(&((gobn_params*)0)->f)
#else
#define GOBN_PARAMS_OFFSET(f) __builtin_offsetof(gobn_params, f)
#endif
#ifdef __cplusplus
#define GOBN_PARAMS_ASSERT(cond) static_assert(cond, #cond)
#else
#define GOBN_PARAMS_ASSERT(cond) _Static_assert(cond, #cond)
#endif
`)
	p("GOBN_PARAMS_ASSERT(sizeof(gobn_params) == %d);\n", t.Size())
	for _, a := range asserts {
		p("GOBN_PARAMS_ASSERT(%s);\n", a)
	}
	p("#undef GOBN_PARAMS_ASSERT\n#undef GOBN_PARAMS_OFFSET\n\n#endif  // GOBN_KERNELS_CUDA_PARAMS_GEN_H_\n")
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
	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	b.WriteString(header)
	p(`// What batchnorm.cu shares with gobn's Go launch layer: the launch shapes
// and the kernels. batchnorm.cu includes this file before its code and
// defines each kernel of GOBN_KERNELS after it.
#ifndef GOBN_KERNELS_CUDA_KERNELS_GEN_CUH_
#define GOBN_KERNELS_CUDA_KERNELS_GEN_CUH_

constexpr int kThreads = %d;  // cudaspec.Threads
constexpr int kLanes = %d;  // cudaspec.FinalizeLanes
constexpr int kSplitLanes = %d;  // cudaspec.FinalizeSplitLanes

// GOBN_KERNELS(K) is K(name, call) for every kernel of cudaspec.Kernels: its
// name, and the call its body makes (V the vector width, U the rows a step:
// cudaspec.Rows).
#define GOBN_KERNELS(K) \
`, cudaspec.Threads, cudaspec.FinalizeLanes, cudaspec.FinalizeSplitLanes)
	for i, k := range ks {
		c, err := call(k)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k.Name(), err)
		}
		end := " \\"
		if i == len(ks)-1 {
			end = ""
		}
		p("  K(%s, (%s))%s\n", k.Name(), c, end)
	}
	p("\n#endif  // GOBN_KERNELS_CUDA_KERNELS_GEN_CUH_\n")
	return b.Bytes(), nil
}

// call returns what kernel k's body calls: batchnorm.cu's device function
// for its job, with its element type, V and U.
func call(k cudaspec.Kernel) (string, error) {
	T := k.Elem.CType
	switch k.Job {
	case cudaspec.FinalizeTrain, cudaspec.FinalizeInfer, cudaspec.FinalizeReduce, cudaspec.FinalizeApply:
		return string(k.Job) + "(p)", nil
	case cudaspec.FinalizeGlobal:
		return fmt.Sprintf("global_finalize<%s>(p)", T), nil
	case cudaspec.Reduce, cudaspec.Sweep:
		mode := map[cudaspec.Job]string{cudaspec.Reduce: "kSums", cudaspec.Sweep: "kSweep"}[k.Job]
		return fmt.Sprintf("reduce_%s<%s, float, %d, %s, %d>(p)", k.Layout, T, k.V, mode, k.U), nil
	case cudaspec.Global:
		if k.Layout != cudaspec.ChannelsLast {
			return "", fmt.Errorf("global is channels last only")
		}
		return fmt.Sprintf("reduce_cl<%s, %s, %d, kGlobal, %d>(p)", T, T, k.V, k.U), nil
	case cudaspec.Apply:
		return fmt.Sprintf("apply_%s<%s, %d, %d>(p)", k.Layout, T, k.V, k.U), nil
	}
	return "", fmt.Errorf("no device function for job %q", k.Job)
}

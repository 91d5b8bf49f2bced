// Command gencapi writes capi's generated files from opdef:
// registry_gen.c, the C tables that the library's load-time constructor
// registers with TensorFlow and XLA, and the per-op C trampolines into Go;
// families_gen.go, from opdef and the kinds' kernels (packages kernels and
// kernels/cuda), the typed binders that call each op family's kernels
// (GenerateFamilies); and attrs_gen.go, the attrs a kernel reads
// (GenerateAttrs).
//
// Usage (from capi/, through go generate):
//
//	go run ../cmd/gencapi
package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gobn/gobn/internal/genfile"
	"github.com/gobn/gobn/opdef"
)

func main() {
	genfile.Main("gencapi", func(dir string) (map[string][]byte, error) { return Files(filepath.Join(dir, "..")) })
}

// Files returns capi's generated files, by name, for the repository at root
// (where GenerateFamilies reads the kernels' packages).
func Files(root string) (map[string][]byte, error) {
	families, err := GenerateFamilies(opdef.All, root)
	if err != nil {
		return nil, err
	}
	attrs, err := GenerateAttrs(opdef.All)
	return map[string][]byte{"registry_gen.c": Generate(opdef.All), "families_gen.go": families, "attrs_gen.go": attrs}, err
}

// Generate returns the C source of the registration tables for ops.
func Generate(ops []opdef.Op) []byte {
	var b genfile.Buffer
	p := b.P
	p("%s\n", genfile.Header("//", "gencapi", "opdef"))
	p("#include \"gobn.h\"\n\n")
	for i, op := range ops {
		p("// %s\n", op.Name)
		p("static const char* const op%d_inputs[] = {%s};\n", i, specList(op.Inputs))
		p("static const char* const op%d_outputs[] = {%s};\n", i, specList(op.Outputs))
		attrs := make([]string, len(op.Attrs))
		for j, a := range op.Attrs {
			attrs[j] = strconv.Quote(a.Spec())
		}
		p("static const char* const op%d_attrs[] = {%s};\n", i, strings.Join(attrs, ", "))
		p("static const gobn_binding op%d_kernels[] = {%s};\n", i, bindingList(op.Kernels))
		if len(op.GPUKernels) > 0 {
			p("static const gobn_binding op%d_gpu_kernels[] = {%s};\n", i, bindingList(op.GPUKernels))
		}
		if len(op.HostMemory) > 0 {
			names := make([]string, len(op.HostMemory))
			for j, n := range op.HostMemory {
				names[j] = strconv.Quote(n)
			}
			p("static const char* const op%d_host_memory[] = {%s};\n", i, strings.Join(names, ", "))
		}
		p("GOBN_TRAMPOLINES(%d)  // gobn.h\n", i)
		p("\n")
	}
	p("const gobn_op_spec gobn_ops[] = {\n")
	for i, op := range ops {
		gpu, host, stock := "NULL", "NULL", "NULL"
		if len(op.GPUKernels) > 0 {
			gpu = fmt.Sprintf("op%d_gpu_kernels", i)
		}
		if len(op.HostMemory) > 0 {
			host = fmt.Sprintf("op%d_host_memory", i)
		}
		if op.Stock != "" {
			stock = strconv.Quote(op.Stock)
		}
		creates := make([]string, 4)
		for flags := range creates {
			creates[flags] = "NULL"
			if !(flags&1 != 0 && len(op.GPUKernels) == 0 || flags&2 != 0 && op.Stock == "") {
				creates[flags] = fmt.Sprintf("op%d_create%d", i, flags)
			}
		}
		xlaGPU := "NULL"
		if len(op.GPUKernels) > 0 {
			xlaGPU = fmt.Sprintf("op%d_xla1", i)
		}
		p("    {%s, %s, %d, op%d_inputs, %d, op%d_outputs, %d, op%d_attrs, %d, op%d_kernels, %d, %s, %d, %s, {%s}, op%d_shape, {op%d_xla0, %s}},\n",
			strconv.Quote(op.Name), stock, len(op.Inputs), i, len(op.Outputs), i, len(op.Attrs), i, len(op.Kernels), i,
			len(op.GPUKernels), gpu, len(op.HostMemory), host, strings.Join(creates, ", "), i, i, xlaGPU)
	}
	p("};\n\nconst int gobn_num_ops = %d;\n", len(ops))
	return b.Bytes()
}

// bindingList returns the C initializers of bindings: {T, U or -1}.
func bindingList(bindings []opdef.TypeBinding) string {
	out := make([]string, len(bindings))
	for j, k := range bindings {
		u := -1
		if d, ok := k["U"]; ok {
			u = int(d)
		}
		out[j] = fmt.Sprintf("{%d, %d}", int(k["T"]), u)
	}
	return strings.Join(out, ", ")
}

func specList(args []opdef.Arg) string {
	specs := make([]string, len(args))
	for i, a := range args {
		specs[i] = strconv.Quote(a.Spec())
	}
	return strings.Join(specs, ", ")
}

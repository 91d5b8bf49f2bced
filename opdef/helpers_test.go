package opdef_test

import "github.com/gobn/gobn/opdef"

// byName returns the op registered as name, and whether there is one.
func byName(name string) (opdef.Op, bool) {
	for _, op := range opdef.All {
		if op.Name == name {
			return op, true
		}
	}
	return opdef.Op{}, false
}

// typeAttrs returns the names of op's type attrs bound by its kernels, in a
// fixed order ("T", then "U").
func typeAttrs(op opdef.Op) []string {
	var names []string
	for _, name := range []string{"T", "U"} {
		if _, ok := op.Kernels[0][name]; ok {
			names = append(names, name)
		}
	}
	return names
}

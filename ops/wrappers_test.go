package ops_test

import (
	"reflect"
	"testing"

	tf "github.com/galeone/tensorflow/tensorflow/go"
	"github.com/galeone/tensorflow/tensorflow/go/op"
	"github.com/gobn/gobn/opdef"
	"github.com/stretchr/testify/require"
)

// wrapper is one generated wrapper of ops_gen.go beside the bindings' stock
// wrapper (nil for an op stock TensorFlow lacks), with their option
// functions by attr name: the rows of wrappers (wrappers_gen_test.go,
// generated from opdef, as Go cannot list a package's functions).
type wrapper struct {
	gobn, stock any
	options     map[string][2]any
}

// TestWrappersHaveTheStockSignatures checks that moving to gobn is an import
// change: each wrapper takes and returns what the bindings' stock wrapper
// does, and has the same option functions with the same value types.
func TestWrappersHaveTheStockSignatures(t *testing.T) {
	for _, o := range opdef.All {
		c := wrappers[o.Name]
		if c.stock == nil {
			continue
		}
		t.Run(o.Stock, func(t *testing.T) {
			gobn, stock := reflect.TypeOf(c.gobn), reflect.TypeOf(c.stock)
			require.Equal(t, stock.NumIn(), gobn.NumIn())
			require.Equal(t, stock.IsVariadic(), gobn.IsVariadic())
			for i := range stock.NumIn() {
				if stock.IsVariadic() && i == stock.NumIn()-1 {
					// ...op.XAttr against ...ops.XAttr: both func(optionalAttr).
					require.Equal(t, stock.In(i).Elem().Kind(), gobn.In(i).Elem().Kind())
					require.Equal(t, stock.In(i).Elem().Name(), gobn.In(i).Elem().Name())
					continue
				}
				require.Equal(t, stock.In(i), gobn.In(i), "parameter %d", i)
			}
			require.Equal(t, stock.NumOut(), gobn.NumOut())
			for i := range stock.NumOut() {
				require.Equal(t, stock.Out(i), gobn.Out(i), "result %d", i)
			}
			for name, fns := range c.options {
				g, s := reflect.TypeOf(fns[0]), reflect.TypeOf(fns[1])
				require.Equal(t, s.In(0), g.In(0), "option %s", name)
			}
		})
	}
}

// TestWrappersBuildTheirOps checks each generated wrapper against opdef: it
// adds the op it names, its inputs in order, its required attrs and its
// options set as given (each away from its default, so that an option that
// sets nothing fails), and returns the op's outputs in order. The parity
// tests build ops from opdef directly, so this is what runs the wrappers.
func TestWrappersBuildTheirOps(t *testing.T) {
	for _, o := range opdef.All {
		t.Run(o.Name, func(t *testing.T) {
			w, ok := wrappers[o.Name]
			require.True(t, ok, "no wrapper of %s listed in wrappers", o.Name)
			b := o.Kernels[len(o.Kernels)-1] // of the mixed ops, T is not U there
			s := op.NewScope()
			args := []reflect.Value{reflect.ValueOf(s)}
			var inputs []tf.Output
			for _, in := range o.Inputs {
				p := op.Placeholder(s.SubScope(in.Name), argType(in.Type, b))
				inputs = append(inputs, p)
				args = append(args, reflect.ValueOf(p))
			}
			want := map[string]any{}
			for name, dtype := range b {
				want[name] = tf.DataType(dtype)
			}
			var options []reflect.Value
			for _, a := range o.Attrs {
				if a.Kind == opdef.TypeAttr {
					continue
				}
				v := reflect.ValueOf(notDefault(a))
				want[a.Name] = v.Interface()
				if a.Default == nil {
					args = append(args, v)
					continue
				}
				set, ok := w.options[a.Name]
				require.True(t, ok, "no option of attr %s listed", a.Name)
				options = append(options, reflect.ValueOf(set[0]).Call([]reflect.Value{v})[0])
			}
			require.Len(t, w.options, len(options), "options listed for attrs that %s does not have", o.Name)

			outs := reflect.ValueOf(w.gobn).Call(append(args, options...))
			require.NoError(t, s.Err())
			require.Len(t, outs, len(o.Outputs))
			operation := outs[0].Interface().(tf.Output).Op
			require.Equal(t, o.Name, operation.Type())
			for i, out := range outs {
				got := []tf.Output{}
				if o.Outputs[i].Number != "" { // a list, of as many as notDefault's count: one
					got = out.Interface().([]tf.Output)
					require.Len(t, got, 1, "output %s", o.Outputs[i].Name)
				} else {
					got = append(got, out.Interface().(tf.Output))
				}
				require.Equal(t, operation.Name(), got[0].Op.Name(), "output %d", i)
				require.Equal(t, i, got[0].Index, "output %s", o.Outputs[i].Name)
			}
			require.Equal(t, len(o.Inputs), operation.NumInputs())
			for i, in := range inputs {
				consumers := in.Consumers()
				require.Len(t, consumers, 1, "input %s", o.Inputs[i].Name)
				require.Equal(t, operation.Name(), consumers[0].Op.Name(), "input %s", o.Inputs[i].Name)
				require.Equal(t, i, consumers[0].Index, "input %s", o.Inputs[i].Name)
			}
			for name, v := range want {
				got, err := operation.Attr(name)
				require.NoError(t, err, "attr %s", name)
				require.Equal(t, v, got, "attr %s", name)
			}
		})
	}
}

// notDefault returns a value of attr a (not a type attr) other than its
// default: an int attr's the next (a list's count: 1), a string attr's
// another it allows or its kernels accept.
func notDefault(a opdef.Attr) any {
	switch a.Kind {
	case opdef.FloatAttr:
		return float32(0.25)
	case opdef.BoolAttr:
		return a.Default != true
	case opdef.IntAttr:
		if d, ok := a.Default.(int64); ok {
			return d + 1
		}
	case opdef.StringAttr:
		for _, v := range append(a.Values, a.Accepts...) {
			if v != a.Default {
				return v
			}
		}
	}
	panic("no other value of attr " + a.Name)
}

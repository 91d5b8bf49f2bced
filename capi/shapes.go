package main

// #include "gobn.h"
// static void gobn_status_ok(TF_Status* status) { TF_SetStatus(status, TF_OK, ""); }
import "C"

import "github.com/gobn/gobn/opdef"

// shapeContext is the shape-inference context of one op being added to a graph.
type shapeContext struct {
	ctx    *C.TF_ShapeInferenceContext
	status *C.TF_Status
	// handles are freed by release.
	handles []*C.TF_ShapeHandle
}

func (s *shapeContext) release() {
	for _, h := range s.handles {
		C.TF_DeleteShapeHandle(h)
	}
}

func (s *shapeContext) own(h *C.TF_ShapeHandle) *C.TF_ShapeHandle {
	s.handles = append(s.handles, h)
	return h
}

// input returns the shape of input i, checked to have a rank in [minRank, maxRank]
// when its rank is known (maxRank < 0: no check).
func (s *shapeContext) input(i, minRank, maxRank int) (*C.TF_ShapeHandle, error) {
	h := s.own(C.TF_NewShapeHandle())
	C.TF_ShapeInferenceContextGetInput(s.ctx, C.int(i), h, s.status)
	if err := statusError(s.status); err != nil {
		return nil, err
	}
	if maxRank < 0 {
		return h, nil
	}
	checked := s.own(C.TF_NewShapeHandle())
	C.TF_ShapeInferenceContextWithRankAtLeast(s.ctx, h, C.int64_t(minRank), checked, s.status)
	if err := statusError(s.status); err != nil {
		return nil, err
	}
	C.TF_ShapeInferenceContextWithRankAtMost(s.ctx, checked, C.int64_t(maxRank), checked, s.status)
	return checked, statusError(s.status)
}

// dims returns the known dims of h (-1 for unknown ones), or nil when its rank
// is unknown.
func (s *shapeContext) dims(h *C.TF_ShapeHandle) []int64 {
	if C.TF_ShapeInferenceContextRankKnown(s.ctx, h) == 0 {
		return nil
	}
	dims := make([]int64, int(C.TF_ShapeInferenceContextRank(s.ctx, h)))
	d := C.TF_NewDimensionHandle()
	defer C.TF_DeleteDimensionHandle(d)
	for i := range dims {
		C.TF_ShapeInferenceContextDim(s.ctx, h, C.int64_t(i), d)
		dims[i] = -1
		if C.TF_DimensionHandleValueKnown(d) != 0 {
			dims[i] = int64(C.TF_DimensionHandleValue(d))
		}
	}
	return dims
}

func (s *shapeContext) emptyVector() *C.TF_ShapeHandle {
	return s.own(C.TF_ShapeInferenceContextVectorFromSize(s.ctx, 0))
}

func (s *shapeContext) scalar() *C.TF_ShapeHandle {
	return s.own(C.TF_ShapeInferenceContextScalar(s.ctx))
}

func (s *shapeContext) setOutput(i int, h *C.TF_ShapeHandle) error {
	C.TF_ShapeInferenceContextSetOutput(s.ctx, C.int(i), h, s.status)
	return statusError(s.status)
}

// setList gives the tensor of list output i (opdef.Arg.Number), the last,
// shape h where the list has one. The C API reads no int attr here, nor
// counts the outputs: a list of none has no index, which TensorFlow
// refuses ("output index out of range"), and the status is reset.
func (s *shapeContext) setList(i int, h *C.TF_ShapeHandle) {
	if s.setOutput(i, h) != nil {
		C.gobn_status_ok(s.status)
	}
}

// inferShapes gives every output its static shape: x_backprop (dx) takes x's
// (t's) shape, the 1-D outputs take the shape of the per-channel inputs, the
// placeholders [0], the count of BatchNormGradReduce [], a list output
// (opdef.Arg.Number) each of its tensors, where it has one. It also rejects
// inputs whose known ranks or dims already break the op's rules.
func inferShapes(op opdef.Op, s *shapeContext) error {
	handles := make([]*C.TF_ShapeHandle, len(op.Inputs))
	dims := make([][]int64, len(op.Inputs))
	for i, in := range op.Inputs {
		minRank, maxRank := 0, -1
		if len(in.Ranks) > 0 {
			minRank, maxRank = in.Ranks[0], in.Ranks[len(in.Ranks)-1]
		}
		h, err := s.input(i, minRank, maxRank)
		if err != nil {
			return err
		}
		handles[i], dims[i] = h, s.dims(h)
	}
	if err := op.CheckStaticShapes(dims); err != nil {
		return err
	}
	for i, out := range op.Outputs {
		h := s.emptyVector()
		switch {
		case out.Shape.Scalar:
			h = s.scalar()
		case !out.Shape.Empty:
			h = handles[out.Shape.Like]
		}
		if out.Number != "" {
			s.setList(i, h)
			continue
		}
		if err := s.setOutput(i, h); err != nil {
			return err
		}
	}
	return nil
}

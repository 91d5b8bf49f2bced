//go:build !cuda

package cuda

import "errors"

// Built reports whether the library carries the CUDA path.
const Built = false

var errNotBuilt = errors.New("gobn: this library was built without the CUDA path (make GOBN_CUDA=0); rebuild with make to run on a GPU")

// Available returns the reason a GPU kernel cannot run: the CUDA path was
// not built.
func Available() error { return errNotBuilt }

func execute(p plan, pl Placement, anchor Ptr) error {
	if len(p.launches) == 0 {
		return nil
	}
	return errNotBuilt
}

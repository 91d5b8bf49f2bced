//go:build !cuda

package cudatest

import "errors"

// Device is a GPU's primary context; without the cuda tag there is none.
type Device struct{}

// Open returns an error: the package was built without the cuda tag.
func Open(ordinal int) (*Device, error) {
	return nil, errors.New("cudatest: built without the cuda tag")
}

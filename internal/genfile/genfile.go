// Package genfile is what the repository's generators (internal/gencapi,
// gencuda, genops, genpy, gensimd) share: the check, run by each one's test,
// that a generated file on disk is what the generator writes now.
package genfile

import (
	"bytes"
	"fmt"
	"os"
)

// Current returns nil if the file at path holds want, and otherwise an error
// that says to run regenerate.
func Current(path string, want []byte, regenerate string) error {
	got, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("%s is stale: run `%s`", path, regenerate)
	}
	return nil
}

package genfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x_gen.go")
	if err := os.WriteFile(path, []byte("package x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Current(path, []byte("package x\n"), "go generate"); err != nil {
		t.Errorf("same contents: %v", err)
	}
	err := Current(path, []byte("package y\n"), "go generate ./x")
	if err == nil || err.Error() != path+" is stale: run `go generate ./x`" {
		t.Errorf("other contents: %v", err)
	}
	if Current(filepath.Join(t.TempDir(), "absent.go"), nil, "go generate") == nil {
		t.Error("a missing file passed")
	}
}

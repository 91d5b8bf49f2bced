package ops_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestExamplesStandAlone: users copy the examples, so an example imports
// gobn's public packages only, never one of its internal ones.
func TestExamplesStandAlone(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "../examples/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/gobn/gobn/internal") {
			t.Errorf("an example depends on %s", pkg)
		}
	}
}

package ops_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadmeProgram follows the README's Go section as a user would: its
// program, copied out of README.md, in a new module in a directory outside
// the checkout, built and run by the section's commands as they stand, with
// GOBN the checkout and none of the build's own environment (cgo flags,
// GOBN_LIBRARY, make's variables). The program must print gobn's kernel
// calls: one of Gobn>FusedBatchNormGradV3.
func TestReadmeProgram(t *testing.T) {
	checkout, err := filepath.Abs("..")
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join(checkout, "README.md"))
	require.NoError(t, err)
	section := string(readme)
	start := strings.Index(section, "\n## Go with tfgo\n")
	require.GreaterOrEqual(t, start, 0, "README.md has no section Go with tfgo")
	section = section[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	commands, program := fenced(t, section, "sh"), fenced(t, section, "go")

	dir := t.TempDir()
	require.False(t, strings.HasPrefix(dir, checkout+string(filepath.Separator)), "the module must lie outside the checkout")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o644))
	env := []string{"GOBN=" + checkout}
	for _, kv := range os.Environ() {
		switch name, _, _ := strings.Cut(kv, "="); name {
		case "CGO_ENABLED", "CGO_CFLAGS", "CGO_LDFLAGS", "GOBN_LIBRARY", "GOFLAGS", "GOEXPERIMENT",
			"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "GOBN":
		default:
			env = append(env, kv)
		}
	}
	cmd := exec.Command("sh", "-ec", commands)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the README's commands:\n%s\n%s", commands, out)
	require.Regexp(t, regexp.MustCompile(`map\[Gobn>FusedBatchNormGradV3:map\[(CPU|GPU):1\]\] <nil>`), string(out))
}

// fenced returns the one code block of language lang in markdown.
func fenced(t *testing.T, markdown, lang string) string {
	t.Helper()
	blocks := regexp.MustCompile("(?ms)^```"+lang+"\n(.*?)^```\n").FindAllStringSubmatch(markdown, -1)
	require.Len(t, blocks, 1, "```%s blocks", lang)
	return blocks[0][1]
}

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func installedProc(t *testing.T) []byte {
	t.Helper()
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	require.NoError(t, err)
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(goroot)), "src", "runtime", "proc.go"))
	require.NoError(t, err)
	return src
}

// The rule applies to the Go that builds the library, and changes exactly
// one line, inside func retake, keeping every line number. The rule was
// written against Go 1.26's retake (go.mod's version): on Go 1.26 this must
// pass; another release says so as a skip (and make as a warning), since
// whether the line is still there is for a person to check.
func TestApplyToInstalledGo(t *testing.T) {
	if v := runtime.Version(); !strings.HasPrefix(v, "go1.26.") && !strings.HasPrefix(v, "go1.26-") && v != "go1.26" {
		t.Skipf("%s: the sysmon rule was written against Go 1.26's runtime; check that it fits this one", v)
	}
	src := installedProc(t)
	out, err := Apply(src)
	require.NoError(t, err)
	before, after := strings.Split(string(src), "\n"), strings.Split(string(out), "\n")
	require.Len(t, after, len(before))
	var changed []int
	for i := range before {
		if before[i] != after[i] {
			changed = append(changed, i)
		}
	}
	require.Len(t, changed, 1)
	line := changed[0]
	require.Equal(t, strings.TrimSuffix(staleTick, "\n"), strings.TrimLeft(before[line], "\t"))
	require.Equal(t, strings.TrimSuffix(withRule, "\n"), strings.TrimLeft(after[line], "\t"))
	require.Equal(t, before[line][:len(before[line])-len(strings.TrimLeft(before[line], "\t"))],
		after[line][:len(after[line])-len(strings.TrimLeft(after[line], "\t"))], "indentation")
	retake := strings.Index(string(src), "\nfunc retake(now int64) uint32 {\n")
	require.Greater(t, retake, 0)
	startLine := strings.Count(string(src[:retake]), "\n") + 1
	require.Greater(t, line, startLine)
	endLine := startLine + strings.Count(string(src[retake+1:]), "\n")
	if end := strings.Index(string(src[retake+1:]), "\n}\n"); end >= 0 {
		endLine = startLine + strings.Count(string(src[retake+1:retake+1+end]), "\n")
	}
	require.Less(t, line, endLine, "the changed line is inside func retake")
}

func TestApplyRejects(t *testing.T) {
	retake := func(body string) []byte {
		return []byte("package runtime\n\nfunc retake(now int64) uint32 {\n" + body + "}\n\nfunc other() {\n\t" + staleTick + "}\n")
	}
	for name, src := range map[string][]byte{
		"no retake":         []byte("package runtime\n\nfunc other() {\n\t" + staleTick + "}\n"),
		"line elsewhere":    retake("\treturn 0\n"),
		"line twice":        retake("\t" + staleTick + "\t" + staleTick),
		"already has rule":  retake("\t" + withRule),
		"retake has no end": []byte("package runtime\n\nfunc retake(now int64) uint32 {\n\t" + staleTick),
	} {
		_, err := Apply(src)
		require.Error(t, err, name)
	}
	out, err := Apply(retake("\tif a {\n\t" + staleTick + "\t}\n"))
	require.NoError(t, err)
	require.Equal(t, 1, bytes.Count(out, []byte(withRule)))
	require.Equal(t, 1, bytes.Count(out, []byte(staleTick)), "the line outside retake stays")
}

// run writes the overlay for go build, and with -off, or for a Go without the
// line, an empty one; a second run with the same result rewrites nothing.
func TestRunWritesOverlay(t *testing.T) {
	goroot := t.TempDir()
	procDir := filepath.Join(goroot, "src", "runtime")
	require.NoError(t, os.MkdirAll(procDir, 0o755))
	procPath := filepath.Join(procDir, "proc.go")
	withLine := "package runtime\n\nfunc retake(now int64) uint32 {\n\tif a {\n\t" + staleTick + "\t}\n\treturn 0\n}\n"
	require.NoError(t, os.WriteFile(procPath, []byte(withLine), 0o644))
	out := t.TempDir()

	require.NoError(t, run(goroot, out, false))
	overlay, err := os.ReadFile(filepath.Join(out, "overlay.json"))
	require.NoError(t, err)
	require.Contains(t, string(overlay), `"`+procPath+`": "`+filepath.Join(out, "proc.go.overlay")+`"`)
	rule, err := os.ReadFile(filepath.Join(out, "rule"))
	require.NoError(t, err)
	require.Equal(t, Rule+"\n", string(rule))
	info, err := os.Stat(filepath.Join(out, "overlay.json"))
	require.NoError(t, err)
	require.NoError(t, run(goroot, out, false))
	again, err := os.Stat(filepath.Join(out, "overlay.json"))
	require.NoError(t, err)
	require.Equal(t, info.ModTime(), again.ModTime(), "unchanged overlay rewritten")

	for name, off := range map[string]bool{"off": true, "another Go": false} {
		if !off {
			require.NoError(t, os.WriteFile(procPath, []byte("package runtime\n"), 0o644))
		}
		require.NoError(t, run(goroot, out, off), name)
		overlay, err = os.ReadFile(filepath.Join(out, "overlay.json"))
		require.NoError(t, err)
		require.JSONEq(t, `{"Replace": {}}`, string(overlay), name)
		rule, err = os.ReadFile(filepath.Join(out, "rule"))
		require.NoError(t, err)
		require.Equal(t, "none\n", string(rule), name)
	}
}

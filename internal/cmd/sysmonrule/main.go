// Command sysmonrule writes the build overlay that gives libgobn.so's Go
// runtime one scheduling rule, from golang/go#60693 ("runtime: avoid
// unnecessary sysmon preemptions"): Go's monitor thread, sysmon, preempts a
// goroutine that has held its P for 10 ms only when no P is idle. With an idle
// P, the scheduler's work conservation means nothing runnable waits for it.
//
// Why gobn wants it. Every TensorFlow thread that calls a gobn kernel enters
// Go through a cgo callback and keeps its P between calls. The callback's
// goroutine never passes through the scheduler, so the P's scheduling tick
// never advances; after 10 ms sysmon counts that as a goroutine running too
// long, preempts it or takes the P back, and then polls at its shortest
// interval, 20 µs. On a 2-core machine that costs a lone call of a small
// tensor 1-3 % against stock TensorFlow, about 2.7 voluntary context switches
// a call more than stock (README, Performance). Go 1.26 has no setting for it.
//
// The rule only withholds preemptions, which Go needs for fairness between
// goroutines and never for correctness: stopping the world and the garbage
// collector preempt goroutines themselves. With every P busy, sysmon preempts
// as before.
//
// The overlay replaces $GOROOT/src/runtime/proc.go with a copy that differs
// in one line of func retake, and keeps every line number. When the installed
// Go's retake does not have the line (another Go version), or -off is given,
// the overlay is empty and the library is built with the stock runtime, with
// a warning. Either way -out gets three files: proc.go.overlay (the copy,
// when the rule applies; not named .go, so that go vet ./... and go test ./...
// do not take the build directory for a package), overlay.json for go build
// -overlay, and rule, one line for go build -ldflags -X that names the rule
// or says "none". Files whose content is unchanged are not rewritten, so make
// rebuilds nothing.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

// Rule names the rule in the library (capi's goRuntimeRule).
const Rule = "golang/go#60693"

// The line of func retake in Go 1.26's runtime/proc.go that preempts a P's
// goroutine whose scheduling tick has not moved for forcePreemptNS, and what
// it becomes. Both have the same tab indentation in the source.
const (
	staleTick = "} else if pd.schedwhen+forcePreemptNS <= now {\n"
	withRule  = "} else if pd.schedwhen+forcePreemptNS <= now && sched.npidle.Load() == 0 { // gobn: " + Rule + "\n"
)

// Apply returns runtime/proc.go's source with the rule: staleTick replaced by
// withRule inside func retake. It fails unless retake holds staleTick exactly
// once (in Go 1.26 it does).
func Apply(src []byte) ([]byte, error) {
	start := bytes.Index(src, []byte("\nfunc retake(now int64) uint32 {\n"))
	if start < 0 {
		return nil, errors.New("runtime/proc.go has no func retake(now int64) uint32")
	}
	end := bytes.Index(src[start+1:], []byte("\n}\n"))
	if end < 0 {
		return nil, errors.New("func retake has no end")
	}
	body := src[start : start+1+end+1] // through the newline before the closing brace
	if n := bytes.Count(body, []byte(staleTick)); n != 1 {
		return nil, fmt.Errorf("func retake has the stale-tick preemption line %d times, want once", n)
	}
	i := start + bytes.Index(body, []byte(staleTick))
	out := make([]byte, 0, len(src)+len(withRule)-len(staleTick))
	out = append(out, src[:i]...)
	out = append(out, withRule...)
	return append(out, src[i+len(staleTick):]...), nil
}

func main() {
	goroot := flag.String("goroot", "", "the GOROOT that go build uses (go env GOROOT)")
	out := flag.String("out", "", "directory for proc.go.overlay, overlay.json and rule")
	off := flag.Bool("off", false, "write an empty overlay: build with the stock runtime")
	flag.Parse()
	if *goroot == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: sysmonrule -goroot DIR -out DIR [-off]")
		os.Exit(2)
	}
	if err := run(*goroot, *out, *off); err != nil {
		fmt.Fprintln(os.Stderr, "sysmonrule:", err)
		os.Exit(1)
	}
}

func run(goroot, out string, off bool) error {
	out, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	procPath := filepath.Join(goroot, "src", "runtime", "proc.go")
	replace := map[string]string{}
	rule := "none"
	if off {
		fmt.Fprintln(os.Stderr, "gobn: building with the stock Go runtime (GO_RUNTIME=stock)")
	} else if src, err := os.ReadFile(procPath); err != nil {
		return err
	} else if patched, err := Apply(src); err != nil {
		fmt.Fprintf(os.Stderr, "gobn: WARNING: %s: %v; building with the stock Go runtime, "+
			"without the sysmon rule of %s (README, Performance)\n", procPath, err, Rule)
	} else {
		copyPath := filepath.Join(out, "proc.go.overlay")
		if err := writeIfChanged(copyPath, patched); err != nil {
			return err
		}
		replace[procPath] = copyPath
		rule = Rule
	}
	overlay, err := json.MarshalIndent(map[string]any{"Replace": replace}, "", "\t")
	if err != nil {
		return err
	}
	if err := writeIfChanged(filepath.Join(out, "overlay.json"), append(overlay, '\n')); err != nil {
		return err
	}
	return writeIfChanged(filepath.Join(out, "rule"), []byte(rule+"\n"))
}

// writeIfChanged writes data to path unless path already holds it, so that
// its modification time, which make compares, moves only with its content.
func writeIfChanged(path string, data []byte) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

//go:build race

package kernels

// raceBuild reports a -race build (race_on_test.go has it for the external
// tests).
const raceBuild = true

//go:build !race

package kernels

// raceBuild reports a -race build (race_off_test.go has it for the external
// tests).
const raceBuild = false

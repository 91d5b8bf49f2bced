//go:build race

package main

// raceEnabled reports a -race build, whose sync.Pool drops a share of what
// it is given on purpose.
const raceEnabled = true

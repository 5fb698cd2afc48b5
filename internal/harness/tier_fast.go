//go:build !processes

package harness

// Processes reports whether this binary was built with Tag: false here, so
// Require skips the tests that start programs.
const Processes = false

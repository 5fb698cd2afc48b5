//go:build processes

package harness

// Processes reports whether this binary was built with Tag: true here, so
// the tests that start programs run, and fail when a program is missing.
const Processes = true

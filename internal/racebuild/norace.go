//go:build !race

// Package racebuild tells tests whether the race detector is on.
package racebuild

// Enabled reports a -race build, where sync.Pool drops items at random, so
// that allocation counts relying on a pool mean nothing there.
const Enabled = false

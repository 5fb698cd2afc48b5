// Package racebuild tells tests whether the race detector is on.

//go:build race

package racebuild

// Enabled reports a -race build, where sync.Pool drops items at random, so
// that allocation counts relying on a pool mean nothing there.
const Enabled = true

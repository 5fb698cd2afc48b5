//go:build race

package rules

// raceEnabled reports a -race build, where sync.Pool drops items at random
// and so allocation counts that rely on it are meaningless.
const raceEnabled = true

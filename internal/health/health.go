// Package health holds the limit store's health, which internal/store
// reports and the listeners and the live page read.
package health

// Store is the state of the limit store.
type Store struct {
	Name    string // the store, e.g. "redis"
	Healthy bool   // calls reach the store
	// Reached reports whether the store has answered at least once since
	// start; once true it stays true.
	Reached bool
	Detail  string // e.g. "breaker closed"
}

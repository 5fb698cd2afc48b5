// Package health holds what the limit store says of its health: the type
// internal/store produces and the listeners (/rlconfig, readiness) and
// the live page read, in a package of its own so that neither side
// imports the other.
package health

// Store is the state of the limit store, for /rlconfig, readiness and the
// live page.
type Store struct {
	// Name is the store, e.g. "redis".
	Name string
	// Healthy reports whether calls reach the store.
	Healthy bool
	// Reached reports whether the store has answered at least once since
	// start (a probe or a call). Once true it stays true.
	Reached bool
	// Detail says more, e.g. "breaker closed".
	Detail string
}

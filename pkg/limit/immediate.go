package limit

import "time"

// Immediate is implemented by a Limiter whose Evaluate never waits for I/O
// or for a slow peer: it decides in the calling goroutine, holding locks no
// longer than a decision takes. A deadline on such a call could not fire
// before it returns, so a caller may skip setting one (a timer and a
// context per call). Evaluate still honours a ctx that is already done.
type Immediate interface {
	Limiter
	// EvaluatesImmediately reports whether Evaluate never waits; it is
	// the same for the whole life of the Limiter.
	EvaluatesImmediately() bool
}

// EvaluatesImmediately implements Immediate: Memory decides in process
// memory, under shard locks held for one decision.
func (m *Memory) EvaluatesImmediately() bool { return true }

// EvaluatesImmediately reports whether l implements Immediate and says
// that its Evaluate never waits.
func EvaluatesImmediately(l Limiter) bool {
	i, ok := l.(Immediate)
	return ok && i.EvaluatesImmediately()
}

// Bounded is implemented by a Limiter that ends every Evaluate call within
// a fixed time of its start by itself, whatever its context's deadline: a
// call still undecided then returns an error wrapping
// context.DeadlineExceeded. A caller whose own deadline would be no sooner
// may skip setting one, and with it a timer and a context per call.
type Bounded interface {
	Limiter
	// EvaluateBound returns how long an Evaluate call lasts at most, or 0
	// when the Limiter sets no bound of its own; it is the same for the
	// whole life of the Limiter.
	EvaluateBound() time.Duration
}

// BoundOf returns the bound l sets on its Evaluate calls by itself
// (Bounded), or 0 when it sets none.
func BoundOf(l Limiter) time.Duration {
	if b, ok := l.(Bounded); ok {
		return b.EvaluateBound()
	}
	return 0
}

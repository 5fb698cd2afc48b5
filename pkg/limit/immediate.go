package limit

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

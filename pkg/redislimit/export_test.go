package redislimit

import "time"

// SetNow makes l pass now() to the script instead of letting it read Redis
// TIME, so tests reach exact boundaries. Production never sets it.
func (l *Limiter) SetNow(now func() time.Time) { l.now = now }

// ScriptSource is the assembled script, for tests that load it themselves.
func ScriptSource() string { return evaluateSource }

// CRC16 is the Cluster slot checksum, for its test vectors.
var CRC16 = crc16

// FunctionName is Script's function, for tests that call it with FCALL.
func FunctionName() string { return functionName }

// LibrarySource is the assembled Redis Functions library, for tests that
// load it themselves.
var LibrarySource = func() string { return evaluateLibrary }

// Queued is the number of calls waiting in l's batcher for a round trip,
// for tests that must know calls queued before they end one.
func (l *Limiter) Queued() int {
	b := l.batcher
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// InFlight is the number of round trips l's batcher has outstanding, for
// tests that must know a round trip's sender has freed it: a caller is
// answered before its sender takes the next batch or frees the round trip.
func (l *Limiter) InFlight() int {
	b := l.batcher
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inFlight
}

// The breaker and key internals, under the names the tests use.
type (
	BreakerOptions = breakerOptions
	BreakerState   = breakerState
)

const (
	BreakerClosed            = breakerClosed
	BreakerOpen              = breakerOpen
	DefaultBreakerFailures   = defaultBreakerFailures
	DefaultBreakerMinBackoff = defaultBreakerMinBackoff
	DefaultBreakerMaxBackoff = defaultBreakerMaxBackoff
)

var (
	ErrCircuitOpen = errCircuitOpen
	AppendKey      = appendKey
	Slot           = slot
	PerSecond      = perSecondRoute
)

// WithBreaker returns o with its circuit breaker tuned by b.
func WithBreaker(o Options, b BreakerOptions) Options {
	o.breaker = b
	return o
}

// BreakerState returns the state of the home node's circuit breaker.
func (l *Limiter) BreakerState() BreakerState { return l.nodes.home.breaker.stateOf() }

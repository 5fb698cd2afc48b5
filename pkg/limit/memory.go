package limit

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrInvalidSpec is wrapped by the error Evaluate returns for a Hit whose
// Spec does not pass Spec.Validate. The error names the hit's index.
var ErrInvalidSpec = errors.New("invalid limit spec")

// MemoryOptions configures a Memory. The zero value is usable.
type MemoryOptions struct {
	// MaxEntries bounds the number of counters held; 0 means 1<<20.
	MaxEntries int
	// Now is the clock; nil means time.Now. Tests inject a fake clock.
	Now func() time.Time
}

// Memory evaluates limits in process memory: the store of a server without
// Redis, and the oracle the Redis scripts are tested against. It is safe for
// concurrent use.
type Memory struct {
	opts MemoryOptions
}

// NewMemory returns an empty Memory.
func NewMemory(opts MemoryOptions) *Memory {
	return &Memory{opts: opts}
}

// Evaluate decides hits together at one instant and writes decisions[i] for
// hits[i]. len(decisions) must equal len(hits).
func (m *Memory) Evaluate(ctx context.Context, hits []Hit, decisions []Decision) error {
	if len(decisions) != len(hits) {
		return fmt.Errorf("limit: %d decisions for %d hits", len(decisions), len(hits))
	}
	return errors.New("limit: Memory.Evaluate is being implemented")
}

// Len returns the number of counters held.
func (m *Memory) Len() int { return 0 }

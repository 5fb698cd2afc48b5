package store

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/pkg/redislimit"
)

// The watch probes the store every sickProbeInterval while unhealthy (each
// probe bounded by it), every idleProbeInterval while healthy, so that
// health follows it without traffic.
const (
	startProbeTimeout = 2 * time.Second
	sickProbeInterval = time.Second
	idleProbeInterval = 5 * time.Second
)

// clock is the watch's time: the system's in Open, one the tests move.
type clock interface {
	Now() time.Time
	// After returns a channel that receives once d has passed.
	After(d time.Duration) <-chan time.Time
}

// systemClock is the system's time.
type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// probed is a limiter whose health a watch follows; a Probe sets it.
type probed interface {
	Healthy() bool
	Probe(ctx context.Context) error
	LastFailure() (time.Time, error)
}

// watch follows the health of one store and logs each change, with attrs
// naming the store.
type watch struct {
	store   probed
	name    string // "Redis" or "Memcached", in its log lines
	attrs   []any
	logger  *slog.Logger
	clock   clock
	nodes   func() []redislimit.NodeHealth // Redis's, each Cluster master logged; nil for Memcached
	reached atomic.Bool
}

// Reached reports whether a probe of the store has succeeded since start.
func (w *watch) Reached() bool { return w.reached.Load() }

// probe probes the store once, within timeout.
func (w *watch) probe(ctx context.Context, timeout time.Duration) error {
	probeCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := w.store.Probe(probeCtx)
	if err == nil {
		w.reached.Store(true)
	}
	return err
}

// run probes the store and logs each change of its health, whether a
// probe or a request saw it, until ctx ends.
func (w *watch) run(ctx context.Context) {
	healthy := w.store.Healthy()
	failing := make(map[string]bool) // Cluster masters by address
	sinceProbe := time.Duration(0)
	tick := w.clock.Now()
	for {
		// On a fixed beat: a slow probe does not delay the next.
		tick = tick.Add(sickProbeInterval)
		now := w.clock.Now()
		if tick.Before(now) {
			tick = now
		}
		select {
		case <-ctx.Done():
			return
		case <-w.clock.After(tick.Sub(now)):
		}
		sinceProbe += sickProbeInterval
		if !w.store.Healthy() || sinceProbe >= idleProbeInterval {
			sinceProbe = 0
			if err := w.probe(ctx, sickProbeInterval); err != nil && ctx.Err() != nil {
				return
			}
		}
		w.logNodes(failing)
		healthy = w.logChange(healthy)
	}
}

// logChange logs the store's health if it differs from was, and returns
// it.
func (w *watch) logChange(was bool) bool {
	now := w.store.Healthy()
	switch {
	case now && !was:
		w.logger.Info(w.name+" answers again: requests are decided by their limits", w.attrs...)
	case !now && was:
		_, err := w.store.LastFailure()
		w.logger.Error(w.name+" fails: requests that need it are answered by the failure policy until it answers again", w.with("err", err)...)
	}
	return now
}

// logNodes logs each Cluster master that started failing or answers again
// since the last call, which failing holds.
func (w *watch) logNodes(failing map[string]bool) {
	if w.nodes == nil {
		return
	}
	for _, n := range w.nodes() {
		if n.Addr == "" {
			continue // the cluster as a whole: the store's own line
		}
		was := failing[n.Addr]
		attrs := w.with("node", n.Addr, "slots", n.Slots)
		switch {
		case !n.Healthy() && !was:
			w.logger.Error(w.name+" node fails: requests on its slots are answered by the failure policy until it answers again; the other nodes' slots are decided as usual",
				append(attrs, "err", n.LastFailure)...)
		case n.Healthy() && was:
			w.logger.Info(w.name+" node answers again: requests on its slots are decided by their limits", attrs...)
		}
		failing[n.Addr] = !n.Healthy()
	}
}

// with returns the watch's attributes followed by more, in a new slice.
func (w *watch) with(more ...any) []any {
	return append(w.attrs[:len(w.attrs):len(w.attrs)], more...)
}

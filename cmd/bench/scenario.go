package main

import (
	"fmt"
	"io"
	"strconv"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/pkg/limit"
)

// Limit regimes. Under: the limit is never reached, so every decision
// writes its counters. Over: 1 request per second per key, so all but
// Keys requests a second are denials, which write nothing.
const (
	limitUnder = "under"
	limitOver  = "over"
)

// underLimitPerSecond is the "never reached" limit: far above what one key
// can receive in a second on any machine.
const underLimitPerSecond = 1_000_000_000

// scenario is one measured load: what each request carries and how it is
// sent.
type scenario struct {
	// Limit is limitUnder or limitOver.
	Limit string `json:"limit"`
	// Descriptors is the number of descriptors per request; each has one
	// entry and matches one limit, so it is also the number of limits
	// decided per request.
	Descriptors int `json:"descriptors"`
	// Keys is the number of distinct values per descriptor key: each
	// request picks a value uniformly at random for each descriptor.
	Keys int `json:"keys"`
	// Concurrency is the number of callers.
	Concurrency int `json:"concurrency"`
	// Rate is the fixed arrival rate in requests per second (open loop);
	// 0 means closed loop: each caller sends its next request as soon as
	// the previous one is answered.
	Rate float64 `json:"rate,omitempty"`
}

// domain is the rule domain a scenario's requests name: the generated rule
// file defines one per limit regime, and a -config file must too.
func (s scenario) domain() string { return "bench-" + s.Limit }

// descriptorKey is the key of the i-th descriptor (from 0) of a request.
func descriptorKey(i int) string { return "key" + strconv.Itoa(i+1) }

func (s scenario) String() string {
	str := fmt.Sprintf("limit=%s descriptors=%d keys=%d concurrency=%d", s.Limit, s.Descriptors, s.Keys, s.Concurrency)
	if s.Rate > 0 {
		str += fmt.Sprintf(" rate=%g/s", s.Rate)
	}
	return str
}

func (s scenario) validate() error {
	switch {
	case s.Limit != limitUnder && s.Limit != limitOver:
		return fmt.Errorf("-limit %q: want %s or %s", s.Limit, limitUnder, limitOver)
	case s.Descriptors < 1:
		return fmt.Errorf("-descriptors %d: want at least 1", s.Descriptors)
	case s.Keys < 1:
		return fmt.Errorf("-keys %d: want at least 1", s.Keys)
	case s.Concurrency < 1:
		return fmt.Errorf("-concurrency %d: want at least 1", s.Concurrency)
	case s.Rate < 0:
		return fmt.Errorf("-rate %g: want 0 (closed loop) or a positive rate", s.Rate)
	}
	return nil
}

// writeRules writes the rules of domain bench-<lim> (lim is limitUnder or
// limitOver) serving every scenario of that regime with at most
// maxDescriptors descriptors: keys key1..keyN matching any value, so that
// every distinct value is its own counter.
func writeRules(w io.Writer, lim string, maxDescriptors int, algorithm string) error {
	rpu := underLimitPerSecond
	if lim == limitOver {
		rpu = 1
	}
	if _, err := fmt.Fprintf(w, "domain: %s\ndescriptors:\n", scenario{Limit: lim}.domain()); err != nil {
		return err
	}
	// The default algorithm goes unnamed so that the files stay in the
	// reference server's format, for measuring it with the same rules.
	algo := ""
	if algorithm != limit.FixedWindow.String() {
		algo = "      algorithm: " + algorithm + "\n"
	}
	for i := range maxDescriptors {
		if _, err := fmt.Fprintf(w, "  - key: %s\n    rate_limit:\n%s      unit: second\n      requests_per_unit: %d\n",
			descriptorKey(i), algo, rpu); err != nil {
			return err
		}
	}
	return nil
}

// requestTemplate returns a request of the scenario's shape whose values
// the caller sets before each send.
func (s scenario) requestTemplate() *pb.RateLimitRequest {
	req := &pb.RateLimitRequest{Domain: s.domain(), Descriptors: make([]*rlv3.RateLimitDescriptor, s.Descriptors)}
	for i := range req.Descriptors {
		req.Descriptors[i] = &rlv3.RateLimitDescriptor{
			Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: descriptorKey(i)}},
		}
	}
	return req
}

// values returns the scenario's distinct descriptor values, built once so
// that sending a request allocates no string.
func (s scenario) values() []string {
	v := make([]string, s.Keys)
	for i := range v {
		v[i] = "v" + strconv.Itoa(i)
	}
	return v
}

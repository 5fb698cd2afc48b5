package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
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

// ruleSpec is what the generated rule files hold.
type ruleSpec struct {
	// maxDescriptors is the number of keys, key1..keyN, each limited on
	// its own counter per value.
	maxDescriptors int
	// algorithm is the algorithm of every limit.
	algorithm string
	// rules adds to domain bench-under that many rules of their own:
	// key1 with the values v0, v1, ..., each with its own limit, beside
	// key1's rule for any value. A request's value among them matches its
	// exact rule.
	rules int
	// generation is subtracted from the limit of those rules, so that a
	// rewrite of the file with the next generation shows in the answers
	// (their current limit) once it is in force.
	generation int
}

// exactLimit is the requests_per_unit of the exact rules of generation g.
func exactLimit(g int) uint32 { return uint32(underLimitPerSecond - g) }

// exactValue is the value of the i-th exact rule (from 0) of key1.
func exactValue(i int) string { return "v" + strconv.Itoa(i) }

// writeRules writes the rules of domain bench-<lim> (lim is limitUnder or
// limitOver) serving every scenario of that regime with at most
// rs.maxDescriptors descriptors: keys key1..keyN matching any value, so
// that every distinct value is its own counter, and under the limit
// rs.rules exact rules of key1.
func writeRules(w io.Writer, lim string, rs ruleSpec) error {
	rpu := underLimitPerSecond
	if lim == limitOver {
		rpu = 1
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	fmt.Fprintf(bw, "domain: %s\ndescriptors:\n", scenario{Limit: lim}.domain())
	// The default algorithm goes unnamed so that the files stay in the
	// reference server's format, for measuring it with the same rules.
	algo := ""
	if rs.algorithm != limit.FixedWindow.String() {
		algo = "      algorithm: " + rs.algorithm + "\n"
	}
	for i := range rs.maxDescriptors {
		fmt.Fprintf(bw, "  - key: %s\n    rate_limit:\n%s      unit: second\n      requests_per_unit: %d\n",
			descriptorKey(i), algo, rpu)
	}
	if lim == limitUnder {
		for i := range rs.rules {
			fmt.Fprintf(bw, "  - key: %s\n    value: %s\n    rate_limit:\n%s      unit: second\n      requests_per_unit: %d\n",
				descriptorKey(0), exactValue(i), algo, exactLimit(rs.generation))
		}
	}
	return bw.Flush()
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

// matrixDescriptors are the descriptor counts -matrix measures.
var matrixDescriptors = []int{1, 3}

// ruleSpec is what the generated rule files hold for these options. They
// cover the matrix as well as -descriptors, so that files written once
// serve every scenario.
func (o *options) ruleSpec() ruleSpec {
	maxDesc := slices.Max(matrixDescriptors)
	for _, sc := range o.scenarios() {
		maxDesc = max(maxDesc, sc.Descriptors)
	}
	return ruleSpec{maxDescriptors: maxDesc, algorithm: o.algorithm, rules: o.rules}
}

// writeRuleFiles writes the generated rules into dir, which must not exist,
// one file per domain.
func writeRuleFiles(dir string, rs ruleSpec) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	for _, lim := range []string{limitUnder, limitOver} {
		if err := writeRuleFile(filepath.Join(dir, scenario{Limit: lim}.domain()+".yaml"), lim, rs); err != nil {
			return err
		}
	}
	return nil
}

// writeRuleFile writes the rules of regime lim into the file path.
func writeRuleFile(path, lim string, rs ruleSpec) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = writeRules(f, lim, rs)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

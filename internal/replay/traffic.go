package replay

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// maxLineBytes is the longest line a Reader accepts.
const maxLineBytes = 1 << 20

// Request is one recorded rate-limit request.
type Request struct {
	// Time is when the request was made.
	Time time.Time
	// Req is the request as Envoy sent it.
	Req *pb.RateLimitRequest
	// Line is its line in the traffic, from 1.
	Line int
}

// Reader reads recorded traffic, one JSON object a line, in either of two
// shapes, told apart line by line:
//
//   - floodgate's, as capture.Recorder writes it (any RFC 3339 time): the body of a /json request plus
//     "time", in snake_case or lowerCamelCase:
//     {"time": "2026-01-02T15:04:05.123000Z", "domain": "demo", "descriptors":
//     [{"entries": [{"key": "api_key", "value": "alice"}]}]}
//   - Envoy's JSON access log with the rate-limit filter's dynamic metadata
//     under "ratelimit" and the request's start under "start_time"
//     (examples/envoy-access-log.yaml, -response-dynamic-metadata). Its
//     entries are "key=value" strings, cut at the first '='. A line
//     without "ratelimit" (null, "-" or missing) was not asked about: it
//     is skipped and counted (InputStats.Skipped).
//
// Blank lines are ignored; any other line is an error naming its number,
// but for a last line cut short (not JSON, no newline after it: a file
// copied while being written), skipped and counted (InputStats.Truncated).
// Requests come in the order of the lines.
type Reader struct {
	sc                 *bufio.Scanner
	line               int
	skipped, truncated int // InputStats' counts
	// unended is set when the scanner returned a last line with no
	// newline after it.
	unended bool
}

// NewReader returns a Reader of r.
func NewReader(r io.Reader) *Reader {
	rd := &Reader{sc: bufio.NewScanner(r)}
	rd.sc.Buffer(make([]byte, 0, 64<<10), maxLineBytes)
	rd.sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		advance, token, err := bufio.ScanLines(data, atEOF)
		if atEOF && token != nil && advance == len(data) && !bytes.HasSuffix(data, []byte("\n")) {
			rd.unended = true
		}
		return advance, token, err
	})
	return rd
}

// Next returns the next request, or io.EOF after the last one. An error
// names the line and what is wrong with it.
func (r *Reader) Next() (Request, error) {
	for r.sc.Scan() {
		r.line++
		b := bytes.TrimSpace(r.sc.Bytes())
		if len(b) == 0 {
			continue
		}
		req, ok, err := parseLine(b)
		if err != nil && r.unended && !json.Valid(b) {
			r.truncated++
			break
		}
		if err != nil {
			return Request{}, fmt.Errorf("line %d: %w", r.line, err)
		}
		if !ok {
			r.skipped++
			continue
		}
		req.Line = r.line
		return req, nil
	}
	if err := r.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return Request{}, fmt.Errorf("line %d: longer than %d bytes", r.line+1, maxLineBytes)
		}
		return Request{}, fmt.Errorf("line %d: %w", r.line+1, err)
	}
	return Request{}, io.EOF
}

// line is one line of traffic in either shape: floodgate's ("domain"
// present, even empty; capture.Recorder writes it) or an access log's
// (RateLimit, decoded again).
type line struct {
	Time      string          `json:"time"`
	StartTime string          `json:"start_time,omitempty"`
	RateLimit json.RawMessage `json:"ratelimit,omitempty"`
	// Domain is the request's, nil when the line has none: it hides the
	// request's own so that an empty one (a request the server refused,
	// captured all the same) still says the shape.
	Domain *string `json:"domain"`
	request[entry]
}

// request is a RateLimitRequest as /json reads it (E is entry) or as
// floodgate's dynamic metadata writes it (E is string, "key=value").
type request[E entry | string] struct {
	Domain          string          `json:"domain"`
	Descriptors     []descriptor[E] `json:"descriptors"`
	HitsAddend      uint32          `json:"hits_addend,omitempty"`
	HitsAddendCamel uint32          `json:"hitsAddend,omitempty"`
}

type descriptor[E entry | string] struct {
	Entries         []E             `json:"entries"`
	Limit           json.RawMessage `json:"limit,omitempty"`
	HitsAddend      *uint64         `json:"hits_addend,omitempty"`
	HitsAddendCamel *uint64         `json:"hitsAddend,omitempty"`
}

// entry is an entry as /json reads it and capture.Recorder writes it.
type entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// split returns an entry's key and value: a "key=value" string is cut at
// its first '='.
func split[E entry | string](e E) (string, string, error) {
	if e, ok := any(e).(entry); ok {
		return e.Key, e.Value, nil
	}
	s := any(e).(string)
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return "", "", fmt.Errorf("entry %q: want key=value", s)
	}
	return k, v, nil
}

// override is a descriptor's limit as /json reads it.
type override struct {
	RequestsPerUnit      uint32 `json:"requests_per_unit"`
	RequestsPerUnitCamel uint32 `json:"requestsPerUnit,omitempty"`
	Unit                 string `json:"unit"`
}

func parseLine(b []byte) (Request, bool, error) {
	var l line
	if err := json.Unmarshal(b, &l); err != nil {
		return Request{}, false, fmt.Errorf("not a JSON object of traffic: %w", err)
	}
	if l.Domain != nil {
		l.request.Domain = *l.Domain
		return build(l.Time, &l.request)
	}
	if len(l.RateLimit) == 0 && l.StartTime == "" {
		return Request{}, false, errors.New(`neither a request ("domain", "descriptors") nor an access-log line ("start_time", "ratelimit")`)
	}
	// An access-log line: the request is the filter's metadata.
	ts := cmp.Or(l.StartTime, l.Time)
	raw := bytes.TrimSpace(l.RateLimit)
	if len(raw) == 0 || string(raw) == "null" || string(raw) == `"-"` || string(raw) == `""` {
		if len(l.Descriptors) > 0 {
			return Request{}, false, errors.New(`descriptors without a "domain"`)
		}
		return Request{}, false, nil
	}
	var md request[string]
	if err := json.Unmarshal(raw, &md); err != nil {
		return Request{}, false, fmt.Errorf("ratelimit: %w", err)
	}
	if md.Domain == "" {
		// Metadata of an answer that is not floodgate's request
		// (say, only quota-mode fields): nothing to replay.
		return Request{}, false, nil
	}
	return build(ts, &md)
}

// build converts a decoded line.
func build[E entry | string](ts string, body *request[E]) (Request, bool, error) {
	if ts == "" {
		return Request{}, false, errors.New(`no "time" (or "start_time" in an access log)`)
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return Request{}, false, fmt.Errorf("time %q: want RFC 3339, e.g. 2026-01-02T15:04:05.123Z", ts)
	}
	req, err := body.proto()
	if err != nil {
		return Request{}, false, err
	}
	return Request{Time: t, Req: req}, true, nil
}

// proto converts a decoded body. It checks only what the conversion
// needs: the service judges the rest as it did in production, refusing
// what it refused (an empty domain, no descriptors), which the replay
// counts as invalid.
func (r *request[E]) proto() (*pb.RateLimitRequest, error) {
	req := &pb.RateLimitRequest{Domain: r.Domain, HitsAddend: max(r.HitsAddend, r.HitsAddendCamel)}
	req.Descriptors = make([]*rlv3.RateLimitDescriptor, len(r.Descriptors))
	for i := range r.Descriptors {
		d := &r.Descriptors[i]
		pd := &rlv3.RateLimitDescriptor{Entries: make([]*rlv3.RateLimitDescriptor_Entry, len(d.Entries))}
		for j, e := range d.Entries {
			k, v, err := split(e)
			if err != nil {
				return nil, fmt.Errorf("descriptors[%d]: %w", i, err)
			}
			pd.Entries[j] = &rlv3.RateLimitDescriptor_Entry{Key: k, Value: v}
		}
		if h := cmp.Or(d.HitsAddend, d.HitsAddendCamel); h != nil {
			pd.HitsAddend = wrapperspb.UInt64(*h)
		}
		if len(d.Limit) > 0 && string(d.Limit) != "null" {
			o, err := parseOverride(d.Limit)
			if err != nil {
				return nil, fmt.Errorf("descriptors[%d].limit: %w", i, err)
			}
			pd.Limit = o
		}
		req.Descriptors[i] = pd
	}
	return req, nil
}

// parseOverride reads a limit override as /json gives it (an object) or
// as the dynamic metadata does (its protobuf text form).
func parseOverride(b json.RawMessage) (*rlv3.RateLimitDescriptor_RateLimitOverride, error) {
	o := &rlv3.RateLimitDescriptor_RateLimitOverride{}
	if b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, err
		}
		if err := prototext.Unmarshal([]byte(s), o); err != nil {
			return nil, fmt.Errorf("%q: %w", s, err)
		}
		return o, nil
	}
	var v override
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	u, ok := typev3.RateLimitUnit_value[strings.ToUpper(v.Unit)]
	if !ok {
		return nil, fmt.Errorf("unit %q: want SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR", v.Unit)
	}
	o.RequestsPerUnit = max(v.RequestsPerUnit, v.RequestsPerUnitCamel)
	o.Unit = typev3.RateLimitUnit(u)
	return o, nil
}

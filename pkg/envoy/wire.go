package envoy

import (
	"sync"
	"unicode/utf8"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
)

// wireRequest is a RateLimitRequest decoded without reflection into
// reused storage: its messages live in the slices below and its strings
// are substrings of one copy of the message, one allocation a call.
//
// decode takes only what Envoy sends: domain, descriptors of key/value
// entries, hits_addend and is_negative_hits. For anything else it reports
// false and the caller decodes with proto, the reference of both paths
// (FuzzWireRequest, TestWireRequestKnowsEveryField).
//
// A wireRequest serves one call at a time; nothing may keep a pointer
// into req after the call (its strings may be kept).
type wireRequest struct {
	req pb.RateLimitRequest

	descs     []rlv3.RateLimitDescriptor
	descPtrs  []*rlv3.RateLimitDescriptor
	entries   []rlv3.RateLimitDescriptor_Entry
	entryPtrs []*rlv3.RateLimitDescriptor_Entry
	ends      []int // ends[i]: the end of descriptor i's entries in entries

	refusal  string // the InvalidArgument message when neither path decodes
	tooLarge int    // the size of a request over the bound, left undecoded
}

// maxPooledParts bounds the room a pooled wireRequest keeps.
const maxPooledParts = 64

var wireRequests = sync.Pool{New: func() any { return new(wireRequest) }}

func getWireRequest() *wireRequest { return wireRequests.Get().(*wireRequest) }

// release clears w and returns it to the pool.
func (w *wireRequest) release() {
	w.reset()
	if cap(w.descs) > maxPooledParts || cap(w.entries) > maxPooledParts {
		return
	}
	wireRequests.Put(w)
}

// reset empties w, keeping its storage.
func (w *wireRequest) reset() {
	clear(w.descs)
	clear(w.entries)
	clear(w.descPtrs)
	clear(w.entryPtrs)
	w.descs, w.entries, w.descPtrs, w.entryPtrs, w.ends = w.descs[:0], w.entries[:0], w.descPtrs[:0], w.entryPtrs[:0], w.ends[:0]
	w.req = pb.RateLimitRequest{}
	w.refusal = ""
	w.tooLarge = 0
}

// decode sets w.req from b, or reports false, w.req then unspecified.
func (w *wireRequest) decode(b []byte) bool {
	// One allocation for every string: b is gRPC's, reused after.
	s := string(b)
	domain, hits, ok := "", uint32(0), true
	walk(b, func(num protowire.Number, typ protowire.Type, at, end int, v uint64) bool {
		switch {
		case num == 1 && typ == protowire.BytesType:
			// proto checks every occurrence, not only the last.
			domain = s[at:end]
			ok = utf8.ValidString(domain)
		case num == 2 && typ == protowire.BytesType:
			ok = w.decodeDescriptor(b[at:end], s[at:end])
		case num == 3 && typ == protowire.VarintType:
			hits = uint32(v)
		default:
			ok = false
		}
		return ok
	})
	if !ok {
		return false
	}
	for i := range w.descs {
		w.descPtrs = append(w.descPtrs, &w.descs[i])
	}
	for i := range w.entries {
		w.entryPtrs = append(w.entryPtrs, &w.entries[i])
	}
	start := 0
	for i, end := range w.ends {
		if end > start {
			w.descs[i].Entries = w.entryPtrs[start:end:end]
		}
		start = end
	}
	w.req.Domain, w.req.HitsAddend = domain, hits
	if len(w.descPtrs) > 0 {
		w.req.Descriptors = w.descPtrs
	}
	return true
}

// decodeDescriptor appends the descriptor in b (s is b as a string).
func (w *wireRequest) decodeDescriptor(b []byte, s string) bool {
	w.descs = append(w.descs, rlv3.RateLimitDescriptor{})
	d := &w.descs[len(w.descs)-1]
	ok := true
	walk(b, func(num protowire.Number, typ protowire.Type, at, end int, v uint64) bool {
		switch {
		case num == 1 && typ == protowire.BytesType:
			ok = w.decodeEntry(b[at:end], s[at:end])
		case num == 4 && typ == protowire.VarintType:
			d.IsNegativeHits = v != 0
		default:
			ok = false
		}
		return ok
	})
	w.ends = append(w.ends, len(w.entries))
	return ok
}

// decodeEntry appends the entry in b (s is b as a string).
func (w *wireRequest) decodeEntry(b []byte, s string) bool {
	var key, value string
	ok := true
	walk(b, func(num protowire.Number, typ protowire.Type, at, end int, _ uint64) bool {
		switch {
		case num == 1 && typ == protowire.BytesType:
			key = s[at:end]
			ok = utf8.ValidString(key)
		case num == 2 && typ == protowire.BytesType:
			value = s[at:end]
			ok = utf8.ValidString(value)
		default:
			ok = false
		}
		return ok
	})
	if !ok {
		return false
	}
	w.entries = append(w.entries, rlv3.RateLimitDescriptor_Entry{Key: key, Value: value})
	return true
}

// walk calls field for each field of the message in b until it returns
// false: a length-delimited field's contents are b[at:end], a varint's
// value is v. At malformed bytes it calls field with type -1 and stops.
func walk(b []byte, field func(num protowire.Number, typ protowire.Type, at, end int, v uint64) bool) {
	for pos := 0; pos < len(b); {
		num, typ, n := protowire.ConsumeTag(b[pos:])
		if n < 0 {
			field(0, -1, 0, 0, 0)
			return
		}
		pos += n
		at, v := pos, uint64(0)
		switch typ {
		case protowire.BytesType:
			var s []byte
			s, n = protowire.ConsumeBytes(b[pos:])
			at = pos + n - len(s)
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b[pos:])
		default:
			n = protowire.ConsumeFieldValue(num, typ, b[pos:])
		}
		if n < 0 {
			field(0, -1, 0, 0, 0)
			return
		}
		pos += n
		if !field(num, typ, at, pos, v) {
			return
		}
	}
}

package envoy

import (
	"sync"
	"unicode/utf8"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
)

// wireRequest is a RateLimitRequest decoded into storage that is reused
// from call to call: the request, its descriptors and their entries live in
// slices kept by the wireRequest, and every string of the request is a
// substring of one copy of the encoded message. A call then costs one
// allocation for its request instead of one per message and string, with
// no reflection.
//
// decode takes only the shapes Envoy sends: domain, descriptors of
// key/value entries, hits_addend and is_negative_hits. Anything else (a
// per-descriptor limit override or hits_addend, unknown fields, invalid
// UTF-8, malformed bytes) makes decode report false, and the caller decodes
// with the proto package instead, whose result and errors are the
// reference for both paths (FuzzWireRequest checks they agree). A field
// that go-control-plane adds fails TestWireRequestKnowsEveryField until
// decode takes it or says it leaves it to proto. Decoding is written by
// hand because go-control-plane generates encoders only (vtMarshaler).
//
// A wireRequest belongs to one call at a time; nothing may keep a pointer
// into req once the call has returned (strings may be kept: they are
// never reused).
type wireRequest struct {
	req pb.RateLimitRequest

	descs     []rlv3.RateLimitDescriptor
	descPtrs  []*rlv3.RateLimitDescriptor
	entries   []rlv3.RateLimitDescriptor_Entry
	entryPtrs []*rlv3.RateLimitDescriptor_Entry
	ends      []int // ends[i]: the end of descriptor i's entries in entries

	// refusal is the InvalidArgument message for a request that decodes
	// with neither path; empty for a good one.
	refusal string
	// tooLarge is the size of a request over the RLS bound, left
	// undecoded; 0 for one within it.
	tooLarge int
}

// maxPooledParts bounds the descriptors and entries a pooled wireRequest
// keeps room for, so that one huge request does not pin its storage.
const maxPooledParts = 64

var wireRequests = sync.Pool{New: func() any { return new(wireRequest) }}

func getWireRequest() *wireRequest { return wireRequests.Get().(*wireRequest) }

// release clears w and returns it to the pool. The caller must not use w
// or anything reached from w.req afterwards.
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

// decode sets w.req from b without reflection, reporting false, with w.req
// left in an unspecified state, for any message it does not take (see
// wireRequest).
func (w *wireRequest) decode(b []byte) bool {
	// One allocation holds every string of the request; b belongs to
	// gRPC and is reused once the codec returns.
	s := string(b)
	domain, hits, ok := "", uint32(0), true
	walk(b, func(num protowire.Number, typ protowire.Type, at, end int, v uint64) bool {
		switch {
		case num == 1 && typ == protowire.BytesType:
			// proto checks every occurrence, not only the last that
			// counts.
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

// decodeDescriptor appends the descriptor encoded in b (s is b as a
// string) to w.
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

// decodeEntry appends the entry encoded in b (s is b as a string) to w.
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

// walk calls field for each field of the message encoded in b, in order,
// until field returns false: a length-delimited field's contents are
// b[at:end], a varint's value is v. It stops at malformed bytes and at any
// other wire type (field is then called with typ so that it refuses).
func walk(b []byte, field func(num protowire.Number, typ protowire.Type, at, end int, v uint64) bool) {
	pos := 0
	for pos < len(b) {
		num, typ, n := protowire.ConsumeTag(b[pos:])
		if n < 0 {
			field(0, -1, 0, 0, 0)
			return
		}
		pos += n
		switch typ {
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b[pos:])
			if n < 0 {
				field(0, -1, 0, 0, 0)
				return
			}
			at := pos + n - len(v)
			pos += n
			if !field(num, typ, at, pos, 0) {
				return
			}
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(b[pos:])
			if n < 0 {
				field(0, -1, 0, 0, 0)
				return
			}
			pos += n
			if !field(num, typ, 0, 0, v) {
				return
			}
		default:
			field(num, typ, 0, 0, 0)
			return
		}
	}
}

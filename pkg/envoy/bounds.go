package envoy

import (
	"fmt"
	"unicode/utf8"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// maxCost bounds a hit's cost, far above any capacity (2^32-1 at most), so
// that clamping changes no decision, while costs stay exact in the Lua
// scripts' float64 and far from int64 overflow.
const maxCost = 1 << 53

// RequestBounds limit what one request may carry; a request beyond one
// gets InvalidArgument naming the field and the bound. Zero fields mean
// their value in DefaultOptions.
type RequestBounds struct {
	// MaxDescriptors bounds the descriptors of a request.
	MaxDescriptors int
	// MaxEntries bounds the entries of one descriptor.
	MaxEntries int
	// MaxKeyBytes bounds the bytes of an entry's key and of the domain.
	MaxKeyBytes int
	// MaxValueBytes bounds the bytes of an entry's value.
	MaxValueBytes int
}

// check returns the first way req breaks the bounds or is malformed,
// naming the field, with the reason to count it under (refusedBounds or
// refusedMalformed). It does not allocate for a valid request.
func (b *RequestBounds) check(req *pb.RateLimitRequest) (reason string, err error) {
	bound := func(format string, args ...any) (string, error) { return refusedBounds, fmt.Errorf(format, args...) }
	malformed := func(format string, args ...any) (string, error) { return refusedMalformed, fmt.Errorf(format, args...) }
	switch domain := req.GetDomain(); {
	case domain == "":
		return malformed("domain: must not be empty")
	case len(domain) > b.MaxKeyBytes:
		return bound("domain: %d bytes, more than the bound of %d (max key bytes)", len(domain), b.MaxKeyBytes)
	case !utf8.ValidString(domain):
		return malformed("domain: not valid UTF-8")
	}
	descs := req.GetDescriptors()
	if len(descs) == 0 {
		return malformed("descriptors: must not be empty (send at least one descriptor)")
	}
	if len(descs) > b.MaxDescriptors {
		return bound("descriptors: %d descriptors, more than the bound of %d (max descriptors)", len(descs), b.MaxDescriptors)
	}
	for i, d := range descs {
		entries := d.GetEntries()
		if len(entries) > b.MaxEntries {
			return bound("descriptors[%d].entries: %d entries, more than the bound of %d (max entries)", i, len(entries), b.MaxEntries)
		}
		for j, e := range entries {
			key, value := e.GetKey(), e.GetValue()
			switch {
			case key == "":
				return malformed("descriptors[%d].entries[%d].key: must not be empty", i, j)
			case len(key) > b.MaxKeyBytes:
				return bound("descriptors[%d].entries[%d].key: %d bytes, more than the bound of %d (max key bytes)", i, j, len(key), b.MaxKeyBytes)
			case len(value) > b.MaxValueBytes:
				return bound("descriptors[%d].entries[%d].value: %d bytes, more than the bound of %d (max value bytes)", i, j, len(value), b.MaxValueBytes)
			case !utf8.ValidString(key):
				return malformed("descriptors[%d].entries[%d].key: not valid UTF-8", i, j)
			case !utf8.ValidString(value):
				return malformed("descriptors[%d].entries[%d].value: not valid UTF-8", i, j)
			}
		}
	}
	return "", nil
}

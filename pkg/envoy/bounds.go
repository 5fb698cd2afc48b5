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
// naming the field, with the reason to count it under. It does not
// allocate for a valid request.
func (b *RequestBounds) check(req *pb.RateLimitRequest) (string, error) {
	err := b.checkFields(req)
	if err == nil {
		return "", nil
	}
	if _, ok := err.(boundError); ok {
		return RefusedBounds, err
	}
	return RefusedMalformed, err
}

// boundError is checkFields' error for a request beyond a bound.
type boundError struct{ msg string }

func (e boundError) Error() string { return e.msg }

func boundErrorf(format string, args ...any) error {
	return boundError{fmt.Sprintf(format, args...)}
}

func (b *RequestBounds) checkFields(req *pb.RateLimitRequest) error {
	switch domain := req.GetDomain(); {
	case domain == "":
		return fmt.Errorf("domain: must not be empty")
	case len(domain) > b.MaxKeyBytes:
		return boundErrorf("domain: %d bytes, more than the bound of %d (max key bytes)", len(domain), b.MaxKeyBytes)
	case !utf8.ValidString(domain):
		return fmt.Errorf("domain: not valid UTF-8")
	}
	descs := req.GetDescriptors()
	if len(descs) == 0 {
		return fmt.Errorf("descriptors: must not be empty (send at least one descriptor)")
	}
	if len(descs) > b.MaxDescriptors {
		return boundErrorf("descriptors: %d descriptors, more than the bound of %d (max descriptors)", len(descs), b.MaxDescriptors)
	}
	for i, d := range descs {
		entries := d.GetEntries()
		if len(entries) > b.MaxEntries {
			return boundErrorf("descriptors[%d].entries: %d entries, more than the bound of %d (max entries)", i, len(entries), b.MaxEntries)
		}
		for j, e := range entries {
			key, value := e.GetKey(), e.GetValue()
			switch {
			case key == "":
				return fmt.Errorf("descriptors[%d].entries[%d].key: must not be empty", i, j)
			case len(key) > b.MaxKeyBytes:
				return boundErrorf("descriptors[%d].entries[%d].key: %d bytes, more than the bound of %d (max key bytes)", i, j, len(key), b.MaxKeyBytes)
			case len(value) > b.MaxValueBytes:
				return boundErrorf("descriptors[%d].entries[%d].value: %d bytes, more than the bound of %d (max value bytes)", i, j, len(value), b.MaxValueBytes)
			case !utf8.ValidString(key):
				return fmt.Errorf("descriptors[%d].entries[%d].key: not valid UTF-8", i, j)
			case !utf8.ValidString(value):
				return fmt.Errorf("descriptors[%d].entries[%d].value: not valid UTF-8", i, j)
			}
		}
	}
	return nil
}

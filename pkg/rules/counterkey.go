package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"strconv"
	"sync"

	"github.com/floodgate/floodgate/pkg/limit"
)

// maxKeyValue is the longest request value written verbatim into a counter
// key; longer ones are replaced by their SHA-256.
const maxKeyValue = 64

// AppendCounterKey appends to dst the identity of the counter that l (one
// of r.Limits) uses for a request with these entries (those given to Match)
// and returns the extended slice. The key is l.ID followed, for each level
// where the counter depends on the request's value (a key-only descriptor,
// or a wildcard without share_threshold), by "|v" and the value
// length-prefixed ("|v5:alice"), or, for values longer than 64 bytes, by
// "|h" and the hex SHA-256 of the value. The encoding is injective: two
// different (limit, relevant values) never give equal keys. It does not
// allocate when dst has the capacity.
func (r *Rule) AppendCounterKey(dst []byte, l *Limit, entries []Entry) []byte {
	dst = append(dst, l.ID...)
	for i := range r.levels {
		if !r.levels[i].dynamic || i >= len(entries) {
			continue
		}
		dst = append(dst, '|')
		dst = appendKeyField(dst, entries[i].Value)
	}
	return dst
}

// Markers of AppendOverrideKey's two forms. Limit IDs, hence
// AppendCounterKey's keys, start with a digit (the domain's length), so
// keys starting with these letters are never counter keys.
const (
	overrideOfRule   = 'o'
	overrideOfDomain = 'd'
)

// AppendOverrideKey appends to dst the identity of the counter of a limit
// that Envoy sent with a request descriptor (the descriptor's `limit`
// override), counted with spec, and returns the extended slice. r is the
// rule the descriptor matched, or nil; a rule without limits counts as nil,
// since it has no limit identity to extend.
//
// With a rule, the key is 'o' then AppendCounterKey of the rule's first
// limit: an override counts apart from the rule's own counters and per
// request value where the rule's counter is. Without one, it is 'd' then
// the domain and every entry's key and value, each written as 'v', its
// length, ':' and its bytes, or as 'h' and the hex SHA-256 when longer than
// 64 bytes: one counter per distinct descriptor, as the reference server
// counts. Both end with "|w", the window in microseconds, "|a" and the
// algorithm number, which parse unambiguously from the end (two maximal
// digit runs after fixed markers).
//
// The encoding is injective over (domain, r, entries, window, algorithm),
// and disjoint from AppendCounterKey's keys, which start with a digit. It
// does not allocate when dst has the capacity.
func AppendOverrideKey(dst []byte, domain string, r *Rule, entries []Entry, spec limit.Spec) []byte {
	if r != nil && len(r.Limits) > 0 {
		dst = append(dst, overrideOfRule)
		dst = r.AppendCounterKey(dst, r.Limits[0], entries)
	} else {
		dst = append(dst, overrideOfDomain)
		dst = appendKeyField(dst, domain)
		for _, e := range entries {
			dst = appendKeyField(dst, e.Key)
			dst = appendKeyField(dst, e.Value)
		}
	}
	dst = append(dst, "|w"...)
	dst = strconv.AppendInt(dst, spec.WindowMicros(), 10)
	dst = append(dst, "|a"...)
	return strconv.AppendUint(dst, uint64(spec.Algorithm), 10)
}

// appendKeyField appends s as 'v', its decimal length, ':' and its bytes,
// or, when longer than maxKeyValue, as 'h' and its hex SHA-256 (which bounds
// key size). The first byte and the length make a sequence of fields parse
// one way only.
func appendKeyField(dst []byte, s string) []byte {
	if len(s) > maxKeyValue {
		dst = append(dst, 'h')
		return appendSHA256Hex(dst, s)
	}
	dst = append(dst, 'v')
	dst = strconv.AppendInt(dst, int64(len(s)), 10)
	dst = append(dst, ':')
	return append(dst, s...)
}

// hasher is a reusable SHA-256 state with room to copy a string into,
// since hashing a string directly would convert (allocate) it.
type hasher struct {
	h     hash.Hash
	chunk [512]byte
	sum   [sha256.Size]byte
}

var hashers = sync.Pool{New: func() any { return &hasher{h: sha256.New()} }}

// appendSHA256Hex appends the hex SHA-256 of s to dst.
func appendSHA256Hex(dst []byte, s string) []byte {
	x := hashers.Get().(*hasher)
	x.h.Reset()
	for len(s) > 0 {
		n := copy(x.chunk[:], s)
		x.h.Write(x.chunk[:n])
		s = s[n:]
	}
	dst = hex.AppendEncode(dst, x.h.Sum(x.sum[:0]))
	hashers.Put(x)
	return dst
}

package rules

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"strconv"
	"sync"
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
		v := entries[i].Value
		if len(v) > maxKeyValue {
			dst = append(dst, "|h"...)
			dst = appendSHA256Hex(dst, v)
			continue
		}
		dst = append(dst, "|v"...)
		dst = strconv.AppendInt(dst, int64(len(v)), 10)
		dst = append(dst, ':')
		dst = append(dst, v...)
	}
	return dst
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
